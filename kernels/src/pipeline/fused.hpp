// Stage Fused: one block per small row, the whole sampling of the row in one launch; and
// EnqueueSmallClass, the fused launch of a size class. See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"
#include "pipeline/small_sort.hpp"

namespace gpusampler::kernels::pipeline {

// One block per row; rows longer than small_max are left to the large-row stages. Work is
// sized to the row: classes and u of the row's elements (registers), a radix select per
// class of the m-th smallest (u, i) in shared memory (8-bit digits; about three rounds, each
// over the keys still tied with the answer), v of the selected only, and the small sort of
// the selected keys by (v, i).
struct FusedBody {
  Params p;
  struct Shared {
    RowDesc row;
    int32_t count[2];
    int64_t m[2];
    int32_t hist[2][256];
    uint64_t prefix[2];  // class c's m-th smallest key, bits [lo[c], 64) found so far
    int32_t need[2];     // its rank (1-based) among the keys that agree with prefix
    int32_t cand[2];     // how many keys agree with prefix
    int32_t lo[2];
    uint64_t answer[2];  // class c's m-th smallest key
    SortShared sort;
  };
  static_assert(offsetof(Shared, sort) % kCubTempStorageAlign == 0,
                "cub's sort storage must start on a 16-byte boundary");
  // Selection key of element i of class c: u in the top half, the class at bits 30-31, i
  // below (< 2^12). Keys of one class order as (u, i).
  static GPUSAMPLER_HD uint64_t SelKey(uint32_t u, uint32_t c, int64_t i) {
    return (static_cast<uint64_t>(u) << 32) | (uint64_t{c} << 30) | static_cast<uint64_t>(i);
  }
  // x's bits [bit, 64), shifted down (0 for bit 64).
  static GPUSAMPLER_HD uint64_t Above(uint64_t x, int bit) { return bit >= 64 ? 0 : x >> bit; }
  // The digit bits [lo, hi) of round r: four rounds over u, then over i's ib bits.
  static GPUSAMPLER_HD void Round(int r, int ib, int* lo, int* hi) {
    if (r < 4) {
      *hi = 64 - 8 * r;
      *lo = *hi - 8;
    } else {
      *hi = ib - 8 * (r - 4);
      *lo = *hi > 8 ? *hi - 8 : 0;
    }
  }
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const RowDesc row = LoadRow(b, sh, block);
    if (row.length > p.small_max || row.class_table >= 0) return;  // (class rows: classes_*.hpp)
    KeyItems<B> keys;
    ClassKeys(b, sh, row, keys);
    TakeQuotas(b, sh, row, block);
    const int64_t m_pos = b.SLoad(&sh.m[0]);
    const int64_t m_neg = b.SLoad(&sh.m[1]);
    const bool partial0 = b.SLoad(&sh.cand[0]) > 0;
    const bool partial1 = b.SLoad(&sh.cand[1]) > 0;
    SelectRounds(b, sh, keys, IndexBits(row.length));
    FindAnswers(b, sh, keys, partial0, partial1);
    KeepSelected(b, sh, row, keys, m_pos, m_neg, partial0, partial1);
    const int64_t m = m_pos + m_neg;
    SmallSort(b, sh.sort, keys, m, 64, [&](int64_t at, uint64_t key) {
      WriteSlot(b, p, row, at, static_cast<int64_t>(key & 0xFFFFFFFFu));
    });
    b.Threads([&](int t) {
      for (int64_t at = m + t; at < row.num_samples; at += kThreads) WriteSlot(b, p, row, at, -1);
    });
  }

  // The block's row, in shared memory (thread 0 loads it and zeroes the class counts). A
  // spare block of a size class gets a row longer than small_max: it exits.
  template <class B>
  GPUSAMPLER_HD RowDesc LoadRow(B& b, Shared& sh, int64_t block) const {
    b.Threads([&](int t) {
      if (t == 0) {
        const int64_t rows = p.sizes != nullptr ? b.Load(&p.sizes->num_rows) : p.num_rows;
        RowDesc row;
        if (block < rows) {
          row = b.Load(p.rows + block);
        } else {
          row.length = INT64_MAX;  // past the batch (a size class's spare block): exit
        }
        b.SStore(&sh.row, row);
        b.SStore(&sh.count[0], 0);
        b.SStore(&sh.count[1], 0);
      }
    });
    return b.SLoad(&sh.row);
  }

