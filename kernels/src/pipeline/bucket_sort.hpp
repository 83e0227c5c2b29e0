// Stage BucketSort: per (large row, v bucket), the bucket sorted by (v, i) into its slots.
// See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"
#include "pipeline/small_sort.hpp"

namespace gpusampler::kernels::pipeline {

// One block per (large row, v bucket): the bucket's keys (v << 32 | i) agree on v's top
// order_bits bits. A bucket a block holds (all of them, unless crafted) takes the small sort
// on the bits below those and writes its slots striped. A larger one is sorted in chunks of
// a block's keys, then merged pairwise (merge path: each thread finds where its outputs
// start by a binary search, then merges kItems keys), ping-ponging with the row's `sel`
// range (free once Scatter has run): O(n log n) whatever the labels.
struct BucketSortBody {
  Params p;
  struct Shared {
    RowDesc row;
    int64_t n, sel_base;
    int32_t below;
    SortShared sort;
  };
  static_assert(offsetof(Shared, sort) % kCubTempStorageAlign == 0,
                "cub's sort storage must start on a 16-byte boundary");
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int bins = 1 << p.order_bits;
    const int32_t l = static_cast<int32_t>(block / bins);
    const int bucket = static_cast<int>(block % bins);
    const int32_t* vhist = p.vhist + int64_t{l} * bins;
    b.Threads([&](int t) {
      if (t == 0) {
        const LargeRowState* st = p.large + l;
        b.SStore(&sh.row, b.Load(p.rows + b.Load(&st->row)));
        b.SStore(&sh.sel_base, b.Load(&st->sel_base));
        b.SStore(&sh.n, static_cast<int64_t>(b.Load(vhist + bucket)));
        b.SStore(&sh.below, 0);
      }
    });
    const int64_t n = b.SLoad(&sh.n);
    if (n == 0) return;
    b.Threads([&](int t) {
      int32_t sum = 0;
      for (int bin = t; bin < bucket; bin += kThreads) sum += b.Load(vhist + bin);
      if (sum != 0) b.SharedAdd(&sh.below, sum);
    });
    const RowDesc row = b.SLoad(&sh.row);
    const int64_t start = b.SLoad(&sh.below);
    const int64_t sel_base = b.SLoad(&sh.sel_base);
    uint64_t* src = p.bucketed + sel_base + start;
    uint64_t* dst = p.sel + sel_base + start;
    const int top = 64 - p.order_bits;
    const int64_t capacity = p.capacity < kBlockKeys ? p.capacity : kBlockKeys;
    typename B::template Items<uint64_t, kItems> keys;
    if (n <= capacity) {
      LoadKeys(b, keys, src, n);
      SmallSort(b, sh.sort, keys, n, top, [&](int64_t at, uint64_t key) {
        WriteSlot(b, p, row, start + at, static_cast<int64_t>(key & 0xFFFFFFFFu));
      });
      return;
    }
    // Sorted runs of `capacity` keys, in place.
    for (int64_t from = 0; from < n; from += capacity) {
      const int64_t count = n - from < capacity ? n - from : capacity;
      LoadKeys(b, keys, src + from, count);
      SmallSort(b, sh.sort, keys, count, top,
                [&](int64_t at, uint64_t key) { b.Store(src + from + at, key); });
    }
    for (int64_t width = capacity; width < n; width *= 2) {
      MergePass(b, src, dst, n, width);
      uint64_t* swap = src;
      src = dst;
      dst = swap;
    }
    const uint64_t* sorted = src;
    b.Threads([&](int t) {
      for (int64_t at = t; at < n; at += kThreads) {
        WriteSlot(b, p, row, start + at, static_cast<int64_t>(b.Load(sorted + at) & 0xFFFFFFFFu));
      }
    });
  }

 private:
  // Thread t's kItems keys: src[k * kThreads + t] for those below `count`, kAbsent past it.
  template <class B>
  static GPUSAMPLER_HD void LoadKeys(B& b, KeyItems<B>& keys, const uint64_t* src, int64_t count) {
    b.Threads([&](int t) {
      uint64_t* mine = b.Mine(keys, t);
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kItems; ++k) {
        const int64_t at = static_cast<int64_t>(k) * kThreads + t;
        mine[k] = at < count ? b.Load(src + at) : kAbsent;
      }
    });
  }

  // One round of the pairwise merge: the sorted runs of `width` keys of src[0, n), merged two
  // by two into dst.
  template <class B>
  static GPUSAMPLER_HD void MergePass(B& b, const uint64_t* src, uint64_t* dst, int64_t n,
                                      int64_t width) {
    for (int64_t lo = 0; lo < n; lo += 2 * width) {
      const int64_t la = n - lo < width ? n - lo : width;
      const int64_t lb = n - lo - la < width ? n - lo - la : width;
      const uint64_t* a = src + lo;
      const uint64_t* c = a + la;
      uint64_t* out = dst + lo;
      b.Threads([&](int t) {
        for (int64_t d = static_cast<int64_t>(t) * kItems; d < la + lb;
             d += int64_t{kThreads} * kItems) {
          // Merge path: i keys of a and d - i of c come before output d.
          int64_t i = d - lb > 0 ? d - lb : 0;
          int64_t hi = d < la ? d : la;
          while (i < hi) {
            const int64_t mid = (i + hi) / 2;
            if (b.Load(a + mid) < b.Load(c + d - 1 - mid)) {
              i = mid + 1;
            } else {
              hi = mid;
            }
          }
          int64_t j = d - i;
          for (int k = 0; k < kItems && d + k < la + lb; ++k) {
            const bool from_a = j >= lb || (i < la && b.Load(a + i) < b.Load(c + j));
            b.Store(out + d + k, from_a ? b.Load(a + i++) : b.Load(c + j++));
          }
        }
      });
    }
  }
};

}  // namespace gpusampler::kernels::pipeline
