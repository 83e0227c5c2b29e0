// The completion of one asynchronous launch, waited for with a timeout. Plain C++ (no CUDA),
// so that its lifetime rules are tested on every machine.
//
// The state is shared between the waiter and the callback (std::shared_ptr), not owned by
// the waiter: when the wait times out the waiter gives up and may be destroyed, and a
// callback that the device runs later only touches the shared state, which it keeps alive.
// Make one Completion per launch: a late callback of an abandoned launch can then never
// mark a later launch done. Thread-safe.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace gpusampler::kernels {

class Completion {
 public:
  Completion() : state_(std::make_shared<State>()) {}

  // The callback to enqueue (EnqueueHostCallback): records `error` (empty: success) and
  // wakes the waiter. Safe to call after this Completion is destroyed; calls after the
  // first are ignored.
  std::function<void(const std::string& error)> Callback() const {
    std::shared_ptr<State> state = state_;
    return [state](const std::string& error) {
      std::lock_guard<std::mutex> lock(state->mu);
      if (state->done) return;
      state->done = true;
      state->error = error;
      state->cv.notify_all();
    };
  }

  // Blocks until the callback has run or `timeout` has passed. Returns false on timeout;
  // otherwise true with `*error` set to what the callback reported.
  bool WaitFor(std::chrono::milliseconds timeout, std::string* error) const {
    std::unique_lock<std::mutex> lock(state_->mu);
    if (!state_->cv.wait_for(lock, timeout, [this] { return state_->done; })) return false;
    *error = state_->error;
    return true;
  }

  // How many owners the shared state has (the waiter plus callbacks not yet destroyed);
  // for tests.
  long use_count() const { return state_.use_count(); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string error;
  };
  std::shared_ptr<State> state_;
};

}  // namespace gpusampler::kernels
