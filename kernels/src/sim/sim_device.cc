// The cuda-sim device: streams, memory and the stream-ordered backend (sim_device.hpp), and
// its DeviceImpl (device_impl.hpp).
#include "sim/sim_device.hpp"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <unordered_set>
#include <utility>

#include "device/device_impl.hpp"

namespace gpusampler::kernels {
namespace sim {
namespace {

struct Registry {
  std::mutex mu;
  std::unordered_set<const void*> streams;
  std::unordered_set<const void*> memory;
  // Sizes of the two sets, readable without the lock: a process that never made a sim stream
  // or allocation (a CUDA server) answers IsSimStream / IsSimMemory without locking, so the
  // CUDA worker's copies and frees share no lock. Changed only under `mu`; a caller holding a
  // sim pointer got it after its registration, so it sees a non-zero count.
  std::atomic<size_t> stream_count{0};
  std::atomic<size_t> memory_count{0};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: streams may outlive statics
  return *r;
}

}  // namespace

SimStream::SimStream() {
  {
    std::lock_guard<std::mutex> lock(registry().mu);
    registry().streams.insert(this);
    registry().stream_count.store(registry().streams.size(), std::memory_order_release);
  }
  thread_ = std::thread([this] { Loop(); });
}

SimStream::~SimStream() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().streams.erase(this);
  registry().stream_count.store(registry().streams.size(), std::memory_order_release);
}

void SimStream::Enqueue(std::function<void()> op) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) {
      captured_.push_back(std::move(op));
      return;
    }
    queue_.push_back(Op{std::move(op), false});
    operations_.fetch_add(1, std::memory_order_relaxed);
  }
  cv_.notify_all();
}

void SimStream::BeginCapture() {
  std::lock_guard<std::mutex> lock(mu_);
  if (capturing_) throw Error(Error::Code::kInternal, "cuda-sim: the stream is already capturing");
  capturing_ = true;
  captured_.clear();
}

bool SimStream::capturing() {
  std::lock_guard<std::mutex> lock(mu_);
  return capturing_;
}

SimStream::Captured SimStream::EndCapture(bool launch) {
  auto ops = std::make_shared<std::vector<std::function<void()>>>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = false;
    ops->swap(captured_);
  }
  if (!launch || ops->empty()) return nullptr;
  Captured captured = std::move(ops);
  LaunchCaptured(captured);
  return captured;
}

void SimStream::LaunchCaptured(const Captured& ops) {
  if (!ops) return;
  // (each launch runs the captured closures again: they read device and pinned memory when
  // they run, as a CUDA graph's nodes do)
  Enqueue([ops] {
    for (const auto& op : *ops) op();
  });
}

void SimStream::EnqueueCallback(std::function<void(const std::string& error)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (capturing_) {
      throw Error(Error::Code::kInternal, "cuda-sim: a host callback cannot be captured");
    }
    operations_.fetch_add(1, std::memory_order_relaxed);
    queue_.push_back(Op{[this, fn = std::move(fn)] {
                          std::string error;
                          {
                            std::lock_guard<std::mutex> lock(mu_);
                            error = error_;
                          }
                          fn(error);
                        },
                        true});
  }
  cv_.notify_all();
}

void SimStream::Synchronize() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
  if (!error_.empty()) throw Error(Error::Code::kDeviceFault, "cuda-sim: " + error_);
}

void SimStream::WaitIdle() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return queue_.empty() && !busy_; });
}

void SimStream::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_ and nothing left
    Op op = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    // After a failure the stream is dead, as after a sticky CUDA error: later operations
    // are skipped; callbacks still run (they report the error).
    const bool skip = !error_.empty() && !op.callback;
    lock.unlock();
    std::string failure;
    try {
      if (!skip) op.run();
    } catch (const std::exception& e) {
      failure = e.what();
    } catch (...) {
      failure = "unknown exception";
    }
    if (op.callback) failure.clear();  // a callback's own exception is not the stream's
    lock.lock();
    if (!failure.empty() && error_.empty()) error_ = failure;
    busy_ = false;
    cv_.notify_all();
  }
}

