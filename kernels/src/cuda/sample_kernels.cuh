// The kernels of the CUDA backend's sampling pipeline (SPEC section 1), between the CUB
// calls that CudaBackend::Sample makes. Every launcher is stream-ordered on `stream`, does
// not synchronize and reads nothing back to the host; each checks its launch.
//
// Pipeline for a batch of B rows (row j has N_j elements and K_j slots):
//   1. LaunchPrepareRows: clamped N_j and K_j, then exclusive scans (CUB) give each row's
//      range [elem_off[j], elem_off[j+1]) in the flattened element arrays and
//      [slot_off[j], slot_off[j+1]) in the flattened slot arrays.
//   2. LaunchSelectionKeys: per element, key (j << 34 | class << 32 | u) and value i. One
//      stable radix sort (CUB) of the whole batch then leaves every row contiguous, with its
//      positives first in (u, i) order, then its negatives, then ignored elements.
//   3. LaunchQuotas: per row, P and Q by binary search in the sorted keys, quotas, counts.
//   4. LaunchOrderKeys: per selected element, PackKey(v, i) in the row's slot range; a
//      segmented radix sort (CUB) over [sel_begin[j], sel_end[j]) gives the output order.
//   5. LaunchWriteOutputs: per slot, index, label and feature bytes, or padding.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels::detail {

// Bits of the row index in the selection keys: the keys are row << 34 | class << 32 | u.
inline constexpr int kClassShift = 32;
inline constexpr int kRowShift = 34;
inline constexpr uint32_t kClassPositive = 0;
inline constexpr uint32_t kClassNegative = 1;
inline constexpr uint32_t kClassIgnored = 2;

// Scratch arrays of one launch, all device memory owned by CudaBackend.
struct SampleScratch {
  int64_t* d_row_len = nullptr;    // [B + 1], last entry 0 (input of the exclusive scan)
  int64_t* d_row_k = nullptr;      // [B + 1], last entry 0
  int64_t* d_elem_off = nullptr;   // [B + 1], exclusive scan of d_row_len
  int64_t* d_slot_off = nullptr;   // [B + 1], exclusive scan of d_row_k
  int64_t* d_num_pos = nullptr;    // [B], P
  int64_t* d_quota_pos = nullptr;  // [B], m_pos
  int64_t* d_quota_neg = nullptr;  // [B], m_neg
  int64_t* d_sel_begin = nullptr;  // [B], slot_off (segment begins of the order sort)
  int64_t* d_sel_end = nullptr;    // [B], slot_off + m_pos + m_neg
  // Sorted by the selection sort (the current buffers of its double buffers).
  const uint64_t* d_sorted_sel_keys = nullptr;  // [total_elements]
  const int32_t* d_sorted_sel_vals = nullptr;   // [total_elements]
  // Sorted by the order sort: PackKey(v, i) per selected slot.
  const uint64_t* d_sorted_order_keys = nullptr;  // [total_slots]
};

// Grid-stride kernels use at most this many blocks per launch (set from the device's SM
// count by the caller).
struct LaunchConfig {
  int max_blocks = 1;
};

// d_row_len / d_row_k from the row descriptors (negative lengths and K read as 0).
void LaunchPrepareRows(const RowDesc* d_rows, int64_t num_rows, const SampleScratch& scratch,
                       const LaunchConfig& config, cudaStream_t stream);

// Keys and values of the selection sort for every element of the batch.
void LaunchSelectionKeys(const Batch& batch, const SampleScratch& scratch, uint64_t* d_keys,
                         int32_t* d_vals, const LaunchConfig& config, cudaStream_t stream);

// P, Q, quotas and d_sel_end per row; writes out_num_positive / out_num_negative.
void LaunchQuotas(const Batch& batch, const SampleScratch& scratch, const LaunchConfig& config,
                  cudaStream_t stream);

// PackKey(v, i) of every selected element at its row's slot range.
void LaunchOrderKeys(const Batch& batch, const SampleScratch& scratch, uint64_t* d_order_keys,
                     const LaunchConfig& config, cudaStream_t stream);

// Indices, labels and features of every slot of the batch, padding included.
void LaunchWriteOutputs(const Batch& batch, const SampleScratch& scratch,
                        const LaunchConfig& config, cudaStream_t stream);

}  // namespace gpusampler::kernels::detail
