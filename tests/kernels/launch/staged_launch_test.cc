// kernels::StagedLaunch: requests of mixed dtypes, row orders and label / feature sources
// (host bytes, or a copy resident in the device's memory) fused into one launch, on the CPU
// backend, the cuda-sim device and CUDA device 0 where one exists. Each request's outputs must
// equal the CPU backend's answer for that request alone, computed without StagedLaunch from a
// contiguous copy of its rows. On cuda-sim the launch is also held to its stream budget (at
// most three stream operations) and to uploading only the row table for resident data.
#include "gpusampler/kernels/staged_launch.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

constexpr int kCpu = -2;  // the test parameter for a host (CPU backend) launch

// A request's host data: labels and features laid out as a dataset (rows anywhere).
struct Source {
  LaunchRequest request;
  std::vector<int64_t> row_offsets;
  std::vector<int64_t> row_start;  // empty: back to back
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;
  bool resident = false;  // give the device a copy (device_labels / device_features)
};

std::unique_ptr<Source> MakeSource(DType dtype, const std::vector<int64_t>& lengths, int64_t k,
                                   int64_t feature_row_bytes, bool shuffled, bool resident,
                                   uint64_t seed) {
  auto s = std::make_unique<Source>();
  std::mt19937_64 gen(seed);
  const size_t item = DTypeSize(dtype);
  s->row_offsets.push_back(0);
  for (int64_t n : lengths) s->row_offsets.push_back(s->row_offsets.back() + n);
  const int64_t total = s->row_offsets.back();
  // The dataset holds the rows in reverse order after a gap, so that row_start matters.
  const int64_t gap = shuffled ? 37 : 0;
  const int64_t dataset = total + gap;
  if (shuffled) {
    int64_t at = dataset;
    for (size_t r = 0; r < lengths.size(); ++r) {
      at -= lengths[r];
      s->row_start.push_back(at);
    }
  }
  s->labels.resize(static_cast<size_t>(dataset) * item + 1);
  for (int64_t e = 0; e < dataset; ++e) {
    const int64_t v = static_cast<int64_t>(gen() % 3) - (dtype == DType::kUInt8 ? 0 : 1);
    std::memcpy(s->labels.data() + e * item, &v, item);
  }
  s->features.resize(static_cast<size_t>(dataset * feature_row_bytes) + 1);
  for (auto& b : s->features) b = static_cast<uint8_t>(gen());
  LaunchRequest& q = s->request;
  q.spec.num_samples = k;
  q.spec.positive_fraction = 0.25;
  q.spec.positive_label = 1;
  q.spec.negative_label = dtype == DType::kUInt8 ? 2 : -1;
  q.seed = seed;
  q.label_dtype = dtype;
  q.num_rows = static_cast<int64_t>(lengths.size());
  q.row_offsets = s->row_offsets.data();
  q.row_start = shuffled ? s->row_start.data() : nullptr;
  q.labels = s->labels.data();
  q.feature_row_bytes = feature_row_bytes;
  q.features = feature_row_bytes > 0 ? s->features.data() : nullptr;
  s->resident = resident;
  return s;
}

// The CPU backend's answer for one request alone, from a contiguous copy of its rows.
struct Expected {
  std::vector<int64_t> indices;
  std::vector<uint8_t> labels, features;
  std::vector<int32_t> pos, neg;
};

Expected Reference(const Source& s) {
  const LaunchRequest& q = s.request;
  const size_t item = DTypeSize(q.label_dtype);
  std::vector<int64_t> lengths;
  std::vector<uint8_t> labels, features;
  for (int64_t r = 0; r < q.num_rows; ++r) {
    const int64_t n = q.row_offsets[r + 1] - q.row_offsets[r];
    const int64_t start = q.row_start != nullptr ? q.row_start[r] : q.row_offsets[r];
    lengths.push_back(n);
    labels.insert(labels.end(), s.labels.begin() + start * item,
                  s.labels.begin() + (start + n) * item);
    if (q.feature_row_bytes > 0) {
      features.insert(features.end(), s.features.begin() + start * q.feature_row_bytes,
                      s.features.begin() + (start + n) * q.feature_row_bytes);
    }
  }
  labels.push_back(0);
  features.push_back(0);
  BatchBuilder builder;
  builder.AddRequest(q.spec, q.seed, q.label_dtype, lengths, q.feature_row_bytes);
  Expected e;
  e.indices.resize(static_cast<size_t>(builder.total_slots()));
  e.labels.resize(static_cast<size_t>(builder.out_label_bytes()));
  e.features.resize(static_cast<size_t>(builder.out_feature_bytes()));
  e.pos.resize(static_cast<size_t>(q.num_rows));
  e.neg.resize(static_cast<size_t>(q.num_rows));
  Batch batch;
  builder.FillSizes(&batch);
  batch.labels = labels.data();
  batch.features = features.data();
  batch.out_indices = e.indices.data();
  batch.out_labels = e.labels.data();
  batch.out_features = e.features.data();
  batch.out_num_positive = e.pos.data();
  batch.out_num_negative = e.neg.data();
  if (q.num_rows > 0) MakeCpuBackend(2)->Sample(batch);
  return e;
}

