// The cuda-sim device: streams, memory and the stream-ordered backend (sim_device.hpp).
#include "sim/sim_device.hpp"

#include <atomic>
#include <cstdlib>
#include <exception>
#include <unordered_set>
#include <utility>

namespace gpusampler::kernels::sim {
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

void SimStream::EndCapture(bool launch) {
  std::vector<std::function<void()>> ops;
  {
    std::lock_guard<std::mutex> lock(mu_);
    capturing_ = false;
    ops.swap(captured_);
  }
  if (!launch || ops.empty()) return;
  Enqueue([ops = std::move(ops)] {
    for (const auto& op : ops) op();
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

}  // namespace gpusampler::kernels::sim
