// The GPU sampling pipeline (SPEC section 1), written once for two executors: the CUDA
// device (cuda/pipeline_exec.cuh: each body runs as a __global__ kernel, one CUDA block per
// block index) and the host-run "cuda-sim" device (sim/sim_block.hpp: the blocks run one after
// the other, the threads of a block one phase at a time between barriers). The same bodies,
// the same buffers, the same launch sequence; only the Block (barriers, shared memory, block
// sort, atomics, counted global loads and stores) and the Exec (launch) differ.
//
// Rules for a body, so that both executors agree:
//   - Work happens inside b.Threads(f): f(t) for every thread t, then a barrier. Code outside
//     a phase runs on every thread on the device and once on the host, so it only reads
//     shared or uniform values and computes locals; it has no side effects.
//   - A thread's state that lives across phases is in b.Mine(items, t) (registers on the
//     device, a per-thread slice on the host). Block-wide sorts take such arrays.
//   - Every global memory access goes through b.Load / b.Store / b.GlobalAdd (feature rows:
//     b.LoadFeature / b.StoreFeature), and every shared one through b.SLoad / b.SStore /
//     b.SharedAdd (on b.SharedAs<T>()): the simulator counts both (LaunchStats::bytes_*,
//     smem_bytes; block sorts at cub's traffic), faults on a misaligned global access, on a
//     read of launch scratch this launch has not written, and on a shared-memory race (two
//     threads of one phase on one byte, one of them storing plainly).
//   - A bounded step that finds more than it was sized for calls b.Fail(p.error, code):
//     the device ORs the code into the arena's error word (the host turns a nonzero word
//     into INTERNAL) and the body skips the overflowing writes; cuda-sim throws INTERNAL.
//
// Stages of a launch (B rows; "small" rows have at most kSmallRowMax elements):
//   Fused       one block per row, sized to the row: classes and u of its elements
//               (registers), a radix select per class of the m-th smallest (u, i) (8-bit
//               digits over the keys still tied with it, in shared memory), v of the
//               selected only, the small sort (below) of the selected by (v, i), outputs
//               striped. A batch of small rows is this one launch (EnqueueSmallClass: one
//               launch per size class, its row count read from device memory).
//   Prepare     large-row tables (tile prefix sums, candidate and selection bases) and
//               zeroed per-row counters.
//   Pass1       one block per tile (16Ki-64Ki elements, the fewest that fit one wave of
//               kResidentBlocks): labels read once, u of the two classes, per-class
//               histograms of u's top kSelectBits bits (shared, then global).
//   Threshold   one block per large row: P, Q, quotas, and per class the histogram bucket
//               holding the m-th smallest (u, i); padding slots.
//   Pass2       tiles again: keys below the boundary bucket are selected (their v is computed
//               and appended); the boundary bucket's keys become candidates; histogram of
//               the selected v's top bits.
//   Boundary    one block per (large row, class): the boundary candidates, narrowed by
//               8-bit histogram rounds while there are more than a block holds, then the
//               small sort by (u, i); the first `need` are selected. More than a block left
//               (never, keys are distinct) raises kErrorBoundary.
//   Scatter     selected keys into buckets of v's top bits (row-major, bucket-major).
//   BucketSort  one block per (large row, bucket): the small sort on the bits of (v, i)
//               below the bucket's, outputs striped. A bucket over a block (a crafted
//               request) is sorted in block-sized runs and merged pairwise: O(n log n).
// The small sort (SmallSort): a counting pass on ~log2(n) - 1 bits below the keys' common
// prefix (about two keys per bin), an insertion sort per bin, striped hand-out; cub's block
// radix sort only if a bin holds more than kInsertMax keys (crafted input).
// Nothing is read back to the host; every grid size is host-known from the row descriptors
// (Enqueue) or the size class (EnqueueSmallClass).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/macros.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/quota.hpp"
#include "gpusampler/kernels/sampler.hpp"

#if defined(__CUDA_ARCH__)
#define GPUSAMPLER_UNROLL _Pragma("unroll")
#else
#define GPUSAMPLER_UNROLL
#endif

