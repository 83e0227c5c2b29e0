#include "cpu/thread_pool.hpp"

#include <chrono>
#include <stdexcept>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpusampler::kernels {
namespace {

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Waking a sleeping thread costs tens to hundreds of microseconds on virtualized hosts, a
// whole 1e4-element row's work, so both sides poll briefly before they block.
template <typename Ready>
bool SpinUntil(Ready ready, int spin_us) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (int i = 0;; ++i) {
    if (ready()) return true;
    CpuRelax();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads, int spin_us, int serial_ms)
    : spin_us_(spin_us), serial_(std::chrono::milliseconds(serial_ms)) {
  if (threads < 1) threads = 1;
  for (int w = 1; w < threads; ++w) workers_.emplace_back([this, w] { WorkerLoop(w); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::RunTasks(uint32_t job, int worker) {
  for (;;) {
    uint64_t state = state_.load();
    if (static_cast<uint32_t>(state >> 32) != job) return;
    const uint32_t i = static_cast<uint32_t>(state);
    // n_ is read after the state: had a later job replaced it, that job would have closed
    // the state first, and the compare-exchange below fails.
    if (i == kClosed || i >= n_.load()) return;
    if (!state_.compare_exchange_weak(state, state + 1)) continue;
    // Task i is ours; the job cannot finish (nor fn_ change) before it is counted.
    const int64_t n = n_.load();
    if (!failed_.load(std::memory_order_relaxed)) {
      try {
        (*fn_.load())(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu_);
        if (!error_) error_ = std::current_exception();
        failed_.store(true);
      }
    }
    if (completed_.fetch_add(1) + 1 == n) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint32_t seen = 0;
  for (;;) {
    auto changed = [&] {
      return stop_.load(std::memory_order_acquire) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!SpinUntil(changed, spin_us_)) {
      std::unique_lock<std::mutex> lock(mu_);
      start_cv_.wait(lock, changed);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    seen = generation_.load(std::memory_order_acquire);
    RunTasks(seen, worker);
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  using Clock = std::chrono::steady_clock;
  if (workers_.empty() || n == 1 || Clock::now() < serial_until_) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  if (n >= kClosed) throw std::length_error("ThreadPool::ParallelFor: too many tasks");
  const uint32_t job = ++job_;
  // Close the state before touching the job's fields (see RunTasks), then open it.
  state_.store(uint64_t{job} << 32 | kClosed);
  fn_.store(&fn);
  n_.store(n);
  completed_.store(0);
  failed_.store(false);
  {
    std::lock_guard<std::mutex> lock(mu_);
    error_ = nullptr;
  }
  state_.store(uint64_t{job} << 32);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.store(job, std::memory_order_release);
  }
  start_cv_.notify_all();
  const Clock::time_point begin = Clock::now();
  RunTasks(job, 0);
  const Clock::time_point ran = Clock::now();
  auto done = [&] { return completed_.load() == n; };
  if (!done() && !SpinUntil(done, spin_us_)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  const Clock::time_point end = Clock::now();
  if (end - ran > (ran - begin) + std::chrono::microseconds(200)) {
    serial_until_ = serial_.OnStall(end);  // a stall: see the constructor's comment
    ++stalls_;
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace gpusampler::kernels