  template <class B>
  GPUSAMPLER_HD void ClassKeys(B& b, Shared& sh, const RowDesc& row, KeyItems<B>& keys) const {
    // Class and u of every element. Thread t takes the quads (4 consecutive elements, one
    // Philox call) t, t + 256, t + 512, t + 768, each loaded whole: a warp reads 128
    // consecutive labels per step (coalesced); quads past the row's end are not read.
    const uint8_t* labels = p.labels + row.label_offset;
    DispatchLabels(row.label_dtype, [&](auto tag) {
      using L = decltype(tag);
      const bool aligned = QuadAligned<L>(labels);
      b.Threads([&](int t) {
        uint64_t* mine = b.Mine(keys, t);
        int32_t count0 = 0, count1 = 0;
        uint32_t quad[kItems / 4][4];
        GPUSAMPLER_UNROLL
        for (int g = 0; g < kItems / 4; ++g) {
          const int64_t i0 = (static_cast<int64_t>(g) * kThreads + t) * 4;
          QuadClasses<L>(b, labels, row, aligned, i0, quad[g]);
        }
        GPUSAMPLER_UNROLL
        for (int g = 0; g < kItems / 4; ++g) {
          const int64_t i0 = (static_cast<int64_t>(g) * kThreads + t) * 4;
          const uint32_t* cls = quad[g];
          const bool any =
              cls[0] != kIgnored || cls[1] != kIgnored || cls[2] != kIgnored || cls[3] != kIgnored;
          Philox4 x{{0, 0, 0, 0}};
          if (any) {
            x = GroupKeys(row, kSelectionStream, i0);
            b.CountPhilox(1);
          }
          GPUSAMPLER_UNROLL
          for (int w = 0; w < 4; ++w) {
            if (cls[w] == kIgnored) {
              mine[g * 4 + w] = kAbsent;
            } else {
              count0 += cls[w] == 0 ? 1 : 0;
              count1 += cls[w] == 1 ? 1 : 0;
              mine[g * 4 + w] = SelKey(x.v[w], cls[w], i0 + w);
            }
          }
        }
        if (count0 != 0) b.SharedAdd(&sh.count[0], count0);
        if (count1 != 0) b.SharedAdd(&sh.count[1], count1);
      });
    });
  }

  // Each class's quota m (written out as the row's counts) and the radix select's start.
  template <class B>
  GPUSAMPLER_HD void TakeQuotas(B& b, Shared& sh, const RowDesc& row, int64_t block) const {
    b.Threads([&](int t) {
      if (t < 2) {
        const int c = t;
        const int64_t count_c = b.SLoad(&sh.count[c]);
        const Quotas q = ComputeQuotas(b.SLoad(&sh.count[0]), b.SLoad(&sh.count[1]),
                                       row.num_samples, row.target, row.fill);
        const int64_t m = c == 0 ? q.pos : q.neg;
        b.SStore(&sh.m[c], m);
        b.Store(c == 0 ? p.out_num_positive + block : p.out_num_negative + block,
                static_cast<int32_t>(m));
        // A radix select runs for a class with 0 < m < count (else it takes all or none).
        b.SStore(&sh.prefix[c], uint64_t{static_cast<uint32_t>(c)} << 30);
        b.SStore(&sh.need[c], static_cast<int32_t>(m));
        b.SStore(&sh.cand[c], m > 0 && m < count_c ? static_cast<int32_t>(count_c) : 0);
        b.SStore(&sh.lo[c], 64);
      }
    });
  }

  template <class B>
  GPUSAMPLER_HD void SelectRounds(B& b, Shared& sh, KeyItems<B>& keys, int ib) const {
    // Rounds while a class has more than one key tied with its answer.
    for (int r = 0;; ++r) {
      const bool open0 = b.SLoad(&sh.cand[0]) > 1;
      const bool open1 = b.SLoad(&sh.cand[1]) > 1;
      int lo = 0, hi = 0;
      Round(r, ib, &lo, &hi);
      if ((!open0 && !open1) || hi <= 0) break;
      const uint64_t dmask = LowMask(hi - lo);
      b.Threads([&](int t) {
        b.SStore(&sh.hist[0][t], 0);
        b.SStore(&sh.hist[1][t], 0);
      });
      b.Threads([&](int t) {
        const uint64_t* mine = b.Mine(keys, t);
        const uint64_t pre0 = open0 ? Above(b.SLoad(&sh.prefix[0]), hi) : kAbsent;
        const uint64_t pre1 = open1 ? Above(b.SLoad(&sh.prefix[1]), hi) : kAbsent;
        GPUSAMPLER_UNROLL
        for (int k = 0; k < kItems; ++k) {
          const uint64_t x = mine[k];
          if (x == kAbsent) continue;
          const int c = static_cast<int>((x >> 30) & 1);
          if (Above(x, hi) == Pick(c, pre0, pre1)) {
            b.SharedAdd(&sh.hist[c][static_cast<int>((x >> lo) & dmask)], 1);
          }
        }
      });
      b.Threads([&](int t) {
        if (t >= 2 || !(t == 0 ? open0 : open1)) return;
        const int c = t;
        const int32_t need = b.SLoad(&sh.need[c]);
        int32_t below = 0;
        int d = 0;
        for (;; ++d) {
          const int32_t h = b.SLoad(&sh.hist[c][d]);
          if (below + h >= need) {
            b.SStore(&sh.need[c], need - below);
            b.SStore(&sh.cand[c], h);
            break;
          }
          below += h;
        }
        b.SStore(&sh.prefix[c], b.SLoad(&sh.prefix[c]) | (static_cast<uint64_t>(d) << lo));
        b.SStore(&sh.lo[c], lo);
      });
    }
  }

