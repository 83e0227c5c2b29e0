// Every metric of SPEC section 4. Families and children are built once, in the
// constructor; the hot path only increments, observes and sets (all thread-safe).
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "core/status.hpp"

namespace gpusampler::server {

class Nvml;

enum class Method : int {
  kSample = 0,
  kSampleStream = 1,
  kGetServerInfo = 2,
  kCreateDataset = 3,
  kDeleteDataset = 4,
  kListDatasets = 5,
  kRegisterRegion = 6,  // shared memory (SPEC section 9)
  kUnregisterRegion = 7,
  kListRegions = 8,
};
constexpr int kNumMethods = 9;
constexpr int kNumCodes = 17;  // gRPC status codes 0..16

// Time during which at least one launch of a device ran. Thread-safe.
class BusyClock {
 public:
  void Begin();
  void End();
  // Busy nanoseconds accumulated up to `now`.
  int64_t BusyNs(std::chrono::steady_clock::time_point now);

 private:
  std::mutex mu_;
  int active_ = 0;
  int64_t busy_ns_ = 0;
  std::chrono::steady_clock::time_point since_{};
};

struct DeviceMetrics {
  std::string name;  // "cpu", "cuda:0"
  std::string uuid;  // CUDA only
  prometheus::Histogram* compute = nullptr;
  prometheus::Histogram* batch_rows = nullptr;
  prometheus::Counter* sampled_rows = nullptr;
  prometheus::Counter* launches = nullptr;
  prometheus::Gauge* busy_ratio = nullptr;
  prometheus::Counter* busy_seconds = nullptr;  // advanced by the updater
  // NVML gauges, each created with its first reading (the updater's thread); null until then
  // and when NVML is unavailable or does not report it.
  bool nvml = false;  // a CUDA device NVML is asked about
  prometheus::Gauge* gpu_utilization = nullptr;
  prometheus::Gauge* gpu_memory_used = nullptr;
  prometheus::Gauge* gpu_memory_total = nullptr;
  BusyClock busy;
  int64_t last_busy_ns = 0;
};

struct BuildInfo {
  std::string version, revision;
  std::string cuda;     // CUDA toolkit compiled against; "none" without the CUDA backend
  std::string backend;  // what serves: "cpu" or "cuda"
};

class Metrics {
 public:
  // `devices`: (name, uuid) of each device the server samples on (uuid empty for cpu).
  Metrics(const std::vector<std::pair<std::string, std::string>>& devices, const BuildInfo& build);
  ~Metrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  // Loads NVML when a CUDA device is in use (logs why not otherwise) and starts the thread
  // that refreshes the busy ratios and GPU gauges every `period`.
  void StartUpdater(std::chrono::milliseconds period);
  // The NVML library StartUpdater loads (tests name a stand-in); call before StartUpdater.
  void set_nvml_library(const std::string& path) { nvml_library_ = path; }
  // Where gpusampler_transport_rejected_calls_total comes from: called by the updater, returns
  // the calls rejected so far (TransportRejections::Sample). Thread-safe.
  void SetTransportRejections(std::function<int64_t()> sample);
  void StopUpdater();

  void RecordRequest(Method method, Code code, double seconds) {
    requests_[static_cast<int>(method)][static_cast<int>(code)]->Increment();
    durations_[static_cast<int>(method)]->Observe(seconds);
  }
  // One RESOURCE_EXHAUSTED answer, by what its retry pushback says (status.hpp): positive,
  // load shedding ("shed": queue or byte budget full, retry later); -1, a request over a
  // configured limit ("limit": do not retry); none, anything else ("other": device memory).
  void RecordResourceExhausted(Method method, int64_t retry_pushback_ms) {
    const int reason = retry_pushback_ms > 0 ? 0 : retry_pushback_ms < 0 ? 1 : 2;
    resource_exhausted_[static_cast<int>(method)][reason]->Increment();
  }
  void RecordQueue(double seconds) { queue_duration_->Observe(seconds); }
  // Lifetime of one SampleStream, arrival to final status.
  void RecordStream(double seconds) { stream_duration_->Observe(seconds); }
  // Sampling quality of one response of `rows` rows with K = `k`: counts the rows with
  // m_pos + m_neg < K (gpusampler_short_rows_total) and observes each row's m_pos / K
  // (gpusampler_positive_fraction). `num_positive` and `num_negative` hold `rows` values.
  void RecordRowQuality(const int32_t* num_positive, const int32_t* num_negative, int64_t rows,
                        int64_t k);
  // gpusampler_datasets and gpusampler_dataset_bytes: `count` resident datasets holding
  // `bytes` (stored and being uploaded; DatasetRegistry::count and bytes).
  void SetDatasets(int64_t count, int64_t bytes);
  DeviceMetrics& device(int i) { return *devices_[static_cast<size_t>(i)]; }
  int num_devices() const { return static_cast<int>(devices_.size()); }

