// Stage Boundary: per (large row, class), the boundary bucket's selected keys. See
// pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"
#include "pipeline/small_sort.hpp"

namespace gpusampler::kernels::pipeline {

struct BoundaryBody {
  Params p;
  struct Shared {
    RowDesc row;
    int64_t n, need, cand_at, sel_base;
    int32_t digit_count[256];
    int32_t digit;
    int32_t kept, taken;
    unsigned long long sel_at;
    SortShared sort;
  };
  static_assert(offsetof(Shared, sort) % kCubTempStorageAlign == 0,
                "cub's sort storage must start on a 16-byte boundary");
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int32_t l = static_cast<int32_t>(block / 2);
    const int c = static_cast<int>(block % 2);
    LargeRowState* st = p.large + l;
    const int bins = 1 << p.order_bits;
    int32_t* vhist = p.vhist + int64_t{l} * bins;
    b.Threads([&](int t) {
      if (t == 0) {
        b.SStore(&sh.row, b.Load(p.rows + b.Load(&st->row)));
        b.SStore(&sh.n, b.Load(&st->cand_count[c]));
        b.SStore(&sh.need, b.Load(&st->need[c]));
        b.SStore(&sh.cand_at, b.Load(&st->cand_base) + b.Load(&st->cand_off[c]));
        b.SStore(&sh.sel_base, b.Load(&st->sel_base));
      }
    });
    if (b.SLoad(&sh.need) == 0) return;
    const RowDesc row = b.SLoad(&sh.row);
    uint64_t* cand = p.cand + b.SLoad(&sh.cand_at);
    uint64_t* const sel = p.sel + b.SLoad(&sh.sel_base);
    // Appends the selected key (u << 32 | i) as (v << 32 | i) at sel_at + at.
    auto select = [&](uint64_t ukey, int64_t at, int64_t sel_at) {
      const int64_t i = static_cast<int64_t>(ukey & 0xFFFFFFFFu);
      b.CountPhilox(1);
      const uint32_t v = OrderKeyOf(row, i);
      b.Store(sel + sel_at + at, (static_cast<uint64_t>(v) << 32) | static_cast<uint64_t>(i));
      b.GlobalAdd(vhist + BucketOf(v, p.order_bits), 1);
    };
    const int64_t capacity = p.capacity < kBlockKeys ? p.capacity : kBlockKeys;
    // Narrow by 8-bit digits of (u, i) below u's top kSelectBits bits (equal for all
    // candidates) until a block holds them: at most seven rounds, since keys are distinct.
    int lo_bit = 64 - kSelectBits;
    KeyItems<B> keys;
    while (b.SLoad(&sh.n) > capacity && lo_bit > 0) {
      const int shift = lo_bit >= 8 ? lo_bit - 8 : 0;
      NarrowRound(b, sh, st, cand, keys, shift, lo_bit - shift, select);
      lo_bit = shift;
    }
    const int64_t n = b.SLoad(&sh.n);
    const int64_t need = b.SLoad(&sh.need);
    // Bounded: distinct keys always narrow to a block; anything else is a device error.
    if (n > capacity || need > n) {
      b.Threads([&](int t) {
        if (t == 0) b.Fail(p.error, kErrorBoundary, "Boundary: more candidates than a block holds");
      });
      return;
    }
    // The rest fits in a block: sort by (u, i), select the first `need`.
    b.Threads([&](int t) {
      uint64_t* mine = b.Mine(keys, t);
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const int64_t at = static_cast<int64_t>(k) * kThreads + t;
        mine[k] = at < n ? b.Load(cand + at) : kAbsent;
      }
      if (t == 0) {
        b.SStore(&sh.sel_at, b.GlobalAdd(&st->sel_cursor, static_cast<unsigned long long>(need)));
      }
    });
    const int64_t sel_at = static_cast<int64_t>(b.SLoad(&sh.sel_at));
    // (the survivors agree on every bit above lo_bit: the narrowing rounds fixed them)
    SmallSort(b, sh.sort, keys, n, lo_bit, [&](int64_t at, uint64_t key) {
      if (at < need) select(key, at, sel_at);
    });
  }

  // One narrowing round on the digit bits [shift, shift + width): the digit holding the
  // need-th key; keys below it are selected, keys on it stay candidates.
  template <class B, class Select>
  GPUSAMPLER_HD void NarrowRound(B& b, Shared& sh, LargeRowState* st, uint64_t* cand,
                                 KeyItems<B>& keys, int shift, int width, Select& select) const {
    const int64_t n = b.SLoad(&sh.n);
    b.Threads([&](int t) {
      for (int d = t; d < 256; d += kThreads) b.SStore(&sh.digit_count[d], 0);
    });
    b.Threads([&](int t) {
      for (int64_t k = t; k < n; k += kThreads) {
        const uint64_t x = b.Load(cand + k);
        b.SharedAdd(&sh.digit_count[(x >> shift) & LowMask(width)], 1);
      }
    });
    b.Threads([&](int t) {
      if (t != 0) return;
      const int64_t need = b.SLoad(&sh.need);
      int64_t below = 0;
      int d = 0;
      for (;; ++d) {
        const int32_t h = b.SLoad(&sh.digit_count[d]);
        if (below + h >= need) break;
        below += h;
      }
      b.SStore(&sh.digit, d);
      b.SStore(&sh.taken, 0);
      b.SStore(&sh.kept, 0);
      if (below > 0) {
        b.SStore(&sh.sel_at, b.GlobalAdd(&st->sel_cursor, static_cast<unsigned long long>(below)));
      }
    });
    const int32_t digit = b.SLoad(&sh.digit);
    // Keys below the digit are selected; keys on it are compacted to the front, in place:
    // a chunk is read whole before any of it is written, and writes stay behind reads.
    for (int64_t chunk = 0; chunk < n; chunk += kBlockKeys) {
      b.Threads([&](int t) {
        uint64_t* mine = b.Mine(keys, t);
        GPUSAMPLER_UNROLL
        for (int k = 0; k < kItems; ++k) {
          const int64_t at = chunk + static_cast<int64_t>(k) * kThreads + t;
          mine[k] = at < n ? b.Load(cand + at) : kAbsent;
        }
      });
      b.Threads([&](int t) {
        const uint64_t* mine = b.Mine(keys, t);
        const int64_t sel_at = static_cast<int64_t>(b.SLoad(&sh.sel_at));
        GPUSAMPLER_UNROLL
        for (int k = 0; k < kItems; ++k) {
          const int64_t at = chunk + static_cast<int64_t>(k) * kThreads + t;
          if (at >= n) continue;
          const int64_t d = static_cast<int64_t>((mine[k] >> shift) & LowMask(width));
          if (d < digit) {
            select(mine[k], b.SharedAdd(&sh.taken, 1), sel_at);
          } else if (d == digit) {
            b.Store(cand + b.SharedAdd(&sh.kept, 1), mine[k]);
          }
        }
      });
    }
    b.Threads([&](int t) {
      if (t != 0) return;
      b.SStore(&sh.need, b.SLoad(&sh.need) - b.SLoad(&sh.taken));
      b.SStore(&sh.n, static_cast<int64_t>(b.SLoad(&sh.kept)));
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
