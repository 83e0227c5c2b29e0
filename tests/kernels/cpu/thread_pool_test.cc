// cpu/thread_pool: every task once, exceptions, and the serial backoff after stalls.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu/thread_pool.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// The backend's pool: every task of every job runs exactly once, on a valid worker id,
// also when jobs follow each other faster than the workers wake up (late workers must not
// run a task of a later job), and a task's exception reaches the caller.
TEST(ThreadPoolTest, EveryTaskOnceAcrossManyJobs) {
  for (int threads : {2, 4}) {
    for (int spin_us : {0, 200}) {
      ThreadPool pool(threads, spin_us);
      std::mt19937 gen(static_cast<unsigned>(threads * 1000 + spin_us));
      for (int job = 0; job < 1000; ++job) {
        const int64_t n = 1 + static_cast<int64_t>(gen() % 40);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        for (auto& r : runs) r.store(0);
        std::atomic<int> bad_worker{0};
        pool.ParallelFor(n, [&](int64_t i, int worker) {
          if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
          runs[static_cast<size_t>(i)].fetch_add(1);
          if ((i & 7) == 3) std::this_thread::yield();
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " spin " << spin_us << " job " << job << " task " << i;
        }
        ASSERT_EQ(bad_worker.load(), 0);
      }
    }
  }
}

TEST(ThreadPoolTest, ExceptionReachesTheCallerAndThePoolKeepsWorking) {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    EXPECT_THROW(pool.ParallelFor(20,
                                  [&](int64_t i, int) {
                                    if (i == round % 20) throw std::runtime_error("task failed");
                                  }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(100, [&](int64_t i, int) { sum.fetch_add(i); });
    ASSERT_EQ(sum.load(), 4950) << "round " << round;
  }
}

TEST(ThreadPoolTest, AnIsolatedStallIsShortAndStallsThatKeepComingReachTheMaximum) {
  using std::chrono::milliseconds;
  SerialBackoff backoff(milliseconds(16));
  auto t = SerialBackoff::Clock::time_point{} + std::chrono::seconds(100);
  // An isolated stall: max / 16.
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(1));
  // Stalls right after each window ends: 2, 4, 8, 16, then 16 again.
  for (const int want : {2, 4, 8, 16, 16}) {
    t += backoff.window() + milliseconds(1);  // within four windows of the last one's end
    EXPECT_EQ(backoff.OnStall(t), t + milliseconds(want)) << want;
  }
  // A stall long after the last window (more than four windows past its end): back to 1 ms.
  t += backoff.window() + milliseconds(65);
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(1));
  t += milliseconds(1) + milliseconds(4);  // exactly four windows after: still "again"
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(2));
}

TEST(ThreadPoolTest, AStalledJobSendsTheNextJobsToTheCallerAlone) {
  // A worker that sleeps inside its task is what a preempted worker looks like to the
  // caller. Until the pool has seen such a stall (the caller may take every task itself, or,
  // on a loaded host, be descheduled itself for as long as the worker sleeps, so retry until
  // the pool counts one), jobs may use every thread; after it, and within the (long) serial
  // period, every task runs on the caller (worker 0), and all of them still run once.
  ThreadPool pool(2, 200, 600000);
  bool stalled = false;
  for (int attempt = 0; attempt < 200 && !stalled; ++attempt) {
    std::atomic<bool> worker_slept{false}, worker_started{false};
    pool.ParallelFor(2, [&](int64_t, int worker) {
      if (worker != 0) {
        worker_started.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        worker_slept.store(true);
      } else {
        // Hold the caller's task until the worker has taken the other one (or 1 s).
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!worker_started.load() && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::yield();
        }
      }
    });
    stalled = worker_slept.load() && pool.stalls() > 0;
  }
  ASSERT_TRUE(stalled) << "no stall seen in 200 jobs";
  for (int job = 0; job < 20; ++job) {
    std::vector<int> runs(64, 0), workers(64, -1);
    pool.ParallelFor(64, [&](int64_t i, int worker) {
      ++runs[static_cast<size_t>(i)];
      workers[static_cast<size_t>(i)] = worker;
    });
    for (int i = 0; i < 64; ++i) {
      ASSERT_EQ(runs[static_cast<size_t>(i)], 1);
      ASSERT_EQ(workers[static_cast<size_t>(i)], 0) << "job " << job << " task " << i;
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
