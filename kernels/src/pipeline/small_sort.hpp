// The block's small sort (SmallSort), shared by Fused, Boundary and BucketSort.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// The block's small sort. Up to kBlockKeys distinct 64-bit keys that agree on every bit
// above `top` are sorted by a counting pass on the `digit_bits` bits below `top` (about two
// keys per bin, in shared memory), then an insertion sort of each bin by the thread owning
// it, and handed out in striped order (rank k * kThreads + t to thread t's k-th call:
// coalesced writes). A bin holding more than kInsertMax keys (crafted input: a client
// choosing labels can pile its selected keys onto a few v values' top bits) sends the whole
// sort to cub's block radix sort instead: O(n log n) either way.
inline constexpr int kSortBinsMax = 2048;
inline constexpr int kInsertMax = 32;
inline constexpr uint64_t kAbsent = ~uint64_t{0};

// cub::BlockRadixSort's TempStorage (which SortWholeBlock lays over `keys`) is read with 16-byte
// shared loads: it must start on a 16-byte boundary (alignof, nvcc 13.0), or the GPU faults
// with cudaErrorMisalignedAddress. Every body's Shared holding a SortShared asserts its offset.
inline constexpr size_t kCubTempStorageAlign = 16;

struct alignas(kCubTempStorageAlign) SortShared {
  uint64_t keys[kBlockKeys];
  int32_t count[kSortBinsMax];
  int32_t part[kThreads];
  int32_t max_part[kThreads];
  int32_t max_bin;
};

// Bits of the counting pass for n keys: about two keys per bin.
GPUSAMPLER_HD int SortDigitBits(int64_t n) {
  int bits = 1;
  while (bits < 11 && (int64_t{2} << bits) < n) ++bits;
  return bits;
}

// The counting pass of SmallSort: 2^digit_bits bins on the key bits [shift, shift + bits);
// thread t owns the bins [t * per, (t + 1) * per).
struct SortBins {
  int shift;
  int bins;
  uint64_t mask;
  int per;
};

template <class B>
using KeyItems = typename B::template Items<uint64_t, kItems>;
template <class B>
using SlotItems = typename B::template Items<int32_t, kItems>;

// Counts the keys of each bin; each key's place within its bin goes to `local`.
template <class B>
GPUSAMPLER_HD void CountIntoBins(B& b, SortShared& ss, const SortBins& sb, KeyItems<B>& keys,
                                 SlotItems<B>& local) {
  b.Threads([&](int t) {
    for (int bin = t; bin < sb.bins; bin += kThreads) b.SStore(&ss.count[bin], 0);
  });
  b.Threads([&](int t) {
    const uint64_t* mine = b.Mine(keys, t);
    int32_t* off = b.Mine(local, t);
    GPUSAMPLER_UNROLL
    for (int k = 0; k < kItems; ++k) {
      if (mine[k] != kAbsent) {
        off[k] = b.SharedAdd(&ss.count[static_cast<int>((mine[k] >> sb.shift) & sb.mask)], 1);
      }
    }
  });
}

// Exclusive starts of each thread's share of the bins (ss.part), and the largest bin
// (ss.max_bin).
template <class B>
GPUSAMPLER_HD void ScanBinShares(B& b, SortShared& ss, const SortBins& sb) {
  b.Threads([&](int t) {
    int32_t sum = 0, most = 0;
    for (int k = 0; k < sb.per; ++k) {
      const int bin = t * sb.per + k;
      if (bin < sb.bins) {
        const int32_t c = b.SLoad(&ss.count[bin]);
        sum += c;
        most = c > most ? c : most;
      }
    }
    b.SStore(&ss.part[t], sum);
    b.SStore(&ss.max_part[t], most);
  });
  b.Threads([&](int t) {
    if (t != 0) return;
    int32_t run = 0, most = 0;
    for (int k = 0; k < kThreads; ++k) {
      const int32_t c = b.SLoad(&ss.part[k]);
      const int32_t m = b.SLoad(&ss.max_part[k]);
      b.SStore(&ss.part[k], run);
      run += c;
      most = m > most ? m : most;
    }
    b.SStore(&ss.max_bin, most);
  });
}

