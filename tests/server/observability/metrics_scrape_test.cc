// observability/metrics after real traffic: short rows and the realized positive
// fraction, and a scrape holding every metric of the spec that passes promtool.
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

TEST(MetricsScrapeTest, ShortRowsAndRealizedPositiveFraction) {
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

TEST(MetricsScrapeTest, ScrapeAfterTrafficHasEverySpecMetricAndPassesPromtool) {
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

}  // namespace
}  // namespace gpusampler::server::testing
