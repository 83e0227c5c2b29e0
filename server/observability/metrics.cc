#include "observability/metrics.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cassert>
#include <utility>

#include "gpusampler/common/status_codes.hpp"
#include "observability/nvml.hpp"
#include "observability/process_metrics.hpp"

namespace gpusampler::server {
namespace {

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

const char* kMethodNames[kNumMethods] = {"Sample",         "SampleStream",     "GetServerInfo",
                                         "CreateDataset",  "DeleteDataset",    "ListDatasets",
                                         "RegisterRegion", "UnregisterRegion", "ListRegions"};
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

namespace {

enum class Type { kCounter, kGauge, kHistogram };

// Every metric family: its name, type, label names and help, in the order of exposition
// (prometheus-cpp exposes counters, then gauges, then histograms, each in this order).
// The GPU families exist only on a server with a CUDA device.
struct FamilySpec {
  const char* name;
  Type type;
  std::vector<std::string> labels;
  const char* help;
};

enum FamilyId : int {
  kRequests,
  kRequestDuration,
  kQueueDuration,
  kStreamDuration,
  kQueueCapacity,
  kServing,
  kTransportRejected,
  kQueueDepth,
  kInflight,
  kInflightBytes,
  kDatasets,
  kDatasetBytes,
  kReceivedBytes,
  kSentBytes,
  kResourceExhausted,
  kDropped,
  kCompute,
  kBatchRows,
  kSampledRows,
  kLaunches,
  kBusyRatio,
  kBusySeconds,
  kGpuUtilization,
  kGpuMemoryUsed,
  kGpuMemoryTotal,
  kShortRows,
  kPositiveFraction,
  kBuildInfo,
  kDatasetLoads,
  kDatasetEvictions,
  kShmRegions,       // shared memory (SPEC section 9)
  kShmWrittenBytes,  // shared memory (SPEC section 9)
  kDatasetScanFailures,
  kConnections,
  kRefusedConnections,
  kNumFamilies,
};

const FamilySpec kFamilies[kNumFamilies] = {
    {"gpusampler_requests_total",
     Type::kCounter,
     {"method", "code"},
     "RPCs finished, by method and gRPC status code."},
    {"gpusampler_request_duration_seconds",
     Type::kHistogram,
     {"method"},
     "RPC duration from arrival to the final status, by method."},
    {"gpusampler_queue_duration_seconds",
     Type::kHistogram,
     {},
     "Time a request waited between acceptance and its launch."},
    {"gpusampler_stream_duration_seconds",
     Type::kHistogram,
     {},
     "Lifetime of a SampleStream, from its arrival to its final status."},
    {"gpusampler_queue_capacity",
     Type::kGauge,
     {},
     "Requests the scheduler queue holds before RESOURCE_EXHAUSTED "
     "(--queue-capacity)."},
    {"gpusampler_serving",
     Type::kGauge,
     {},
     "1 while grpc.health.v1 reports SERVING; 0 while warming up, draining "
     "or after a device fault."},
    {"gpusampler_transport_rejected_calls_total",
     Type::kCounter,
     {},
     "Calls gRPC refused before the service saw them (a message over the "
     "transport limit, a client gone before its request arrived); from channelz."},
    {"gpusampler_queue_depth", Type::kGauge, {}, "Requests waiting in the scheduler queue."},
    {"gpusampler_inflight_requests",
     Type::kGauge,
     {},
     "Sampling requests accepted and not yet answered."},
    {"gpusampler_inflight_bytes",
     Type::kGauge,
     {},
     "Request and response bytes held now, of the --max-inflight-bytes "
     "budget."},
    {"gpusampler_datasets", Type::kGauge, {}, "Resident datasets stored."},
    {"gpusampler_dataset_bytes",
     Type::kGauge,
     {"device"},
     "Bytes of resident datasets, stored and being uploaded, by "
     "device that keeps a copy."},
    {"gpusampler_received_bytes_total",
     Type::kCounter,
     {},
     "Serialized bytes of sampling requests received."},
    {"gpusampler_sent_bytes_total",
     Type::kCounter,
     {},
     "Serialized bytes of sampling responses sent."},
    {"gpusampler_resource_exhausted_total",
     Type::kCounter,
     {"method", "reason"},
     "RESOURCE_EXHAUSTED answers (also in gpusampler_requests_total), by method and "
     "reason: shed (queue or byte budget full; positive retry pushback), limit (over "
     "a configured limit; pushback -1, do not retry), other (no pushback: device "
     "memory)."},
    {"gpusampler_dropped_requests_total",
     Type::kCounter,
     {"reason"},
     "Requests dropped before launch (no kernel ran), by reason."},
    {"gpusampler_compute_duration_seconds",
     Type::kHistogram,
     {"device"},
     "Duration of one launch (staging, sampling, copies), by device."},
    {"gpusampler_batch_rows",
     Type::kHistogram,
     {"device"},
     "Rows fused into one launch, by device."},
    {"gpusampler_sampled_rows_total", Type::kCounter, {"device"}, "Rows sampled, by device."},
    {"gpusampler_launches_total",
     Type::kCounter,
     {"device"},
     "Sampling launches (kernels) run, by device."},
    {"gpusampler_device_busy_ratio",
     Type::kGauge,
     {"device"},
     "Fraction of the last update period with a launch running, by device "
     "(own timing)."},
    {"gpusampler_device_busy_seconds_total",
     Type::kCounter,
     {"device"},
     "Seconds during which at least one launch ran, by device (own timing, CPU "
     "workers too; rate() is the busy ratio)."},
    {"gpusampler_gpu_utilization_ratio",
     Type::kGauge,
     {"device", "gpu_uuid"},
     "GPU utilization reported by NVML, [0, 1]."},
    {"gpusampler_gpu_memory_used_bytes",
     Type::kGauge,
     {"device", "gpu_uuid"},
     "GPU memory in use, reported by NVML."},
    {"gpusampler_gpu_memory_total_bytes",
     Type::kGauge,
     {"device", "gpu_uuid"},
     "GPU memory, reported by NVML."},
    {"gpusampler_short_rows_total",
     Type::kCounter,
     {},
     "Sampled rows with fewer than num_samples selected elements "
     "(m_pos + m_neg < K); the rest of the row is padding."},
    {"gpusampler_positive_fraction",
     Type::kHistogram,
     {},
     "Realized share of positives per sampled row, m_pos / K."},
    {"gpusampler_build_info",
     Type::kGauge,
     {"version", "revision", "cuda", "cuda_driver", "backend"},
     "Build of this server; always 1. cuda: the CUDA toolkit it "
     "was compiled with; cuda_driver: the CUDA version of the "
     "driver in use (none when serving on the CPU)."},
    {"gpusampler_dataset_loads_total",
     Type::kCounter,
     {"result"},
     "Datasets loaded from the --dataset-dir repository, by result (error: "
     "a bad file, logged and skipped)."},
    {"gpusampler_dataset_evictions_total",
     Type::kCounter,
     {},
     "Datasets evicted from memory to make room under "
     "--max-dataset-bytes (they stay in the repository)."},
    // Shared memory (SPEC section 9).
    {"gpusampler_shared_memory_regions",
     Type::kGauge,
     {},
     "Shared-memory regions registered (RegisterRegion, all tokens) and mapped now."},
    {"gpusampler_shared_memory_written_bytes_total",
     Type::kCounter,
     {},
     "Answer bytes written into shared-memory regions instead of the response."},
    {"gpusampler_dataset_scan_failures_total",
     Type::kCounter,
     {},
     "Re-scans of --dataset-dir that could not list the directory (EMFILE, "
     "EACCES, ...); the resident datasets were kept."},
    {"gpusampler_connections",
     Type::kGauge,
     {},
     "Connections open on the gRPC port (at most --max-connections)."},
    {"gpusampler_refused_connections_total",
     Type::kCounter,
     {"reason"},
     "New gRPC connections closed as soon as they were accepted, by reason (limit: "
     "--max-connections were open; descriptors: the process was out of file descriptors)."},
};

bool IsGpuFamily(int id) {
  return id == kGpuUtilization || id == kGpuMemoryUsed || id == kGpuMemoryTotal;
}

template <class T>
constexpr Type TypeOf();
template <>
constexpr Type TypeOf<prometheus::Counter>() {
  return Type::kCounter;
}
template <>
constexpr Type TypeOf<prometheus::Gauge>() {
  return Type::kGauge;
}
template <>
constexpr Type TypeOf<Histogram>() {
  return Type::kHistogram;
}

template <class T>
prometheus::Family<T>* Register(const FamilySpec& spec, prometheus::Registry* registry) {
  return &prometheus::detail::Builder<T>().Name(spec.name).Help(spec.help).Register(*registry);
}

}  // namespace

Metrics::Metrics(const std::vector<std::pair<std::string, std::string>>& devices,
                 const BuildInfo& build)
    : registry_(std::make_shared<prometheus::Registry>()), build_(build) {
  const bool any_gpu = std::any_of(devices.begin(), devices.end(),
                                   [](const auto& device) { return !device.second.empty(); });
  RegisterFamilies(any_gpu);
  BuildRequestMetrics();
  BuildServerMetrics();
  for (const auto& [name, uuid] : devices) {
    // Each device that samples keeps a whole copy: host memory for CPU workers, device
    // memory for CUDA workers (docs/datasets.md).
    dataset_bytes_.push_back(Add<prometheus::Gauge>(kDatasetBytes, {name}));
  }
  for (const auto& [name, uuid] : devices) devices_.push_back(BuildDeviceMetrics(name, uuid));
  short_rows_ = Add<prometheus::Counter>(kShortRows, {});
  positive_fraction_ = Add<Histogram>(kPositiveFraction, {}, FractionBuckets());
  // The build_info series is added by StartUpdater, once NVML tells the CUDA version in use.
  process_ = MakeProcessCollector();
  dataset_loads_ok_ = Add<prometheus::Counter>(kDatasetLoads, {"ok"});
  dataset_loads_error_ = Add<prometheus::Counter>(kDatasetLoads, {"error"});
  dataset_evictions_ = Add<prometheus::Counter>(kDatasetEvictions, {});
  dataset_scan_failures_ = Add<prometheus::Counter>(kDatasetScanFailures, {});
  connections_ = Add<prometheus::Gauge>(kConnections, {});
  refused_connections_[0] = Add<prometheus::Counter>(kRefusedConnections, {"limit"});
  refused_connections_[1] = Add<prometheus::Counter>(kRefusedConnections, {"descriptors"});
}

void Metrics::RegisterFamilies(bool any_gpu) {
  families_.assign(kNumFamilies, nullptr);
  for (int id = 0; id < kNumFamilies; ++id) {
    const FamilySpec& spec = kFamilies[id];
    assert(spec.name != nullptr);  // a row for every FamilyId
    if (IsGpuFamily(id) && !any_gpu) continue;
    switch (spec.type) {
      case Type::kCounter:
        families_[id] = Register<prometheus::Counter>(spec, registry_.get());
        break;
      case Type::kGauge:
        families_[id] = Register<prometheus::Gauge>(spec, registry_.get());
        break;
      case Type::kHistogram:
        families_[id] = Register<Histogram>(spec, registry_.get());
        break;
    }
  }
}

template <class T>
prometheus::Family<T>& Metrics::family(int id) {
  assert(kFamilies[id].type == TypeOf<T>() && families_[id] != nullptr);
  return static_cast<prometheus::Family<T>&>(*families_[id]);
}

template <class T, class... Args>
T* Metrics::Add(int id, const std::vector<std::string>& values, Args&&... args) {
  const std::vector<std::string>& names = kFamilies[id].labels;
  assert(names.size() == values.size());
  prometheus::Labels labels;
  for (size_t i = 0; i < names.size(); ++i) labels.emplace(names[i], values[i]);
  return &family<T>(id).Add(labels, std::forward<Args>(args)...);
}

// Requests by method: finished by status code, their duration, RESOURCE_EXHAUSTED by reason.
void Metrics::BuildRequestMetrics() {
  auto& requests = family<prometheus::Counter>(kRequests);
  auto& durations = family<Histogram>(kRequestDuration);
  for (int m = 0; m < kNumMethods; ++m) {
    for (int c = 0; c < kNumCodes; ++c) {
      requests_[m][c] = &requests.Add({{"method", kMethodNames[m]}, {"code", kGrpcCodeNames[c]}});
    }
    durations_[m] = &durations.Add({{"method", kMethodNames[m]}}, LatencyBuckets());
  }
  for (int m = 0; m < kNumMethods; ++m) {
    const char* reasons[] = {"shed", "limit", "other"};
    for (int r = 0; r < 3; ++r) {
      resource_exhausted_[m][r] =
          Add<prometheus::Counter>(kResourceExhausted, {kMethodNames[m], reasons[r]});
    }
  }
}

// The queue, the lifecycle, the transport and the bytes in flight.
void Metrics::BuildServerMetrics() {
  queue_duration_ = Add<Histogram>(kQueueDuration, {}, LatencyBuckets());
  stream_duration_ = Add<Histogram>(kStreamDuration, {}, StreamBuckets());
  queue_capacity_ = Add<prometheus::Gauge>(kQueueCapacity, {});
  serving_ = Add<prometheus::Gauge>(kServing, {});
  transport_rejected_ = Add<prometheus::Counter>(kTransportRejected, {});
  queue_depth_ = Add<prometheus::Gauge>(kQueueDepth, {});
  inflight_ = Add<prometheus::Gauge>(kInflight, {});
  inflight_bytes_ = Add<prometheus::Gauge>(kInflightBytes, {});
  datasets_ = Add<prometheus::Gauge>(kDatasets, {});
  received_bytes_ = Add<prometheus::Counter>(kReceivedBytes, {});
  sent_bytes_ = Add<prometheus::Counter>(kSentBytes, {});
  shm_regions_ = Add<prometheus::Gauge>(kShmRegions, {});
  shm_written_bytes_ = Add<prometheus::Counter>(kShmWrittenBytes, {});
  dropped_deadline_ = Add<prometheus::Counter>(kDropped, {"deadline"});
  dropped_cancelled_ = Add<prometheus::Counter>(kDropped, {"cancelled"});
}

std::unique_ptr<DeviceMetrics> Metrics::BuildDeviceMetrics(const std::string& name,
                                                           const std::string& uuid) {
  auto d = std::make_unique<DeviceMetrics>();
  d->name = name;
  d->uuid = uuid;
  d->compute = Add<Histogram>(kCompute, {name}, LatencyBuckets());
  d->batch_rows = Add<Histogram>(kBatchRows, {name}, RowBuckets());
  d->sampled_rows = Add<prometheus::Counter>(kSampledRows, {name});
  d->launches = Add<prometheus::Counter>(kLaunches, {name});
  d->busy_ratio = Add<prometheus::Gauge>(kBusyRatio, {name});
  d->busy_seconds = Add<prometheus::Counter>(kBusySeconds, {name});
  return d;
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
  if (families_[kGpuUtilization] != nullptr) {
    std::string why;
    nvml_ = Nvml::Load(&why, nvml_library_);
    if (!nvml_) {
      spdlog::warn("NVML unavailable, no GPU utilization or memory gauges: {}", why);
    } else {
      for (auto& d : devices_) {
        if (d->uuid.empty()) continue;
        // Each gauge appears with its first reading: a MIG slice never reports utilization,
        // and a gauge stuck at 0 would read as an idle GPU.
        d->nvml = true;
      }
    }
  } else {
    spdlog::info("no CUDA device in use: NVML not loaded, no GPU gauges");
  }
  std::string cuda_driver = "none";
  if (build_.backend == "cuda") cuda_driver = nvml_ ? nvml_->CudaDriverVersion() : "unknown";
  Add<prometheus::Gauge>(
      kBuildInfo, {build_.version, build_.revision, build_.cuda, cuda_driver, build_.backend})
      ->Set(1);
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
    if (nvml_ && d->nvml && nvml_->Read(d->uuid, &r)) {
      if (r.has_utilization) {
        if (d->gpu_utilization == nullptr) {
          d->gpu_utilization = Add<prometheus::Gauge>(kGpuUtilization, {d->name, d->uuid});
        }
        d->gpu_utilization->Set(r.utilization);
      }
      if (r.has_memory) {
        if (d->gpu_memory_used == nullptr) {
          d->gpu_memory_used = Add<prometheus::Gauge>(kGpuMemoryUsed, {d->name, d->uuid});
          d->gpu_memory_total = Add<prometheus::Gauge>(kGpuMemoryTotal, {d->name, d->uuid});
        }
        d->gpu_memory_used->Set(static_cast<double>(r.memory_used));
        d->gpu_memory_total->Set(static_cast<double>(r.memory_total));
      }
    }
  }
}

void Metrics::SetDatasets(int64_t count, int64_t bytes) {
  datasets_->Set(static_cast<double>(count));
  for (prometheus::Gauge* g : dataset_bytes_) g->Set(static_cast<double>(bytes));
}

}  // namespace gpusampler::server