namespace gpusampler::kernels::pipeline {

inline constexpr int kThreads = 256;
inline constexpr int kItems = 16;                              // keys per thread in a block sort
inline constexpr int kBlockKeys = kThreads * kItems;           // 4096
inline constexpr int64_t kSmallRowMax = kBlockKeys;            // rows the fused kernel takes
inline constexpr int64_t kTileElements = int64_t{1} << 16;     // Pass1/Pass2 tile, at most
inline constexpr int64_t kMinTileElements = int64_t{1} << 14;  // ... and at least
inline constexpr int64_t kResidentBlocks = 528;                // one wave: 132 H200 SMs x 4 blocks
inline constexpr int kRoundElements = kThreads * 4;            // one Philox call per thread
inline constexpr int kSelectBits = 11;                         // u histogram: 2048 buckets
inline constexpr int kSelectBins = 1 << kSelectBits;
inline constexpr int kMaxOrderBits = 11;  // v buckets: at most 2048
inline constexpr int kMaxOrderBins = 1 << kMaxOrderBits;
inline constexpr int64_t kSlotTile = kBlockKeys;  // Scatter tile
inline constexpr uint32_t kPositive = 0;
inline constexpr uint32_t kNegative = 1;
inline constexpr uint32_t kIgnored = 2;
// Device error flags (Params::error, OR-ed): a bounded step found more than it was sized
// for. Never expected; the launch's results are then not to be used (INTERNAL).
inline constexpr uint32_t kErrorCandidates = 1;  // Pass2: boundary candidates over the count
inline constexpr uint32_t kErrorBoundary = 2;    // Boundary: candidates left over a block
inline constexpr unsigned long long kDropped = ~0ull;

// a0 or a1 by a runtime class c: a select, not an index into a local array (which would put
// the array in local memory on the device).
template <class T>
GPUSAMPLER_HD T Pick(int c, T a0, T a1) {
  return c == 0 ? a0 : a1;
}

GPUSAMPLER_HD uint64_t LowMask(int bits) {
  return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
}

// Bits that hold every index below n (at least 1).
GPUSAMPLER_HD int IndexBits(int64_t n) {
  int bits = 1;
  while (bits < 62 && (int64_t{1} << bits) < n) ++bits;
  return bits;
}

// The bucket of order key v among 2^bits buckets (its top bits).
GPUSAMPLER_HD int BucketOf(uint32_t v, int bits) {
  return bits == 0 ? 0 : static_cast<int>(v >> (32 - bits));
}

// Bits of v that pick a bucket for rows of at most `max_samples` slots: about a thousand keys
// per bucket on average, far below a block's kBlockKeys.
inline int OrderBucketBits(int64_t max_samples) {
  int bits = 0;
  while (bits < kMaxOrderBits && (int64_t{1024} << bits) < max_samples) ++bits;
  return bits;
}

// Per large row, written by Prepare (bases) and Threshold/Pass2/Boundary (the rest).
struct LargeRowState {
  int32_t row = 0;         // index into Batch rows
  int32_t first_tile = 0;  // Pass1/Pass2 tiles [first_tile, next row's first_tile)
  int32_t first_slot_tile = 0;
  int32_t pad = 0;
  int64_t cand_base = 0;           // element offset of the row's candidates
  int64_t sel_base = 0;            // slot offset of the row's selected keys
  int64_t m[2] = {0, 0};           // quotas
  int64_t sel_below[2] = {0, 0};   // u buckets below this are selected outright
  int64_t cand_bin[2] = {-1, -1};  // the boundary bucket, -1 for none
  int64_t cand_count[2] = {0, 0};
  int64_t cand_off[2] = {0, 0};  // class c's candidates at cand_base + cand_off[c]
  int64_t need[2] = {0, 0};      // how many boundary candidates are selected
  unsigned long long cand_cursor[2] = {0, 0};
  unsigned long long sel_cursor = 0;
};

// Sizes read from device memory by a launch captured once for a size class (see
// EnqueueSmallClass): the batch that replays it may be smaller than the class.
struct LaunchSizes {
  int32_t num_rows = 0;
  int32_t pad = 0;
};

// Everything a body reads or writes; plain pointers, passed to kernels by value.
struct Params {
  const RowDesc* rows = nullptr;
  int32_t num_rows = 0;
  const uint8_t* labels = nullptr;
  const uint8_t* features = nullptr;
  int64_t* out_indices = nullptr;
  uint8_t* out_labels = nullptr;
  uint8_t* out_features = nullptr;
  int32_t* out_num_positive = nullptr;
  int32_t* out_num_negative = nullptr;
  // Large rows (scratch in the arena).
  int32_t num_large = 0;
  int32_t num_tiles = 0;
  int32_t num_slot_tiles = 0;
  int32_t order_bits = 0;
  int32_t capacity = kBlockKeys;     // keys a block sorts at once (the simulator's tests lower it)
  int64_t small_max = kSmallRowMax;  // rows up to this long take the fused kernel (ditto)
  int64_t tile_elements = kTileElements;  // Pass1/Pass2 tile (a multiple of kRoundElements)
  LargeRowState* large = nullptr;         // [num_large + 1]: the last entry only holds tile counts
  int32_t* hist = nullptr;                // [num_large][2][kSelectBins]
  int32_t* vhist = nullptr;               // [num_large][1 << order_bits]
  int32_t* vcursor = nullptr;             // [num_large][1 << order_bits]
  uint64_t* cand = nullptr;               // [large elements]: (u << 32 | i)
  uint64_t* sel = nullptr;                // [large slots]: (v << 32 | i), unordered
  uint64_t* bucketed = nullptr;           // [large slots]: grouped by v bucket
  uint32_t* error = nullptr;              // device error flags (kError*), OR-ed; see Layout
  // When set, FusedBody reads the batch's row count here and its blocks past it exit.
  const LaunchSizes* sizes = nullptr;
};

// Host-known shape of a launch, from the host copy of the rows.
struct Shape {
  int64_t small_max = kSmallRowMax;
  int64_t tile_elements = kTileElements;
  int32_t num_rows = 0;
  int32_t num_small = 0;
  int32_t num_large = 0;
  int32_t num_tiles = 0;
  int32_t num_slot_tiles = 0;
  int32_t order_bits = 0;
  int64_t large_elements = 0;
  int64_t large_slots = 0;
  int32_t prepare_blocks = 1;
};

Shape MakeShape(const RowDesc* host_rows, int64_t num_rows, int64_t small_max = kSmallRowMax);
// Worst-case shape for launches of at most these sizes (arena sizing at Reserve).
Shape BoundShape(int64_t num_rows, int64_t total_elements, int64_t total_slots);

// Byte offsets of the scratch arrays in the arena; `Bind` points Params at them.
// `error` (one word at the arena's start) is not scratch: kernels only OR into it, the host
// zeroes it when it allocates the arena and reads it after each launch.
struct Layout {
  size_t error = 0;
  size_t scratch = 0;  // scratch is [scratch, bytes): poisoned per launch by cuda-sim
  size_t large = 0, hist = 0, vhist = 0, vcursor = 0, cand = 0, sel = 0, bucketed = 0;
  size_t zero_begin = 0, zero_end = 0;  // Prepare zeroes [zero_begin, zero_end)
  size_t bytes = 0;
};
Layout MakeLayout(const Shape& shape);
void Bind(const Shape& shape, const Layout& layout, uint8_t* arena, Params* params);
// The batch's buffers (where the backend works) as Params; scratch is bound by Enqueue.
Params ParamsOf(const Batch& batch);

// ---------------------------------------------------------------------------------------
// Helpers over a Block.

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

// ---------------------------------------------------------------------------------------
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

// ---------------------------------------------------------------------------------------
// Bodies. Each is a functor: body(block, block_index).

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
    if (row.length > p.small_max) return;
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

// Large-row tables and zeroed counters. Block 0 writes every LargeRowState field that is
// not written later (bases, tile starts, zeroed cursors); every block zeroes a share of the
// histograms [zero_begin, zero_end) (passed as words), which the states do not overlap.
struct PrepareBody {
  Params p;
  uint64_t* zero = nullptr;
  int64_t zero_words = 0;
  int64_t blocks = 1;
  struct Shared {
    int32_t flag[kThreads];
    int32_t tiles[kThreads];
    int32_t slot_tiles[kThreads];
    int64_t elems[kThreads];
    int64_t slots[kThreads];
    int32_t base_large, base_tiles, base_slot_tiles;
    int64_t base_elems, base_slots;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    b.Threads([&](int t) {
      for (int64_t w = block * kThreads + t; w < zero_words; w += blocks * kThreads) {
        b.Store(zero + w, uint64_t{0});
      }
    });
    if (block != 0) return;
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      if (t == 0) {
        b.SStore(&sh.base_large, 0);
        b.SStore(&sh.base_tiles, 0);
        b.SStore(&sh.base_slot_tiles, 0);
        b.SStore(&sh.base_elems, int64_t{0});
        b.SStore(&sh.base_slots, int64_t{0});
      }
    });
    for (int64_t chunk = 0; chunk < p.num_rows; chunk += kThreads) {
      b.Threads([&](int t) {
        const int64_t j = chunk + t;
        int32_t flag = 0, tiles = 0, slot_tiles = 0;
        int64_t elems = 0, slots = 0;
        if (j < p.num_rows) {
          const int64_t n = b.Load(&p.rows[j].length);
          const int64_t k = b.Load(&p.rows[j].num_samples);
          if (n > p.small_max) {
            flag = 1;
            tiles = static_cast<int32_t>((n + p.tile_elements - 1) / p.tile_elements);
            slot_tiles = static_cast<int32_t>((k + kSlotTile - 1) / kSlotTile);
            elems = n;
            slots = k;
          }
        }
        b.SStore(&sh.flag[t], flag);
        b.SStore(&sh.tiles[t], tiles);
        b.SStore(&sh.slot_tiles[t], slot_tiles);
        b.SStore(&sh.elems[t], elems);
        b.SStore(&sh.slots[t], slots);
      });
      // A serial scan of the chunk (kThreads rows) by thread 0: rows are few next to
      // elements, and this runs once per launch.
      b.Threads([&](int t) {
        if (t != 0) return;
        int32_t base_large = b.SLoad(&sh.base_large);
        int32_t base_tiles = b.SLoad(&sh.base_tiles);
        int32_t base_slot_tiles = b.SLoad(&sh.base_slot_tiles);
        int64_t base_elems = b.SLoad(&sh.base_elems);
        int64_t base_slots = b.SLoad(&sh.base_slots);
        for (int k = 0; k < kThreads; ++k) {
          if (!b.SLoad(&sh.flag[k])) continue;
          const int32_t l = base_large++;
          LargeRowState* st = p.large + l;
          b.Store(&st->row, static_cast<int32_t>(chunk + k));
          b.Store(&st->first_tile, base_tiles);
          b.Store(&st->first_slot_tile, base_slot_tiles);
          b.Store(&st->cand_base, base_elems);
          b.Store(&st->sel_base, base_slots);
          b.Store(&st->cand_cursor[0], 0ull);
          b.Store(&st->cand_cursor[1], 0ull);
          b.Store(&st->sel_cursor, 0ull);
          base_tiles += b.SLoad(&sh.tiles[k]);
          base_slot_tiles += b.SLoad(&sh.slot_tiles[k]);
          base_elems += b.SLoad(&sh.elems[k]);
          base_slots += b.SLoad(&sh.slots[k]);
        }
        b.SStore(&sh.base_large, base_large);
        b.SStore(&sh.base_tiles, base_tiles);
        b.SStore(&sh.base_slot_tiles, base_slot_tiles);
        b.SStore(&sh.base_elems, base_elems);
        b.SStore(&sh.base_slots, base_slots);
      });
    }
    b.Threads([&](int t) {
      if (t == 0) {
        LargeRowState* end = p.large + b.SLoad(&sh.base_large);
        b.Store(&end->first_tile, b.SLoad(&sh.base_tiles));
        b.Store(&end->first_slot_tile, b.SLoad(&sh.base_slot_tiles));
      }
    });
  }
};

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

