// The scheduler: a bounded queue of jobs and one thread per worker. The queue serves client
// connections in turn (one job of each connection with work, round-robin; FIFO within a
// connection), so that one connection's flood delays another's request by about one launch.
// A worker thread takes the next job plus whatever else is queued (up to max_batch_rows rows),
// drops jobs that were cancelled or whose deadline passed, runs the rest as one fused launch and
// completes them. It launches at once when no other launch is running, so batching never adds
// latency to an idle server; while launches run, a batch may wait up to max_batch_delay_us
// to fill. An idle worker polls the queue for spin_us before it parks, so that a request
// arriving soon after the last one does not pay a thread wake-up. A worker added with a job size
// limit (an express worker) takes only jobs of at most that many label elements, in the same
// turn order, so that a small request never waits behind a large one's launch. Thread-safe:
// every public method may be called from any thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/job.hpp"
#include "core/status.hpp"
#include "observability/metrics.hpp"
#include "scheduling/worker.hpp"

namespace gpusampler::server {

// Jobs queued per connection (Job::connection), taken round-robin across connections.
// Thread-compatible (the scheduler's lock).
class FairQueue {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  void push_back(std::shared_ptr<Job> job);
  // The job that is served next. Not empty.
  const std::shared_ptr<Job>& front() const { return at(0); }
  void pop_front() { pop(0); }
  // The turn (0 = next) of the first connection whose next job has at most `max_elements`
  // label elements (0: any job), or size_turns() when there is none. O(connections queued).
  size_t NextWithin(int64_t max_elements) const;
  size_t size_turns() const { return turns_.size(); }
  // The next job of the connection at `turn`, and taking it: that connection's later jobs,
  // if any, wait for the other connections' turns.
  const std::shared_ptr<Job>& at(size_t turn) const { return lanes_.at(turns_[turn]).front(); }
  void pop(size_t turn);
  // Every job, in the order they would be served; leaves the queue empty.
  std::deque<std::shared_ptr<Job>> TakeAll();

 private:
  std::map<std::string, std::deque<std::shared_ptr<Job>>> lanes_;  // non-empty lanes only
  std::deque<std::string> turns_;  // connections with queued jobs, whose turn is next first
  size_t size_ = 0;
};

class Scheduler {
 public:
  struct Options {
    int64_t queue_capacity = 1024;
    int64_t max_batch_rows = 256;
    int64_t max_batch_delay_us = 200;
    int64_t spin_us = 0;  // how long an idle worker polls the queue before parking
    // Label elements fused into one launch (bounds staging and device scratch); a larger
    // request still runs, alone.
    int64_t max_batch_elements = int64_t{1} << 27;
    // Output slots (sum of B * K) fused into one launch, far below the kernels' 32-bit
    // slot indexing; a larger request still runs, alone.
    int64_t max_batch_slots = int64_t{1} << 26;
  };
  // `metrics` must outlive the scheduler. `on_fatal` runs once, on a worker thread, when a
  // device fault makes the server unusable.
  Scheduler(Options options, Metrics* metrics, std::function<void(const Status&)> on_fatal);
  ~Scheduler();

  struct WorkerOptions {
    // > 0: an express worker, which takes only jobs of at most this many label elements and
    // fuses at most this many into one launch.
    int64_t max_job_elements = 0;
  };
  // Adds a worker whose metrics are metrics->device(device_index). Before Start only.
  void AddWorker(std::unique_ptr<Worker> worker, int device_index, WorkerOptions options);
  void AddWorker(std::unique_ptr<Worker> worker, int device_index) {
    AddWorker(std::move(worker), device_index, WorkerOptions());
  }
  // Warms up every worker (WarmUp), then starts the worker threads.
  Status Start();

  // Queues `job`. On refusal (queue full: RESOURCE_EXHAUSTED; draining or failed:
  // UNAVAILABLE) returns the status and does not call job->done.
  Status Submit(std::shared_ptr<Job> job);

  // Refuses new jobs from now on; queued and running jobs go on.
  void StopAccepting();
  // Waits until nothing is queued or running, or until `deadline`. True when idle.
  bool WaitIdle(Clock::time_point deadline);
  // Stops the threads after their current launch; jobs still queued get UNAVAILABLE.
  void Stop();
  // The same, but waits for running launches only until `deadline`: false when one is still
  // running then (its threads are left running; the caller is about to exit the process).
  bool Stop(Clock::time_point deadline);

  // Counters proving what ran: launches (kernels), rows launched, jobs dropped unlaunched.
  int64_t launches() const { return launches_.load(); }
  int64_t launched_rows() const { return launched_rows_.load(); }
  int64_t dropped() const { return dropped_.load(); }
  int64_t queue_depth() const;

  // Test hook: while paused, workers take nothing from the queue.
  void SetPausedForTesting(bool paused);

 private:
  struct WorkerSlot {
    std::unique_ptr<Worker> worker;
    int device_index = 0;
    WorkerOptions options;
    std::thread thread;
  };
  void Loop(WorkerSlot* slot);
  // Whether `slot` has a job it may take.
  bool HasWorkLocked(const WorkerSlot& slot) const;
  // Moves queued jobs that `slot` may take into `batch` while they fit in max_batch_rows,
  // max_batch_elements (an express worker's limit) and max_batch_slots (the first always
  // fits).
  void TakeLocked(const WorkerSlot& slot, std::vector<std::shared_ptr<Job>>* batch, int64_t* rows,
                  int64_t* elements);
  // Completes `job` with DEADLINE_EXCEEDED or CANCELLED (counted as dropped) when its
  // deadline has passed at `now` or it was cancelled; true then.
  bool DropIfDead(Job* job, Clock::time_point now);
  void Launch(WorkerSlot* slot, std::vector<std::shared_ptr<Job>>& batch);
  void RunJobs(WorkerSlot* slot, const std::vector<Job*>& jobs, Clock::time_point start);
  void Fatal(const Status& status);

  const Options options_;
  Metrics* metrics_;
  std::function<void(const Status&)> on_fatal_;
  std::vector<std::unique_ptr<WorkerSlot>> workers_;

  mutable std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable idle_cv_;
  FairQueue queue_;
  int running_ = 0;  // launches in progress
  bool accepting_ = true;
  bool stop_ = false;
  bool paused_ = false;
  bool failed_ = false;
  // An express worker exists: a new job wakes every parked worker, since the one a single
  // wake-up reached might not be allowed to take it.
  bool has_express_ = false;

  std::atomic<bool> has_work_{false};  // the queue is non-empty (read while spinning)
  std::atomic<int64_t> launches_{0};
  std::atomic<int64_t> launched_rows_{0};
  std::atomic<int64_t> dropped_{0};
};

}  // namespace gpusampler::server
