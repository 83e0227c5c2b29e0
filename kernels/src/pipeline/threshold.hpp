// Stage Threshold: per large row, the quotas and the boundary bucket of each class. See
// pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

struct ThresholdBody {
  Params p;
  struct Shared {
    RowDesc row;
    int32_t r;
    int64_t part[2][kThreads];
    int64_t m[2];
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    LargeRowState* st = p.large + block;
    const int32_t* hist = p.hist + block * 2 * kSelectBins;
    constexpr int kPer = kSelectBins / kThreads;
    b.Threads([&](int t) {
      if (t == 0) {
        const int32_t r = b.Load(&st->row);
        b.SStore(&sh.r, r);
        b.SStore(&sh.row, b.Load(p.rows + r));
      }
      for (int c = 0; c < 2; ++c) {
        int64_t sum = 0;
        for (int k = 0; k < kPer; ++k) sum += b.Load(hist + c * kSelectBins + t * kPer + k);
        b.SStore(&sh.part[c][t], sum);
      }
    });
    b.Threads([&](int t) {
      if (t != 0) return;
      const RowDesc row = b.SLoad(&sh.row);
      const int32_t r = b.SLoad(&sh.r);
      int64_t count[2] = {0, 0};
      for (int c = 0; c < 2; ++c) {
        for (int k = 0; k < kThreads; ++k) count[c] += b.SLoad(&sh.part[c][k]);
      }
      const Quotas q = ComputeQuotas(count[0], count[1], row.num_samples, row.target, row.fill);
      const int64_t m[2] = {q.pos, q.neg};
      b.Store(p.out_num_positive + r, static_cast<int32_t>(q.pos));
      b.Store(p.out_num_negative + r, static_cast<int32_t>(q.neg));
      int64_t cand_total = 0;
      for (int c = 0; c < 2; ++c) {
        b.SStore(&sh.m[c], m[c]);
        b.Store(&st->m[c], m[c]);
        int64_t sel_below = 0, cand_bin = -1, cand_count = 0, need = 0;
        if (m[c] == count[c]) {
          sel_below = kSelectBins;  // the whole class
        } else if (m[c] > 0) {
          // The thread chunk, then the bucket, where the running count reaches m.
          int64_t below = 0;
          int k = 0;
          for (;; ++k) {
            const int64_t part = b.SLoad(&sh.part[c][k]);
            if (below + part >= m[c]) break;
            below += part;
          }
          int bin = k * kPer;
          for (;; ++bin) {
            const int64_t h = b.Load(hist + c * kSelectBins + bin);
            if (below + h >= m[c]) {
              need = m[c] - below;
              if (need == h) {
                sel_below = bin + 1;  // the bucket is taken whole
                need = 0;
              } else {
                sel_below = bin;
                cand_bin = bin;
                cand_count = h;
              }
              break;
            }
            below += h;
          }
        }
        b.Store(&st->sel_below[c], sel_below);
        b.Store(&st->cand_bin[c], cand_bin);
        b.Store(&st->cand_count[c], cand_count);
        b.Store(&st->cand_off[c], cand_total);
        b.Store(&st->need[c], need);
        cand_total += cand_count;
      }
    });
    const RowDesc row = b.SLoad(&sh.row);
    const int64_t m = b.SLoad(&sh.m[0]) + b.SLoad(&sh.m[1]);
    b.Threads([&](int t) {
      for (int64_t at = m + t; at < row.num_samples; at += kThreads) WriteSlot(b, p, row, at, -1);
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