struct Pass2Body {
  Params p;
  struct Shared {
    RowDesc row;
    int64_t begin, end, cand_base, sel_base;
    int64_t sel_below[2], cand_bin[2], cand_off[2], cand_count[2];
    int32_t large;
    int32_t n_sel, n_cand[2];
    unsigned long long sel_at, cand_at[2];
    int32_t vhist[kMaxOrderBins];
  };
  // The tile's uniform values, read once from shared memory (registers).
  struct Tile {
    RowDesc row;
    int32_t l;
    LargeRowState* st;
    int64_t begin, end;
    int64_t sel_below0, sel_below1, cand_bin0, cand_bin1, cand_count0, cand_count1;
    uint64_t* sel;
    uint64_t* cand0;
    uint64_t* cand1;
  };
  // Per round (two quads per thread, both loaded before either is used), each thread holds
  // up to eight keys and where they go (kind: 0 none, 1 selected, 2 + c a candidate of class
  // c; off: its place among the round's keys).
  template <class B>
  struct Round {
    typename B::template Items<uint64_t, 8> key;
    typename B::template Items<int32_t, 8> kind;
    typename B::template Items<int32_t, 8> off;
  };

  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int bins = 1 << p.order_bits;
    LoadTile(b, sh, block, bins);
    const Tile tl = ReadTile(b, sh);
    const uint8_t* labels = p.labels + tl.row.label_offset;
    DispatchLabels(tl.row.label_dtype, [&](auto tag) {
      using L = decltype(tag);
      const bool aligned = QuadAligned<L>(labels);
      Round<B> r;
      for (int64_t round = tl.begin; round < tl.end; round += 2 * kRoundElements) {
        ClassifyRound<L>(b, sh, tl, labels, aligned, round, r);
        ReserveRound(b, sh, tl);
        WriteRound(b, sh, tl, r);
      }
    });
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) {
        const int32_t h = b.SLoad(&sh.vhist[bin]);
        if (h != 0) b.GlobalAdd(p.vhist + int64_t{tl.l} * bins + bin, h);
      }
    });
  }

  // Thread 0 copies the tile's row and its large-row state into shared memory; the v
  // histogram is zeroed.
  template <class B>
  GPUSAMPLER_HD void LoadTile(B& b, Shared& sh, int64_t block, int bins) const {
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) b.SStore(&sh.vhist[bin], 0);
      if (t == 0) {
        const int32_t l = LargeOfTile(b, p, block, false);
        const LargeRowState* st = p.large + l;
        const RowDesc row = b.Load(p.rows + b.Load(&st->row));
        const int64_t begin = (block - b.Load(&st->first_tile)) * p.tile_elements;
        b.SStore(&sh.large, l);
        b.SStore(&sh.row, row);
        b.SStore(&sh.begin, begin);
        b.SStore(&sh.end,
                 begin + p.tile_elements < row.length ? begin + p.tile_elements : row.length);
        b.SStore(&sh.cand_base, b.Load(&st->cand_base));
        b.SStore(&sh.sel_base, b.Load(&st->sel_base));
        for (int c = 0; c < 2; ++c) {
          b.SStore(&sh.sel_below[c], b.Load(&st->sel_below[c]));
          b.SStore(&sh.cand_bin[c], b.Load(&st->cand_bin[c]));
          b.SStore(&sh.cand_off[c], b.Load(&st->cand_off[c]));
          b.SStore(&sh.cand_count[c], b.Load(&st->cand_count[c]));
          b.SStore(&sh.n_cand[c], 0);
        }
        b.SStore(&sh.n_sel, 0);
      }
    });
  }

  template <class B>
  GPUSAMPLER_HD Tile ReadTile(B& b, Shared& sh) const {
    Tile tl;
    tl.row = b.SLoad(&sh.row);
    tl.l = b.SLoad(&sh.large);
    tl.st = p.large + tl.l;
    tl.begin = b.SLoad(&sh.begin);
    tl.end = b.SLoad(&sh.end);
    tl.sel_below0 = b.SLoad(&sh.sel_below[0]);
    tl.sel_below1 = b.SLoad(&sh.sel_below[1]);
    tl.cand_bin0 = b.SLoad(&sh.cand_bin[0]);
    tl.cand_bin1 = b.SLoad(&sh.cand_bin[1]);
    tl.cand_count0 = b.SLoad(&sh.cand_count[0]);
    tl.cand_count1 = b.SLoad(&sh.cand_count[1]);
    tl.sel = p.sel + b.SLoad(&sh.sel_base);
    tl.cand0 = p.cand + b.SLoad(&sh.cand_base) + b.SLoad(&sh.cand_off[0]);
    tl.cand1 = p.cand + b.SLoad(&sh.cand_base) + b.SLoad(&sh.cand_off[1]);
    return tl;
  }

  // Classes, u, and (for the selected) v of the round's two quads per thread; places among
  // the round's selected and candidates come from shared counters.
  template <class L, class B>
  GPUSAMPLER_HD void ClassifyRound(B& b, Shared& sh, const Tile& tl, const uint8_t* labels,
                                   bool aligned, int64_t round, Round<B>& r) const {
    const RowDesc& row = tl.row;
    b.Threads([&](int t) {
      uint32_t quad[2][4];
      GPUSAMPLER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t i0 = round + h * kRoundElements + 4 * t;
        if (i0 < tl.end) {
          QuadClasses<L>(b, labels, row, aligned, i0, quad[h]);
        } else {
          quad[h][0] = quad[h][1] = quad[h][2] = quad[h][3] = kIgnored;
        }
      }
      GPUSAMPLER_UNROLL
      for (int h = 0; h < 2; ++h) {
        uint64_t* k_ = b.Mine(r.key, t) + 4 * h;
        int32_t* kind_ = b.Mine(r.kind, t) + 4 * h;
        int32_t* off_ = b.Mine(r.off, t) + 4 * h;
        const int64_t i0 = round + h * kRoundElements + 4 * t;
        const uint32_t* cls = quad[h];
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) kind_[w] = 0;
        if (cls[0] == kIgnored && cls[1] == kIgnored && cls[2] == kIgnored && cls[3] == kIgnored) {
          continue;
        }
        const Philox4 u = GroupKeys(row, kSelectionStream, i0);
        b.CountPhilox(1);
        bool any_selected = false;
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) {
          if (cls[w] == kIgnored) continue;
          const int64_t bin = u.v[w] >> (32 - kSelectBits);
          const int c = static_cast<int>(cls[w]);
          if (bin < Pick(c, tl.sel_below0, tl.sel_below1)) {
            kind_[w] = 1;
            any_selected = true;
          } else if (bin == Pick(c, tl.cand_bin0, tl.cand_bin1)) {
            kind_[w] = 2 + static_cast<int32_t>(cls[w]);
            k_[w] = (static_cast<uint64_t>(u.v[w]) << 32) | static_cast<uint64_t>(i0 + w);
            off_[w] = b.SharedAdd(&sh.n_cand[cls[w]], 1);
          }
        }
        if (!any_selected) continue;
        const Philox4 v = GroupKeys(row, kOrderStream, i0);
        b.CountPhilox(1);
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) {
          if (kind_[w] != 1) continue;
          k_[w] = (static_cast<uint64_t>(v.v[w]) << 32) | static_cast<uint64_t>(i0 + w);
          off_[w] = b.SharedAdd(&sh.n_sel, 1);
          b.SharedAdd(&sh.vhist[BucketOf(v.v[w], p.order_bits)], 1);
        }
      }
    });
  }

  // Thread 0 reserves the round's places in the row's selected and candidate ranges (global
  // cursors) and resets the round's counters.
  template <class B>
  GPUSAMPLER_HD void ReserveRound(B& b, Shared& sh, const Tile& tl) const {
    b.Threads([&](int t) {
      if (t != 0) return;
      const int32_t n_sel = b.SLoad(&sh.n_sel);
      if (n_sel > 0) {
        b.SStore(&sh.sel_at,
                 b.GlobalAdd(&tl.st->sel_cursor, static_cast<unsigned long long>(n_sel)));
      }
      for (int c = 0; c < 2; ++c) {
        const int32_t n_cand = b.SLoad(&sh.n_cand[c]);
        if (n_cand > 0) {
          const unsigned long long at =
              b.GlobalAdd(&tl.st->cand_cursor[c], static_cast<unsigned long long>(n_cand));
          // Bounded: Threshold counted the boundary bucket's keys.
          if (static_cast<int64_t>(at) + n_cand > Pick(c, tl.cand_count0, tl.cand_count1)) {
            b.Fail(p.error, kErrorCandidates, "Pass2: more boundary candidates than counted");
            b.SStore(&sh.cand_at[c], kDropped);  // (the device goes on without writing)
          } else {
            b.SStore(&sh.cand_at[c], at);
          }
        }
      }
      // Reset the round counters (read above by this thread only).
      b.SStore(&sh.n_sel, 0);
      b.SStore(&sh.n_cand[0], 0);
      b.SStore(&sh.n_cand[1], 0);
    });
  }

  template <class B>
  GPUSAMPLER_HD void WriteRound(B& b, Shared& sh, const Tile& tl, Round<B>& r) const {
    b.Threads([&](int t) {
      const uint64_t* k_ = b.Mine(r.key, t);
      const int32_t* kind_ = b.Mine(r.kind, t);
      const int32_t* off_ = b.Mine(r.off, t);
      GPUSAMPLER_UNROLL
      for (int w = 0; w < 8; ++w) {
        if (kind_[w] == 1) {
          b.Store(tl.sel + static_cast<int64_t>(b.SLoad(&sh.sel_at)) + off_[w], k_[w]);
        } else if (kind_[w] >= 2) {
          const int c = kind_[w] - 2;
          const unsigned long long at = b.SLoad(&sh.cand_at[c]);
          if (at != kDropped) {
            b.Store(Pick(c, tl.cand0, tl.cand1) + static_cast<int64_t>(at) + off_[w], k_[w]);
          }
        }
      }
    });
  }
};

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
    auto load = [&](int64_t from, int64_t count) {
      b.Threads([&](int t) {
        uint64_t* mine = b.Mine(keys, t);
        GPUSAMPLER_UNROLL
        for (int k = 0; k < kItems; ++k) {
          const int64_t at = static_cast<int64_t>(k) * kThreads + t;
          mine[k] = at < count ? b.Load(src + from + at) : kAbsent;
        }
      });
    };
    if (n <= capacity) {
      load(0, n);
      SmallSort(b, sh.sort, keys, n, top, [&](int64_t at, uint64_t key) {
        WriteSlot(b, p, row, start + at, static_cast<int64_t>(key & 0xFFFFFFFFu));
      });
      return;
    }
    // Sorted runs of `capacity` keys, in place.
    for (int64_t from = 0; from < n; from += capacity) {
      const int64_t count = n - from < capacity ? n - from : capacity;
      load(from, count);
      SmallSort(b, sh.sort, keys, count, top,
                [&](int64_t at, uint64_t key) { b.Store(src + from + at, key); });
    }
    for (int64_t width = capacity; width < n; width *= 2) {
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
};

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

