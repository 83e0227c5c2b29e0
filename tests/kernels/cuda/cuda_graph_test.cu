// The CUDA backend's Sample() is stream-ordered and never synchronizes, so once its scratch
// space is large enough it can be captured into a CUDA graph: the graph's replays must give
// the outputs of a plain call, which must equal the CPU backend's bit for bit.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels {
namespace {

#define ASSERT_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// Host copies of every output buffer of a batch.
struct Outputs {
  std::vector<int64_t> indices;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;
  std::vector<int32_t> num_positive;
  std::vector<int32_t> num_negative;
};

bool operator==(const Outputs& a, const Outputs& b) {
  return a.indices == b.indices && a.labels == b.labels && a.features == b.features &&
         a.num_positive == b.num_positive && a.num_negative == b.num_negative;
}

uint64_t Mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return x;
}

// Labels and features of a batch mixing dtypes, feature widths, empty rows and K > N; with
// `only`, every request has that label dtype (labels its range holds; bool has no ignored
// value); `small_only` leaves out the large row (SampleSmallClass takes the batch).
struct HostBatch {
  BatchBuilder builder;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;

  explicit HostBatch(DType only = DType::kUnspecified, bool small_only = false) {
    const bool mixed = only == DType::kUnspecified;
    const bool is_bool = only == DType::kBool;
    const bool is_unsigned = only == DType::kUInt8 || is_bool;
    SamplingSpec spec;
    spec.num_samples = 64;
    builder.AddRequest(spec, 7, mixed ? DType::kInt32 : only, {1000, 0, 37}, 12);
    spec.num_samples = 100;
    spec.positive_fraction = 0.25;
    spec.fill = FillPolicy::kNegativesOnly;
    if (!small_only) builder.AddRequest(spec, 99, mixed ? DType::kInt8 : only, {5003}, 0);
    spec.num_samples = 9;
    spec.positive_label = is_bool ? 1 : 3;
    spec.negative_label = is_bool ? 0 : is_unsigned ? 2 : -2;
    spec.fill = FillPolicy::kNone;
    builder.AddRequest(spec, 12345678901234ULL, mixed ? DType::kInt16 : only, {50, 2, 700}, 5);

    labels.resize(static_cast<size_t>(builder.label_bytes()));
    features.resize(static_cast<size_t>(builder.feature_bytes()));
    const int64_t ignored = is_unsigned ? 7 : -7;
    for (const RowDesc& row : builder.rows()) {
      const size_t item = DTypeSize(row.label_dtype);
      for (int64_t i = 0; i < row.length; ++i) {
        // Mostly negatives, some positives, some ignored values.
        const uint64_t h = Mix(static_cast<uint64_t>(row.label_offset) * 131 + i);
        const int64_t label = h % 10 < 2              ? row.positive_label
                              : h % 10 < 8 || is_bool ? row.negative_label
                                                      : ignored;
        std::memcpy(&labels[row.label_offset + i * item], &label, item);  // little-endian
      }
      for (int64_t b = 0; b < row.length * row.feature_row_bytes; ++b) {
        features[row.feature_offset + b] = static_cast<uint8_t>(Mix(row.feature_offset + b));
      }
    }
  }

  Outputs MakeOutputs() const {
    Outputs out;
    out.indices.assign(static_cast<size_t>(builder.total_slots()), 0x5555);
    out.labels.assign(static_cast<size_t>(builder.out_label_bytes()), 0x55);
    out.features.assign(static_cast<size_t>(builder.out_feature_bytes()), 0x55);
    out.num_positive.assign(builder.rows().size(), -5);
    out.num_negative.assign(builder.rows().size(), -5);
    return out;
  }
};

// Device copies of a HostBatch's inputs and one set of outputs.
class DeviceBatch {
 public:
  DeviceBatch(const HostBatch& host, void* stream, int device = 0)
      : stream_(stream), device_(device) {
    const auto& rows = host.builder.rows();
    d_rows_ = Upload(rows.data(), rows.size() * sizeof(RowDesc));
    d_labels_ = Upload(host.labels.data(), host.labels.size());
    d_features_ = Upload(host.features.data(), host.features.size());
    const Outputs init = host.MakeOutputs();
    d_indices_ = Upload(init.indices.data(), init.indices.size() * sizeof(int64_t));
    d_out_labels_ = Upload(init.labels.data(), init.labels.size());
    d_out_features_ = Upload(init.features.data(), init.features.size());
    d_num_positive_ = Upload(init.num_positive.data(), init.num_positive.size() * 4);
    d_num_negative_ = Upload(init.num_negative.data(), init.num_negative.size() * 4);
    host.builder.FillSizes(&batch_);
    batch_.rows = static_cast<const RowDesc*>(d_rows_);
    batch_.labels = static_cast<const uint8_t*>(d_labels_);
    batch_.features = static_cast<const uint8_t*>(d_features_);
    batch_.out_indices = static_cast<int64_t*>(d_indices_);
    batch_.out_labels = static_cast<uint8_t*>(d_out_labels_);
    batch_.out_features = static_cast<uint8_t*>(d_out_features_);
    batch_.out_num_positive = static_cast<int32_t*>(d_num_positive_);
    batch_.out_num_negative = static_cast<int32_t*>(d_num_negative_);
    StreamSynchronize(stream_);
  }
  ~DeviceBatch() {
    for (void* p : owned_) DeviceFree(p);
  }

