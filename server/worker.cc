#include "worker.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/launcher.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {
namespace {

using kernels::BatchBuilder;
using kernels::DType;
using kernels::RowDesc;

// Where a launch's outputs are, on the host.
struct HostOutputs {
  const int64_t* indices;
  const uint8_t* labels;
  const int32_t* num_positive;
  const int32_t* num_negative;
};

// A launch: the rows of every job (labels only: features never enter a launch), with each
// job's labels and output labels starting 8-byte aligned, so that no label is misaligned
// for its dtype when requests of different dtypes share a launch.
struct Plan {
  kernels::Batch sizes;  // the host-known size fields
  std::vector<RowDesc> rows;
  std::vector<int64_t> first;        // each job's first row
  std::vector<int64_t> label_start;  // each job's byte offset in the staged labels
  int64_t label_bytes = 0;
  int64_t out_label_bytes = 0;
};

int64_t Align8(int64_t n) { return (n + 7) / 8 * 8; }

Plan MakePlan(const std::vector<Job*>& jobs) {
  BatchBuilder builder;
  Plan plan;
  plan.first.resize(jobs.size());
  std::vector<int64_t> lengths;
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = *jobs[j];
    lengths.resize(static_cast<size_t>(job.num_rows()));
    for (int64_t r = 0; r < job.num_rows(); ++r) {
      lengths[r] = job.row_offsets[r + 1] - job.row_offsets[r];
    }
    plan.first[j] = builder.AddRequest(job.spec, job.seed, job.label_dtype, lengths,
                                       /*feature_row_bytes=*/0);
  }
  builder.FillSizes(&plan.sizes);
  plan.rows = builder.rows();
  plan.sizes.rows = nullptr;
  plan.sizes.host_rows = nullptr;  // pointed into `builder`; callers set it to plan.rows
  plan.label_start.resize(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    const Job& job = *jobs[j];
    const int64_t item = static_cast<int64_t>(kernels::ItemSize(job.label_dtype));
    const int64_t in_start = Align8(plan.label_bytes);
    const int64_t out_start = Align8(plan.out_label_bytes);
    plan.label_start[j] = in_start;
    const int64_t b = job.num_rows();
    if (b > 0) {
      const RowDesc& head = plan.rows[static_cast<size_t>(plan.first[j])];
      const int64_t in_shift = in_start - head.label_offset;
      const int64_t out_shift = out_start - head.out_label_offset;
      for (int64_t r = plan.first[j]; r < plan.first[j] + b; ++r) {
        plan.rows[static_cast<size_t>(r)].label_offset += in_shift;
        plan.rows[static_cast<size_t>(r)].out_label_offset += out_shift;
      }
    }
    plan.label_bytes = in_start + job.num_elements() * item;
    plan.out_label_bytes = out_start + b * job.spec.num_samples * item;
  }
  return plan;
}

// Copies every job's labels to its place in `dst` (the layout of `plan`), except the jobs
// marked in `on_device` (their labels are copied on the device).
void StageLabels(const std::vector<Job*>& jobs, const Plan& plan, uint8_t* dst,
                 const std::vector<bool>* on_device = nullptr) {
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (on_device != nullptr && (*on_device)[j]) continue;
    const Job* job = jobs[j];
    const size_t item = kernels::ItemSize(job->label_dtype);
    if (job->row_source.empty()) {
      const size_t bytes = static_cast<size_t>(job->num_elements()) * item;
      if (bytes) std::memcpy(dst + plan.label_start[j], job->labels, bytes);
      continue;
    }
    // Dataset rows named in any order: row by row, back to back.
    for (int64_t r = 0; r < job->num_rows(); ++r) {
      const size_t bytes =
          static_cast<size_t>(job->row_offsets[r + 1] - job->row_offsets[r]) * item;
      if (bytes) {
        std::memcpy(dst + plan.label_start[j] + static_cast<size_t>(job->row_offsets[r]) * item,
                    job->labels + static_cast<size_t>(job->row_start(r)) * item, bytes);
      }
    }
  }
}