bool IsSimStream(const void* stream) {
  if (stream == nullptr || registry().stream_count.load(std::memory_order_acquire) == 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().streams.count(stream) > 0;
}

SimStream* AsSimStream(void* stream) { return static_cast<SimStream*>(stream); }

bool IsSimMemory(const void* ptr) {
  if (ptr == nullptr || registry().memory_count.load(std::memory_order_acquire) == 0) {
    return false;
  }
  std::lock_guard<std::mutex> lock(registry().mu);
  return registry().memory.count(ptr) > 0;
}

void* Alloc(size_t bytes) {
  // 256-byte aligned like cudaMalloc, and uninitialized like it.
  void* ptr = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
  if (ptr == nullptr) throw Error(Error::Code::kOutOfMemory, "cuda-sim: out of host memory");
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().memory.insert(ptr);
  registry().memory_count.store(registry().memory.size(), std::memory_order_release);
  return ptr;
}

void Free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  {
    // Held while waiting: a stream cannot be destroyed (it deregisters under this lock) while
    // it is waited on. Stream operations never take it.
    std::lock_guard<std::mutex> lock(registry().mu);
    if (registry().memory.erase(ptr) == 0) return;
    registry().memory_count.store(registry().memory.size(), std::memory_order_release);
    for (const void* stream : registry().streams) {
      static_cast<SimStream*>(const_cast<void*>(stream))->WaitIdle();
    }
  }
  std::free(ptr);
}

namespace {

// A StreamGraph's instantiated graph on cuda-sim: the operations it captured.
struct SimGraph {
  SimStream::Captured ops;
};

// StreamTimer on a sim stream: the times at which the stream reached Start and Stop.
struct SimEvent {
  std::chrono::steady_clock::time_point at{};
};

// The cuda-sim device of device_impl.hpp: its memory is host memory (device and pinned alike),
// its copies and memsets are operations of its streams, and a graph launch is the captured
// operations queued as one.
class SimDevice final : public DeviceImpl {
 public:
  bool OwnsStream(const void* stream) const override { return IsSimStream(stream); }
  bool OwnsMemory(const void* ptr) const override { return IsSimMemory(ptr); }
  std::unique_ptr<Backend> MakeBackend(int) const override { return MakeStreamBackend(); }
  DeviceInfo Info(int) const override {
    DeviceInfo info;
    info.index = kSimDevice;
    info.name = "cuda-sim (the CUDA pipeline on the host)";
    info.uuid = "SIM-00000000-0000-0000-0000-000000000000";
    return info;
  }
  void* Alloc(int, size_t bytes) const override { return sim::Alloc(bytes); }
  void Free(void* ptr) const noexcept override { sim::Free(ptr); }
  void* PinnedAlloc(int, size_t bytes) const override { return sim::Alloc(bytes); }
  void PinnedFree(void* ptr) const noexcept override { sim::Free(ptr); }
  void BindThread(int) const override {}
  void CopyToDevice(int, void* dst, const void* src, size_t bytes) const override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) const override {
    if (bytes == 0) return;
    AsSimStream(stream)->Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }
  void MemsetAsync(void* dst, int value, size_t bytes, void* stream) const override {
    if (bytes == 0) return;
    AsSimStream(stream)->Enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
  }
  void EnqueueHostCallback(void* stream,
                           std::function<void(const std::string& error)> fn) const override {
    AsSimStream(stream)->EnqueueCallback(std::move(fn));
  }
  void Synchronize(void* stream) const override { AsSimStream(stream)->Synchronize(); }
  int64_t Operations(void* stream) const override { return AsSimStream(stream)->operations(); }

  void GraphLaunch(void* stream, void** exec, const std::function<void()>& enqueue) const override {
    SimStream* sim_stream = AsSimStream(stream);
    sim_stream->BeginCapture();
    try {
      enqueue();
    } catch (...) {
      sim_stream->EndCapture(/*launch=*/false);
      throw;
    }
    SimStream::Captured ops = sim_stream->EndCapture(/*launch=*/true);
    // "instantiated": the captured operations, kept for GraphReplay
    delete static_cast<SimGraph*>(*exec);
    *exec = new SimGraph{std::move(ops)};
  }
  void GraphReplay(void* stream, void* exec) const override {
    AsSimStream(stream)->LaunchCaptured(static_cast<SimGraph*>(exec)->ops);
  }
  void GraphDestroy(void* exec) const noexcept override { delete static_cast<SimGraph*>(exec); }

  void TimerCreate(void*, void** start, void** stop) const override {
    *start = new SimEvent;
    *stop = new SimEvent;
  }
  void TimerDestroy(void* start, void* stop) const noexcept override {
    delete static_cast<SimEvent*>(start);
    delete static_cast<SimEvent*>(stop);
  }
  void TimerRecord(void* event, void* stream) const override {
    auto* at = static_cast<SimEvent*>(event);
    AsSimStream(stream)->Enqueue([at] { at->at = std::chrono::steady_clock::now(); });
  }
  float TimerElapsedMs(void* stream, void* start, void* stop) const override {
    AsSimStream(stream)->Synchronize();
    return std::chrono::duration<float, std::milli>(static_cast<SimEvent*>(stop)->at -
                                                    static_cast<SimEvent*>(start)->at)
        .count();
  }
};

}  // namespace
}  // namespace sim

const DeviceImpl& SimDeviceImpl() {
  static const sim::SimDevice device;
  return device;
}

}  // namespace gpusampler::kernels