// The launch sequence, for either executor:
//   exec.Launch(body, blocks)           one kernel of `blocks` blocks of kThreads threads
template <class Exec>
void Enqueue(Exec& exec, const Shape& shape, const Layout& layout, uint8_t* arena,
             const Params& base) {
  Params p = base;
  exec.Scratch(arena + layout.scratch, layout.bytes - layout.scratch);
  p.num_rows = shape.num_rows;
  p.small_max = shape.small_max;
  p.tile_elements = shape.tile_elements;
  if (shape.num_small > 0) exec.Launch(FusedBody{p}, shape.num_rows);
  if (shape.num_large == 0) return;
  Bind(shape, layout, arena, &p);
  PrepareBody prepare{p, reinterpret_cast<uint64_t*>(arena + layout.zero_begin),
                      static_cast<int64_t>((layout.zero_end - layout.zero_begin) / 8),
                      shape.prepare_blocks};
  exec.Launch(prepare, shape.prepare_blocks);
  exec.Launch(Pass1Body{p}, shape.num_tiles);
  exec.Launch(ThresholdBody{p}, shape.num_large);
  exec.Launch(Pass2Body{p}, shape.num_tiles);
  exec.Launch(BoundaryBody{p}, int64_t{2} * shape.num_large);
  if (shape.num_slot_tiles > 0) {
    exec.Launch(ScatterBody{p}, shape.num_slot_tiles);
    exec.Launch(BucketSortBody{p}, int64_t{shape.num_large} << shape.order_bits);
  }
}

}  // namespace gpusampler::kernels::pipeline
