// kernels::CudaLauncher: the per-stream launch context (stream, arena, pinned staging,
// device buffers, completion with a time limit), on the cuda-sim device everywhere and on
// CUDA device 0 where one exists: a launch that times out, growth, capture. The staged round
// trip on each device: launcher_on_device_test.cc; the staged launch over it:
// staged_launch_test.cc.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/launcher.hpp"
#include "sim/sim_device.hpp"

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

// The GPU round 4 sequence: one 2^27-element row reserved, then 4,096 large rows. Each
// dimension of a launch of 4,096 rows x 2^15 elements is within what was reserved, so Holds()
// accepts it, but its arena (per-large-row tables for 4,096 rows and per-tile tables for 2^27
// elements) is larger than either reservation's. Reserving only each call's own sizes left the
// arena short: the launch then had to grow under stream capture, which CUDA refuses (and
// cuda-sim now refuses too). The capture is dropped, not run: the growth check is at enqueue.
TEST(CudaLauncherTest, ReserveCoversTheBoundingShapeOfEverySizeReserved) {
  CudaLauncher launcher(kSimDevice, milliseconds(60000));
  constexpr int64_t kRows = 4096;
  constexpr int64_t kLength = int64_t{1} << 15;
  constexpr int64_t kSamples = 256;
  LaunchSizes one_long;
  one_long.rows = 1;
  one_long.elements = int64_t{1} << 27;
  one_long.slots = kSamples;
  launcher.Reserve(one_long);
  LaunchSizes many;
  many.rows = kRows;
  many.elements = kRows * 4097;
  many.slots = kRows * kSamples;
  launcher.Reserve(many);

  BatchBuilder builder;
  SamplingSpec spec;
  spec.num_samples = kSamples;
  for (int64_t r = 0; r < kRows; ++r) builder.AddRequest(spec, 7, DType::kInt8, {kLength}, 0);
  LaunchSizes both;
  both.rows = kRows;
  both.elements = builder.total_elements();
  both.slots = builder.total_slots();
  ASSERT_TRUE(launcher.Holds(both));

  Batch batch;
  builder.FillSizes(&batch);
  batch.host_rows = builder.rows().data();
  // Never dereferenced: the captured launch is dropped before it runs.
  batch.labels = launcher.d_in();
  batch.out_indices = reinterpret_cast<int64_t*>(launcher.d_out());
  batch.out_labels = launcher.d_out();
  batch.out_num_positive = reinterpret_cast<int32_t*>(launcher.d_out());
  batch.out_num_negative = reinterpret_cast<int32_t*>(launcher.d_out());
  sim::SimStream* stream = sim::AsSimStream(launcher.stream());
  stream->BeginCapture();
  try {
    launcher.backend().Sample(batch);
  } catch (const Error& e) {
    stream->EndCapture(/*launch=*/false);
    FAIL() << "the launch needed arena growth under capture: " << e.what();
  }
  stream->EndCapture(/*launch=*/false);
}

// cuda-sim refuses arena growth under capture, as CUDA does: without a Reserve, the same
// capture fails with the reason.
TEST(CudaLauncherTest, ArenaGrowthUnderCaptureIsRefusedOnCudaSim) {
  CudaLauncher launcher(kSimDevice, milliseconds(60000));
  BatchBuilder builder;
  SamplingSpec spec;
  spec.num_samples = 16;
  builder.AddRequest(spec, 7, DType::kInt8, {int64_t{1} << 20}, 0);
  Batch batch;
  builder.FillSizes(&batch);
  batch.host_rows = builder.rows().data();
  uint8_t dummy[16] = {};
  batch.labels = dummy;
  batch.out_indices = reinterpret_cast<int64_t*>(dummy);
  batch.out_labels = dummy;
  batch.out_num_positive = reinterpret_cast<int32_t*>(dummy);
  batch.out_num_negative = reinterpret_cast<int32_t*>(dummy);
  sim::SimStream* stream = sim::AsSimStream(launcher.stream());
  stream->BeginCapture();
  try {
    launcher.backend().Sample(batch);
    ADD_FAILURE() << "arena growth under capture was allowed";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("stream capture"), std::string::npos) << e.what();
  }
  stream->EndCapture(/*launch=*/false);
}

}  // namespace
}  // namespace gpusampler::kernels