  const Batch& batch() const { return batch_; }

  // Every output back to the pattern it started with.
  void ResetOutputs(const HostBatch& host) {
    const Outputs init = host.MakeOutputs();
    CopyAsync(d_indices_, init.indices.data(), init.indices.size() * sizeof(int64_t), stream_);
    CopyAsync(d_out_labels_, init.labels.data(), init.labels.size(), stream_);
    CopyAsync(d_out_features_, init.features.data(), init.features.size(), stream_);
    CopyAsync(d_num_positive_, init.num_positive.data(), init.num_positive.size() * 4, stream_);
    CopyAsync(d_num_negative_, init.num_negative.data(), init.num_negative.size() * 4, stream_);
    StreamSynchronize(stream_);
  }

  Outputs Download(const HostBatch& host) const {
    Outputs out = host.MakeOutputs();
    CopyAsync(out.indices.data(), d_indices_, out.indices.size() * sizeof(int64_t), stream_);
    CopyAsync(out.labels.data(), d_out_labels_, out.labels.size(), stream_);
    CopyAsync(out.features.data(), d_out_features_, out.features.size(), stream_);
    CopyAsync(out.num_positive.data(), d_num_positive_, out.num_positive.size() * 4, stream_);
    CopyAsync(out.num_negative.data(), d_num_negative_, out.num_negative.size() * 4, stream_);
    StreamSynchronize(stream_);
    return out;
  }

 private:
  void* Upload(const void* src, size_t bytes) {
    void* d = DeviceAlloc(device_, bytes == 0 ? 1 : bytes);
    owned_.push_back(d);
    CopyAsync(d, src, bytes, stream_);
    return d;
  }

  void* stream_;
  int device_;
  std::vector<void*> owned_;
  void* d_rows_;
  void* d_labels_;
  void* d_features_;
  void* d_indices_;
  void* d_out_labels_;
  void* d_out_features_;
  void* d_num_positive_;
  void* d_num_negative_;
  Batch batch_;
};

Outputs RunCpu(const HostBatch& host) {
  Outputs out = host.MakeOutputs();
  Batch batch;
  host.builder.FillSizes(&batch);
  batch.labels = host.labels.data();
  batch.features = host.features.data();
  batch.out_indices = out.indices.data();
  batch.out_labels = out.labels.data();
  batch.out_features = out.features.data();
  batch.out_num_positive = out.num_positive.data();
  batch.out_num_negative = out.num_negative.data();
  MakeCpuBackend(1)->Sample(batch);
  return out;
}

TEST(CudaGraphTest, CapturedSampleMatchesPlainSampleAndCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const HostBatch host;
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  EXPECT_EQ(backend->name(), "cuda:0");
  EXPECT_EQ(backend->memory_space(), MemorySpace::kDevice);
  auto stream = static_cast<cudaStream_t>(backend->stream());
  ASSERT_NE(stream, nullptr);

  // Plain call; it also grows the scratch space, which capture does not allow.
  DeviceBatch plain(host, stream);
  backend->Sample(plain.batch());
  const Outputs want = plain.Download(host);
  EXPECT_TRUE(want == RunCpu(host)) << "CUDA and CPU backends differ";

  DeviceBatch captured(host, stream);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  backend->Sample(captured.batch());
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  // Capture records the work without running it.
  EXPECT_FALSE(captured.Download(host) == want);

  for (int replay = 0; replay < 2; ++replay) {
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));
    EXPECT_TRUE(captured.Download(host) == want) << "replay " << replay;
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
}

