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

// Synchronizes: the pipeline's WeightedKeysBody over `probes` on the current device.
struct WeightedKeyQuery {
  uint64_t seed;
  uint32_t row;
  uint64_t i;
  float score;
  bool given;  // u and u2 below, not the element's Philox words
  uint32_t u, u2;
};
struct WeightedKeyResult {
  uint32_t u, u2;
  uint64_t e_bits, key_bits;
};
void CudaWeightedKeys(const std::vector<WeightedKeyQuery>& queries,
                      std::vector<WeightedKeyResult>* out);

}  // namespace gpusampler::kernels
