// kernels::StagedLaunch on the cuda-sim device, which counts stream operations: a launch is one
// captured graph and one completion, and a launch over a resident dataset uploads the row table
// only.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/staged_launch.hpp"
#include "launch/staged_sources.hpp"

namespace gpusampler::kernels {
namespace {

using staged_test::ExpectOutputs;
using staged_test::MakeSource;
using staged_test::Source;
using std::chrono::milliseconds;

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
    // The row table (3 rows) and the launch's sizes word, 256-byte aligned: no label crosses.
    EXPECT_EQ(launch.last_stats().upload_bytes,
              static_cast<int64_t>((3 * sizeof(RowDesc) + 16 + 255) / 256 * 256));
  }
  // Uncaptured, the same launch is four operations: upload, kernels, download, completion.
  launch.set_use_graphs(false);
  ExpectOutputs(launch.Run({s->request})[0], *s, "uncaptured");
  EXPECT_FALSE(launch.last_stats().graph);
  EXPECT_EQ(launch.last_stats().stream_ops, 4);
  DeviceFree(labels);
  DeviceFree(features);
}

// `s`'s labels and features copied into the same device buffers each time, so that launches
// of different sources differ only in what device memory holds.
void ResideIn(Source* s, void* labels, void* features) {
  std::memcpy(labels, s->labels.data(), s->labels.size());  // (cuda-sim memory is host memory)
  std::memcpy(features, s->features.data(), s->features.size());
  s->request.device_labels = static_cast<const uint8_t*>(labels);
  s->request.device_features = static_cast<const uint8_t*>(features);
}

// Small rows over a resident dataset: the graph of the size class is captured once and
// replayed while the launch's key (class, buffers, copy sizes) holds; other row lengths,
// labels, seeds and row starts are read from device memory and give the exact results; a new
// K changes the outputs' layout and captures again; large rows capture every launch.
TEST(StagedLaunchSimTest, SmallRowGraphCapturedOncePerSizeClass) {
  StagedLaunch launch(kSimDevice, milliseconds(60000));
  void* labels = DeviceAlloc(kSimDevice, 1 << 20);
  void* features = DeviceAlloc(kSimDevice, 1 << 20);
  StagedSizes sizes;  // reserved up front, as the server does: no growth releases the graphs
  sizes.rows = 3;
  sizes.elements = 20000;
  sizes.slots = 300;
  sizes.feature_bytes = 300 * 16;
  launch.Reserve(sizes);
  struct Step {
    std::vector<int64_t> lengths;
    int64_t k;
    uint64_t seed;
    bool captures;
  };
  const Step steps[] = {
      {{1000, 1000, 3000}, 100, 11, true},  // first launch of its class
      {{4000, 17, 2500}, 100, 12, false},   // same class: replayed
      {{0, 4096, 1}, 100, 13, false},       // an empty row, a full one
      {{900, 900, 900}, 60, 14, true},      // K changes the outputs' layout
      {{50, 3000, 4000}, 60, 15, false},    // ... replayed from then on
      {{5000, 10, 10}, 60, 16, true},       // a large row: another stage set
      {{5000, 10, 10}, 60, 17, true},       // ... captured each launch
      {{10, 20, 30}, 60, 18, false},        // the small class's graph is still there
  };
  int round = 0;
  for (const Step& step : steps) {
    auto s = MakeSource(DType::kInt32, step.lengths, step.k, 16, true, true, step.seed);
    ResideIn(s.get(), labels, features);
    ExpectOutputs(launch.Run({s->request})[0], *s, "step " + std::to_string(round));
    EXPECT_TRUE(launch.last_stats().graph) << round;
    EXPECT_EQ(launch.last_stats().graph_captured, step.captures) << round;
    EXPECT_EQ(launch.last_stats().stream_ops, 2) << round;
    ++round;
  }
  DeviceFree(labels);
  DeviceFree(features);
}

}  // namespace
}  // namespace gpusampler::kernels
