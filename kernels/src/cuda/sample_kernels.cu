// Kernels of the CUDA sampling pipeline; see sample_kernels.cuh for the stages.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/error.cuh"
#include "cuda/label_io.cuh"
#include "cuda/sample_kernels.cuh"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::kernels::detail {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpSize = 32;

int BlocksFor(int64_t work_items, int items_per_block, const LaunchConfig& config) {
  const int64_t blocks = (work_items + items_per_block - 1) / items_per_block;
  return static_cast<int>(blocks < config.max_blocks ? blocks : config.max_blocks);
}

__device__ __forceinline__ int64_t GlobalThread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridThreads() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The row owning flattened position `pos`: the largest j < num_rows with offsets[j] <= pos.
// Empty rows have offsets[j] == offsets[j + 1] and are skipped by taking the largest j.
__device__ __forceinline__ int64_t FindRow(const int64_t* offsets, int64_t num_rows, int64_t pos) {
  int64_t lo = 0;
  int64_t hi = num_rows;
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (offsets[mid] <= pos) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// First position in [lo, hi) whose key is >= value, or hi.
__device__ __forceinline__ int64_t LowerBound(const uint64_t* keys, int64_t lo, int64_t hi,
                                              uint64_t value) {
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < value) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

__device__ __forceinline__ int64_t Clamp64(int64_t value, int64_t lo, int64_t hi) {
  return value < lo ? lo : (value > hi ? hi : value);
}

__global__ void PrepareRowsKernel(const RowDesc* rows, int64_t num_rows, int64_t* row_len,
                                  int64_t* row_k) {
  for (int64_t j = GlobalThread(); j <= num_rows; j += GridThreads()) {
    if (j == num_rows) {
      row_len[j] = 0;
      row_k[j] = 0;
    } else {
      row_len[j] = Clamp64(rows[j].length, 0, INT32_MAX);
      row_k[j] = Clamp64(rows[j].num_samples, 0, INT64_MAX);
    }
  }
}

__global__ void SelectionKeysKernel(const RowDesc* rows, int64_t num_rows, const int64_t* elem_off,
                                    int64_t total_elements, const uint8_t* labels, uint64_t* keys,
                                    int32_t* vals) {
  const int64_t row_elements_end = elem_off[num_rows];
  for (int64_t e = GlobalThread(); e < total_elements; e += GridThreads()) {
    if (e >= row_elements_end) {
      // Batch::total_elements larger than the rows' lengths: sorts after every row and is
      // never read.
      keys[e] = ~uint64_t{0};
      vals[e] = -1;
      continue;
    }
    const int64_t j = FindRow(elem_off, num_rows, e);
    const int64_t i = e - elem_off[j];
    const RowDesc& row = rows[j];
    uint32_t cls = kClassIgnored;
    int64_t label = 0;
    if (LoadLabel(labels + row.label_offset, row.label_dtype, i, &label)) {
      if (label == row.positive_label) {
        cls = kClassPositive;
      } else if (label == row.negative_label) {
        cls = kClassNegative;
      }
    }
    const uint32_t u =
        ElementKey(row.seed, row.row_in_request, kSelectionStream, static_cast<uint64_t>(i));
    keys[e] =
        (static_cast<uint64_t>(j) << kRowShift) | (static_cast<uint64_t>(cls) << kClassShift) | u;
    // Values are written in increasing i within each row and the radix sort is stable, so
    // equal u break ties by i, as (u, i) order requires.
    vals[e] = static_cast<int32_t>(i);
  }
}

__global__ void QuotasKernel(const RowDesc* rows, int64_t num_rows, const int64_t* elem_off,
                             int64_t total_elements, const int64_t* row_k, const int64_t* slot_off,
                             int64_t total_slots, const uint64_t* sorted_keys, int64_t* num_pos,
                             int64_t* quota_pos, int64_t* quota_neg, int64_t* sel_begin,
                             int64_t* sel_end, int32_t* out_num_positive,
                             int32_t* out_num_negative) {
  for (int64_t j = GlobalThread(); j < num_rows; j += GridThreads()) {
    // Clamping keeps every access inside the scratch arrays even if the Batch sizes
    // disagree with the rows (a caller bug); with consistent sizes it changes nothing.
    const int64_t begin = Clamp64(elem_off[j], 0, total_elements);
    const int64_t end = Clamp64(elem_off[j + 1], begin, total_elements);
    const uint64_t row_key = static_cast<uint64_t>(j) << kRowShift;
    const int64_t neg_begin =
        LowerBound(sorted_keys, begin, end, row_key | (uint64_t{kClassNegative} << kClassShift));
    const int64_t ignored_begin =
        LowerBound(sorted_keys, neg_begin, end, row_key | (uint64_t{kClassIgnored} << kClassShift));
    const int64_t p = neg_begin - begin;
    const int64_t q = ignored_begin - neg_begin;

    const RowDesc& row = rows[j];
    const int64_t k = row_k[j];
    // target <= K for every valid spec (f in [0, 1]); the clamp keeps m_pos + m_neg <= K
    // so a bad descriptor cannot write past the row's slots.
    const int64_t target = Clamp64(row.target, 0, k);
    const Quotas quotas = ComputeQuotas(p, q, k, target, row.fill);

    num_pos[j] = p;
    quota_pos[j] = quotas.pos;
    quota_neg[j] = quotas.neg;
    const int64_t slot_begin = Clamp64(slot_off[j], 0, total_slots);
    sel_begin[j] = slot_begin;
    sel_end[j] = Clamp64(slot_off[j] + quotas.pos + quotas.neg, slot_begin, total_slots);
    out_num_positive[j] = static_cast<int32_t>(quotas.pos);
    out_num_negative[j] = static_cast<int32_t>(quotas.neg);
  }
}

__global__ void OrderKeysKernel(const RowDesc* rows, int64_t num_rows, const int64_t* elem_off,
                                const int64_t* slot_off, int64_t total_slots,
                                const int64_t* num_pos, const int64_t* quota_pos,
                                const int64_t* quota_neg, const int32_t* sorted_vals,
                                uint64_t* order_keys) {
  for (int64_t s = GlobalThread(); s < total_slots; s += GridThreads()) {
    const int64_t j = FindRow(slot_off, num_rows, s);
    const int64_t t = s - slot_off[j];
    const int64_t m_pos = quota_pos[j];
    if (t >= m_pos + quota_neg[j]) continue;  // padding: not sorted, written directly
    // The row's sorted run holds its P positives, then its negatives, each in (u, i) order.
    const int64_t src = elem_off[j] + (t < m_pos ? t : num_pos[j] + (t - m_pos));
    const int32_t i = sorted_vals[src];
    const RowDesc& row = rows[j];
    const uint32_t v =
        ElementKey(row.seed, row.row_in_request, kOrderStream, static_cast<uint64_t>(i));
    order_keys[s] = PackKey(v, static_cast<uint64_t>(i));
  }
}

// Copies (or, with src == nullptr, zeroes) `bytes` bytes with the lanes of one warp, in the
// widest word that the addresses and the size allow.
template <typename Word>
__device__ __forceinline__ void WarpCopyWords(uint8_t* dst, const uint8_t* src, int64_t bytes,
                                              int lane) {
  Word* dst_words = reinterpret_cast<Word*>(dst);
  const Word* src_words = reinterpret_cast<const Word*>(src);
  const int64_t words = bytes / static_cast<int64_t>(sizeof(Word));
  for (int64_t w = lane; w < words; w += kWarpSize) {
    dst_words[w] = src_words != nullptr ? src_words[w] : Word{};
  }
}

__device__ __forceinline__ void WarpCopyBytes(uint8_t* dst, const uint8_t* src, int64_t bytes,
                                              int lane) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src) |
                         static_cast<uintptr_t>(bytes);
  if (bits % 16 == 0) {
    WarpCopyWords<uint4>(dst, src, bytes, lane);
  } else if (bits % 8 == 0) {
    WarpCopyWords<uint2>(dst, src, bytes, lane);
  } else if (bits % 4 == 0) {
    WarpCopyWords<uint32_t>(dst, src, bytes, lane);
  } else {
    WarpCopyWords<uint8_t>(dst, src, bytes, lane);
  }
}