void SetTensor(v1::Tensor* t, DType dtype, const std::vector<int64_t>& shape, const void* data,
               size_t bytes) {
  t->set_dtype(static_cast<v1::DType>(dtype));
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  t->mutable_data()->assign(static_cast<const char*>(data), bytes);
}

// `gathered`: the job's feature rows already gathered (on the device), or null to gather
// them here from the job's host bytes.
void WriteResponse(const Job& job, const RowDesc& first_row, int64_t first, const HostOutputs& out,
                   const std::string& device, const uint8_t* gathered = nullptr) {
  v1::SampleResponse* resp = job.response;
  const int64_t b = job.num_rows();
  const int64_t k = job.spec.num_samples;
  const size_t slots = static_cast<size_t>(b * k);
  const size_t item = kernels::ItemSize(job.label_dtype);
  std::vector<int64_t> shape;
  if (!job.drop_batch_dim) shape.push_back(b);
  shape.push_back(k);
  const int64_t* indices = out.indices + (b ? first_row.out_slot : 0);
  SetTensor(resp->mutable_indices(), DType::kInt64, shape, indices, slots * 8);
  SetTensor(resp->mutable_labels(), job.label_dtype, shape,
            out.labels + (b ? first_row.out_label_offset : 0), slots * item);
  SetTensor(resp->mutable_num_positive(), DType::kInt32, {b}, out.num_positive + first,
            static_cast<size_t>(b) * 4);
  SetTensor(resp->mutable_num_negative(), DType::kInt32, {b}, out.num_negative + first,
            static_cast<size_t>(b) * 4);
  if (job.feature_row_bytes > 0) {
    // Gathered on the host from the request's own bytes: K feature rows per row instead of
    // shipping all N of them to the device (docs/decisions.md, "Server").
    const size_t frb = static_cast<size_t>(job.feature_row_bytes);
    std::vector<int64_t> fshape = shape;
    fshape.insert(fshape.end(), job.feature_trailing_shape.begin(),
                  job.feature_trailing_shape.end());
    v1::Tensor* t = resp->mutable_features();
    t->set_dtype(static_cast<v1::DType>(job.feature_dtype));
    t->mutable_shape()->Assign(fshape.begin(), fshape.end());
    std::string* data = t->mutable_data();
    data->resize(slots * frb);
    uint8_t* dst = reinterpret_cast<uint8_t*>(data->data());
    if (gathered != nullptr) std::memcpy(dst, gathered, slots * frb);
    for (int64_t r = 0; gathered == nullptr && r < b; ++r) {
      const uint8_t* row = job.features + static_cast<size_t>(job.row_start(r)) * frb;
      kernels::GatherRows(indices + r * k, nullptr, k, job.feature_row_bytes, row,
                          dst + static_cast<size_t>(r * k) * frb);
    }
  }
  resp->set_seed(job.seed);
  resp->set_device(device);
}

// `gathered[j]` (optional): job j's feature rows gathered on the device.
void WriteResponses(const std::vector<Job*>& jobs, const Plan& plan, const HostOutputs& out,
                    const std::string& device,
                    const std::vector<const uint8_t*>* gathered = nullptr) {
  static const RowDesc kNoRow{};
  for (size_t j = 0; j < jobs.size(); ++j) {
    const bool has_rows = jobs[j]->num_rows() > 0;
    const int64_t first = plan.first[j];
    WriteResponse(*jobs[j], has_rows ? plan.rows[static_cast<size_t>(first)] : kNoRow, first, out,
                  device, gathered != nullptr ? (*gathered)[j] : nullptr);
  }
}

class HostWorker final : public Worker {
 public:
  HostWorker(std::unique_ptr<kernels::Backend> backend, std::string device)
      : backend_(std::move(backend)), device_(std::move(device)) {}

  const std::string& device() const override { return device_; }