// The crafted-input fallback: cub's block radix sort of the whole keys, handed out striped.
template <class B, class Write>
GPUSAMPLER_HD void SortWholeBlock(B& b, SortShared& ss, KeyItems<B>& keys, int64_t n,
                                  Write& write) {
  b.SortKeysStriped(keys, 64, &ss);
  b.Threads([&](int t) {
    const uint64_t* mine = b.Mine(keys, t);
    GPUSAMPLER_UNROLL
    for (int k = 0; k < kItems; ++k) {
      const int64_t at = static_cast<int64_t>(k) * kThreads + t;
      if (at < n) write(at, mine[k]);
    }
  });
}

// Each bin's start (replacing its count), then every key stored at its bin's start plus its
// place.
template <class B>
GPUSAMPLER_HD void ScatterIntoBins(B& b, SortShared& ss, const SortBins& sb, KeyItems<B>& keys,
                                   SlotItems<B>& local) {
  b.Threads([&](int t) {
    int32_t run = b.SLoad(&ss.part[t]);
    for (int k = 0; k < sb.per; ++k) {
      const int bin = t * sb.per + k;
      if (bin < sb.bins) {
        const int32_t c = b.SLoad(&ss.count[bin]);
        b.SStore(&ss.count[bin], run);
        run += c;
      }
    }
  });
  b.Threads([&](int t) {
    const uint64_t* mine = b.Mine(keys, t);
    const int32_t* off = b.Mine(local, t);
    GPUSAMPLER_UNROLL
    for (int k = 0; k < kItems; ++k) {
      if (mine[k] != kAbsent) {
        const int bin = static_cast<int>((mine[k] >> sb.shift) & sb.mask);
        b.SStore(&ss.keys[b.SLoad(&ss.count[bin]) + off[k]], mine[k]);
      }
    }
  });
}

// Each thread insertion-sorts its own bins' segments of ss.keys.
template <class B>
GPUSAMPLER_HD void SortEachBin(B& b, SortShared& ss, const SortBins& sb, int64_t n) {
  b.Threads([&](int t) {
    for (int k = 0; k < sb.per; ++k) {
      const int bin = t * sb.per + k;
      if (bin >= sb.bins) break;
      const int32_t lo = b.SLoad(&ss.count[bin]);
      const int32_t hi = bin + 1 < sb.bins ? b.SLoad(&ss.count[bin + 1]) : static_cast<int32_t>(n);
      for (int32_t a = lo + 1; a < hi; ++a) {
        const uint64_t x = b.SLoad(&ss.keys[a]);
        int32_t c = a;
        while (c > lo) {
          const uint64_t y = b.SLoad(&ss.keys[c - 1]);
          if (y < x) break;
          b.SStore(&ss.keys[c], y);
          --c;
        }
        if (c != a) b.SStore(&ss.keys[c], x);
      }
    }
  });
}

// keys: thread t's kItems keys (kAbsent for none), n of them in all; write(at, key) gets the
// key of rank `at` (< n). The keys agree on bits [top, 64).
template <class B, class Write>
GPUSAMPLER_HD void SmallSort(B& b, SortShared& ss, KeyItems<B>& keys, int64_t n, int top,
                             Write write) {
  if (n <= 0) return;
  const int dbits = SortDigitBits(n) < top ? SortDigitBits(n) : top;
  SortBins sb;
  sb.shift = top - dbits;
  sb.bins = 1 << dbits;
  sb.mask = static_cast<uint64_t>(sb.bins - 1);
  sb.per = (sb.bins + kThreads - 1) / kThreads;
  SlotItems<B> local;
  CountIntoBins(b, ss, sb, keys, local);
  ScanBinShares(b, ss, sb);
  if (b.SLoad(&ss.max_bin) > kInsertMax) {
    SortWholeBlock(b, ss, keys, n, write);
    return;
  }
  ScatterIntoBins(b, ss, sb, keys, local);
  SortEachBin(b, ss, sb, n);
  b.Threads([&](int t) {
    GPUSAMPLER_UNROLL
    for (int k = 0; k < kItems; ++k) {
      const int64_t at = static_cast<int64_t>(k) * kThreads + t;
      if (at < n) write(at, b.SLoad(&ss.keys[at]));
    }
  });
}

}  // namespace gpusampler::kernels::pipeline
