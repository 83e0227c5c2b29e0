// The NVML gauges through a stand-in NVML (fake_nvml.c): memory and utilization are read and
// exported independently, so a MIG slice, where NVML does not report utilization, still has
// its memory gauges (and GpuMemoryNearFull can fire), and no utilization gauge stuck at 0.
#include <gtest/gtest.h>
#include <prometheus/text_serializer.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "observability/metrics.hpp"
#include "observability/nvml.hpp"

namespace gpusampler::server::testing {
namespace {

std::string Scrape(const Metrics& m) {
  return prometheus::TextSerializer().Serialize(m.registry()->Collect());
}

// Starts the updater on one fake CUDA device and returns a scrape taken after it has read NVML.
std::string ScrapeAfterUpdates(bool mig) {
  if (mig) {
    setenv("FAKE_NVML_MIG", "1", 1);
  } else {
    unsetenv("FAKE_NVML_MIG");
  }
  Metrics metrics({{"cuda:0", "GPU-fake-0"}}, BuildInfo{"test", "test", "13.0", "cuda"});
  metrics.set_nvml_library(GPUSAMPLER_FAKE_NVML);
  metrics.StartUpdater(std::chrono::milliseconds(5));
  std::string scrape;
  for (int i = 0; i < 400; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    scrape = Scrape(metrics);
    if (scrape.find("gpusampler_gpu_memory_used_bytes{") != std::string::npos) break;
  }
  metrics.StopUpdater();
  unsetenv("FAKE_NVML_MIG");
  return scrape;
}

const char* kUsed = "gpusampler_gpu_memory_used_bytes{device=\"cuda:0\",gpu_uuid=\"GPU-fake-0\"} ";
const char* kUtil = "gpusampler_gpu_utilization_ratio{device=\"cuda:0\",gpu_uuid=\"GPU-fake-0\"} ";

TEST(NvmlTest, ReadsEachPartOnItsOwn) {
  std::string why;
  auto nvml = Nvml::Load(&why, GPUSAMPLER_FAKE_NVML);
  ASSERT_NE(nvml, nullptr) << why;
  EXPECT_EQ(nvml->CudaDriverVersion(), "13.0");
  Nvml::Reading r;
  setenv("FAKE_NVML_MIG", "1", 1);
  ASSERT_TRUE(nvml->Read("GPU-fake-0", &r));
  unsetenv("FAKE_NVML_MIG");
  EXPECT_FALSE(r.has_utilization);
  EXPECT_TRUE(r.has_memory);
  EXPECT_EQ(r.memory_used, 3ull << 30);
  EXPECT_EQ(r.memory_total, 80ull << 30);
  Nvml::Reading unknown;
  EXPECT_FALSE(nvml->Read("GPU-other", &unknown));
  EXPECT_FALSE(unknown.has_memory);
}

TEST(NvmlTest, AFullGpuExportsBothGauges) {
  const std::string scrape = ScrapeAfterUpdates(false);
  EXPECT_NE(scrape.find(std::string(kUsed) + "3221225472"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find(std::string(kUtil) + "0.42"), std::string::npos) << scrape;
}

TEST(NvmlTest, AMigSliceKeepsItsMemoryGaugesAndHasNoUtilization) {
  const std::string scrape = ScrapeAfterUpdates(true);
  EXPECT_NE(scrape.find(std::string(kUsed) + "3221225472"), std::string::npos) << scrape;
  EXPECT_NE(scrape.find("gpusampler_gpu_memory_total_bytes{device=\"cuda:0\",gpu_uuid=\"GPU-fake-"
                        "0\"} 85899345920"),
            std::string::npos)
      << scrape;
  EXPECT_EQ(scrape.find(kUtil), std::string::npos) << scrape;
}

TEST(NvmlTest, AMissingLibraryIsReportedNotFatal) {
  std::string why;
  EXPECT_EQ(Nvml::Load(&why, "/nonexistent/libnvidia-ml.so.1"), nullptr);
  EXPECT_NE(why.find("/nonexistent/libnvidia-ml.so.1"), std::string::npos) << why;
}

}  // namespace
}  // namespace gpusampler::server::testing
