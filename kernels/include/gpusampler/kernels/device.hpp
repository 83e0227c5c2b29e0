// Device memory, pinned host memory, stream-ordered copies and completion callbacks, for
// callers that stage data for the CUDA backend (server workers, tests, benchmarks) without
// including CUDA headers. In a build without CUDA every function throws
// Error(kUnavailable), except the queries, which report no device.
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace gpusampler::kernels {

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
void PinnedFree(void* ptr) noexcept;

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
