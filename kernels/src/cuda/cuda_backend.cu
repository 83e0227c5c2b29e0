// The CUDA backend: one device, one non-blocking stream, one scratch arena grown
// geometrically. Sample() only enqueues work (kernels in sample_kernels.cu, sorts and scans
// from CUB) and is capturable into a CUDA graph once the arena is large enough. Once a
// capture has used the arena it never moves until ReleaseGraphs() (arena_policy.hpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "arena_policy.hpp"
#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "cuda/sample_kernels.cuh"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {
namespace {

using detail::kRowShift;

// Selection keys hold the row index above bit 34 of a 64-bit word.
constexpr int64_t kMaxRows = int64_t{1} << (64 - kRowShift);
constexpr size_t kArenaAlignment = 256;

size_t AlignUp(size_t bytes) {
  return (bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
}

// Bits needed for row indices 0 .. num_rows - 1.
int RowBits(int64_t num_rows) {
  int bits = 0;
  while (bits < 63 && (int64_t{1} << bits) < num_rows) ++bits;
  return bits;
}

int64_t Grow(int64_t have, int64_t want) {
  return want <= have ? have : std::max(want, have + have / 2);
}

using detail::ArenaPolicy;
using detail::Capacity;

// Where each scratch array lies in the arena; `base` nullptr gives offsets from 0.
struct ArenaLayout {
  int64_t* row_arrays[9] = {};  // see CudaBackend::Sample for their use
  uint64_t* sel_keys[2] = {};
  int32_t* sel_vals[2] = {};
  uint64_t* order_keys[2] = {};
  void* temp = nullptr;
  size_t bytes = 0;
};

ArenaLayout LayOut(void* base, const Capacity& capacity) {
  ArenaLayout layout;
  const uintptr_t start = reinterpret_cast<uintptr_t>(base);
  size_t offset = 0;
  auto take = [&](size_t bytes) {
    const uintptr_t address = start + offset;
    offset += AlignUp(bytes);
    return reinterpret_cast<void*>(address);
  };
  for (int64_t*& array : layout.row_arrays) {
    array = static_cast<int64_t*>(take(sizeof(int64_t) * capacity.rows));
  }
  for (int b = 0; b < 2; ++b) {
    layout.sel_keys[b] = static_cast<uint64_t*>(take(sizeof(uint64_t) * capacity.elements));
    layout.sel_vals[b] = static_cast<int32_t*>(take(sizeof(int32_t) * capacity.elements));
    layout.order_keys[b] = static_cast<uint64_t*>(take(sizeof(uint64_t) * capacity.slots));
  }
  layout.temp = take(static_cast<size_t>(capacity.temp_bytes));
  layout.bytes = offset;
  return layout;
}

void CheckBatch(const Batch& batch, bool pointers) {
  auto invalid = [](const std::string& what) {
    throw Error(Error::Code::kInvalidArgument, "cuda backend: " + what);
  };
  if (batch.num_rows < 0 || batch.total_elements < 0 || batch.total_slots < 0) {
    invalid("negative batch size (num_rows " + std::to_string(batch.num_rows) +
            ", total_elements " + std::to_string(batch.total_elements) + ", total_slots " +
            std::to_string(batch.total_slots) + ")");
  }
  if (batch.num_rows >= kMaxRows) {
    invalid("num_rows " + std::to_string(batch.num_rows) + " exceeds " +
            std::to_string(kMaxRows - 1));
  }
  // DeviceSegmentedRadixSort counts items and segments in int.
  if (batch.total_slots > INT_MAX) {
    invalid("total_slots " + std::to_string(batch.total_slots) + " exceeds " +
            std::to_string(INT_MAX));
  }
  if (!pointers) return;
  if (batch.num_rows > 0 && (batch.rows == nullptr || batch.out_num_positive == nullptr ||
                             batch.out_num_negative == nullptr)) {
    invalid("null rows or per-row output pointer");
  }
  if (batch.total_elements > 0 && batch.labels == nullptr) invalid("null labels");
  if (batch.total_slots > 0 && batch.out_indices == nullptr) invalid("null out_indices");
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda:" + std::to_string(device_); }
  MemorySpace memory_space() const override { return MemorySpace::kDevice; }
  void Sample(const Batch& batch) override;
  void* stream() const override { return stream_; }
  void Reserve(int64_t num_rows, int64_t total_elements, int64_t total_slots) override;
  void ReleaseGraphs() override { policy_.ReleaseGraphs(); }

 private:
  // CUB temporary storage for the launch's sizes (a host-only query).
  int64_t TempBytes(int64_t num_rows, int64_t total_elements, int64_t total_slots) const;
  Capacity Need(int64_t num_rows, int64_t total_elements, int64_t total_slots) const;
  // Makes the arena hold at least `need`, or throws when ArenaPolicy refuses the growth.
  // Stream-ordered: never synchronizes when the device has stream-ordered allocation.
  void Reserve(const Capacity& need);
  void ReleaseArena() noexcept;

  int device_;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_alloc_ = false;
  detail::LaunchConfig config_;
  void* d_arena_ = nullptr;
  Capacity capacity_;
  ArenaPolicy policy_;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  detail::ScopedDevice guard(device_);
  int sm_count = 0;
  GPUSAMPLER_CUDA_TRY(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device_));
  // Enough resident blocks to fill every SM several times over; grid-stride loops do the
  // rest.
  config_.max_blocks = std::max(1, sm_count) * 32;
  int pools = 0;
  GPUSAMPLER_CUDA_TRY(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
  stream_ordered_alloc_ = pools != 0;
  GPUSAMPLER_CUDA_TRY(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaBackend::~CudaBackend() {
  try {
    detail::ScopedDevice guard(device_);
    ReleaseArena();
    // Returns at once; the stream's pending work still completes.
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaStreamDestroy(stream_));
  } catch (const Error& error) {
    std::fprintf(stderr, "%s\n", error.what());
  }
}

void CudaBackend::ReleaseArena() noexcept {
  if (d_arena_ == nullptr) return;
  // Work still queued on the stream may use the arena: the stream-ordered free waits for it.
  if (stream_ordered_alloc_) {
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaFreeAsync(d_arena_, stream_));
  } else {
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaFree(d_arena_));
  }
  d_arena_ = nullptr;
  capacity_ = Capacity{};
}

int64_t CudaBackend::TempBytes(int64_t num_rows, int64_t total_elements,
                               int64_t total_slots) const {
  const int selection_end_bit = kRowShift + RowBits(num_rows);
  size_t scan_bytes = 0;
  GPUSAMPLER_CUDA_TRY(
      cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<int64_t*>(nullptr),
                                    static_cast<int64_t*>(nullptr), num_rows + 1, stream_));
  size_t selection_bytes = 0;
  if (total_elements > 0) {
    cub::DoubleBuffer<uint64_t> keys(nullptr, nullptr);
    cub::DoubleBuffer<int32_t> vals(nullptr, nullptr);
    GPUSAMPLER_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        nullptr, selection_bytes, keys, vals, total_elements, 0, selection_end_bit, stream_));
  }
  size_t order_bytes = 0;
  if (total_slots > 0) {
    cub::DoubleBuffer<uint64_t> keys(nullptr, nullptr);
    GPUSAMPLER_CUDA_TRY(cub::DeviceSegmentedRadixSort::SortKeys(
        nullptr, order_bytes, keys, static_cast<int>(total_slots), static_cast<int>(num_rows),
        static_cast<const int64_t*>(nullptr), static_cast<const int64_t*>(nullptr), 0, 64,
        stream_));
  }
  return static_cast<int64_t>(std::max({scan_bytes, selection_bytes, order_bytes}));
}

