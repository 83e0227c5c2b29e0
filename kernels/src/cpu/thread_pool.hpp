// A fixed pool of worker threads for the CPU backend. Not part of the public API.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace gpusampler::kernels {

// How long jobs run on the caller alone after a stall (ThreadPool): `max` / 16 after an
// isolated stall, doubling up to `max` while each stall comes within four windows of the end
// of the last window. On a quiet host an occasional stall (the host ran something else for
// a moment) then costs a millisecond or two of serial jobs, not 20 ms: at B = 1 x 1e5
// (0.13 ms a call at 2 threads, 0.2 ms alone) one stall moved the median of a 200-call run to
// the serial time. An oversubscribed host, which stalls again as soon as a window ends,
// reaches `max` within five stalls. Not thread-safe: the caller's.
class SerialBackoff {
 public:
  using Clock = std::chrono::steady_clock;
  explicit SerialBackoff(std::chrono::milliseconds max)
      : max_(max), base_(std::max<Clock::duration>(max / 16, std::chrono::microseconds(1))) {}
  // A stall at `now`: starts a serial window and returns its end.
  Clock::time_point OnStall(Clock::time_point now) {
    const bool again = window_.count() > 0 && now - until_ <= 4 * window_;
    window_ = again ? std::min<Clock::duration>(2 * window_, max_) : base_;
    until_ = now + window_;
    return until_;
  }
  Clock::duration window() const { return window_; }

 private:
  const Clock::duration max_;
  const Clock::duration base_;
  Clock::duration window_{0};
  Clock::time_point until_{};
};

class ThreadPool {
 public:
  // `threads` workers in all, the calling thread included (so threads - 1 are spawned).
  // Idle workers poll for new work for `spin_us` microseconds before they sleep.
  //
  // An oversubscribed host (more runnable threads than cores) preempts a worker in the
  // middle of a task, and the caller then waits for a whole scheduler time slice to get
  // that task back: many short fork-joins in a row (32 rows of 20 us, or the eight phases of
  // a split row) then cost several times their work. So when a job's caller, out of tasks,
  // waits for the others longer than it worked itself plus 200 us (a stall, never seen when
  // the workers run), the jobs of the next few milliseconds run on the caller alone, up to
  // `serial_ms` when stalls keep coming (SerialBackoff); then the pool tries again. Results
  // never depend on it.
  explicit ThreadPool(int threads, int spin_us = 200, int serial_ms = 20);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }
  // Jobs so far whose caller waited for a stalled worker (each started a serial window).
  int64_t stalls() const { return stalls_; }

  // Calls fn(i, worker) for every i in [0, n), spread over the pool; `worker` in
  // [0, size()) identifies the thread (for per-thread scratch). The caller runs tasks too
  // and returns as soon as every task has finished (a worker that has not started yet,
  // e.g. one the OS has not scheduled on a loaded machine, is not waited for: the caller
  // takes its tasks), rethrowing the first exception a task threw (tasks not yet started
  // then are skipped). One ParallelFor at a time; not reentrant from inside a task.
  void ParallelFor(int64_t n, const std::function<void(int64_t, int)>& fn);

 private:
  using Fn = std::function<void(int64_t, int)>;
  static constexpr uint32_t kClosed = 0xFFFFFFFFu;

  void WorkerLoop(int worker);
  // Claims and runs tasks of job `job` until none is left (or another job began).
  void RunTasks(uint32_t job, int worker);

  const int spin_us_;
  SerialBackoff serial_;                                  // the caller's; no lock needed
  int64_t stalls_ = 0;                                    // the caller's; no lock needed
  std::chrono::steady_clock::time_point serial_until_{};  // the caller's; no lock needed
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  // Job number << 32 | next task index; the index is kClosed while a job is set up. A task
  // is claimed by a compare-exchange that also checks the job number, so a worker that
  // wakes up late can never claim a task of a later job with an earlier job's function.
  std::atomic<uint64_t> state_{0};
  std::atomic<const Fn*> fn_{nullptr};
  std::atomic<int64_t> n_{0};
  std::atomic<int64_t> completed_{0};  // tasks of the current job finished
  std::atomic<bool> failed_{false};
  // The job number sleepers wait on; bumped under mu_ (so sleepers cannot miss it) after
  // the job is published.
  std::atomic<uint32_t> generation_{0};
  std::atomic<bool> stop_{false};
  uint32_t job_ = 0;          // the caller's job counter
  std::exception_ptr error_;  // guarded by mu_
};

}  // namespace gpusampler::kernels
