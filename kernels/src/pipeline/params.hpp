// The pipeline's constants, its small shared arithmetic, and the plain types every stage
// reads: LargeRowState, LaunchSizes, Params (what a body sees), and the host-side Shape and
// Layout of a launch (pipeline/plan.cc). See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/macros.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/quota.hpp"
#include "gpusampler/kernels/types.hpp"

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
inline constexpr int kResidentBlocksPerSm = 4;                 // Pass1/Pass2 at <= 64 registers
inline constexpr int64_t kResidentBlocks = 132 * kResidentBlocksPerSm;  // one wave: H200's SMs
inline constexpr int kRoundElements = kThreads * 4;  // one Philox call per thread
inline constexpr int kSelectBits = 11;               // u histogram: 2048 buckets
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
inline constexpr uint32_t kErrorClassSlots = 4;  // ClassCollect: more selected than K
inline constexpr unsigned long long kDropped = ~0ull;
// The class path (rows with a class table, classes_*.hpp).
inline constexpr int64_t kClassTile = int64_t{1} << 14;  // ClassKeys/Hist/Collect tile
inline constexpr int kClassKeyRounds = 8;                // 8-bit digits of the 64-bit key
inline constexpr int kSharedClasses = 8;  // classes a ClassHist block counts in shared memory
inline constexpr uint16_t kNoClass = 0xFFFF;
inline constexpr int kClassPhases = 2;  // 0: every class's own key; 1: MIXED's uniform rest

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
  int32_t first_pair = 0;          // class rows: the row's first (row, class) pair
  int64_t cand_base = 0;           // element offset of the row's candidates (class rows: keys)
  int64_t sel_base = 0;            // slot offset of the row's selected keys
  int64_t m[2] = {0, 0};           // quotas
  int64_t sel_below[2] = {0, 0};   // u buckets below this are selected outright
  int64_t cand_bin[2] = {-1, -1};  // the boundary bucket, -1 for none
  int64_t cand_count[2] = {0, 0};
  int64_t cand_off[2] = {0, 0};  // class c's candidates at cand_base + cand_off[c]
  int64_t need[2] = {0, 0};      // how many boundary candidates are selected
  unsigned long long cand_cursor[2] = {0, 0};
  unsigned long long sel_cursor = 0;
  int32_t open = 0;  // class rows: pairs whose radix select is not done (ClassPick)
  int32_t pad = 0;
};

// Per (class row, class), the class path's radix select (classes_*.hpp): the members' keys
// are 96-bit (key, i); the selected are those whose bits [lo, 96) are at most the prefix's
// (pk, pi); `need` of the `cand` keys that agree with the prefix are selected.
struct ClassPairState {
  unsigned long long n = 0;  // members (ClassKeys)
  int64_t m = 0;             // quota m_c
  int64_t h = 0;             // MIXED: the hardest part
  uint64_t pk = 0;           // prefix: key bits
  uint32_t pi = 0;           // ... and index bits
  int32_t lo = 96;           // bits [lo, 96) of the prefix are fixed
  int64_t need = 0;
  int64_t cand = 0;
  int32_t mode = 0;  // 0: none selected in this phase; 1: select by the prefix
  int32_t selection = 0;
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
  // Class rows (Batch's class fields; scratch bound by BindClasses).
  const uint8_t* class_tables = nullptr;
  const float* scores = nullptr;
  int32_t* out_num_per_class = nullptr;
  ClassPairState* pairs = nullptr;  // [class pairs]
  int32_t* class_hist = nullptr;    // [class pairs][256]
  uint64_t* class_keys = nullptr;   // [class elements]: members' selection keys
  uint16_t* class_codes = nullptr;  // [class elements]: class, kNoClass for none
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
  // Class rows (class_table >= 0), all lengths: the class path.
  int32_t num_class_rows = 0;
  int32_t class_tiles = 0;
  int32_t class_slot_tiles = 0;
  int32_t class_order_bits = 0;
  int32_t class_index_digits = 0;  // 8-bit digits of the largest class row's indices
  int32_t class_prepare_blocks = 1;
  int64_t class_elements = 0;
  int64_t class_slots = 0;
  int64_t class_pairs = 0;
};

Shape MakeShape(const RowDesc* host_rows, int64_t num_rows, int64_t small_max = kSmallRowMax);
// Worst-case shape for launches of at most these sizes (arena sizing at Reserve).
// total_class_pairs: sum of num_classes over the class rows (Backend::Reserve's caller counts
// them); -1: every row may have kMaxClasses (about 1 KB per row and class: for tests only).
Shape BoundShape(int64_t num_rows, int64_t total_elements, int64_t total_slots,
                 int64_t total_class_pairs = -1);

// Byte offsets of the scratch arrays in the arena; `Bind` points Params at them.
// `error` (one word at the arena's start) is not scratch: kernels only OR into it, the host
// zeroes it when it allocates the arena and reads it after each launch.
struct Layout {
  size_t error = 0;
  size_t scratch = 0;  // scratch is [scratch, bytes): poisoned per launch by cuda-sim
  size_t large = 0, hist = 0, vhist = 0, vcursor = 0, cand = 0, sel = 0, bucketed = 0;
  size_t zero_begin = 0, zero_end = 0;  // Prepare zeroes [zero_begin, zero_end)
  // The class path's arrays: they alias the large-row arrays above (its stages run after
  // those), so a launch pays for the larger of the two.
  size_t class_large = 0, class_pairs = 0, class_hist = 0, class_vhist = 0, class_vcursor = 0;
  size_t class_keys = 0, class_codes = 0, class_sel = 0, class_bucketed = 0;
  size_t class_zero_begin = 0, class_zero_end = 0;
  size_t bytes = 0;
};
Layout MakeLayout(const Shape& shape);
void Bind(const Shape& shape, const Layout& layout, uint8_t* arena, Params* params);
// Points Params at the class path's arrays, as the large-row stages see them (large, vhist,
// vcursor, sel, bucketed, num_large, num_tiles, num_slot_tiles, order_bits, tile_elements):
// Prepare, Scatter and BucketSort run on class rows unchanged.
void BindClasses(const Shape& shape, const Layout& layout, uint8_t* arena, Params* params);
// The batch's buffers (where the backend works) as Params; scratch is bound by Enqueue.
Params ParamsOf(const Batch& batch);

}  // namespace gpusampler::kernels::pipeline
