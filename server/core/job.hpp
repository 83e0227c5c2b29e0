// A validated sampling request as plain values, plus what the scheduler needs to run and
// answer it. Built once at the edge (ValidateRequest); the kernels never see protobuf.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::v1 {
class SampleResponse;
}

namespace gpusampler::server {

using Clock = std::chrono::steady_clock;

// A resident dataset's storage as a worker sees it (implemented by server::Dataset).
// Thread-safe: immutable.
class DatasetStorage {
 public:
  virtual ~DatasetStorage() = default;
  // The labels / features in the memory of CUDA device `device`; null when the dataset keeps
  // no copy there (then `Job::labels` / `Job::features` address its host copy).
  virtual const uint8_t* DeviceLabels(int device) const = 0;
  virtual const uint8_t* DeviceFeatures(int device) const = 0;
};

// The tensors of an answer, in SPEC section 9's region order.
enum class AnswerTensor : int {
  kIndices = 0,
  kLabels = 1,
  kFeatures = 2,
  kNumPositive = 3,
  kNumNegative = 4,
  kNumPerClass = 5,
};
constexpr int kNumAnswerTensors = 6;

// Where a worker writes an answer's tensor bytes when they do not go into the response
// (shared memory, SPEC section 9: implemented by the edge's region writer). `bytes` null
// writes `size` zero bytes. A failed write (the region was truncated meanwhile) is kept by
// the sink and reported by the edge when the job is done; the worker goes on.
// Thread-safety: one worker writes one job's sink.
class AnswerSink {
 public:
  virtual ~AnswerSink() = default;
  // Where `tensor`'s bytes go, for a launch that writes them there itself (the feature
  // gather); null when it may not (then the worker hands them to Write from its buffers).
  virtual uint8_t* Destination(AnswerTensor tensor) = 0;
  // `bytes` == Destination(tensor): already written there.
  virtual void Write(AnswerTensor tensor, const void* bytes, size_t size) = 0;
};

// Timings the worker reports back for one request.
struct JobTiming {
  Clock::time_point launched{};
  Clock::time_point completed{};
  int64_t batch_rows = 0;
};

// Thread-safety: the fields are written by the service before Submit and read by one worker
// afterwards; `cancelled` may be set from any thread at any time.
struct Job {
  // What to sample. Pointers address the request message's bytes, which the caller keeps
  // alive until `done` has been called.
  kernels::SamplingSpec spec;
  uint64_t seed = 0;
  kernels::DType label_dtype = kernels::DType::kInt64;
  const uint8_t* labels = nullptr;
  std::vector<int64_t> row_offsets;  // B + 1 element offsets; row r is [row_offsets[r], [r+1])
  // Where each row starts in `labels` (and in `features`), in elements, when the rows are
  // not laid out back to back (dataset rows named in any order); empty: row_offsets.
  std::vector<int64_t> row_source;
  bool drop_batch_dim = false;  // labels were [N]: outputs are [K], not [1, K]
  // Set for a request naming a resident dataset: keeps its bytes alive while the job may
  // read them (deleting or replacing the dataset meanwhile is safe), and tells a CUDA
  // worker where its device copy is.
  std::shared_ptr<const DatasetStorage> dataset;
  // Optional features, gathered on the host from these bytes after sampling.
  const uint8_t* features = nullptr;
  kernels::DType feature_dtype = kernels::DType::kUnspecified;
  std::vector<int64_t> feature_trailing_shape;  // one feature row's shape
  int64_t feature_row_bytes = 0;                // 0: labels only
  // Classes (SPEC section 7): FLOAT32 scores laid out and indexed like `labels` (row_start),
  // or null. They address the request's bytes, the dataset's stored scores, or
  // `owned_scores` (a copy the edge made: unaligned bytes, or request scores of dataset rows
  // named with `rows`, scattered to where those rows start).
  const float* scores = nullptr;
  std::vector<float> owned_scores;
  int64_t num_classes() const { return static_cast<int64_t>(spec.classes.size()); }
  // An epoch request (SPEC section 8): this rank's steps in the epoch, for the response;
  // -1 without an epoch.
  int64_t epoch_steps = -1;

  int64_t num_rows() const { return static_cast<int64_t>(row_offsets.size()) - 1; }
  int64_t num_elements() const { return row_offsets.back(); }
  // Element offset of row r's first element in `labels` / `features`.
  int64_t row_start(int64_t r) const {
    return row_source.empty() ? row_offsets[static_cast<size_t>(r)]
                              : row_source[static_cast<size_t>(r)];
  }

  // Scheduling.
  Clock::time_point accepted{};
  Clock::time_point deadline = Clock::time_point::max();
  std::atomic<bool> cancelled{false};
  // The client connection it came from (its peer address): the queue serves connections in
  // turn (Scheduler).
  std::string connection;

  // Where the worker writes the result (owned by the caller; untouched after `done`).
  v1::SampleResponse* response = nullptr;
  // Set when the answer goes into a shared-memory region: the tensors' bytes go there, and
  // `response`'s tensors keep dtype and shape with empty data (owned by the caller).
  AnswerSink* answer_sink = nullptr;
  JobTiming timing;
  // Called exactly once, from a worker thread (or from Submit's caller when the scheduler
  // refuses the job). After it returns the job's pointers may dangle.
  std::function<void(const Status&)> done;
  // Set when the answer is computed off the scheduler and off the gRPC thread (an ELEMENTS
  // epoch step that builds the member lists: SubmitJob runs it on the epoch thread).
  std::function<Status(Job&)> answer_off_scheduler;
};

}  // namespace gpusampler::server
