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

// Stream operations enqueued on `stream` so far (copies, memsets, kernels, callbacks, and a
// captured graph's launch each count one), as the cuda-sim device counts them; -1 for a CUDA
// stream, which does not count them.
int64_t StreamOperations(void* stream);

// The work that a function enqueues on a stream, captured and launched as one stream
// operation: a CUDA graph on a CUDA stream (captured anew each Launch; the instantiated graph
// is updated in place when the new capture has the same topology, and instantiated again when
// not), and one queued operation that runs the captured ones in order on a cuda-sim stream.
// The captured work must be capturable: copies from pinned or device memory, kernels, no
// synchronization, no host callback. Not thread-safe.
class StreamGraph {
 public:
  explicit StreamGraph(void* stream);
  ~StreamGraph();
  StreamGraph(const StreamGraph&) = delete;
  StreamGraph& operator=(const StreamGraph&) = delete;

  // Captures what `enqueue` issues on the stream, then launches it. Throws what `enqueue`
  // throws (the capture is discarded, nothing launched), or Error(kInternal) when capture,
  // instantiation or the launch fails.
  void Launch(const std::function<void()>& enqueue);
  // Launches the instantiated graph again as it was last captured, without capturing
  // (cudaGraphLaunch): the caller knows that a new capture would record the same operations
  // (GraphCache's key). Throws Error(kInternal) when none is instantiated or the launch fails.
  void Replay();
  // Destroys the instantiated graph: call it before memory that the graph refers to moves.
  void Reset() noexcept;
  bool instantiated() const { return exec_ != nullptr; }
  // Captures made by Launch so far (Replay makes none).
  int64_t captures() const { return captures_; }

 private:
  void* stream_;
  void* exec_ = nullptr;
  int64_t captures_ = 0;
};

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
