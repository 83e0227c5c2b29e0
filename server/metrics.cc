#include "metrics.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "datasets.hpp"
#include "gpusampler/common/status_codes.hpp"
#include "nvml.hpp"
#include "process_metrics.hpp"

namespace gpusampler::server {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;
using prometheus::Histogram;

// 50 us .. ~26 s, factor 2: covers a loopback round trip up to a huge request.
Histogram::BucketBoundaries LatencyBuckets() {
  Histogram::BucketBoundaries b;
  for (double x = 50e-6; x < 30; x *= 2) b.push_back(x);
  return b;
}

// 1 ms .. ~70 min, factor 4: a SampleStream lives from one request to a whole training run.
Histogram::BucketBoundaries StreamBuckets() {
  Histogram::BucketBoundaries b;
  for (double x = 1e-3; x < 5000; x *= 4) b.push_back(x);
  return b;
}

Histogram::BucketBoundaries RowBuckets() {
  Histogram::BucketBoundaries b;
  for (double x = 1; x <= 65536; x *= 2) b.push_back(x);
  return b;
}

// 0, 0.05, ..., 1 as literals (no accumulated rounding): a row's m_pos / K falls in the
// bucket of the first bound not below it.
const Histogram::BucketBoundaries& FractionBuckets() {
  static const Histogram::BucketBoundaries b = {0,    0.05, 0.1,  0.15, 0.2,  0.25, 0.3,
                                                0.35, 0.4,  0.45, 0.5,  0.55, 0.6,  0.65,
                                                0.7,  0.75, 0.8,  0.85, 0.9,  0.95, 1};
  return b;
}

const char* kMethodNames[kNumMethods] = {"Sample",        "SampleStream",  "GetServerInfo",
                                         "CreateDataset", "DeleteDataset", "ListDatasets"};
// The "code" label's values: gRPC's code names, from the one shared table.
using common::kGrpcCodeNames;
static_assert(kNumCodes == common::kNumGrpcCodes);

}  // namespace

void BusyClock::Begin() {
  std::lock_guard<std::mutex> lock(mu_);
  if (active_++ == 0) since_ = std::chrono::steady_clock::now();
}

void BusyClock::End() {
  std::lock_guard<std::mutex> lock(mu_);
  if (--active_ == 0) {
    busy_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                    std::chrono::steady_clock::now() - since_)
                    .count();
  }
}

int64_t BusyClock::BusyNs(std::chrono::steady_clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t ns = busy_ns_;
  if (active_ > 0 && now > since_) {
    ns += std::chrono::duration_cast<std::chrono::nanoseconds>(now - since_).count();
  }
  return ns;
}

