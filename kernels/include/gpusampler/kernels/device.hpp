// Device memory, pinned host memory, stream-ordered copies and completion callbacks, for
// callers that stage data for the CUDA backend (server workers, tests, benchmarks) without
// including CUDA headers. In a build without CUDA every function throws
// Error(kUnavailable) for a CUDA device, except the queries, which report no device.
//
// Device kSimDevice is "cuda-sim", in every build: its memory is host memory, its streams
// are host threads that run the enqueued operations in order, and its kernels are the CUDA
// pipeline's bodies run by the host executor (MakeCudaBackend(kSimDevice) is a cuda-sim
// backend on its own stream). Code written against this header (CudaLauncher, the server's
// CUDA worker, dataset placement) runs unchanged on it, so CI runs the GPU path's logic.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace gpusampler::kernels {

inline constexpr int kSimDevice = -1;

struct DeviceInfo {
  int index = 0;
  std::string name;
  size_t total_memory = 0;
  std::string uuid;  // "GPU-xxxxxxxx-..." as nvidia-smi prints it
};

// Properties of device `device`. Throws Error(kUnavailable) when absent.
DeviceInfo GetDeviceInfo(int device);

// Device memory on `device`. Throws Error(kOutOfMemory) when the allocation fails.
void* DeviceAlloc(int device, size_t bytes);
void DeviceFree(void* ptr) noexcept;
// Page-locked host memory (for async copies). Throws Error(kOutOfMemory) on failure.
void* PinnedAlloc(size_t bytes);
// The same, with `device` current during the call: on a thread that has not used CUDA yet,
// PinnedAlloc(bytes) would create the context of device 0 (the current device by default).
void* PinnedAllocOn(int device, size_t bytes);
void PinnedFree(void* ptr) noexcept;
// Makes `device` the calling thread's current device (cudaSetDevice), so that later calls on
// this thread create no context on another GPU. For worker threads bound to one device.
void BindThreadToDevice(int device);

// Blocking host-to-device copy onto `device`. Synchronizes: for uploads outside the sampling
// path (resident datasets).
void CopyToDevice(int device, void* dst, const void* src, size_t bytes);
// Stream-ordered copy on `stream` (an opaque cudaStream_t); direction inferred from the
// pointers. Does not synchronize.
void CopyAsync(void* dst, const void* src, size_t bytes, void* stream);
// Stream-ordered memset. Does not synchronize.
void MemsetAsync(void* dst, int value, size_t bytes, void* stream);
// Runs `fn` on a CUDA-owned host thread once all work enqueued on `stream` so far has
// finished. `fn` receives an empty string, or the name of the sticky error that the
// stream hit. Does not synchronize. `fn` must not call CUDA.
void EnqueueHostCallback(void* stream, std::function<void(const std::string& error)> fn);
// Blocks until `stream` is idle. Synchronizes: never on the sampling path; for tests,
// benchmarks and shutdown.
void StreamSynchronize(void* stream);

// One contiguous byte range to copy: `bytes` bytes from src + src_offset to dst + dst_offset.
struct CopySpan {
  int64_t src_offset = 0;
  int64_t dst_offset = 0;
  int64_t bytes = 0;
};

// Device to device: copies spans[j] for j < n from `src` to `dst` in one launch (the span
// table `d_spans` is itself in device memory). For gathering many rows of a resident
// dataset into a launch's staged labels. Does not synchronize.
void CopySpansAsync(const CopySpan* d_spans, int64_t n, const uint8_t* src, uint8_t* dst,
                    void* stream);

// The feature gather on the device: for rows r < `rows` and slots s < k, copies feature row
// d_row_start[r] + d_indices[r * k + s] of `features` (rows of `row_bytes` bytes) to row
// r * k + s of `out`; a negative index (padding) writes zeros. Does not synchronize.
void GatherFeatureRowsAsync(const int64_t* d_indices, const int64_t* d_row_start, int64_t rows,
                            int64_t k, int64_t row_bytes, const uint8_t* features, uint8_t* out,
                            void* stream);

// Elapsed milliseconds of the work enqueued on `stream` between the two calls, measured
// with CUDA events (for busy-ratio accounting and benchmarks).
class StreamTimer {
 public:
  explicit StreamTimer(void* stream);
  ~StreamTimer();
  StreamTimer(const StreamTimer&) = delete;
  StreamTimer& operator=(const StreamTimer&) = delete;
  void Start();  // records the start event; does not synchronize
  void Stop();   // records the stop event; does not synchronize
  // Synchronizes on the stop event.
  float ElapsedMs();

 private:
  void* stream_;
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

}  // namespace gpusampler::kernels
