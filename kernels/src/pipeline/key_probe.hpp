// Test-only: KeysBody, u and v of single elements derived exactly as the stages derive them.
// Not part of a launch; tests/kernels include it to pin the key derivation.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/classes_common.hpp"
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

// The weighted key of single elements (SPEC section 7) derived as ClassKeysBody derives it:
// (a probe with `given` set takes its own u and u2)
// u (stream 0) and u2 (kWeightStream) of the element's Philox block, E = WeightedE(u, u2)
// and key = WeightedKeyBits(E, score), in the executor's double arithmetic (on the device
// the __dmul_rn/__dadd_rn/__ddiv_rn intrinsics). One element per thread.
// (given != 0: u and u2 are the probe's own, for the file's raw-bits lines)
struct WeightedProbe {
  uint64_t seed;
  uint64_t i;
  uint32_t row;
  float score;
  uint32_t u;
  uint32_t u2;
  int32_t given;
  int32_t pad;
};
struct WeightedProbeOut {
  uint32_t u;
  uint32_t u2;
  uint64_t e_bits;
  uint64_t key_bits;
};
struct WeightedKeysBody {
  const WeightedProbe* probes = nullptr;
  int64_t n = 0;
  WeightedProbeOut* out = nullptr;
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    b.Threads([&](int t) {
      const int64_t j = block * kThreads + t;
      if (j >= n) return;
      const WeightedProbe q = b.Load(probes + j);
      RowDesc row;
      row.seed = q.seed;
      row.row_in_request = q.row;
      const int64_t i = static_cast<int64_t>(q.i);
      const Philox4 x = GroupKeys(row, kSelectionStream, i - i % 4);
      const Philox4 x2 = GroupKeys(row, kWeightStream, i - i % 4);
      b.CountPhilox(2);
      WeightedProbeOut o;
      o.u = q.given != 0 ? q.u : x.v[i % 4];
      o.u2 = q.given != 0 ? q.u2 : x2.v[i % 4];
      const double e = WeightedE(o.u, o.u2);
      o.e_bits = DoubleBits(e);
      o.key_bits = WeightedKeyBits(e, q.score);
      b.Store(out + j, o);
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
