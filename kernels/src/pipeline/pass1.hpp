// Stage Pass1: per tile, the classes' histograms of u. See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

struct Pass1Body {
  Params p;
  struct Shared {
    RowDesc row;
    int64_t begin, end;  // element range of the tile within the row
    int32_t large;
    int32_t hist[2 * kSelectBins];
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      for (int bin = t; bin < 2 * kSelectBins; bin += kThreads) b.SStore(&sh.hist[bin], 0);
      if (t == 0) {
        const int32_t l = LargeOfTile(b, p, block, false);
        const int32_t r = b.Load(&p.large[l].row);
        const RowDesc row = b.Load(p.rows + r);
        const int64_t begin = (block - b.Load(&p.large[l].first_tile)) * p.tile_elements;
        b.SStore(&sh.large, l);
        b.SStore(&sh.row, row);
        b.SStore(&sh.begin, begin);
        b.SStore(&sh.end,
                 begin + p.tile_elements < row.length ? begin + p.tile_elements : row.length);
      }
    });
    const RowDesc row = b.SLoad(&sh.row);
    const int64_t begin = b.SLoad(&sh.begin);
    const int64_t end = b.SLoad(&sh.end);
    // Two quads per step, both loaded before either is used.
    const uint8_t* labels = p.labels + row.label_offset;
    DispatchLabels(row.label_dtype, [&](auto tag) {
      using L = decltype(tag);
      const bool aligned = QuadAligned<L>(labels);
      b.Threads([&](int t) {
        for (int64_t i0 = begin + 4 * t; i0 < end; i0 += 2 * kRoundElements) {
          uint32_t quad[2][4];
          QuadClasses<L>(b, labels, row, aligned, i0, quad[0]);
          const int64_t i1 = i0 + kRoundElements;
          if (i1 < end) {
            QuadClasses<L>(b, labels, row, aligned, i1, quad[1]);
          } else {
            quad[1][0] = quad[1][1] = quad[1][2] = quad[1][3] = kIgnored;
          }
          GPUSAMPLER_UNROLL
          for (int h = 0; h < 2; ++h) {
            const uint32_t* cls = quad[h];
            if (cls[0] == kIgnored && cls[1] == kIgnored && cls[2] == kIgnored &&
                cls[3] == kIgnored) {
              continue;
            }
            const Philox4 x = GroupKeys(row, kSelectionStream, h == 0 ? i0 : i1);
            b.CountPhilox(1);
            GPUSAMPLER_UNROLL
            for (int w = 0; w < 4; ++w) {
              if (cls[w] != kIgnored) {
                b.SharedAdd(&sh.hist[cls[w] * kSelectBins + (x.v[w] >> (32 - kSelectBits))], 1);
              }
            }
          }
        }
      });
    });
    const int32_t l = b.SLoad(&sh.large);
    b.Threads([&](int t) {
      for (int bin = t; bin < 2 * kSelectBins; bin += kThreads) {
        const int32_t h = b.SLoad(&sh.hist[bin]);
        if (h != 0) b.GlobalAdd(p.hist + int64_t{l} * 2 * kSelectBins + bin, h);
      }
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
