// Test-only: KeysBody, u and v of single elements derived exactly as the stages derive them.
// Not part of a launch; tests/kernels include it to pin the key derivation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// u and v of single elements, derived exactly as the bodies derive them (GroupKeys, and
// OrderKeyOf for v): pins the pipeline's key derivation on the reference keys file through
// either executor. One element per thread.
struct KeyProbe {
  uint64_t seed;
  uint32_t row;
  uint64_t i;
};
struct KeysBody {
  const KeyProbe* probes = nullptr;
  int64_t n = 0;
  uint32_t* u = nullptr;
  uint32_t* v = nullptr;
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    b.Threads([&](int t) {
      const int64_t j = block * kThreads + t;
      if (j >= n) return;
      const KeyProbe q = b.Load(probes + j);
      RowDesc row;
      row.seed = q.seed;
      row.row_in_request = q.row;
      const int64_t i = static_cast<int64_t>(q.i);
      const Philox4 x = GroupKeys(row, kSelectionStream, i - i % 4);
      b.CountPhilox(2);
      b.Store(u + j, x.v[i % 4]);
      b.Store(v + j, OrderKeyOf(row, i));
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
