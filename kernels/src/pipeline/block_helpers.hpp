// Helpers over a Block that several stages share: unaligned and quad-wise label loads, byte
// copies (feature rows), slot writes, the key derivation (GroupKeys, OrderKeyOf), a block's
// exclusive scan, and the large row owning a tile. See pipeline.hpp for the rules.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

template <class B, class T>
GPUSAMPLER_HD T LoadUnaligned(B& b, const uint8_t* p) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0) return b.Load(reinterpret_cast<const T*>(p));
  T value;
  uint8_t bytes[sizeof(T)];
  for (size_t k = 0; k < sizeof(T); ++k) bytes[k] = b.Load(p + k);
  memcpy(&value, bytes, sizeof(T));
  return value;
}

struct Unlabeled {};  // an unknown dtype: every element ignored

GPUSAMPLER_HD int LabelSize(DType dtype) { return IsLabel(dtype) ? DTypeSize(dtype) : 0; }

// Label types by dtype: Dispatch calls f(L{}) with the row's label type, once per block, so
// the element loops are compiled per type (no switch per element).
template <class F>
GPUSAMPLER_HD void DispatchLabels(DType dtype, F&& f) {
  // The label word of the dtype table (dtype.hpp): its conversion to int64 is the widening.
  if (!WithLabelWord(dtype, f)) f(Unlabeled{});
}

// The classes of elements [i0, i0 + 4) of a row whose labels are L (i0 a multiple of 4): a
// quad inside the row is loaded whole, in 16-byte (or smaller, for 1-2 byte labels) words,
// when the row's labels start on such a word (`quad_aligned`, uniform); otherwise, and at
// the row's end, element by element.
template <class L>
struct QuadWord {
  static constexpr int kBytes = 4 * static_cast<int>(sizeof(L)) < 16 ? 4 * sizeof(L) : 16;
  struct alignas(kBytes) Type {
    uint8_t bytes[kBytes];
  };
};
template <class L, class B>
GPUSAMPLER_HD void QuadClasses(B& b, const uint8_t* labels, const RowDesc& row, bool quad_aligned,
                               int64_t i0, uint32_t cls[4]) {
  if constexpr (std::is_same_v<L, Unlabeled>) {
    for (int w = 0; w < 4; ++w) cls[w] = kIgnored;
    return;
  } else {
    L value[4];
    if (quad_aligned && i0 + 4 <= row.length) {
      using Word = typename QuadWord<L>::Type;
      constexpr int kWords = 4 * static_cast<int>(sizeof(L)) / QuadWord<L>::kBytes;
      const Word* at = reinterpret_cast<const Word*>(labels + i0 * static_cast<int64_t>(sizeof(L)));
      Word words[kWords];
      GPUSAMPLER_UNROLL
      for (int k = 0; k < kWords; ++k) words[k] = b.Load(at + k);
      memcpy(value, words, sizeof(value));
    } else {
      GPUSAMPLER_UNROLL
      for (int w = 0; w < 4; ++w) {
        value[w] = i0 + w < row.length
                       ? LoadUnaligned<B, L>(b, labels + (i0 + w) * static_cast<int64_t>(sizeof(L)))
                       : L{};
      }
    }
    GPUSAMPLER_UNROLL
    for (int w = 0; w < 4; ++w) {
      const int64_t label = static_cast<int64_t>(value[w]);
      cls[w] = i0 + w >= row.length          ? kIgnored
               : label == row.positive_label ? kPositive
               : label == row.negative_label ? kNegative
                                             : kIgnored;
    }
  }
}
template <class L>
GPUSAMPLER_HD bool QuadAligned(const uint8_t* labels) {
  return reinterpret_cast<uintptr_t>(labels) % QuadWord<L>::kBytes == 0;
}

// Copies n bytes (or zeroes them when src is null) in the widest word the addresses allow.
// kFeatures: the bytes are feature rows, which the simulator counts apart from the sampling's
// own traffic (they are the payload the caller asked for, K rows per row, not a cost per
// label element).
template <bool kFeatures, class B>
GPUSAMPLER_HD void CopyBytes(B& b, uint8_t* dst, const uint8_t* src, int64_t n) {
  auto copy = [&](auto word) {
    using W = decltype(word);
    for (int64_t k = 0; k < n; k += static_cast<int64_t>(sizeof(W))) {
      W w = 0;
      if (src != nullptr) {
        w = kFeatures ? b.LoadFeature(reinterpret_cast<const W*>(src + k))
                      : b.Load(reinterpret_cast<const W*>(src + k));
      }
      if (kFeatures) {
        b.StoreFeature(reinterpret_cast<W*>(dst + k), w);
      } else {
        b.Store(reinterpret_cast<W*>(dst + k), w);
      }
    }
  };
  const uintptr_t bits = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                         static_cast<uintptr_t>(n);
  if (bits % 8 == 0) {
    copy(uint64_t{0});
  } else if (bits % 4 == 0) {
    copy(uint32_t{0});
  } else {
    copy(uint8_t{0});
  }
}

