// kernels::StagedLaunch: requests of mixed dtypes, row orders and label / feature sources
// (host bytes, or a copy resident in the device's memory) fused into one launch, on the CPU
// backend, the cuda-sim device and CUDA device 0 where one exists. Each request's outputs must
// equal the CPU backend's answer for that request alone, computed without StagedLaunch from a
// contiguous copy of its rows. On cuda-sim the launch is also held to its stream budget (at
// most three stream operations) and to uploading only the row table for resident data.
#include "gpusampler/kernels/staged_launch.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"
#include "launch/staged_sources.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

constexpr int kCpu = -2;  // the test parameter for a host (CPU backend) launch

using staged_test::ExpectOutputs;
using staged_test::MakeSource;
using staged_test::Source;

class StagedLaunchTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (GetParam() >= 0 && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    launch_ = GetParam() == kCpu ? std::make_unique<StagedLaunch>(MakeCpuBackend(2))
                                 : std::make_unique<StagedLaunch>(GetParam(), milliseconds(60000));
  }
  void TearDown() override {
    launch_.reset();
    for (void* p : device_) DeviceFree(p);
  }
  // Gives the device a copy of the source's labels and features.
  void MakeResident(Source* s) {
    if (!launch_->on_device() || !s->resident) return;
    auto upload = [&](const std::vector<uint8_t>& bytes) {
      void* p = DeviceAlloc(GetParam(), bytes.size());
      CopyToDevice(GetParam(), p, bytes.data(), bytes.size());
      device_.push_back(p);
      return static_cast<const uint8_t*>(p);
    };
    s->request.device_labels = upload(s->labels);
    if (s->request.feature_row_bytes > 0) s->request.device_features = upload(s->features);
  }

  std::unique_ptr<StagedLaunch> launch_;
  std::vector<void*> device_;
};

TEST_P(StagedLaunchTest, MixedRequestsMatchTheCpuBackendOneByOne) {
  std::vector<std::unique_ptr<Source>> sources;
  // Host labels and features, rows back to back: a fused row, an empty one, a large one.
  sources.push_back(MakeSource(DType::kInt32, {700, 0, 9000}, 100, 12, false, false, 1));
  // A resident dataset, rows named out of order, with features.
  sources.push_back(MakeSource(DType::kInt64, {5000, 300, 64}, 200, 16, true, true, 2));
  // Resident one-byte labels without features (offsets not multiples of 8).
  sources.push_back(MakeSource(DType::kInt8, {77, 4097}, 50, 0, true, true, 3));
  // A request without rows, and host uint8 labels out of order.
  sources.push_back(MakeSource(DType::kInt16, {}, 10, 8, false, false, 4));
  sources.push_back(MakeSource(DType::kUInt8, {333, 1}, 40, 4, true, false, 5));
  // A second resident dataset with features: two resident feature sources in one launch.
  sources.push_back(MakeSource(DType::kInt64, {2500}, 2600, 8, true, true, 6));
  std::vector<LaunchRequest> requests;
  for (auto& s : sources) {
    MakeResident(s.get());
    requests.push_back(s->request);
  }
  for (int round = 0; round < 2; ++round) {  // the second launch reuses the graph
    const std::vector<LaunchOutput>& outs = launch_->Run(requests);
    ASSERT_EQ(outs.size(), requests.size());
    for (size_t j = 0; j < sources.size(); ++j) {
      ExpectOutputs(outs[j], *sources[j],
                    "round " + std::to_string(round) + " request " + std::to_string(j));
    }
  }
  // The same requests one at a time.
  for (size_t j = 0; j < sources.size(); ++j) {
    ExpectOutputs(launch_->Run({requests[j]})[0], *sources[j], "alone " + std::to_string(j));
  }
}

// Growth between launches (buffers, scratch and the captured graph all move) keeps answers.
TEST_P(StagedLaunchTest, GrowsBetweenLaunches) {
  auto small = MakeSource(DType::kInt64, {100, 200}, 10, 0, false, false, 7);
  auto large = MakeSource(DType::kInt64, {70000, 3, 20000}, 3000, 4, true, true, 8);
  MakeResident(large.get());
  ExpectOutputs(launch_->Run({small->request})[0], *small, "small");
  ExpectOutputs(launch_->Run({large->request})[0], *large, "large");
  ExpectOutputs(launch_->Run({small->request})[0], *small, "small again");
}

TEST_P(StagedLaunchTest, ARequestWithoutLabelsNamesItself) {
  auto ok = MakeSource(DType::kInt64, {10}, 2, 0, false, false, 9);
  auto bad = MakeSource(DType::kInt64, {10}, 2, 0, false, false, 10);
  bad->request.labels = nullptr;
  try {
    launch_->Run({ok->request, bad->request});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("request 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("10 elements"), std::string::npos) << e.what();
  }
  ExpectOutputs(launch_->Run({ok->request})[0], *ok, "after the error");
}

// features_out (an answer into shared memory): a host backend's kernels and a device launch's
// host gather write the caller's buffer (LaunchOutput::features points there, with the same
// bytes, padding rows zeroed over stale bytes, at an odd address); features read on a device
// come back in the launch's own buffer.
TEST_P(StagedLaunchTest, FeaturesOutReceivesTheGather) {
  std::vector<std::unique_ptr<Source>> sources;
  sources.push_back(MakeSource(DType::kInt32, {700, 0, 9000}, 100, 12, false, false, 11));
  sources.push_back(MakeSource(DType::kInt64, {5000, 300, 64}, 200, 16, true, true, 12));
  sources.push_back(MakeSource(DType::kInt8, {77, 4097}, 50, 0, true, true, 13));
  std::vector<LaunchRequest> requests;
  std::vector<std::vector<uint8_t>> outs(sources.size());
  for (size_t j = 0; j < sources.size(); ++j) {
    MakeResident(sources[j].get());
    LaunchRequest q = sources[j]->request;
    const int64_t bytes = q.num_rows * q.spec.num_samples * q.feature_row_bytes;
    outs[j].assign(static_cast<size_t>(bytes) + 3, 0xA5);  // stale bytes, odd address below
    if (bytes > 0) q.features_out = outs[j].data() + 3;
    requests.push_back(q);
  }
  for (int round = 0; round < 2; ++round) {
    const std::vector<LaunchOutput>& got = launch_->Run(requests);
    for (size_t j = 0; j < sources.size(); ++j) {
      const std::string what = "round " + std::to_string(round) + " request " + std::to_string(j);
      ExpectOutputs(got[j], *sources[j], what);
      const bool device_features = launch_->on_device() && sources[j]->resident;
      if (requests[j].features_out == nullptr) {
        EXPECT_EQ(got[j].features, nullptr) << what;
      } else if (device_features) {
        EXPECT_NE(got[j].features, requests[j].features_out) << what;
      } else {
        EXPECT_EQ(got[j].features, requests[j].features_out) << what;
      }
    }
    for (auto& o : outs) std::fill(o.begin(), o.end(), 0xA5);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StagedLaunchTest, ::testing::Values(kCpu, kSimDevice, 0),
                         [](const auto& info) {
                           return info.param == kCpu         ? std::string("cpu")
                                  : info.param == kSimDevice ? std::string("cudasim")
                                                             : std::string("cuda0");
                         });

}  // namespace
}  // namespace gpusampler::kernels
