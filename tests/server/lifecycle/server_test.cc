// lifecycle through gRPC: a client retries a full queue after the pushback the server
// sends (gRFC A6) and succeeds.
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

int64_t MetricValue(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return static_cast<int64_t>(std::stod(scrape.substr(at + series.size() + 2)));
}

TEST(RetryTest, ClientRetriesAFullQueueAfterThePushbackAndSucceeds) {
  ServerConfig config = TestConfig();
  config.queue_capacity = 1;
  auto t = StartServer(config);
  Scheduler& sched = t.server->scheduler();
  sched.SetPausedForTesting(true);
  auto queued = StartSample(t.stub.get(), Small());
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 1; }));
  const std::string shed =
      "gpusampler_requests_total{code=\"RESOURCE_EXHAUSTED\",method=\"Sample\"}";
  client::ClientOptions o;
  o.targets = {"127.0.0.1:" + std::to_string(t.server->grpc_port())};
  o.retry.max_attempts = 5;  // the pushback spaces the attempts 100-200 ms apart
  client::Client retrying(o);
  v1::SampleResponse response;
  grpc::Status status;
  std::thread caller([&] { status = retrying.Sample(Small(8, 2), &response); });
  // The queue is full: the first attempt is shed with a positive pushback. Drain the queue
  // then; a later attempt of the same call gets in.
  const bool was_shed = WaitFor(
      [&] { return MetricValue(HttpGet(t.server->metrics_port(), "/metrics"), shed) >= 1; });
  sched.SetPausedForTesting(false);
  caller.join();
  ASSERT_TRUE(was_shed);
  EXPECT_TRUE(queued->status.get().ok());
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.num_positive().shape(0), 1);
}

}  // namespace
}  // namespace gpusampler::server::testing
