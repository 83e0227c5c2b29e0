// StreamGraph (device.hpp) on the cuda-sim device: the capture the device seam offers.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

// StreamGraph on a cuda-sim stream: captured copies run in order as one stream operation; a
// capture whose enqueue throws runs nothing; a host callback cannot be captured.
TEST(StreamGraphSimTest, OneOperationInOrderAndNothingOnError) {
  auto backend = MakeCudaBackend(kSimDevice);
  void* stream = backend->stream();
  auto* a = static_cast<uint8_t*>(DeviceAlloc(kSimDevice, 64));
  auto* b = static_cast<uint8_t*>(DeviceAlloc(kSimDevice, 64));
  auto* c = static_cast<uint8_t*>(DeviceAlloc(kSimDevice, 64));
  for (int i = 0; i < 64; ++i) a[i] = static_cast<uint8_t>(i + 1);
  std::memset(b, 0, 64);
  std::memset(c, 0, 64);
  StreamGraph graph(stream);
  const int64_t before = StreamOperations(stream);
  graph.Launch([&] {
    CopyAsync(b, a, 64, stream);  // in order: c gets a's bytes through b
    CopyAsync(c, b, 64, stream);
  });
  StreamSynchronize(stream);
  EXPECT_EQ(StreamOperations(stream) - before, 1);
  EXPECT_EQ(std::memcmp(c, a, 64), 0);
  std::memset(c, 0, 64);
  EXPECT_THROW(graph.Launch([&] {
    CopyAsync(c, a, 64, stream);
    throw Error(Error::Code::kInvalidArgument, "enqueue failed");
  }),
               Error);
  StreamSynchronize(stream);
  EXPECT_EQ(StreamOperations(stream) - before, 1);
  EXPECT_EQ(c[0], 0) << "a discarded capture ran";
  try {
    graph.Launch([&] { EnqueueHostCallback(stream, [](const std::string&) {}); });
    ADD_FAILURE() << "a callback was captured";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kInternal) << e.what();
  }
  graph.Launch([&] { CopyAsync(c, a, 64, stream); });  // the stream still captures
  StreamSynchronize(stream);
  EXPECT_EQ(std::memcmp(c, a, 64), 0);
  DeviceFree(a);
  DeviceFree(b);
  DeviceFree(c);
}

// Replay launches the last capture again without capturing: its copies read their sources
// when they run (as a CUDA graph's nodes do), one stream operation, one capture counted.
TEST(StreamGraphSimTest, ReplayRunsTheLastCaptureAgain) {
  auto backend = MakeCudaBackend(kSimDevice);
  void* stream = backend->stream();
  auto* a = static_cast<uint8_t*>(DeviceAlloc(kSimDevice, 64));
  auto* b = static_cast<uint8_t*>(DeviceAlloc(kSimDevice, 64));
  StreamGraph graph(stream);
  EXPECT_THROW(graph.Replay(), Error);  // nothing instantiated yet
  std::memset(a, 1, 64);
  std::memset(b, 0, 64);
  int enqueued = 0;
  graph.Launch([&] {
    ++enqueued;
    CopyAsync(b, a, 64, stream);
  });
  StreamSynchronize(stream);
  EXPECT_EQ(b[63], 1);
  std::memset(a, 2, 64);
  const int64_t before = StreamOperations(stream);
  graph.Replay();
  StreamSynchronize(stream);
  EXPECT_EQ(StreamOperations(stream) - before, 1);
  EXPECT_EQ(enqueued, 1) << "Replay ran the enqueue function";
  EXPECT_EQ(graph.captures(), 1);
  for (int i = 0; i < 64; ++i) ASSERT_EQ(b[i], 2) << i;
  graph.Reset();
  EXPECT_THROW(graph.Replay(), Error);
  DeviceFree(a);
  DeviceFree(b);
}

}  // namespace
}  // namespace gpusampler::kernels