  template <class B>
  GPUSAMPLER_HD void FindAnswers(B& b, Shared& sh, KeyItems<B>& keys, bool partial0,
                                 bool partial1) const {
    // The one key left tied with each partial class's answer is the answer.
    b.Threads([&](int t) {
      const uint64_t* mine = b.Mine(keys, t);
      const int lo0 = partial0 ? b.SLoad(&sh.lo[0]) : 64;
      const int lo1 = partial1 ? b.SLoad(&sh.lo[1]) : 64;
      const uint64_t pre0 = partial0 ? Above(b.SLoad(&sh.prefix[0]), lo0) : kAbsent;
      const uint64_t pre1 = partial1 ? Above(b.SLoad(&sh.prefix[1]), lo1) : kAbsent;
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const uint64_t x = mine[k];
        if (x == kAbsent) continue;
        const int c = static_cast<int>((x >> 30) & 1);
        if (Pick(c, partial0, partial1) && Above(x, Pick(c, lo0, lo1)) == Pick(c, pre0, pre1)) {
          b.SStore(&sh.answer[c], x);
        }
      }
    });
  }

  template <class B>
  GPUSAMPLER_HD void KeepSelected(B& b, Shared& sh, const RowDesc& row, KeyItems<B>& keys,
                                  int64_t m_pos, int64_t m_neg, bool partial0,
                                  bool partial1) const {
    // The selected: all of a class taken whole, keys up to the answer of a partial class.
    // Their key becomes (v, i).
    b.Threads([&](int t) {
      uint64_t* mine = b.Mine(keys, t);
      const uint64_t limit0 = partial0 ? b.SLoad(&sh.answer[0]) : kAbsent;
      const uint64_t limit1 = partial1 ? b.SLoad(&sh.answer[1]) : kAbsent;
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const uint64_t x = mine[k];
        if (x == kAbsent) continue;
        const int c = static_cast<int>((x >> 30) & 1);
        if (Pick(c, m_pos, m_neg) > 0 && x <= Pick(c, limit0, limit1)) {
          const int64_t i = static_cast<int64_t>(x & 0xFFFu);
          b.CountPhilox(1);
          mine[k] = (static_cast<uint64_t>(OrderKeyOf(row, i)) << 32) | static_cast<uint64_t>(i);
        } else {
          mine[k] = kAbsent;
        }
      }
    });
  }
};

// One size class of batches whose rows are all small (at most kSmallRowMax elements): the
// fused kernel over `class_rows` blocks, the batch's row count read from `sizes` (device
// memory) when it runs, so a launch captured once (a CUDA graph) serves every batch of at
// most class_rows small rows. How the host binds a class:
//   - per class, fixed device buffers sized for the class's bounds (rows table of
//     class_rows RowDescs, LaunchSizes, labels, features, outputs): a graph replays the
//     pointers it captured, so every replay uses the same buffers;
//   - capture once: EnqueueSmallClass(exec, class_rows, p) with p = ParamsOf(those buffers)
//     and p.sizes pointing at the class's LaunchSizes;
//   - per batch: one host-to-device copy of [LaunchSizes | rows | labels] (one staging
//     section, laid out back to back), the graph launch, one device-to-host copy of the
//     outputs (+ an event or a polled flag for completion): three stream operations.
// Rows past num_rows are never read; their blocks exit at once (~1-2 us for a class of
// 1024 against the batch's own work). Batches with large rows take Enqueue (sizes planned on
// the host) until the large-row stages read theirs from device memory too.
template <class Exec>
void EnqueueSmallClass(Exec& exec, int32_t class_rows, const Params& base) {
  Params p = base;
  p.num_rows = class_rows;
  p.small_max = kSmallRowMax;
  exec.Launch(FusedBody{p}, class_rows);
}

}  // namespace gpusampler::kernels::pipeline
