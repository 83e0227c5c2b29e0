// kernels::CudaLauncher: the per-stream launch context (stream, arena, pinned staging,
// device buffers, completion with a time limit), on the cuda-sim device everywhere and on
// CUDA device 0 where one exists: a staged round trip with growth, a sampled launch equal to
// the CPU backend's, an enqueue error, and a launch that times out.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
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

// Rows and labels staged in pinned memory, copied in, sampled, copied out: the CUDA
// worker's sequence, equal to the CPU backend's answer.
TEST_P(LauncherOnDevice, SampledLaunchMatchesTheCpuBackend) {
  CudaLauncher launcher(GetParam(), milliseconds(60000));
  BatchBuilder builder;
  SamplingSpec spec;
  spec.num_samples = 300;
  builder.AddRequest(spec, 99, DType::kInt32, {5000, 700, 0, 20000}, 0);
  std::vector<int32_t> labels(static_cast<size_t>(builder.total_elements()));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((i * 7919) % 3);
  const auto& rows = builder.rows();
  const size_t rows_bytes = rows.size() * sizeof(RowDesc);
  const size_t label_bytes = labels.size() * sizeof(int32_t);
  const size_t idx_bytes = static_cast<size_t>(builder.total_slots()) * 8;
  const size_t olab_bytes = static_cast<size_t>(builder.out_label_bytes());
  const size_t cnt_bytes = rows.size() * 4;
  LaunchSizes sizes;
  sizes.rows = static_cast<int64_t>(rows.size());
  sizes.elements = builder.total_elements();
  sizes.slots = builder.total_slots();
  sizes.in_bytes = rows_bytes + label_bytes;
  sizes.out_bytes = idx_bytes + olab_bytes + 2 * cnt_bytes;
  launcher.Reserve(sizes);
  std::memcpy(launcher.h_in(), rows.data(), rows_bytes);
  std::memcpy(launcher.h_in() + rows_bytes, labels.data(), label_bytes);
  Batch batch;
  builder.FillSizes(&batch);  // host_rows: the builder's rows
  batch.rows = reinterpret_cast<const RowDesc*>(launcher.d_in());
  batch.labels = launcher.d_in() + rows_bytes;
  batch.out_indices = reinterpret_cast<int64_t*>(launcher.d_out());
  batch.out_labels = launcher.d_out() + idx_bytes;
  batch.out_num_positive = reinterpret_cast<int32_t*>(launcher.d_out() + idx_bytes + olab_bytes);
  batch.out_num_negative =
      reinterpret_cast<int32_t*>(launcher.d_out() + idx_bytes + olab_bytes + cnt_bytes);
  launcher.Launch([&] {
    CopyAsync(launcher.d_in(), launcher.h_in(), sizes.in_bytes, launcher.stream());
    launcher.backend().Sample(batch);
    CopyAsync(launcher.h_out(), launcher.d_out(), sizes.out_bytes, launcher.stream());
  });

  std::vector<int64_t> idx(static_cast<size_t>(builder.total_slots()));
  std::vector<uint8_t> olab(olab_bytes + 1);
  std::vector<int32_t> pos(rows.size()), neg(rows.size());
  Batch cpu = batch;
  cpu.rows = rows.data();
  cpu.labels = reinterpret_cast<const uint8_t*>(labels.data());
  cpu.out_indices = idx.data();
  cpu.out_labels = olab.data();
  cpu.out_num_positive = pos.data();
  cpu.out_num_negative = neg.data();
  MakeCpuBackend(1)->Sample(cpu);
  EXPECT_EQ(std::memcmp(launcher.h_out(), idx.data(), idx_bytes), 0);
  EXPECT_EQ(std::memcmp(launcher.h_out() + idx_bytes, olab.data(), olab_bytes), 0);
  EXPECT_EQ(std::memcmp(launcher.h_out() + idx_bytes + olab_bytes, pos.data(), cnt_bytes), 0);
  EXPECT_EQ(std::memcmp(launcher.h_out() + idx_bytes + olab_bytes + cnt_bytes, neg.data(),
                        cnt_bytes),
            0);
}

INSTANTIATE_TEST_SUITE_P(Devices, LauncherOnDevice, ::testing::Values(kSimDevice, 0),
                         [](const auto& info) {
                           return info.param == kSimDevice ? std::string("cudasim")
                                                           : std::string("cuda0");
                         });

// A launch that does not finish in time (a hung kernel: here, a sim stream operation that
// waits on the test) is a device fault; the late completion is harmless and the launcher
// refuses further launches.
TEST(CudaLauncherTest, TimeoutIsADeviceFaultAndTheLateCallbackIsHarmless) {
  CudaLauncher launcher(kSimDevice, milliseconds(100));
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  try {
    launcher.Launch([&] {
      // An operation of the stream that blocks until the test releases it.
      EnqueueHostCallback(launcher.stream(), [&](const std::string&) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return release; });
      });
    });
    ADD_FAILURE() << "the launch did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kDeviceFault) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device-timeout-ms"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(launcher.faulted());
  {
    std::lock_guard<std::mutex> lock(mu);
    release = true;
  }
  cv.notify_all();
  StreamSynchronize(launcher.stream());  // the late completion callback runs now
  EXPECT_THROW(launcher.Launch([] {}), Error);
}

// A launcher destroyed after a timeout while its stream still holds copies into its staging:
// the stream finishes (or, on CUDA, the frees wait for the device) before the buffers go. On
// cuda-sim, whose frees do not wait, freeing first was a use-after-free (found by ASan).
TEST(CudaLauncherTest, DestroyedAfterATimeoutWithCopiesQueued) {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::thread releaser;
  {
    CudaLauncher launcher(kSimDevice, milliseconds(50));
    LaunchSizes sizes;
    sizes.in_bytes = sizes.out_bytes = 4096;
    launcher.Reserve(sizes);
    EXPECT_THROW(launcher.Launch([&] {
      EnqueueHostCallback(launcher.stream(), [&](const std::string&) {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return release; });
      });
      CopyAsync(launcher.d_in(), launcher.h_in(), 4096, launcher.stream());
      CopyAsync(launcher.h_out(), launcher.d_in(), 4096, launcher.stream());
    }),
                 Error);
    EXPECT_TRUE(launcher.faulted());
    releaser = std::thread([&] {
      std::this_thread::sleep_for(milliseconds(200));
      {
        std::lock_guard<std::mutex> lock(mu);
        release = true;
      }
      cv.notify_all();
    });
  }  // ~CudaLauncher while the copies are still queued
  releaser.join();
}

}  // namespace
}  // namespace gpusampler::kernels