void ExpectOutputs(const LaunchOutput& out, const Source& s, const std::string& what) {
  SCOPED_TRACE(what);
  const Expected e = Reference(s);
  const LaunchRequest& q = s.request;
  ASSERT_EQ(out.num_rows, q.num_rows);
  ASSERT_EQ(out.k, q.spec.num_samples);
  const size_t slots = e.indices.size();
  if (slots > 0) {
    EXPECT_EQ(std::memcmp(out.indices, e.indices.data(), slots * 8), 0);
    EXPECT_EQ(std::memcmp(out.labels, e.labels.data(), e.labels.size()), 0);
  }
  if (q.num_rows > 0) {
    EXPECT_EQ(std::memcmp(out.num_positive, e.pos.data(), e.pos.size() * 4), 0);
    EXPECT_EQ(std::memcmp(out.num_negative, e.neg.data(), e.neg.size() * 4), 0);
  }
  if (q.feature_row_bytes > 0 && !e.features.empty()) {
    ASSERT_NE(out.features, nullptr);
    EXPECT_EQ(std::memcmp(out.features, e.features.data(), e.features.size()), 0);
  } else {
    EXPECT_EQ(out.features, nullptr);
  }
}

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

INSTANTIATE_TEST_SUITE_P(Backends, StagedLaunchTest, ::testing::Values(kCpu, kSimDevice, 0),
                         [](const auto& info) {
                           return info.param == kCpu         ? std::string("cpu")
                                  : info.param == kSimDevice ? std::string("cudasim")
                                                             : std::string("cuda0");
                         });

// On the cuda-sim device, which counts stream operations: a launch is one captured graph
// (upload, kernels, download) and one completion, and a step over a resident dataset
// uploads the row table only.
TEST(StagedLaunchSimTest, TwoStreamOperationsAndOnlyTheRowTableForResidentData) {
  StagedLaunch launch(kSimDevice, milliseconds(60000));
  auto s = MakeSource(DType::kInt64, {1000, 1000, 50000}, 100, 64, true, true, 11);
  void* labels = DeviceAlloc(kSimDevice, s->labels.size());
  void* features = DeviceAlloc(kSimDevice, s->features.size());
  CopyToDevice(kSimDevice, labels, s->labels.data(), s->labels.size());
  CopyToDevice(kSimDevice, features, s->features.data(), s->features.size());
  s->request.device_labels = static_cast<const uint8_t*>(labels);
  s->request.device_features = static_cast<const uint8_t*>(features);
  for (int round = 0; round < 2; ++round) {
    ExpectOutputs(launch.Run({s->request})[0], *s, "resident");
    EXPECT_TRUE(launch.last_stats().graph);
    EXPECT_EQ(launch.last_stats().stream_ops, 2);
    // The row table (3 rows), 256-byte aligned: no label crosses.
    EXPECT_EQ(launch.last_stats().upload_bytes,
              static_cast<int64_t>((3 * sizeof(RowDesc) + 255) / 256 * 256));
  }
  // Uncaptured, the same launch is four operations: upload, kernels, download, completion.
  launch.set_use_graphs(false);
  ExpectOutputs(launch.Run({s->request})[0], *s, "uncaptured");
  EXPECT_FALSE(launch.last_stats().graph);
  EXPECT_EQ(launch.last_stats().stream_ops, 4);
  DeviceFree(labels);
  DeviceFree(features);
}

}  // namespace
}  // namespace gpusampler::kernels