Metrics::Metrics(const std::vector<std::pair<std::string, std::string>>& devices,
                 const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()) {
  auto& requests = BuildCounter()
                       .Name("gpusampler_requests_total")
                       .Help("RPCs finished, by method and gRPC status code.")
                       .Register(*registry_);
  auto& durations = BuildHistogram()
                        .Name("gpusampler_request_duration_seconds")
                        .Help("RPC duration from arrival to the final status, by method.")
                        .Register(*registry_);
  for (int m = 0; m < kNumMethods; ++m) {
    for (int c = 0; c < kNumCodes; ++c) {
      requests_[m][c] = &requests.Add({{"method", kMethodNames[m]}, {"code", kGrpcCodeNames[c]}});
    }
    durations_[m] = &durations.Add({{"method", kMethodNames[m]}}, LatencyBuckets());
  }
  queue_duration_ = &BuildHistogram()
                         .Name("gpusampler_queue_duration_seconds")
                         .Help("Time a request waited between acceptance and its launch.")
                         .Register(*registry_)
                         .Add({}, LatencyBuckets());
  stream_duration_ = &BuildHistogram()
                          .Name("gpusampler_stream_duration_seconds")
                          .Help("Lifetime of a SampleStream, from its arrival to its final status.")
                          .Register(*registry_)
                          .Add({}, StreamBuckets());
  queue_capacity_ = &BuildGauge()
                         .Name("gpusampler_queue_capacity")
                         .Help(
                             "Requests the scheduler queue holds before RESOURCE_EXHAUSTED "
                             "(--queue-capacity).")
                         .Register(*registry_)
                         .Add({});
  serving_ = &BuildGauge()
                  .Name("gpusampler_serving")
                  .Help(
                      "1 while grpc.health.v1 reports SERVING; 0 while warming up, draining "
                      "or after a device fault.")
                  .Register(*registry_)
                  .Add({});
  transport_rejected_ =
      &BuildCounter()
           .Name("gpusampler_transport_rejected_calls_total")
           .Help(
               "Calls gRPC refused before the service saw them (a message over the "
               "transport limit, a client gone before its request arrived); from channelz.")
           .Register(*registry_)
           .Add({});
  queue_depth_ = &BuildGauge()
                      .Name("gpusampler_queue_depth")
                      .Help("Requests waiting in the scheduler queue.")
                      .Register(*registry_)
                      .Add({});
  inflight_ = &BuildGauge()
                   .Name("gpusampler_inflight_requests")
                   .Help("Sampling requests accepted and not yet answered.")
                   .Register(*registry_)
                   .Add({});
  inflight_bytes_ = &BuildGauge()
                         .Name("gpusampler_inflight_bytes")
                         .Help(
                             "Request and response bytes held now, of the --max-inflight-bytes "
                             "budget.")
                         .Register(*registry_)
                         .Add({});
  datasets_ = &BuildGauge()
                   .Name("gpusampler_datasets")
                   .Help("Resident datasets stored.")
                   .Register(*registry_)
                   .Add({});
  // Each device that samples keeps a whole copy: host memory for CPU workers, device
  // memory for CUDA workers (docs/datasets.md).
  auto& dataset_bytes = BuildGauge()
                            .Name("gpusampler_dataset_bytes")
                            .Help(
                                "Bytes of resident datasets, stored and being uploaded, by "
                                "device that keeps a copy.")
                            .Register(*registry_);
  for (const auto& [name, uuid] : devices) {
    dataset_bytes_.push_back(&dataset_bytes.Add({{"device", name}}));
  }
  received_bytes_ = &BuildCounter()
                         .Name("gpusampler_received_bytes_total")
                         .Help("Serialized bytes of sampling requests received.")
                         .Register(*registry_)
                         .Add({});
  sent_bytes_ = &BuildCounter()
                     .Name("gpusampler_sent_bytes_total")
                     .Help("Serialized bytes of sampling responses sent.")
                     .Register(*registry_)
                     .Add({});
  auto& exhausted =
      BuildCounter()
          .Name("gpusampler_resource_exhausted_total")
          .Help(
              "RESOURCE_EXHAUSTED answers (also in gpusampler_requests_total), by method and "
              "reason: shed (queue or byte budget full; positive retry pushback), limit (over "
              "a configured limit; pushback -1, do not retry), other (no pushback: device "
              "memory).")
          .Register(*registry_);
  for (int m = 0; m < kNumMethods; ++m) {
    const char* reasons[] = {"shed", "limit", "other"};
    for (int r = 0; r < 3; ++r) {
      resource_exhausted_[m][r] =
          &exhausted.Add({{"method", kMethodNames[m]}, {"reason", reasons[r]}});
    }
  }
  auto& dropped = BuildCounter()
                      .Name("gpusampler_dropped_requests_total")
                      .Help("Requests dropped before launch (no kernel ran), by reason.")
                      .Register(*registry_);
  dropped_deadline_ = &dropped.Add({{"reason", "deadline"}});
  dropped_cancelled_ = &dropped.Add({{"reason", "cancelled"}});

  auto& compute = BuildHistogram()
                      .Name("gpusampler_compute_duration_seconds")
                      .Help("Duration of one launch (staging, sampling, copies), by device.")
                      .Register(*registry_);
  auto& batch_rows = BuildHistogram()
                         .Name("gpusampler_batch_rows")
                         .Help("Rows fused into one launch, by device.")
                         .Register(*registry_);
  auto& sampled = BuildCounter()
                      .Name("gpusampler_sampled_rows_total")
                      .Help("Rows sampled, by device.")
                      .Register(*registry_);
  auto& launches = BuildCounter()
                       .Name("gpusampler_launches_total")
                       .Help("Sampling launches (kernels) run, by device.")
                       .Register(*registry_);
  auto& busy = BuildGauge()
                   .Name("gpusampler_device_busy_ratio")
                   .Help(
                       "Fraction of the last update period with a launch running, by device "
                       "(own timing).")
                   .Register(*registry_);
  auto& busy_seconds =
      BuildCounter()
          .Name("gpusampler_device_busy_seconds_total")
          .Help(
              "Seconds during which at least one launch ran, by device (own timing, CPU "
              "workers too; rate() is the busy ratio).")
          .Register(*registry_);
  bool any_gpu = false;
  for (const auto& [name, uuid] : devices) {
    auto d = std::make_unique<DeviceMetrics>();
    d->name = name;
    d->uuid = uuid;
    d->compute = &compute.Add({{"device", name}}, LatencyBuckets());
    d->batch_rows = &batch_rows.Add({{"device", name}}, RowBuckets());
    d->sampled_rows = &sampled.Add({{"device", name}});
    d->launches = &launches.Add({{"device", name}});
    d->busy_ratio = &busy.Add({{"device", name}});
    d->busy_seconds = &busy_seconds.Add({{"device", name}});
    any_gpu = any_gpu || !uuid.empty();
    devices_.push_back(std::move(d));
  }
  if (any_gpu) {
    gpu_util_family_ = &BuildGauge()
                            .Name("gpusampler_gpu_utilization_ratio")
                            .Help("GPU utilization reported by NVML, [0, 1].")
                            .Register(*registry_);
    gpu_used_family_ = &BuildGauge()
                            .Name("gpusampler_gpu_memory_used_bytes")
                            .Help("GPU memory in use, reported by NVML.")
                            .Register(*registry_);
    gpu_total_family_ = &BuildGauge()
                             .Name("gpusampler_gpu_memory_total_bytes")
                             .Help("GPU memory, reported by NVML.")
                             .Register(*registry_);
  }
  short_rows_ = &BuildCounter()
                     .Name("gpusampler_short_rows_total")
                     .Help(
                         "Sampled rows with fewer than num_samples selected elements "
                         "(m_pos + m_neg < K); the rest of the row is padding.")
                     .Register(*registry_)
                     .Add({});
  positive_fraction_ = &BuildHistogram()
                            .Name("gpusampler_positive_fraction")
                            .Help("Realized share of positives per sampled row, m_pos / K.")
                            .Register(*registry_)
                            .Add({}, FractionBuckets());

  // Its series is added by StartUpdater, once NVML tells the CUDA version in use.
  build_ = build;
  build_info_family_ = &BuildGauge()
                            .Name("gpusampler_build_info")
                            .Help(
                                "Build of this server; always 1. cuda: the CUDA toolkit it "
                                "was compiled with; cuda_driver: the CUDA version of the "
                                "driver in use (none when serving on the CPU).")
                            .Register(*registry_);
  process_ = MakeProcessCollector();
  BuildRepositoryMetrics();
}

