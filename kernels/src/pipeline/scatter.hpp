// Stage Scatter: the selected keys into buckets of v's top bits. See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

struct ScatterBody {
  Params p;
  struct Shared {
    int64_t begin, m, sel_base;
    int32_t large;
    int32_t start[kMaxOrderBins];
    int32_t local[kMaxOrderBins];
    int32_t global[kMaxOrderBins];
    int32_t part[kThreads];
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int bins = 1 << p.order_bits;
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) b.SStore(&sh.local[bin], 0);
      if (t == 0) {
        const int32_t l = LargeOfTile(b, p, block, true);
        const LargeRowState* st = p.large + l;
        b.SStore(&sh.large, l);
        b.SStore(&sh.begin, (block - b.Load(&st->first_slot_tile)) * kSlotTile);
        b.SStore(&sh.m, b.Load(&st->m[0]) + b.Load(&st->m[1]));
        b.SStore(&sh.sel_base, b.Load(&st->sel_base));
      }
    });
    const int64_t begin = b.SLoad(&sh.begin);
    const int64_t m = b.SLoad(&sh.m);
    if (begin >= m) return;
    const int64_t end = m < begin + kSlotTile ? m : begin + kSlotTile;
    const int32_t l = b.SLoad(&sh.large);
    const int64_t sel_base = b.SLoad(&sh.sel_base);
    ExclusiveScan(b, p.vhist + int64_t{l} * bins, bins, sh.start, sh.part);
    typename B::template Items<uint64_t, kItems> keys;
    typename B::template Items<int32_t, kItems> at_bucket;
    b.Threads([&](int t) {
      uint64_t* mine = b.Mine(keys, t);
      int32_t* local = b.Mine(at_bucket, t);
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const int64_t s = begin + static_cast<int64_t>(k) * kThreads + t;
        if (s >= end) continue;
        mine[k] = b.Load(p.sel + sel_base + s);
        const int bin = BucketOf(static_cast<uint32_t>(mine[k] >> 32), p.order_bits);
        local[k] = b.SharedAdd(&sh.local[bin], 1);
      }
    });
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) {
        const int32_t c = b.SLoad(&sh.local[bin]);
        if (c > 0) {
          b.SStore(&sh.global[bin],
                   b.SLoad(&sh.start[bin]) + b.GlobalAdd(p.vcursor + int64_t{l} * bins + bin, c));
        }
      }
    });
    b.Threads([&](int t) {
      const uint64_t* mine = b.Mine(keys, t);
      const int32_t* local = b.Mine(at_bucket, t);
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const int64_t s = begin + static_cast<int64_t>(k) * kThreads + t;
        if (s >= end) continue;
        const int bin = BucketOf(static_cast<uint32_t>(mine[k] >> 32), p.order_bits);
        b.Store(p.bucketed + sel_base + b.SLoad(&sh.global[bin]) + local[k], mine[k]);
      }
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
