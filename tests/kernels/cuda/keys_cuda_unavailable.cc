// keys_cuda.hpp in a build without CUDA.
#include "cuda/keys_cuda.hpp"

namespace gpusampler::kernels {

bool CudaKeysAvailable() { return false; }

void CudaElementKeys(const std::vector<KeyQuery>&, std::vector<uint32_t>*, std::vector<uint32_t>*) {
}

void CudaWeightedKeys(const std::vector<WeightedKeyQuery>&, std::vector<WeightedKeyResult>*) {}

}  // namespace gpusampler::kernels