void Metrics::BuildRepositoryMetrics() {
  auto& loads = BuildCounter()
                    .Name("gpusampler_dataset_loads_total")
                    .Help(
                        "Datasets loaded from the --dataset-dir repository, by result (error: "
                        "a bad file, logged and skipped).")
                    .Register(*registry_);
  dataset_loads_ok_ = &loads.Add({{"result", "ok"}});
  dataset_loads_error_ = &loads.Add({{"result", "error"}});
  dataset_evictions_ = &BuildCounter()
                            .Name("gpusampler_dataset_evictions_total")
                            .Help(
                                "Datasets evicted from memory to make room under "
                                "--max-dataset-bytes (they stay in the repository).")
                            .Register(*registry_)
                            .Add({});
}

Metrics::~Metrics() { StopUpdater(); }

void Metrics::RecordRowQuality(const int32_t* num_positive, const int32_t* num_negative,
                               int64_t rows, int64_t k) {
  if (rows <= 0 || k <= 0) return;
  const Histogram::BucketBoundaries& bounds = FractionBuckets();
  // One ObserveMultiple per response rather than one locked Observe per row.
  std::vector<double> counts(bounds.size() + 1, 0.0);
  double sum = 0;
  int64_t short_rows = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const double fraction = static_cast<double>(num_positive[r]) / static_cast<double>(k);
    sum += fraction;
    counts[static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), fraction) -
                               bounds.begin())] += 1;
    if (int64_t{num_positive[r]} + num_negative[r] < k) ++short_rows;
  }
  positive_fraction_->ObserveMultiple(counts, sum);
  if (short_rows > 0) short_rows_->Increment(static_cast<double>(short_rows));
}

