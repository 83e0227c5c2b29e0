// kernels::CudaLauncher on each device (the cuda-sim device everywhere, CUDA device 0 where one
// exists): a staged round trip with growth, an enqueue error, and the launcher usable after it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/launcher.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

class LauncherOnDevice : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (GetParam() != kSimDevice && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_P(LauncherOnDevice, StagedRoundTripAndGrowth) {
  CudaLauncher launcher(GetParam(), milliseconds(60000));
  EXPECT_EQ(launcher.name(), GetParam() == kSimDevice ? "cuda-sim" : "cuda:0");
  LaunchSizes sizes;
  sizes.in_bytes = 1000;
  sizes.out_bytes = 1000;
  launcher.Reserve(sizes);
  EXPECT_TRUE(launcher.Holds(sizes));
  for (size_t bytes : {size_t{1000}, size_t{100000}}) {
    sizes.in_bytes = sizes.out_bytes = bytes;
    launcher.Reserve(sizes);  // the second grows
    std::vector<uint8_t> want(bytes);
    std::iota(want.begin(), want.end(), static_cast<uint8_t>(bytes));
    std::memcpy(launcher.h_in(), want.data(), bytes);
    std::memset(launcher.h_out(), 0, bytes);
    launcher.Launch([&] {
      CopyAsync(launcher.d_in(), launcher.h_in(), bytes, launcher.stream());
      CopyAsync(launcher.d_out(), launcher.d_in(), bytes, launcher.stream());
      CopyAsync(launcher.h_out(), launcher.d_out(), bytes, launcher.stream());
    });
    EXPECT_EQ(std::memcmp(launcher.h_out(), want.data(), bytes), 0) << bytes;
  }
  EXPECT_THROW(launcher.Launch([] { throw std::runtime_error("enqueue failed"); }),
               std::runtime_error);
  EXPECT_FALSE(launcher.faulted());
  launcher.Launch([] {});  // still usable
}

INSTANTIATE_TEST_SUITE_P(Devices, LauncherOnDevice, ::testing::Values(kSimDevice, 0),
                         [](const auto& info) {
                           return info.param == kSimDevice ? std::string("cudasim")
                                                           : std::string("cuda0");
                         });

}  // namespace
}  // namespace gpusampler::kernels
