// lifecycle through gRPC: device out of memory and device faults (through a test
// backend), authentication, the metrics endpoint after real traffic, and client retries
// after a full queue's pushback.
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

// A CPU backend that fails on chosen K values: 777 runs out of memory, 778 does after
// 800 ms, 555 rejects its input (a non-device error), 666 faults.
class FaultyBackend final : public kernels::Backend {
 public:
  FaultyBackend() : cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (batch.rows[r].num_samples == 778) {
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        throw kernels::Error(kernels::Error::Code::kOutOfMemory, "test: slow out of memory");
      }
      if (batch.rows[r].num_samples == 555) {
        throw kernels::Error(kernels::Error::Code::kInvalidArgument, "test: rejected");
      }
      if (batch.rows[r].num_samples == 777) {
        throw kernels::Error(kernels::Error::Code::kOutOfMemory, "test: out of memory");
      }
      if (batch.rows[r].num_samples == 666) {
        throw kernels::Error(kernels::Error::Code::kDeviceFault, "test: illegal address");
      }
    }
    cpu_->Sample(batch);
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};

BackendFactory Faulty() {
  return [](int) { return std::make_unique<FaultyBackend>(); };
}

TEST(DeviceErrorTest, OutOfMemoryFailsOnlyThatRequestAndServingGoesOn) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, Small(777), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("out of memory"), std::string::npos) << s.error_message();
  }
  // Fused with innocent requests: only the one that does not fit fails.
  t.server->scheduler().SetPausedForTesting(true);
  auto ok1 = StartSample(t.stub.get(), Small(8, 1));
  auto oom = StartSample(t.stub.get(), Small(777, 2));
  auto ok2 = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 3; }));
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_TRUE(ok1->status.get().ok());
  EXPECT_EQ(oom->status.get().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(ok2->status.get().ok());
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_TRUE(t.stub->Sample(&ctx, Small(), &resp).ok());
}

TEST(DeviceErrorTest, AnyNonFaultErrorOfAFusedLaunchIsRetriedRequestByRequest) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  sched.SetPausedForTesting(true);
  auto ok1 = StartSample(t.stub.get(), Small(8, 1));
  auto bad = StartSample(t.stub.get(), Small(555, 2));
  auto ok2 = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 3; }));
  sched.SetPausedForTesting(false);
  EXPECT_TRUE(ok1->status.get().ok());
  const grpc::Status s = bad->status.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(ok2->status.get().ok());
  EXPECT_EQ(ok1->response.timing().batch_rows(), 1);  // answered by its solo retry
  EXPECT_EQ(sched.launches() - launches, 4);          // the fused launch + 3 alone
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
}

TEST(DeviceErrorTest, SoloRetryDropsRequestsThatDiedDuringTheFusedLaunch) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  const int64_t dropped = sched.dropped();
  sched.SetPausedForTesting(true);
  auto slow_oom = StartSample(t.stub.get(), Small(778, 1));
  auto late = StartSample(t.stub.get(), Small(8, 2), std::chrono::milliseconds(400));
  auto cancelled = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 3; }));
  sched.SetPausedForTesting(false);  // all three alive at launch; the launch takes 800 ms
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 0; }));
  cancelled->context.TryCancel();
  EXPECT_EQ(late->status.get().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(cancelled->status.get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(slow_oom->status.get().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(sched.WaitIdle(Clock::now() + std::chrono::seconds(10)));
  // The fused launch and slow_oom's retry; no kernel for the dead two.
  EXPECT_EQ(sched.launches() - launches, 2);
  EXPECT_EQ(sched.dropped() - dropped, 2);
}

TEST(DeviceErrorTest, DeviceFaultSetsNotServingFailsInFlightAndRequestsExit) {
  auto t = StartServer(TestConfig(), Faulty());
  t.server->scheduler().SetPausedForTesting(true);
  auto fault = StartSample(t.stub.get(), Small(666));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  // Queued behind the faulting launch (fusion off would not matter: the queue is failed).
  auto behind = StartSample(t.stub.get(), Small(8));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 2; }));
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_EQ(fault->status.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(behind->status.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  t.server->WaitForShutdownRequest();  // returns: the fault asked the process to exit
  EXPECT_TRUE(t.server->failed());
  EXPECT_EQ(HealthStatus(t.channel), "NOT_SERVING");
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_EQ(t.stub->Sample(&ctx, Small(), &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  t.server->Shutdown();
}

TEST(AuthTest, BearerTokenRequiredWhenConfiguredHealthStaysOpen) {
  const std::string path = ::testing::TempDir() + "/gpusampler-token";
  std::ofstream(path) << "  s3cret-token\n";
  ServerConfig config = TestConfig();
  config.auth_token_file = path;
  auto t = StartServer(config);
  auto call = [&](const char* auth) {
    grpc::ClientContext ctx;
    if (auth) ctx.AddMetadata("authorization", auth);
    v1::SampleResponse resp;
    return t.stub->Sample(&ctx, Small(), &resp);
  };
  const grpc::Status missing = call(nullptr);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer s3cret-token-longer").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(call("Bearer s3cret-token").ok());
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    EXPECT_EQ(t.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    auto stream = t.stub->SampleStream(&ctx);
    stream->Write(Small());
    stream->WritesDone();
    v1::SampleResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
}

int64_t MetricValue(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return static_cast<int64_t>(std::stod(scrape.substr(at + series.size() + 2)));
}

TEST(MetricsTest, ShortRowsAndRealizedPositiveFraction) {
  auto t = StartServer(TestConfig());
  RequestSpec r;
  std::vector<int64_t> plenty(100, 0), scarce(100, 0), tiny = {1, 1, 0, 0, 0};
  for (int i = 0; i < 50; ++i) plenty[i] = 1;
  for (int i = 0; i < 3; ++i) scarce[i] = 1;
  r.rows = {plenty, scarce};
  r.num_samples = 10;  // plenty: 5 + 5 (0.5); scarce: 3 + 7 (0.3), both full
  r.ragged = true;
  r.rows.push_back(tiny);  // 2 + 3 < 10: short, 0.2
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(t.stub->Sample(&ctx, MakeRequest(r), &resp).ok());
  EXPECT_EQ(Values<int32_t>(resp.num_positive()), (std::vector<int32_t>{5, 3, 2}));
  const std::string scrape = HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_EQ(MetricValue(scrape, "gpusampler_short_rows_total"), 1);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_count"), 3);
  const size_t sum = scrape.find("\ngpusampler_positive_fraction_sum ");
  ASSERT_NE(sum, std::string::npos) << scrape;
  EXPECT_NEAR(std::stod(scrape.substr(sum + 34)), 1.0, 1e-9);  // 0.5 + 0.3 + 0.2
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"0.15\"}"), 0);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"0.2\"}"), 1);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"0.3\"}"), 2);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"0.45\"}"), 2);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"0.5\"}"), 3);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_positive_fraction_bucket{le=\"+Inf\"}"), 3);
}