void Metrics::StartUpdater(std::chrono::milliseconds period) {
  if (gpu_util_family_ != nullptr) {
    std::string why;
    nvml_ = Nvml::Load(&why);
    if (!nvml_) {
      spdlog::warn("NVML unavailable, no GPU utilization or memory gauges: {}", why);
    } else {
      for (auto& d : devices_) {
        if (d->uuid.empty()) continue;
        const prometheus::Labels labels{{"device", d->name}, {"gpu_uuid", d->uuid}};
        d->gpu_utilization = &gpu_util_family_->Add(labels);
        d->gpu_memory_used = &gpu_used_family_->Add(labels);
        d->gpu_memory_total = &gpu_total_family_->Add(labels);
      }
    }
  } else {
    spdlog::info("no CUDA device in use: NVML not loaded, no GPU gauges");
  }
  std::string cuda_driver = "none";
  if (build_.backend == "cuda") cuda_driver = nvml_ ? nvml_->CudaDriverVersion() : "unknown";
  build_info_family_
      ->Add({{"version", build_.version},
             {"revision", build_.revision},
             {"cuda", build_.cuda},
             {"cuda_driver", cuda_driver},
             {"backend", build_.backend}})
      .Set(1);
  last_update_ = std::chrono::steady_clock::now();
  updater_ = std::thread([this, period] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, period, [this] { return stop_; })) Update();
  });
}

void Metrics::SetTransportRejections(std::function<int64_t()> sample) {
  std::lock_guard<std::mutex> lock(mu_);
  transport_sample_ = std::move(sample);
}

void Metrics::StopUpdater() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (updater_.joinable()) updater_.join();
}

void Metrics::Update() {
  const auto now = std::chrono::steady_clock::now();
  const double wall_ns = static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - last_update_).count());
  last_update_ = now;
  if (transport_sample_) {
    const int64_t n = transport_sample_();
    if (n > transport_counted_) {
      transport_rejected_->Increment(static_cast<double>(n - transport_counted_));
      transport_counted_ = n;
    }
  }
  for (auto& d : devices_) {
    const int64_t busy = d->busy.BusyNs(now);
    if (wall_ns > 0) {
      d->busy_ratio->Set(std::min(1.0, static_cast<double>(busy - d->last_busy_ns) / wall_ns));
    }
    if (busy > d->last_busy_ns) d->busy_seconds->Increment((busy - d->last_busy_ns) * 1e-9);
    d->last_busy_ns = busy;
    Nvml::Reading r;
    if (nvml_ && d->gpu_utilization && nvml_->Read(d->uuid, &r)) {
      d->gpu_utilization->Set(r.utilization);
      d->gpu_memory_used->Set(static_cast<double>(r.memory_used));
      d->gpu_memory_total->Set(static_cast<double>(r.memory_total));
    }
  }
}

void Metrics::SetDatasets(const DatasetRegistry* datasets) {
  if (datasets == nullptr) return;
  datasets_->Set(static_cast<double>(datasets->count()));
  for (prometheus::Gauge* g : dataset_bytes_) g->Set(static_cast<double>(datasets->bytes()));
}

}  // namespace gpusampler::server
