// Issue 31, item 6b: a Sample call whose client is gone before its launch is dropped
// (counted CANCELLED and as a cancelled drop), never computed.
#include <gtest/gtest.h>

#include <string>

#include "edge/service.hpp"
#include "overload_util.hpp"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(ClientGoneTest, CallCancelledWhileQueuedIsDroppedNotComputed) {
  ServerConfig config = TestConfig();
  config.cpu_workers = 1;
  auto t = StartServer(config);
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  const int64_t rows = sched.launched_rows();
  const int64_t dropped = sched.dropped();
  const int64_t cancels = t.server->service().client_cancels();
  // The worker is held: both calls wait in the queue.
  sched.SetPausedForTesting(true);
  auto live = StartSample(t.stub.get(), Request(1000, 5, 1, "live"));
  auto gone = StartSample(t.stub.get(), Request(1200, 7, 2, "gone"));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 2; }));
  gone->context.TryCancel();
  EXPECT_EQ(gone->status.get().error_code(), grpc::StatusCode::CANCELLED);
  // The server has seen the cancel (OnCancel ran) before the worker may take anything.
  ASSERT_TRUE(WaitFor([&] { return t.server->service().client_cancels() == cancels + 1; }));
  sched.SetPausedForTesting(false);
  const grpc::Status s = live->status.get();
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(live->response.request_id(), "live");
  ASSERT_TRUE(sched.WaitIdle(Clock::now() + std::chrono::seconds(10)));
  // One launch, of the live call's one row only; the gone call was dropped unlaunched.
  EXPECT_EQ(sched.launches() - launches, 1);
  EXPECT_EQ(sched.launched_rows() - rows, 1);
  EXPECT_EQ(sched.dropped() - dropped, 1);
  EXPECT_TRUE(WaitFor([&] {
    return Metric(t, "gpusampler_dropped_requests_total{reason=\"cancelled\"}") == 1 &&
           Metric(t, "gpusampler_requests_total{code=\"CANCELLED\",method=\"Sample\"}") == 1;
  })) << HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_EQ(Metric(t, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 1);
}

}  // namespace
}  // namespace gpusampler::server::testing