// Slot t of a row: element i (>= 0) or padding (i < 0).
template <class B>
GPUSAMPLER_HD void WriteSlot(B& b, const Params& p, const RowDesc& row, int64_t t, int64_t i) {
  b.Store(p.out_indices + row.out_slot + t, i);
  const int item = LabelSize(row.label_dtype);
  if (p.out_labels != nullptr && item > 0) {
    uint8_t* dst = p.out_labels + row.out_label_offset + t * item;
    if (i >= 0) {
      CopyBytes<false>(b, dst, p.labels + row.label_offset + i * item, item);
    } else {
      // The padding label of the dtype table, stored in `item` bytes (-1: every byte 0xFF).
      const uint8_t pad = static_cast<uint8_t>(Traits(row.label_dtype).padding_label);
      for (int k = 0; k < item; ++k) b.Store(dst + k, pad);
    }
  }
  const int64_t fb = row.feature_row_bytes;
  if (fb > 0 && p.out_features != nullptr) {
    const uint8_t* src =
        (i >= 0 && p.features != nullptr) ? p.features + row.feature_offset + i * fb : nullptr;
    CopyBytes<true>(b, p.out_features + row.out_feature_offset + t * fb, src, fb);
  }
}

// The Philox call holding the keys of elements [i0, i0 + 4) of a row (i0 a multiple of 4)
// in `stream`: word w is the key of element i0 + w. Every body derives u this way.
GPUSAMPLER_HD Philox4 GroupKeys(const RowDesc& row, uint32_t stream, int64_t i0) {
  return BlockPhilox(row.seed, row.row_in_request, stream, static_cast<uint64_t>(i0) / 4);
}

// v of one element (computed only for selected elements, one call each).
GPUSAMPLER_HD uint32_t OrderKeyOf(const RowDesc& row, int64_t i) {
  return ElementKey(row.seed, row.row_in_request, kOrderStream, static_cast<uint64_t>(i));
}

// Exclusive prefix sums of n <= kThreads * 8 counters (global), into shared `out`; `part`
// is shared scratch of kThreads entries. Two phases plus a serial pass over kThreads sums.
template <class B>
GPUSAMPLER_HD void ExclusiveScan(B& b, const int32_t* counters, int n, int32_t* out,
                                 int32_t* part) {
  const int per = (n + kThreads - 1) / kThreads;
  b.Threads([&](int t) {
    int32_t sum = 0;
    for (int k = 0; k < per; ++k) {
      const int bin = t * per + k;
      if (bin < n) {
        const int32_t c = b.Load(counters + bin);
        b.SStore(out + bin, c);
        sum += c;
      }
    }
    b.SStore(part + t, sum);
  });
  b.Threads([&](int t) {
    if (t == 0) {
      int32_t run = 0;
      for (int k = 0; k < kThreads; ++k) {
        const int32_t c = b.SLoad(part + k);
        b.SStore(part + k, run);
        run += c;
      }
    }
  });
  b.Threads([&](int t) {
    int32_t run = b.SLoad(part + t);
    for (int k = 0; k < per; ++k) {
      const int bin = t * per + k;
      if (bin < n) {
        const int32_t c = b.SLoad(out + bin);
        b.SStore(out + bin, run);
        run += c;
      }
    }
  });
}

// The large row owning tile `tile` (first_tile prefix sums): a binary search per block.
template <class B>
GPUSAMPLER_HD int32_t LargeOfTile(B& b, const Params& p, int64_t tile, bool slot_tiles) {
  int32_t lo = 0;
  int32_t hi = p.num_large;  // invariant: start(lo) <= tile < start(hi)
  while (hi - lo > 1) {
    const int32_t mid = lo + (hi - lo) / 2;
    const int32_t start =
        slot_tiles ? b.Load(&p.large[mid].first_slot_tile) : b.Load(&p.large[mid].first_tile);
    if (start <= tile) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace gpusampler::kernels::pipeline
