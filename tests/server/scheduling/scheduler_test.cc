// scheduling/scheduler through gRPC: a full queue, fusion limits (elements, slots),
// deadlines and cancellation (with the launch counter proving no kernel ran).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gpusampler/client/client.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

v1::SampleRequest Small(int64_t k = 8, uint64_t seed = 1) {
  RequestSpec r;
  r.rows = {RandomRow(1000, seed)};
  r.num_samples = k;
  r.seed = seed;
  return MakeRequest(r);
}

TEST(SchedulerTest, FullQueueIsResourceExhaustedAndQueuedWorkCompletes) {
  ServerConfig config = TestConfig();
  config.queue_capacity = 2;
  auto t = StartServer(config);
  t.server->scheduler().SetPausedForTesting(true);
  auto a = StartSample(t.stub.get(), Small());
  auto b = StartSample(t.stub.get(), Small());
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 2; }));
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, Small(), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("queue full (2 requests waiting"), std::string::npos)
      << s.error_message();
  // Load shedding asks for a retry later: a positive grpc-retry-pushback-ms.
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto pushback = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(pushback, trailers.end());
  EXPECT_GT(std::stoll(std::string(pushback->second.data(), pushback->second.size())), 0);
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_TRUE(a->status.get().ok());
  EXPECT_TRUE(b->status.get().ok());
}

TEST(SchedulerTest, FusionStopsAtMaxElements) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 1000;
  config.limits.max_elements = 3000;  // also the fused launch's element budget
  auto t = StartServer(config);
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  sched.SetPausedForTesting(true);
  auto request = [](int64_t n, uint64_t seed) {
    RequestSpec r;
    r.rows = {RandomRow(n, seed)};
    r.seed = seed;
    return MakeRequest(r);
  };
  auto a = StartSample(t.stub.get(), request(1000, 1));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 1; }));
  auto b = StartSample(t.stub.get(), request(1000, 2));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 2; }));
  auto c = StartSample(t.stub.get(), request(1500, 3));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 3; }));
  sched.SetPausedForTesting(false);
  ASSERT_TRUE(a->status.get().ok());
  ASSERT_TRUE(b->status.get().ok());
  ASSERT_TRUE(c->status.get().ok());
  EXPECT_EQ(a->response.timing().batch_rows(), 2);  // a + b: 2000 elements
  EXPECT_EQ(b->response.timing().batch_rows(), 2);
  EXPECT_EQ(c->response.timing().batch_rows(), 1);  // + c would be 3500 > 3000
  EXPECT_EQ(sched.launches() - launches, 2);
}

TEST(SchedulerTest, DeadlinePassedAndCancelledRequestsNeverLaunch) {
  auto t = StartServer(TestConfig());
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  const int64_t rows = sched.launched_rows();
  sched.SetPausedForTesting(true);
  auto late = StartSample(t.stub.get(), Small(), std::chrono::milliseconds(100));
  auto cancelled = StartSample(t.stub.get(), Small());
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 2; }));
  cancelled->context.TryCancel();
  EXPECT_EQ(late->status.get().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(cancelled->status.get().error_code(), grpc::StatusCode::CANCELLED);
  // The client sees CANCELLED at once; give the server's OnCancel a moment to run.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  // Both reach a worker only after their deadline / cancellation.
  sched.SetPausedForTesting(false);
  ASSERT_TRUE(sched.WaitIdle(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(sched.dropped(), 2);
  EXPECT_EQ(sched.launches(), launches) << "a kernel ran for a dead request";
  EXPECT_EQ(sched.launched_rows(), rows);
  // The counter does move when work runs.
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(t.stub->Sample(&ctx, Small(), &resp).ok());
  EXPECT_EQ(sched.launches(), launches + 1);
  EXPECT_EQ(sched.launched_rows(), rows + 1);
  const std::string scrape = HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_NE(scrape.find("gpusampler_dropped_requests_total{reason=\"deadline\"} 1"),
            std::string::npos);
  EXPECT_NE(scrape.find("gpusampler_dropped_requests_total{reason=\"cancelled\"} 1"),
            std::string::npos);
}

TEST(SchedulerTest, FusionStopsAtMaxBatchSlots) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 1000;
  config.max_batch_slots = 20;
  auto t = StartServer(config);
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  sched.SetPausedForTesting(true);
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < 3; ++i) {
    calls.push_back(StartSample(t.stub.get(), Small(8, static_cast<uint64_t>(i + 1))));
    ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == i + 1; }));
  }
  sched.SetPausedForTesting(false);
  for (auto& c : calls) ASSERT_TRUE(c->status.get().ok());
  EXPECT_EQ(calls[0]->response.timing().batch_rows(), 2);  // 16 slots
  EXPECT_EQ(calls[1]->response.timing().batch_rows(), 2);
  EXPECT_EQ(calls[2]->response.timing().batch_rows(), 1);  // + 8 would be 24 > 20
  EXPECT_EQ(sched.launches() - launches, 2);
}

}  // namespace
}  // namespace gpusampler::server::testing
