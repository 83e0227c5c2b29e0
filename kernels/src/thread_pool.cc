#include "thread_pool.hpp"

#include <chrono>

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

ThreadPool::ThreadPool(int threads, int spin_us) : spin_us_(spin_us) {
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

void ThreadPool::RunTasks(int worker) {
  for (;;) {
    const int64_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= n_) return;
    try {
      (*fn_)(i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      // Drain the remaining indices so every thread finishes promptly.
      next_.store(n_, std::memory_order_relaxed);
    }
  }
}

void ThreadPool::WorkerLoop(int worker) {
  uint64_t seen = 0;
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
    RunTasks(worker);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t, int)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  start_cv_.notify_all();
  RunTasks(0);
  auto done = [&] { return pending_.load(std::memory_order_acquire) == 0; };
  if (!SpinUntil(done, spin_us_)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mu_);
    error = error_;
    fn_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace gpusampler::kernels
