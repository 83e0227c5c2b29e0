#include "scheduling/worker.hpp"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "gpusampler/kernels/staged_launch.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {
namespace {

using kernels::DType;

// One tensor of the answer: dtype and shape in the response; its bytes (`data` null: zeros)
// in the response, or, for an answer into a shared-memory region, written by the job's sink
// straight from the launch's output (the response's data then stays empty).
void PutTensor(const Job& job, AnswerTensor which, v1::Tensor* t, DType dtype,
               const std::vector<int64_t>& shape, const void* data, size_t bytes) {
  t->set_dtype(static_cast<v1::DType>(dtype));
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  if (job.answer_sink != nullptr) {
    t->clear_data();
    job.answer_sink->Write(which, data, bytes);
  } else if (data != nullptr) {
    t->mutable_data()->assign(static_cast<const char*>(data), bytes);
  } else {
    t->mutable_data()->assign(bytes, '\0');
  }
}

void WriteResponse(const Job& job, const kernels::LaunchOutput& out, const std::string& device) {
  v1::SampleResponse* resp = job.response;
  const int64_t b = job.num_rows();
  const int64_t k = job.spec.num_samples;
  const size_t slots = static_cast<size_t>(b * k);
  const size_t item = kernels::DTypeSize(job.label_dtype);
  std::vector<int64_t> shape;
  if (!job.drop_batch_dim) shape.push_back(b);
  shape.push_back(k);
  PutTensor(job, AnswerTensor::kIndices, resp->mutable_indices(), DType::kInt64, shape, out.indices,
            slots * 8);
  PutTensor(job, AnswerTensor::kLabels, resp->mutable_labels(), job.label_dtype, shape, out.labels,
            slots * item);
  if (job.feature_row_bytes > 0) {
    std::vector<int64_t> fshape = shape;
    fshape.insert(fshape.end(), job.feature_trailing_shape.begin(),
                  job.feature_trailing_shape.end());
    // No features out (rows without elements): padding only, zeros.
    PutTensor(job, AnswerTensor::kFeatures, resp->mutable_features(), job.feature_dtype, fshape,
              out.features, slots * static_cast<size_t>(job.feature_row_bytes));
  }
  PutTensor(job, AnswerTensor::kNumPositive, resp->mutable_num_positive(), DType::kInt32, {b},
            out.num_positive, static_cast<size_t>(b) * 4);
  PutTensor(job, AnswerTensor::kNumNegative, resp->mutable_num_negative(), DType::kInt32, {b},
            out.num_negative, static_cast<size_t>(b) * 4);
  if (!job.spec.classes.empty()) {
    const int64_t c = out.num_classes;
    std::vector<int64_t> cshape;
    if (!job.drop_batch_dim) cshape.push_back(b);
    cshape.push_back(c);
    PutTensor(job, AnswerTensor::kNumPerClass, resp->mutable_num_per_class(), DType::kInt32, cshape,
              out.num_per_class, static_cast<size_t>(b * c) * 4);
  }
  resp->set_seed(job.seed);
  resp->set_device(device);
}

// The one worker: converts jobs to launch requests and outputs to responses; the launch
// itself (layout, staging, copies, kernels, feature gather, output carving) is
// kernels::StagedLaunch's, on a host backend or on a device.
class LaunchWorker final : public Worker {
 public:
  LaunchWorker(std::unique_ptr<kernels::StagedLaunch> launch, std::string device)
      : launch_(std::move(launch)), device_(std::move(device)) {}

  const std::string& device() const override { return device_; }

  void Run(const std::vector<Job*>& jobs) override {
    requests_.resize(jobs.size());
    const bool on_device = launch_->on_device();
    const int index = launch_->device();
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = *jobs[j];
      kernels::LaunchRequest& q = requests_[j];
      q = kernels::LaunchRequest{};
      q.spec = job.spec;
      q.seed = job.seed;
      q.label_dtype = job.label_dtype;
      q.num_rows = job.num_rows();
      q.row_offsets = job.row_offsets.data();
      q.row_start = job.row_source.empty() ? nullptr : job.row_source.data();
      q.labels = job.labels;
      q.feature_row_bytes = job.feature_row_bytes;
      q.features = job.features;
      if (!job.spec.classes.empty()) q.scores = job.scores;
      // An answer into shared memory: the feature gather writes the region itself.
      if (job.answer_sink != nullptr && job.feature_row_bytes > 0) {
        q.features_out = job.answer_sink->Destination(AnswerTensor::kFeatures);
      }
      // A resident dataset's copy in this device's memory, when it keeps one: only the row
      // table crosses PCIe (docs/datasets.md).
      if (on_device && job.dataset) {
        q.device_labels = job.dataset->DeviceLabels(index);
        q.device_features = job.dataset->DeviceFeatures(index);
      }
    }
    const std::vector<kernels::LaunchOutput>& outs = launch_->Run(requests_);
    for (size_t j = 0; j < jobs.size(); ++j) WriteResponse(*jobs[j], outs[j], device_);
  }

 private:
  std::unique_ptr<kernels::StagedLaunch> launch_;
  std::string device_;
  std::vector<kernels::LaunchRequest> requests_;
};

}  // namespace

std::unique_ptr<Worker> MakeHostWorker(std::unique_ptr<kernels::Backend> backend,
                                       std::string device) {
  return std::make_unique<LaunchWorker>(std::make_unique<kernels::StagedLaunch>(std::move(backend)),
                                        std::move(device));
}

std::unique_ptr<Worker> MakeCudaWorker(int device, const CudaWorkerOptions& options) {
  auto launch = std::make_unique<kernels::StagedLaunch>(
      device, std::chrono::milliseconds(std::max<int64_t>(1, options.device_timeout_ms)));
  // Sized once from the configured limits, so that requests within them never allocate
  // (cudaMalloc / cudaHostAlloc synchronize the device and take milliseconds).
  kernels::StagedSizes sizes;
  sizes.rows = std::max<int64_t>(1, options.reserve_rows);
  sizes.elements = std::max<int64_t>(0, options.reserve_elements);
  sizes.slots = std::max<int64_t>(0, options.reserve_slots);
  launch->Reserve(sizes);
  const std::string name = launch->name();
  return std::make_unique<LaunchWorker>(std::move(launch), name);
}

Status WarmUp(Worker* worker) {
  std::vector<int64_t> labels(3 * 4096 + 300);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3) - 1;
  Job job;
  job.spec.num_samples = 512;
  job.seed = 1;
  job.labels = reinterpret_cast<const uint8_t*>(labels.data());
  job.row_offsets = {0, 3 * 4096, static_cast<int64_t>(labels.size())};
  v1::SampleResponse response;
  job.response = &response;
  try {
    worker->Run({&job});
  } catch (...) {  // kernels -> server
    return FromCurrentException("warm-up on " + worker->device() + " failed");
  }
  if (response.num_positive().data().size() != 8) {
    return Status(Code::kInternal, "warm-up on " + worker->device() + " gave no output");
  }
  return Status::Ok();
}

}  // namespace gpusampler::server
