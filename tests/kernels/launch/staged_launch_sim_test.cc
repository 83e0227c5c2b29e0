// kernels::StagedLaunch on the cuda-sim device, which counts stream operations: a launch is one
// captured graph and one completion, and a launch over a resident dataset uploads the row table
// only.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/staged_launch.hpp"
#include "launch/staged_sources.hpp"

namespace gpusampler::kernels {
namespace {

using staged_test::ExpectOutputs;
using staged_test::MakeSource;
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