  void Run(const std::vector<Job*>& jobs) override {
    const Plan plan = MakePlan(jobs);
    kernels::Batch batch = plan.sizes;
    batch.rows = plan.rows.data();
    std::vector<RowDesc> direct;
    if (jobs.size() == 1) {
      // One request: sample straight from its bytes (a resident dataset's too, wherever
      // its rows are).
      batch.labels = jobs[0]->labels;
      if (!jobs[0]->row_source.empty()) {
        direct = plan.rows;
        const int64_t item = static_cast<int64_t>(kernels::ItemSize(jobs[0]->label_dtype));
        for (size_t r = 0; r < direct.size(); ++r) {
          direct[r].label_offset = jobs[0]->row_start(static_cast<int64_t>(r)) * item;
        }
        batch.rows = direct.data();
      }
    } else {
      labels_.resize(static_cast<size_t>(plan.label_bytes));
      StageLabels(jobs, plan, labels_.data());
      batch.labels = labels_.data();
    }
    indices_.resize(static_cast<size_t>(plan.sizes.total_slots));
    out_labels_.resize(static_cast<size_t>(plan.out_label_bytes));
    pos_.resize(static_cast<size_t>(batch.num_rows));
    neg_.resize(static_cast<size_t>(batch.num_rows));
    batch.out_indices = indices_.data();
    batch.out_labels = out_labels_.data();
    batch.out_num_positive = pos_.data();
    batch.out_num_negative = neg_.data();
    if (batch.num_rows > 0) backend_->Sample(batch);
    WriteResponses(jobs, plan, {indices_.data(), out_labels_.data(), pos_.data(), neg_.data()},
                   device_);
  }

 private:
  std::unique_ptr<kernels::Backend> backend_;
  std::string device_;
  // Grown by std::vector's geometric growth and never shrunk.
  std::vector<uint8_t> labels_;
  std::vector<int64_t> indices_;
  std::vector<uint8_t> out_labels_;
  std::vector<int32_t> pos_, neg_;
};

class CudaWorker final : public Worker {
 public:
  CudaWorker(int device, const CudaWorkerOptions& options)
      : launcher_(device, std::chrono::milliseconds(options.device_timeout_ms)),
        device_(launcher_.name()),
        device_index_(device) {
    // Sized once from the configured limits, so that requests within them never allocate
    // (cudaMalloc / cudaHostAlloc synchronize the device and take milliseconds).
    const int64_t rows = std::max<int64_t>(1, options.reserve_rows);
    kernels::LaunchSizes sizes;
    sizes.rows = rows;
    sizes.elements = std::max<int64_t>(0, options.reserve_elements);
    sizes.slots = std::max<int64_t>(0, options.reserve_slots);
    sizes.in_bytes = Align(static_cast<size_t>(rows) * sizeof(RowDesc)) +
                     Align(sizes.elements * 8) +
                     Align(static_cast<size_t>(rows) * sizeof(kernels::CopySpan)) +
                     Align(static_cast<size_t>(rows) * 8);
    sizes.out_bytes =
        Align(sizes.slots * 8) + Align(sizes.slots * 8) + 2 * Align(static_cast<size_t>(rows) * 4);
    launcher_.Reserve(sizes);
    WarmUp();
  }

  const std::string& device() const override { return device_; }

