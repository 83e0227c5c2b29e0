// Coalesces concurrent calls of one expensive, read-only computation (a listing of 100k
// datasets). A call that arrives while a run is in progress joins the next run, which starts
// when that one ends, so every caller gets a result computed after its call began (never a
// stale answer), at most one run is in progress at a time however many callers ask, and no
// caller's thread waits for another's run: the thread that runs delivers every result.
// Thread-safety: thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace gpusampler::server {

template <typename T>
class SingleFlight {
 public:
  using Done = std::function<void(std::shared_ptr<const T>)>;

  // `compute` reports failure in T (say, a Status inside it), never by throwing.
  explicit SingleFlight(std::function<T()> compute) : compute_(std::move(compute)) {}

  // Calls `done` with the result of a run that started after this call began. When no run is
  // in progress, this thread runs (and keeps running while callers arrived during its run),
  // then returns; else it returns at once and the running thread calls `done` later.
  void Run(Done done) {
    std::unique_lock<std::mutex> lock(mu_);
    waiting_.push_back(std::move(done));
    if (running_) return;  // the running thread takes this call into its next run
    running_ = true;
    while (!waiting_.empty()) {
      std::vector<Done> batch;
      batch.swap(waiting_);  // callers from now on wait for the run after this one
      lock.unlock();
      const std::shared_ptr<const T> result = std::make_shared<const T>(compute_());
      for (Done& d : batch) d(result);
      lock.lock();
      ++runs_;
    }
    running_ = false;
  }

  // How many runs have completed (for tests).
  long runs() const {
    std::lock_guard<std::mutex> lock(mu_);
    return runs_;
  }

 private:
  const std::function<T()> compute_;
  mutable std::mutex mu_;
  bool running_ = false;
  std::vector<Done> waiting_;  // the callers of the next run
  long runs_ = 0;
};

}  // namespace gpusampler::server