// One warp per output slot: lane 0 writes the index, the first lanes the label bytes, all
// lanes the feature row.
__global__ void WriteOutputsKernel(const RowDesc* rows, int64_t num_rows, const int64_t* row_k,
                                   const int64_t* slot_off, int64_t total_slots,
                                   const int64_t* quota_pos, const int64_t* quota_neg,
                                   const uint64_t* sorted_order_keys, const uint8_t* labels,
                                   const uint8_t* features, int64_t* out_indices,
                                   uint8_t* out_labels, uint8_t* out_features) {
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  const int64_t warps = GridThreads() / kWarpSize;
  for (int64_t s = GlobalThread() / kWarpSize; s < total_slots; s += warps) {
    const int64_t j = FindRow(slot_off, num_rows, s);
    const int64_t t = s - slot_off[j];
    if (t >= row_k[j]) continue;  // Batch::total_slots larger than the rows' K
    const RowDesc& row = rows[j];
    const bool selected = t < quota_pos[j] + quota_neg[j];
    const int64_t i = selected ? static_cast<int64_t>(PackedIndex(sorted_order_keys[s])) : -1;

    if (lane == 0) out_indices[row.out_slot + t] = i;

    const int item_size = LabelItemSize(row.label_dtype);
    if (out_labels != nullptr && lane < item_size) {
      out_labels[row.out_label_offset + t * item_size + lane] =
          selected ? labels[row.label_offset + i * item_size + lane]
                   : PaddingLabelByte(row.label_dtype);
    }

    const int64_t feature_bytes = row.feature_row_bytes;
    if (feature_bytes > 0 && out_features != nullptr) {
      const uint8_t* src = (selected && features != nullptr)
                               ? features + row.feature_offset + i * feature_bytes
                               : nullptr;
      WarpCopyBytes(out_features + row.out_feature_offset + t * feature_bytes, src, feature_bytes,
                    lane);
    }
  }
}

}  // namespace