TEST(MetricsTest, ScrapeAfterTrafficHasEverySpecMetricAndPassesPromtool) {
  auto t = StartServer(TestConfig());
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    ASSERT_TRUE(t.stub->Sample(&ctx, Small(8, static_cast<uint64_t>(i)), &resp).ok());
  }
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    t.stub->Sample(&ctx, Small(0), &resp);  // INVALID_ARGUMENT
  }
  {
    grpc::ClientContext ctx;
    auto stream = t.stub->SampleStream(&ctx);
    stream->Write(Small());
    stream->WritesDone();
    v1::SampleResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    ASSERT_TRUE(stream->Finish().ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // one busy-ratio update
  const std::string scrape = HttpGet(t.server->metrics_port(), "/metrics");
  ASSERT_FALSE(scrape.empty());
  EXPECT_EQ(MetricValue(scrape, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 5);
  EXPECT_EQ(
      MetricValue(scrape, "gpusampler_requests_total{code=\"INVALID_ARGUMENT\",method=\"Sample\"}"),
      1);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_requests_total{code=\"OK\",method=\"SampleStream\"}"),
            1);
  const std::string device = "{device=\"" + TestDeviceId() + "\"}";
  EXPECT_EQ(MetricValue(scrape, "gpusampler_sampled_rows_total" + device), 6);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_batch_rows_count" + device), 6);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_queue_duration_seconds_count"), 6);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_request_duration_seconds_count{method=\"Sample\"}"), 6);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_queue_depth"), 0);
  EXPECT_EQ(MetricValue(scrape, "gpusampler_inflight_requests"), 0);
  EXPECT_GT(MetricValue(scrape, "gpusampler_received_bytes_total"), 6 * 8000);
  EXPECT_GT(MetricValue(scrape, "gpusampler_sent_bytes_total"), 6 * 128);
  for (const char* name : {"# TYPE gpusampler_request_duration_seconds histogram",
                           "# TYPE gpusampler_queue_duration_seconds histogram",
                           "# TYPE gpusampler_compute_duration_seconds histogram",
                           "# TYPE gpusampler_batch_rows histogram"}) {
    EXPECT_NE(scrape.find(name), std::string::npos) << name;
  }
  EXPECT_NE(scrape.find("gpusampler_device_busy_ratio" + device), std::string::npos) << device;
  // cuda: the toolkit compiled with; cuda_driver: the CUDA in use ("none" on the host).
  const std::string prefix = std::string("gpusampler_build_info{backend=\"") + TestBackend() +
                             "\",cuda=\"" + CudaVersion() + "\",cuda_driver=\"";
  const std::string suffix =
      std::string("\",revision=\"") + Revision() + "\",version=\"" + Version() + "\"} 1";
  const size_t at = scrape.find(prefix);
  ASSERT_NE(at, std::string::npos) << prefix;
  const size_t end = scrape.find('"', at + prefix.size());
  const std::string driver = scrape.substr(at + prefix.size(), end - at - prefix.size());
  if (TestOnHost()) {
    EXPECT_EQ(driver, "none");
  } else {
    EXPECT_NE(driver, "none");
  }
  EXPECT_EQ(scrape.compare(end, suffix.size(), suffix), 0) << scrape.substr(at, 200);
  if (TestOnHost()) {
    // No GPU in use: no GPU gauges.
    EXPECT_EQ(scrape.find("gpusampler_gpu_utilization_ratio"), std::string::npos);
  }

  if (std::string(GPUSAMPLER_PROMTOOL).empty()) {
    // In CI the format check is required: a missing promtool is a failure there.
    if (std::getenv("CI") != nullptr) {
      FAIL() << "promtool not found (Debian package prometheus) and CI is set: the "
                "exposition format must be checked";
    }
    GTEST_SKIP() << "promtool not found (Debian package prometheus): format not checked";
  }
  const std::string path = ::testing::TempDir() + "/scrape.txt";
  std::ofstream(path) << scrape;
  const std::string cmd = std::string(GPUSAMPLER_PROMTOOL) + " check metrics < " + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof(buf), p)) out += buf;
  const int rc = pclose(p);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "promtool reports problems";
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