Capacity CudaBackend::Need(int64_t num_rows, int64_t total_elements, int64_t total_slots) const {
  Capacity need;
  need.rows = num_rows + 1;
  need.elements = total_elements;
  need.slots = total_slots;
  need.temp_bytes = TempBytes(num_rows, total_elements, total_slots);
  return need;
}

void CudaBackend::Reserve(int64_t num_rows, int64_t total_elements, int64_t total_slots) {
  Batch sizes;
  sizes.num_rows = num_rows;
  sizes.total_elements = total_elements;
  sizes.total_slots = total_slots;
  CheckBatch(sizes, /*pointers=*/false);
  if (num_rows == 0) return;
  detail::ScopedDevice guard(device_);
  Reserve(Need(num_rows, total_elements, total_slots));
}

void CudaBackend::Reserve(const Capacity& need) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  GPUSAMPLER_CUDA_TRY(cudaStreamIsCapturing(stream_, &capture));
  std::string why;
  switch (policy_.Check(capacity_, need, capture != cudaStreamCaptureStatusNone, &why)) {
    case ArenaPolicy::Decision::kFits:
      return;
    case ArenaPolicy::Decision::kRefused:
      throw Error(Error::Code::kInvalidArgument, "cuda backend: " + why);
    case ArenaPolicy::Decision::kGrow:
      break;
  }
  Capacity next;
  next.rows = Grow(capacity_.rows, need.rows);
  next.elements = Grow(capacity_.elements, need.elements);
  next.slots = Grow(capacity_.slots, need.slots);
  next.temp_bytes = Grow(capacity_.temp_bytes, need.temp_bytes);
  const size_t bytes = LayOut(nullptr, next).bytes;

  // Free first so that the pool can reuse the old block for the new one.
  ReleaseArena();
  void* arena = nullptr;
  if (stream_ordered_alloc_) {
    GPUSAMPLER_CUDA_TRY(cudaMallocAsync(&arena, bytes, stream_));
  } else {
    GPUSAMPLER_CUDA_TRY(cudaMalloc(&arena, bytes));
  }
  d_arena_ = arena;
  capacity_ = next;
  if (stream_ordered_alloc_) {
    // A deliberate growth: hand the pool's unused memory (the old arena once its free has
    // run) back to the device rather than keeping both sizes reserved for good.
    cudaMemPool_t pool = nullptr;
    GPUSAMPLER_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device_));
    GPUSAMPLER_CUDA_TRY(cudaMemPoolTrimTo(pool, 0));
  }
}

