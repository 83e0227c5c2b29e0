// The CUDA backend: one device, one non-blocking stream, one scratch arena grown
// geometrically. Sample() only enqueues the kernels of pipeline/pipeline.hpp (the same bodies
// that cuda-sim runs on the host) and is capturable into a CUDA graph once the arena is large
// enough. Once a capture has used the arena it never moves until ReleaseGraphs()
// (arena_policy.hpp).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "cuda/arena_policy.hpp"
#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "cuda/pipeline_exec.cuh"
#include "gpusampler/kernels/backend.hpp"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels {
namespace {

using detail::ArenaPolicy;
using detail::Capacity;

// The arena is sized in bytes (Capacity::temp_bytes): the pipeline's layout for a launch of
// at most the reserved sizes (pipeline::BoundShape) never exceeds it.
Capacity BytesNeeded(size_t bytes) {
  Capacity need;
  need.temp_bytes = static_cast<int64_t>(bytes);
  return need;
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
  // Rows, tiles and blocks are counted in int32 on the device.
  if (batch.num_rows > INT_MAX / 2) {
    invalid("num_rows " + std::to_string(batch.num_rows) + " exceeds " +
            std::to_string(INT_MAX / 2));
  }
  if (!pointers) return;
  if (batch.num_rows > 0 && batch.host_rows == nullptr) {
    invalid("Batch::host_rows is required (the launch shape is planned on the host)");
  }
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
  bool SampleSmallClass(const Batch& batch, int32_t class_rows, const void* sizes) override;
  void* stream() const override { return stream_; }
  void Reserve(int64_t num_rows, int64_t total_elements, int64_t total_slots,
               int64_t total_class_pairs = 0) override;
  void ReleaseGraphs() override { policy_.ReleaseGraphs(); }
  uint32_t* error_flags() override { return error_flags_; }

 private:
  // Makes the arena hold at least `need`, or throws when ArenaPolicy refuses the growth.
  // Stream-ordered: never synchronizes when the device has stream-ordered allocation.
  void Reserve(const Capacity& need);
  void ReleaseArena() noexcept;

  int device_;
  cudaStream_t stream_ = nullptr;
  bool stream_ordered_alloc_ = false;
  void* d_arena_ = nullptr;
  uint32_t* error_flags_ = nullptr;  // the last launch's error word (pipeline::Layout::error)
  Capacity capacity_;
  ArenaPolicy policy_;
};

CudaBackend::CudaBackend(int device) : device_(device) {
  detail::ScopedDevice guard(device_);
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

void CudaBackend::Reserve(int64_t num_rows, int64_t total_elements, int64_t total_slots,
                          int64_t total_class_pairs) {
  Batch sizes;
  sizes.num_rows = num_rows;
  sizes.total_elements = total_elements;
  sizes.total_slots = total_slots;
  CheckBatch(sizes, /*pointers=*/false);
  if (num_rows == 0) return;
  detail::ScopedDevice guard(device_);
  const pipeline::Shape bound =
      pipeline::BoundShape(num_rows, total_elements, total_slots, total_class_pairs);
  Reserve(BytesNeeded(pipeline::MakeLayout(bound).bytes));
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
  next.temp_bytes = detail::GrowArenaBytes(capacity_.temp_bytes, need.temp_bytes);
  const size_t bytes = static_cast<size_t>(next.temp_bytes);

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
  // The error word at the arena's start: zero until a kernel ORs a code into it, reset by the
  // caller after each launch that reads it (Backend::error_flags).
  GPUSAMPLER_CUDA_TRY(cudaMemsetAsync(arena, 0, sizeof(uint32_t), stream_));
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
  error_flags_ = nullptr;
  if (batch.num_rows == 0) return;
  ValidateRows(batch.host_rows, batch.num_rows);
  detail::ScopedDevice guard(device_);

  const pipeline::Shape shape = pipeline::MakeShape(batch.host_rows, batch.num_rows);
  const pipeline::Layout layout = pipeline::MakeLayout(shape);
  // Grows only when the caller did not Reserve() enough (tests, benchmarks); the server's
  // worker always has. A batch of small rows needs no arena at all.
  const bool arena = shape.num_large > 0 || shape.num_class_rows > 0;
  if (layout.bytes > 0 && arena) Reserve(BytesNeeded(layout.bytes));

  pipeline::CudaExec exec(stream_);
  pipeline::Enqueue(exec, shape, layout, static_cast<uint8_t*>(d_arena_),
                    pipeline::ParamsOf(batch));
  if (arena) {
    error_flags_ = reinterpret_cast<uint32_t*>(static_cast<uint8_t*>(d_arena_) + layout.error);
  }
}

bool CudaBackend::SampleSmallClass(const Batch& batch, int32_t class_rows, const void* sizes) {
  CheckBatch(batch, /*pointers=*/true);
  if (batch.num_rows == 0 || class_rows < batch.num_rows || sizes == nullptr) return false;
  ValidateRows(batch.host_rows, batch.num_rows);
  if (!AllSmallBinaryRows(batch.host_rows, batch.num_rows, pipeline::kSmallRowMax)) return false;
  error_flags_ = nullptr;  // the fused kernel keeps no error word
  detail::ScopedDevice guard(device_);
  pipeline::CudaExec exec(stream_);
  pipeline::Params p = pipeline::ParamsOf(batch);
  p.sizes = static_cast<const pipeline::LaunchSizes*>(sizes);
  pipeline::EnqueueSmallClass(exec, class_rows, p);
  return true;
}

}  // namespace

namespace detail {

// The CUDA device's backend (device.cu's CudaDevice::MakeBackend).
std::unique_ptr<Backend> MakeCudaRuntimeBackend(int device) {
  const int count = CudaDeviceCount();
  if (device < 0 || device >= count) {
    throw Error(Error::Code::kUnavailable, "CUDA device " + std::to_string(device) +
                                               " is absent (" + std::to_string(count) +
                                               " present)");
  }
  return std::make_unique<CudaBackend>(device);
}

}  // namespace detail

}  // namespace gpusampler::kernels