void LaunchPrepareRows(const RowDesc* d_rows, int64_t num_rows, const SampleScratch& scratch,
                       const LaunchConfig& config, cudaStream_t stream) {
  PrepareRowsKernel<<<BlocksFor(num_rows + 1, kThreads, config), kThreads, 0, stream>>>(
      d_rows, num_rows, scratch.d_row_len, scratch.d_row_k);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

void LaunchSelectionKeys(const Batch& batch, const SampleScratch& scratch, uint64_t* d_keys,
                         int32_t* d_vals, const LaunchConfig& config, cudaStream_t stream) {
  if (batch.total_elements == 0) return;
  SelectionKeysKernel<<<BlocksFor(batch.total_elements, kThreads, config), kThreads, 0, stream>>>(
      batch.rows, batch.num_rows, scratch.d_elem_off, batch.total_elements, batch.labels, d_keys,
      d_vals);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

void LaunchQuotas(const Batch& batch, const SampleScratch& scratch, const LaunchConfig& config,
                  cudaStream_t stream) {
  if (batch.num_rows == 0) return;
  QuotasKernel<<<BlocksFor(batch.num_rows, kThreads, config), kThreads, 0, stream>>>(
      batch.rows, batch.num_rows, scratch.d_elem_off, batch.total_elements, scratch.d_row_k,
      scratch.d_slot_off, batch.total_slots, scratch.d_sorted_sel_keys, scratch.d_num_pos,
      scratch.d_quota_pos, scratch.d_quota_neg, scratch.d_sel_begin, scratch.d_sel_end,
      batch.out_num_positive, batch.out_num_negative);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

void LaunchOrderKeys(const Batch& batch, const SampleScratch& scratch, uint64_t* d_order_keys,
                     const LaunchConfig& config, cudaStream_t stream) {
  if (batch.total_slots == 0) return;
  OrderKeysKernel<<<BlocksFor(batch.total_slots, kThreads, config), kThreads, 0, stream>>>(
      batch.rows, batch.num_rows, scratch.d_elem_off, scratch.d_slot_off, batch.total_slots,
      scratch.d_num_pos, scratch.d_quota_pos, scratch.d_quota_neg, scratch.d_sorted_sel_vals,
      d_order_keys);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

void LaunchWriteOutputs(const Batch& batch, const SampleScratch& scratch,
                        const LaunchConfig& config, cudaStream_t stream) {
  if (batch.total_slots == 0) return;
  constexpr int kWarpsPerBlock = kThreads / kWarpSize;
  WriteOutputsKernel<<<BlocksFor(batch.total_slots, kWarpsPerBlock, config), kThreads, 0, stream>>>(
      batch.rows, batch.num_rows, scratch.d_row_k, scratch.d_slot_off, batch.total_slots,
      scratch.d_quota_pos, scratch.d_quota_neg, scratch.d_sorted_order_keys, batch.labels,
      batch.features, batch.out_indices, batch.out_labels, batch.out_features);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

}  // namespace gpusampler::kernels::detail
