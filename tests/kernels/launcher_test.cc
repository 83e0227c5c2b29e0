// kernels::CudaLauncher: the per-stream launch context (stream, arena, pinned staging,
// device buffers, completion with a time limit). Without a device only its refusal is
// checked; with one, a staged round trip, a sampled launch, growth, and an enqueue error.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <vector>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/launcher.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

TEST(CudaLauncherTest, UnavailableWithoutADevice) {
  if (CudaDeviceCount() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    CudaLauncher launcher(0, milliseconds(1000));
    ADD_FAILURE() << "a launcher without a device";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kUnavailable) << e.what();
  }
}

TEST(CudaLauncherTest, StagedRoundTripAndGrowth) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  CudaLauncher launcher(0, milliseconds(60000));
  EXPECT_EQ(launcher.name(), "cuda:0");
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

}  // namespace
}  // namespace gpusampler::kernels
