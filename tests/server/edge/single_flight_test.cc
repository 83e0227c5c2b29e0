// SingleFlight (server/edge/single_flight.hpp): the calls that arrive during a run share the
// next run, which starts after all of them; the caller threads never wait for a run; and no
// caller gets a result from a run that began before its call.
#include "edge/single_flight.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gpusampler::server {
namespace {

TEST(SingleFlightTest, CallsDuringARunShareTheNextRunWithoutWaiting) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  int started = 0;
  SingleFlight<int> flight([&] {
    std::unique_lock<std::mutex> lock(mu);
    const int run = ++started;
    cv.notify_all();
    cv.wait(lock, [&] { return release || run > 1; });  // the first run waits for the test
    return run;
  });
  std::vector<int> got(6, 0);
  std::thread first([&] { flight.Run([&](std::shared_ptr<const int> r) { got[0] = *r; }); });
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return started == 1; });
  }
  // Five calls while run 1 is in progress: each returns at once, its answer not yet there.
  for (int i = 1; i < 6; ++i) {
    flight.Run([&got, i](std::shared_ptr<const int> r) { got[i] = *r; });
  }
  EXPECT_EQ(flight.runs(), 0);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(started, 1);  // nothing else ran meanwhile
    release = true;
  }
  cv.notify_all();
  first.join();  // the running thread ran run 2 for the five, then returned
  EXPECT_EQ(got, (std::vector<int>{1, 2, 2, 2, 2, 2}));
  EXPECT_EQ(flight.runs(), 2);
  int last = 0;
  flight.Run([&](std::shared_ptr<const int> r) { last = *r; });  // idle: runs on this thread
  EXPECT_EQ(last, 3);
  EXPECT_EQ(flight.runs(), 3);
}

TEST(SingleFlightTest, NoCallerGetsARunThatBeganBeforeItsCall) {
  std::atomic<int> started{0};
  std::atomic<int> running{0};
  std::atomic<int> overlaps{0};
  SingleFlight<int> flight([&] {
    if (running.fetch_add(1) != 0) overlaps.fetch_add(1);
    const int run = started.fetch_add(1) + 1;
    std::this_thread::yield();
    running.fetch_sub(1);
    return run;
  });
  constexpr int kThreads = 8;
  constexpr int kCalls = 300;
  std::atomic<int> stale{0};
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kCalls; ++i) {
        const int before = started.load();  // runs that began before this call
        flight.Run([&, before](std::shared_ptr<const int> r) {
          if (*r <= before) stale.fetch_add(1);
          answered.fetch_add(1);
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(answered.load(), kThreads * kCalls);  // every call answered once
  EXPECT_EQ(stale.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);  // one run at a time
  EXPECT_EQ(flight.runs(), started.load());
  EXPECT_LE(flight.runs(), kThreads * kCalls);
}

}  // namespace
}  // namespace gpusampler::server
