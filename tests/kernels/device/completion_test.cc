// kernels::Completion: the wait for a launch's stream callback, with a timeout, and a late
// callback that must be harmless once the waiter has given up (the CUDA worker's timeout).
// Run under the asan preset, a use-after-free here is reported.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "gpusampler/kernels/completion.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

TEST(CompletionTest, CallbackBeforeOrDuringTheWait) {
  {
    Completion done;
    done.Callback()("");
    std::string error = "x";
    EXPECT_TRUE(done.WaitFor(milliseconds(0), &error));
    EXPECT_EQ(error, "");
  }
  {
    Completion done;
    auto callback = done.Callback();
    std::thread device([callback] {
      std::this_thread::sleep_for(milliseconds(20));
      callback("cudaErrorIllegalAddress");
    });
    std::string error;
    EXPECT_TRUE(done.WaitFor(milliseconds(60000), &error));
    EXPECT_EQ(error, "cudaErrorIllegalAddress");
    device.join();
  }
}

TEST(CompletionTest, TimesOutWhenTheCallbackNeverComes) {
  Completion done;
  auto callback = done.Callback();
  std::string error = "untouched";
  EXPECT_FALSE(done.WaitFor(milliseconds(10), &error));
  EXPECT_EQ(error, "untouched");
}

TEST(CompletionTest, LateCallbackAfterTheWaiterIsGoneIsHarmless) {
  std::function<void(const std::string&)> late;
  {
    auto done = std::make_unique<Completion>();
    late = done->Callback();
    EXPECT_EQ(done->use_count(), 2);
    std::string error;
    EXPECT_FALSE(done->WaitFor(milliseconds(1), &error));
  }
  // The waiter (and in the server, the worker's launch) is gone; the callback keeps the
  // state alive itself: no use-after-free. A second call is ignored.
  late("");
  late("cudaErrorLaunchFailure");
}

TEST(CompletionTest, EachLaunchHasItsOwnState) {
  Completion first;
  auto first_callback = first.Callback();
  std::string error;
  EXPECT_FALSE(first.WaitFor(milliseconds(1), &error));
  Completion second;   // the next launch
  first_callback("");  // the abandoned launch completes late
  EXPECT_FALSE(second.WaitFor(milliseconds(1), &error))
      << "a late callback completed another launch";
  second.Callback()("");
  EXPECT_TRUE(second.WaitFor(milliseconds(0), &error));
}

}  // namespace
}  // namespace gpusampler::kernels
