// A fixed pool of worker threads for the CPU backend. Not part of the public API.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpusampler::kernels {

class ThreadPool {
 public:
  // `threads` workers in all, the calling thread included (so threads - 1 are spawned).
  // Idle workers poll for new work for `spin_us` microseconds before they sleep.
  explicit ThreadPool(int threads, int spin_us = 200);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i, worker) for every i in [0, n), spread over the pool; `worker` in
  // [0, size()) identifies the thread (for per-thread scratch). The caller runs tasks too
  // and returns when all are done, rethrowing the first exception a task threw.
  // One ParallelFor at a time; not reentrant from inside a task.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int)>& fn);

 private:
  void WorkerLoop(int worker);
  void RunTasks(int worker);

  const int spin_us_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Bumped (under mu_, so sleepers cannot miss it) after the job fields below are set.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};  // workers still inside the current job
  std::atomic<bool> stop_{false};
  const std::function<void(int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  std::atomic<int64_t> next_{0};
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace gpusampler::kernels