// A graph captured from Sample() bakes in the arena's addresses: growing the arena while
// the graph exists would make its replays use freed memory, so the growth is refused until
// ReleaseGraphs() (arena_policy.hpp; the rule itself is tested without a device in
// arena_policy_test.cc).
TEST(CudaGraphTest, ArenaNeverMovesUnderACapturedGraph) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  const HostBatch host;
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  auto stream = static_cast<cudaStream_t>(backend->stream());
  DeviceBatch batch(host, stream);
  backend->Reserve(batch.batch().num_rows, batch.batch().total_elements, batch.batch().total_slots);
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  backend->Sample(batch.batch());
  ASSERT_CUDA_OK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  // Ten times the elements: the arena would have to move.
  const int64_t rows = batch.batch().num_rows;
  const int64_t elements = batch.batch().total_elements * 10;
  const int64_t slots = batch.batch().total_slots * 10;
  try {
    backend->Reserve(rows, elements, slots);
    ADD_FAILURE() << "growth allowed while a captured graph refers to the arena";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kInvalidArgument) << e.what();
  }
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, stream));  // still valid: the arena did not move
  EXPECT_TRUE(batch.Download(host) == RunCpu(host));
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  backend->ReleaseGraphs();
  backend->Reserve(rows, elements, slots);  // now allowed
  backend->Sample(batch.batch());
  EXPECT_TRUE(batch.Download(host) == RunCpu(host));
}

// One row validation for both backends (kernels::ValidateRows): an invalid row is refused
// with the CPU backend's error, before anything is enqueued, instead of being clamped.
TEST(CudaGraphTest, InvalidRowIsRefusedLikeOnTheCpu) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  HostBatch host;
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  DeviceBatch batch(host, backend->stream());
  std::vector<RowDesc> rows = host.builder.rows();
  rows[1].negative_label = rows[1].positive_label;
  Batch bad = batch.batch();
  bad.host_rows = rows.data();
  std::string cuda_error;
  try {
    backend->Sample(bad);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Error::Code::kInvalidArgument);
    cuda_error = e.what();
  }
  std::string cpu_error;
  try {
    ValidateRows(rows.data(), static_cast<int64_t>(rows.size()));
  } catch (const Error& e) {
    cpu_error = e.what();
  }
  EXPECT_FALSE(cpu_error.empty());
  EXPECT_EQ(cuda_error, cpu_error);
}

// Every label dtype, on CUDA device 0 (skipped without one) and on its cuda-sim twin: a
// plain Sample equals the CPU backend; one captured through StreamGraph, then replayed
// without capture over reset outputs, gives the same; so does the size class's launch
// (SampleSmallClass, the row count read from device memory) of a small-row batch, captured
// once and replayed.
class CudaGraphDTypeTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(CudaGraphDTypeTest, CapturedAndReplayedMatchPlainAndCpu) {
  const int device = std::get<0>(GetParam());
  if (device != kSimDevice && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Backend> backend = MakeCudaBackend(device);
  void* stream = backend->stream();
  for (const bool small_only : {false, true}) {
    SCOPED_TRACE(small_only ? "small rows only" : "with a large row");
    const HostBatch host(std::get<1>(GetParam()), small_only);
    DeviceBatch plain(host, stream, device);
    backend->Sample(plain.batch());  // (grows the scratch space, which capture does not allow)
    const Outputs want = plain.Download(host);
    ASSERT_TRUE(want == RunCpu(host)) << "device and CPU backends differ";

    DeviceBatch captured(host, stream, device);
    pipeline::LaunchSizes sizes;
    sizes.num_rows = static_cast<int32_t>(captured.batch().num_rows);
    void* d_sizes = DeviceAlloc(device, sizeof(sizes));
    CopyToDevice(device, d_sizes, &sizes, sizeof(sizes));
    bool classed = false;
    StreamGraph graph(stream);
    graph.Launch([&] {
      classed = small_only && backend->SampleSmallClass(captured.batch(), 8, d_sizes);
      if (!classed) backend->Sample(captured.batch());
    });
    EXPECT_EQ(classed, small_only);
    EXPECT_TRUE(captured.Download(host) == want) << "captured";
    for (int replay = 0; replay < 2; ++replay) {
      captured.ResetOutputs(host);
      graph.Replay();
      EXPECT_TRUE(captured.Download(host) == want) << "replay " << replay;
    }
    EXPECT_EQ(graph.captures(), 1);
    graph.Reset();
    backend->ReleaseGraphs();
    DeviceFree(d_sizes);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLabelDType, CudaGraphDTypeTest,
                         ::testing::Combine(::testing::Values(0, kSimDevice),
                                            ::testing::Values(DType::kBool, DType::kInt8,
                                                              DType::kUInt8, DType::kInt16,
                                                              DType::kInt32, DType::kInt64)),
                         [](const ::testing::TestParamInfo<std::tuple<int, DType>>& info) {
                           return std::string(std::get<0>(info.param) == kSimDevice ? "CudaSim_"
                                                                                    : "Cuda_") +
                                  Traits(std::get<1>(info.param)).name;
                         });

TEST(CudaGraphTest, EmptyBatchAndUnavailableDevice) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::unique_ptr<Backend> backend = MakeCudaBackend(0);
  backend->Sample(Batch{});  // no rows: nothing to do
  StreamSynchronize(backend->stream());
  EXPECT_THROW(MakeCudaBackend(CudaDeviceCount()), Error);
}

}  // namespace
}  // namespace gpusampler::kernels