void CudaBackend::Sample(const Batch& batch) {
  CheckBatch(batch, /*pointers=*/true);
  if (batch.host_rows != nullptr) ValidateRows(batch.host_rows, batch.num_rows);
  if (batch.num_rows == 0) return;
  detail::ScopedDevice guard(device_);

  const int selection_end_bit = kRowShift + RowBits(batch.num_rows);
  // Grows only when the caller did not Reserve() enough (tests, benchmarks); the server's
  // worker always has.
  Reserve(Need(batch.num_rows, batch.total_elements, batch.total_slots));

  const ArenaLayout arena = LayOut(d_arena_, capacity_);
  detail::SampleScratch scratch;
  scratch.d_row_len = arena.row_arrays[0];
  scratch.d_row_k = arena.row_arrays[1];
  scratch.d_elem_off = arena.row_arrays[2];
  scratch.d_slot_off = arena.row_arrays[3];
  scratch.d_num_pos = arena.row_arrays[4];
  scratch.d_quota_pos = arena.row_arrays[5];
  scratch.d_quota_neg = arena.row_arrays[6];
  scratch.d_sel_begin = arena.row_arrays[7];
  scratch.d_sel_end = arena.row_arrays[8];
  const size_t temp_capacity = static_cast<size_t>(capacity_.temp_bytes);

  // 1. Each row's element range and slot range in the flattened scratch arrays.
  detail::LaunchPrepareRows(batch.rows, batch.num_rows, scratch, config_, stream_);
  size_t temp_bytes = temp_capacity;
  GPUSAMPLER_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
      arena.temp, temp_bytes, scratch.d_row_len, scratch.d_elem_off, batch.num_rows + 1, stream_));
  temp_bytes = temp_capacity;
  GPUSAMPLER_CUDA_TRY(cub::DeviceScan::ExclusiveSum(
      arena.temp, temp_bytes, scratch.d_row_k, scratch.d_slot_off, batch.num_rows + 1, stream_));

  // 2. Selection order: rows, then classes, then (u, i).
  scratch.d_sorted_sel_keys = arena.sel_keys[0];
  scratch.d_sorted_sel_vals = arena.sel_vals[0];
  if (batch.total_elements > 0) {
    detail::LaunchSelectionKeys(batch, scratch, arena.sel_keys[0], arena.sel_vals[0], config_,
                                stream_);
    cub::DoubleBuffer<uint64_t> keys(arena.sel_keys[0], arena.sel_keys[1]);
    cub::DoubleBuffer<int32_t> vals(arena.sel_vals[0], arena.sel_vals[1]);
    temp_bytes = temp_capacity;
    GPUSAMPLER_CUDA_TRY(cub::DeviceRadixSort::SortPairs(
        arena.temp, temp_bytes, keys, vals, batch.total_elements, 0, selection_end_bit, stream_));
    // The buffer holding the result depends only on the pass count, decided on the host.
    scratch.d_sorted_sel_keys = keys.Current();
    scratch.d_sorted_sel_vals = vals.Current();
  }

  // 3. Class counts and quotas.
  detail::LaunchQuotas(batch, scratch, config_, stream_);

  // 4-5. Output order and outputs.
  if (batch.total_slots > 0) {
    detail::LaunchOrderKeys(batch, scratch, arena.order_keys[0], config_, stream_);
    cub::DoubleBuffer<uint64_t> order(arena.order_keys[0], arena.order_keys[1]);
    temp_bytes = temp_capacity;
    GPUSAMPLER_CUDA_TRY(cub::DeviceSegmentedRadixSort::SortKeys(
        arena.temp, temp_bytes, order, static_cast<int>(batch.total_slots),
        static_cast<int>(batch.num_rows), scratch.d_sel_begin, scratch.d_sel_end, 0, 64, stream_));
    scratch.d_sorted_order_keys = order.Current();
    detail::LaunchWriteOutputs(batch, scratch, config_, stream_);
  }
}

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int device) {
  const int count = CudaDeviceCount();
  if (device < 0 || device >= count) {
    throw Error(Error::Code::kUnavailable, "CUDA device " + std::to_string(device) +
                                               " is absent (" + std::to_string(count) +
                                               " present)");
  }
  return std::make_unique<CudaBackend>(device);
}

}  // namespace gpusampler::kernels
