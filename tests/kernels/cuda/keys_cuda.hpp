// u and v computed by a CUDA kernel, for keys_test.cc. Without CUDA in the build (or
// without a device) CudaKeysAvailable() is false.
#pragma once

#include <cstdint>
#include <vector>

namespace gpusampler::kernels {

struct KeyQuery {
  uint64_t seed;
  uint32_t row;
  uint64_t i;
  uint32_t u;  // expected
  uint32_t v;  // expected
};

bool CudaKeysAvailable();

// Synchronizes: u[j], v[j] of queries[j], computed on the current device.
void CudaElementKeys(const std::vector<KeyQuery>& queries, std::vector<uint32_t>* u,
                     std::vector<uint32_t>* v);

}  // namespace gpusampler::kernels
