#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "keys_cuda.hpp"

namespace gpusampler::kernels {
namespace {

__global__ void KeysKernel(const KeyQuery* q, int n, uint32_t* u, uint32_t* v) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= n) return;
  u[j] = ElementKey(q[j].seed, q[j].row, kSelectionStream, q[j].i);
  v[j] = ElementKey(q[j].seed, q[j].row, kOrderStream, q[j].i);
}

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e));
}

}  // namespace

bool CudaKeysAvailable() { return CudaDeviceCount() > 0; }

void CudaElementKeys(const std::vector<KeyQuery>& queries, std::vector<uint32_t>* u,
                     std::vector<uint32_t>* v) {
  const int n = static_cast<int>(queries.size());
  KeyQuery* d_q = nullptr;
  uint32_t *d_u = nullptr, *d_v = nullptr;
  Check(cudaMalloc(&d_q, n * sizeof(KeyQuery)), "cudaMalloc");
  Check(cudaMalloc(&d_u, n * sizeof(uint32_t)), "cudaMalloc");
  Check(cudaMalloc(&d_v, n * sizeof(uint32_t)), "cudaMalloc");
  Check(cudaMemcpy(d_q, queries.data(), n * sizeof(KeyQuery), cudaMemcpyHostToDevice), "copy");
  KeysKernel<<<(n + 127) / 128, 128>>>(d_q, n, d_u, d_v);
  Check(cudaGetLastError(), "launch");
  u->resize(n);
  v->resize(n);
  Check(cudaMemcpy(u->data(), d_u, n * sizeof(uint32_t), cudaMemcpyDeviceToHost), "copy");
  Check(cudaMemcpy(v->data(), d_v, n * sizeof(uint32_t), cudaMemcpyDeviceToHost), "copy");
  cudaFree(d_q);
  cudaFree(d_u);
  cudaFree(d_v);
}

}  // namespace gpusampler::kernels