  prometheus::Gauge& queue_depth() { return *queue_depth_; }
  prometheus::Gauge& inflight() { return *inflight_; }
  // gpusampler_inflight_bytes: the --max-inflight-bytes budget in use (ByteBudget).
  prometheus::Gauge& inflight_bytes() { return *inflight_bytes_; }
  prometheus::Gauge& queue_capacity() { return *queue_capacity_; }
  // 1 while health reports SERVING, else 0.
  prometheus::Gauge& serving() { return *serving_; }
  // process_* (resident memory, CPU seconds, open fds, start time), read at scrape time;
  // expose it beside registry().
  std::shared_ptr<prometheus::Collectable> process_collector() const { return process_; }
  prometheus::Counter& received_bytes() { return *received_bytes_; }
  prometheus::Counter& sent_bytes() { return *sent_bytes_; }
  prometheus::Counter& dropped_deadline() { return *dropped_deadline_; }
  prometheus::Counter& dropped_cancelled() { return *dropped_cancelled_; }
  // The dataset repository (SPEC section 6): datasets loaded from --dataset-dir by result,
  // and datasets evicted from memory (they stay in the repository).
  prometheus::Counter& dataset_loads(bool ok) {
    return ok ? *dataset_loads_ok_ : *dataset_loads_error_;
  }
  prometheus::Counter& dataset_evictions() { return *dataset_evictions_; }
  // Shared memory (SPEC section 9): regions mapped now; answer bytes written into them.
  prometheus::Gauge& shm_regions() { return *shm_regions_; }
  prometheus::Counter& shm_written_bytes() { return *shm_written_bytes_; }
  // Re-scans that could not list --dataset-dir (the resident datasets were kept).
  prometheus::Counter& dataset_scan_failures() { return *dataset_scan_failures_; }
  // The gRPC port's listener: connections open; connections refused (0: the limit,
  // 1: out of descriptors).
  prometheus::Gauge& connections() { return *connections_; }
  prometheus::Counter& refused_connections(int reason) { return *refused_connections_[reason]; }

 private:
  // The steps of the constructor: every family from the table (metrics.cc), then the
  // children that exist from the start.
  void RegisterFamilies(bool any_gpu);
  void BuildRequestMetrics();
  void BuildServerMetrics();
  std::unique_ptr<DeviceMetrics> BuildDeviceMetrics(const std::string& name,
                                                    const std::string& uuid);
  // Family `id` of the table, as its type.
  template <class T>
  prometheus::Family<T>& family(int id);
  // The child of family `id` with these label values (in the table's label order).
  template <class T, class... Args>
  T* Add(int id, const std::vector<std::string>& values, Args&&... args);
  void Update();

  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<prometheus::Collectable*> families_;  // by the table's index; null: absent
  std::array<std::array<prometheus::Counter*, kNumCodes>, kNumMethods> requests_{};
  std::array<prometheus::Histogram*, kNumMethods> durations_{};
  std::array<std::array<prometheus::Counter*, 3>, kNumMethods> resource_exhausted_{};
  prometheus::Histogram* queue_duration_ = nullptr;
  prometheus::Histogram* stream_duration_ = nullptr;
  prometheus::Gauge* queue_capacity_ = nullptr;
  BuildInfo build_;
  std::shared_ptr<prometheus::Collectable> process_;
  prometheus::Counter* transport_rejected_ = nullptr;
  prometheus::Gauge* serving_ = nullptr;
  std::function<int64_t()> transport_sample_;  // under mu_
  int64_t transport_counted_ = 0;              // under mu_
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Gauge* inflight_ = nullptr;
  prometheus::Gauge* inflight_bytes_ = nullptr;
  prometheus::Gauge* datasets_ = nullptr;
  std::vector<prometheus::Gauge*> dataset_bytes_;  // one per device
  prometheus::Counter* received_bytes_ = nullptr;
  prometheus::Counter* sent_bytes_ = nullptr;
  prometheus::Gauge* shm_regions_ = nullptr;          // shared memory
  prometheus::Counter* shm_written_bytes_ = nullptr;  // shared memory
  prometheus::Counter* dropped_deadline_ = nullptr;
  prometheus::Counter* dropped_cancelled_ = nullptr;
  prometheus::Counter* short_rows_ = nullptr;
  prometheus::Histogram* positive_fraction_ = nullptr;
  prometheus::Counter* dataset_loads_ok_ = nullptr;
  prometheus::Counter* dataset_loads_error_ = nullptr;
  prometheus::Counter* dataset_evictions_ = nullptr;
  prometheus::Counter* dataset_scan_failures_ = nullptr;
  prometheus::Gauge* connections_ = nullptr;
  std::array<prometheus::Counter*, 2> refused_connections_{};
  std::vector<std::unique_ptr<DeviceMetrics>> devices_;

  std::unique_ptr<Nvml> nvml_;
  std::string nvml_library_ = "libnvidia-ml.so.1";
  std::thread updater_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::chrono::steady_clock::time_point last_update_{};
};

}  // namespace gpusampler::server
