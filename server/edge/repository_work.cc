#include "edge/repository_work.hpp"

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "core/thread_priority.hpp"

namespace gpusampler::server {
namespace {

class RepositoryWork {
 public:
  static RepositoryWork& Get() {
    static RepositoryWork* w = new RepositoryWork();  // lives with the process
    return *w;
  }
  void Run(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(work));
    }
    cv_.notify_one();
  }

 private:
  // Four: a 512 MiB load on one leaves the others to deletions, listings and other misses.
  static constexpr int kThreads = 4;
  RepositoryWork() {
    for (int i = 0; i < kThreads; ++i) std::thread([this] { Loop(); }).detach();
  }
  void Loop() {
    // Loads, listings and deletions yield the CPU to the threads that answer samples.
    LowerThisThreadsPriority();
    while (true) {
      std::function<void()> work;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return !queue_.empty(); });
        work = std::move(queue_.front());
        queue_.pop_front();
      }
      work();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
};

}  // namespace

void RunRepositoryWork(std::function<void()> work) { RepositoryWork::Get().Run(std::move(work)); }

}  // namespace gpusampler::server
