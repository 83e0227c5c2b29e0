// The cuda-sim device behind device.hpp's kSimDevice: host memory standing in for device and
// pinned memory, and streams that are host threads running their operations in order (a
// throwing operation leaves a sticky error that later callbacks report, as a device fault
// does on a GPU).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gpusampler/kernels/backend.hpp"

namespace gpusampler::kernels::sim {

class SimStream {
 public:
  SimStream();
  ~SimStream();  // runs what is queued, then stops
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  // Queues `op`; it runs on the stream's thread after everything queued before it.
  void Enqueue(std::function<void()> op);
  // Queues a callback that receives the sticky error ("" when none).
  void EnqueueCallback(std::function<void(const std::string& error)> fn);
  // Stream capture (StreamGraph): from BeginCapture on, Enqueue collects the operations
  // instead of queuing them; EndCapture(true) queues them as one operation that runs them
  // in order (a graph launch), EndCapture(false) drops them. A callback cannot be captured
  // (EnqueueCallback throws Error(kInternal) while capturing).
  // EndCapture returns the captured operations (null when dropped or none), which
  // LaunchCaptured queues again as one operation (a graph replayed without capture).
  using Captured = std::shared_ptr<const std::vector<std::function<void()>>>;
  void BeginCapture();
  Captured EndCapture(bool launch);
  void LaunchCaptured(const Captured& ops);
  // Whether the stream is capturing now (cudaStreamIsCapturing).
  bool capturing();
  // Operations queued so far (a captured graph counts one): the stream_ops of a launch.
  int64_t operations() const { return operations_.load(std::memory_order_relaxed); }
  // Blocks until everything queued so far has run. Throws Error(kDeviceFault) when an
  // operation failed.
  void Synchronize();
  // The same without the error: for frees, which wait for the device as cudaFree does.
  void WaitIdle();

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  struct Op {
    std::function<void()> run;
    bool callback = false;  // runs even after a failure (it reports the error)
  };
  std::deque<Op> queue_;
  bool capturing_ = false;
  std::vector<std::function<void()>> captured_;
  std::atomic<int64_t> operations_{0};
  bool busy_ = false;
  bool stop_ = false;
  std::string error_;
  std::thread thread_;
};

// Whether `stream` / `ptr` belong to the simulator (registered at creation / allocation).
bool IsSimStream(const void* stream);
bool IsSimMemory(const void* ptr);
SimStream* AsSimStream(void* stream);

void* Alloc(size_t bytes);
// No-op for pointers it did not allocate. Like cudaFree, waits until every sim stream is idle
// first, so that queued work (say, after a launch timed out) never touches freed memory.
// Never call it from a stream operation.
void Free(void* ptr) noexcept;

// A cuda-sim backend whose Sample() enqueues the pipeline on its own stream and returns at
// once, like the CUDA backend (MakeCudaBackend(kSimDevice)).
std::unique_ptr<Backend> MakeStreamBackend();

}  // namespace gpusampler::kernels::sim