  void Run(const std::vector<Job*>& jobs) override {
    if (launcher_.faulted()) {
      throw kernels::Error(kernels::Error::Code::kDeviceFault,
                           device_ + ": an earlier launch timed out; the device is not used");
    }
    const Plan plan = MakePlan(jobs);
    const int64_t num_rows = static_cast<int64_t>(plan.rows.size());
    // Jobs naming a resident dataset read its copy in this device's memory: their labels
    // are copied into the launch on the device (one span per row), and their feature rows
    // are gathered there too, so only K rows per row cross PCIe (docs/datasets.md).
    std::vector<bool> on_device(jobs.size(), false);
    std::vector<kernels::CopySpan> spans;
    std::vector<int64_t> span_first(jobs.size() + 1, 0), row_start, start_first(jobs.size(), 0);
    std::vector<size_t> gather_at(jobs.size(), 0);
    size_t gather_bytes = 0;
    for (size_t j = 0; j < jobs.size(); ++j) {
      const Job& job = *jobs[j];
      span_first[j] = static_cast<int64_t>(spans.size());
      if (!job.dataset) continue;
      on_device[j] = true;
      const int64_t item = static_cast<int64_t>(kernels::ItemSize(job.label_dtype));
      for (int64_t r = 0; r < job.num_rows(); ++r) {
        const int64_t len = job.row_offsets[r + 1] - job.row_offsets[r];
        if (len > 0) {
          spans.push_back({job.row_start(r) * item, plan.label_start[j] + job.row_offsets[r] * item,
                           len * item});
        }
      }
      if (job.feature_row_bytes > 0) {
        start_first[j] = static_cast<int64_t>(row_start.size());
        for (int64_t r = 0; r < job.num_rows(); ++r) row_start.push_back(job.row_start(r));
        gather_at[j] = gather_bytes;
        gather_bytes += Align(
            static_cast<size_t>(job.num_rows() * job.spec.num_samples * job.feature_row_bytes));
      }
    }
    span_first[jobs.size()] = static_cast<int64_t>(spans.size());
    // One pinned and one device region each way; sections aligned to 256 bytes.
    const size_t rows_bytes = Align(static_cast<size_t>(num_rows) * sizeof(RowDesc));
    const size_t label_bytes = Align(static_cast<size_t>(plan.label_bytes));
    const size_t span_bytes = Align(spans.size() * sizeof(kernels::CopySpan));
    const size_t start_bytes = Align(row_start.size() * sizeof(int64_t));
    const size_t idx_bytes = Align(static_cast<size_t>(plan.sizes.total_slots) * 8);
    const size_t olab_bytes = Align(static_cast<size_t>(plan.out_label_bytes));
    const size_t cnt_bytes = Align(static_cast<size_t>(num_rows) * 4);
    const size_t in_bytes = rows_bytes + label_bytes + span_bytes + start_bytes;
    const size_t out_bytes = idx_bytes + olab_bytes + 2 * cnt_bytes + gather_bytes;

    // Within the warm-up sizes this allocates nothing; beyond them it is one deliberate
    // growth before anything of this launch is enqueued (the previous launch has finished).
    kernels::LaunchSizes sizes;
    sizes.rows = num_rows;
    sizes.elements = plan.sizes.total_elements;
    sizes.slots = plan.sizes.total_slots;
    sizes.in_bytes = in_bytes;
    sizes.out_bytes = out_bytes;
    launcher_.Reserve(sizes);
    uint8_t* h_in = launcher_.h_in();
    uint8_t* h_out = launcher_.h_out();
    uint8_t* d_in = launcher_.d_in();
    uint8_t* d_out = launcher_.d_out();
    if (num_rows > 0) {
      std::memcpy(h_in, plan.rows.data(), static_cast<size_t>(num_rows) * sizeof(RowDesc));
    }
    StageLabels(jobs, plan, h_in + rows_bytes, &on_device);
    if (!spans.empty()) {
      std::memcpy(h_in + rows_bytes + label_bytes, spans.data(),
                  spans.size() * sizeof(kernels::CopySpan));
    }
    if (!row_start.empty()) {
      std::memcpy(h_in + rows_bytes + label_bytes + span_bytes, row_start.data(),
                  row_start.size() * sizeof(int64_t));
    }

    void* stream = launcher_.stream();
    kernels::Batch batch = plan.sizes;
    batch.rows = reinterpret_cast<const RowDesc*>(d_in);
    batch.host_rows = plan.rows.data();  // validated by the backend (kernels::ValidateRows)
    batch.labels = d_in + rows_bytes;
    batch.out_indices = reinterpret_cast<int64_t*>(d_out);
    batch.out_labels = d_out + idx_bytes;
    batch.out_num_positive = reinterpret_cast<int32_t*>(d_out + idx_bytes + olab_bytes);
    batch.out_num_negative = reinterpret_cast<int32_t*>(d_out + idx_bytes + olab_bytes + cnt_bytes);
    const auto* d_spans =
        reinterpret_cast<const kernels::CopySpan*>(d_in + rows_bytes + label_bytes);
    const auto* d_row_start =
        reinterpret_cast<const int64_t*>(d_in + rows_bytes + label_bytes + span_bytes);
    uint8_t* d_gathered = d_out + idx_bytes + olab_bytes + 2 * cnt_bytes;
    launcher_.Launch([&] {
      if (num_rows == 0) return;
      kernels::CopyAsync(d_in, h_in, in_bytes, stream);
      for (size_t j = 0; j < jobs.size(); ++j) {
        if (!on_device[j] || span_first[j + 1] == span_first[j]) continue;
        kernels::CopySpansAsync(d_spans + span_first[j], span_first[j + 1] - span_first[j],
                                jobs[j]->dataset->DeviceLabels(device_index_), d_in + rows_bytes,
                                stream);
      }
      launcher_.backend().Sample(batch);
      for (size_t j = 0; j < jobs.size(); ++j) {
        const Job& job = *jobs[j];
        if (!on_device[j] || job.feature_row_bytes == 0 || job.num_rows() == 0) continue;
        const RowDesc& first = plan.rows[static_cast<size_t>(plan.first[j])];
        kernels::GatherFeatureRowsAsync(
            batch.out_indices + first.out_slot, d_row_start + start_first[j], job.num_rows(),
            job.spec.num_samples, job.feature_row_bytes, job.dataset->DeviceFeatures(device_index_),
            d_gathered + gather_at[j], stream);
      }
      kernels::CopyAsync(h_out, d_out, out_bytes, stream);
    });
    std::vector<const uint8_t*> gathered(jobs.size(), nullptr);
    const uint8_t* h_gathered = h_out + idx_bytes + olab_bytes + 2 * cnt_bytes;
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (on_device[j] && jobs[j]->feature_row_bytes > 0) gathered[j] = h_gathered + gather_at[j];
    }
    WriteResponses(jobs, plan,
                   {reinterpret_cast<const int64_t*>(h_out), h_out + idx_bytes,
                    reinterpret_cast<const int32_t*>(h_out + idx_bytes + olab_bytes),
                    reinterpret_cast<const int32_t*>(h_out + idx_bytes + olab_bytes + cnt_bytes)},
                   device_, &gathered);
  }

 private:
  static size_t Align(size_t n) { return (n + 255) / 256 * 256; }
  static size_t Align(int64_t n) { return Align(static_cast<size_t>(std::max<int64_t>(0, n))); }

  // One launch with a row longer than 4096 elements (the radix-select stages) and a short
  // one (the fused kernel), so that every kernel of the pipeline is loaded (CUDA loads
  // modules lazily) and the arena is in use before the first request. Synchronous:
  // construction is never on a request path.
  void WarmUp() {
    std::vector<int64_t> labels(3 * 4096 + 300);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 3) - 1;
    Job job;
    job.spec.num_samples = 512;
    job.seed = 1;
    job.labels = reinterpret_cast<const uint8_t*>(labels.data());
    job.row_offsets = {0, 3 * 4096, static_cast<int64_t>(labels.size())};
    v1::SampleResponse response;
    job.response = &response;
    Run({&job});
    if (response.num_positive().data().size() != 8) {
      throw kernels::Error(kernels::Error::Code::kInternal, device_ + ": warm-up gave no output");
    }
  }

  // The stream, the arena, pinned staging and device buffers, and the completion wait.
  kernels::CudaLauncher launcher_;
  std::string device_;
  const int device_index_;
};

}  // namespace

std::unique_ptr<Worker> MakeHostWorker(std::unique_ptr<kernels::Backend> backend,
                                       std::string device) {
  return std::make_unique<HostWorker>(std::move(backend), std::move(device));
}

std::unique_ptr<Worker> MakeCudaWorker(int device, const CudaWorkerOptions& options) {
  return std::make_unique<CudaWorker>(device, options);
}

}  // namespace gpusampler::server
