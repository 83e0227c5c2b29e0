// The staged launch: one fused launch of several sampling requests, from plain request
// descriptions to per-request output views, on any backend. Everything between a request and
// the kernels lives here (row descriptors, section layout and alignment, staging, uploads, the
// feature gather, the download, output carving), so that the server's worker only converts
// requests and outputs, and benchmarks and tests launch exactly as the server does.
//
// Where the data lives:
//   - Host backend (the CPU backend, or cuda-sim in host mode): the kernels read every
//     request's labels and features in place; nothing is copied in.
//   - Device backend (CUDA, or the cuda-sim device): a request's labels and features are read
//     in place when they are resident in the device's memory (LaunchRequest::device_labels /
//     device_features: a resident dataset); then a step copies only the small tables (row
//     descriptors, with the seeds) to the device. Host-resident labels are staged in pinned
//     memory and uploaded with the tables, in one copy. Host-resident features never cross
//     PCIe: the K selected rows per row are gathered on the host once the indices are back.
//   - One feature-gather design: features in the launch's memory space are written to the
//     output slots by the sampling kernels themselves (RowDesc::feature_offset); features
//     elsewhere are gathered on the host by kernels::GatherRows from the returned indices.
//
// Rows of one launch read from several sources (a staging section, one or more resident
// datasets) through one base pointer: Batch::labels (Batch::features) is the lowest of the
// sources' addresses and each row's offset is its source's distance from it plus its start.
// Device memory is one flat address space (CUDA's unified addressing), so the kernels see
// plain non-negative offsets.
//
// A device launch is at most three stream operations: on CUDA the upload, the kernels and
// the download are captured into one CUDA graph (one operation; one instantiated graph per
// stage set of the pipeline, updated in place by each launch of that set) and completion is
// one host callback; the cuda-sim device models capture the same way (one queued operation), and
// counts the operations (StreamOperations in device.hpp). Not thread-safe: one caller at a
// time (a server worker owns one).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {

class CudaLauncher;
struct LaunchSizes;
class GraphCache;   // kernels/src/launch/graph_cache.hpp
struct LaunchPlan;  // kernels/src/launch/plan.hpp

// One request of a launch: B rows sampled with one spec and seed (SPEC section 1).
struct LaunchRequest {
  SamplingSpec spec;
  uint64_t seed = 0;
  DType label_dtype = DType::kInt64;
  int64_t num_rows = 0;
  // num_rows + 1 element offsets: row r has row_offsets[r + 1] - row_offsets[r] elements.
  const int64_t* row_offsets = nullptr;
  // Where row r starts in the label (and feature) source, in elements; null: row_offsets[r]
  // (rows back to back). For dataset rows named in any order.
  const int64_t* row_start = nullptr;
  // The labels in host memory. For a device backend, device_labels (the same labels resident
  // in that device's memory) is read instead when set; one of the two is required when the
  // request has elements.
  const uint8_t* labels = nullptr;
  const uint8_t* device_labels = nullptr;
  // Optional features: feature_row_bytes bytes per element; same rule as the labels.
  int64_t feature_row_bytes = 0;
  const uint8_t* features = nullptr;
  const uint8_t* device_features = nullptr;
  // Optional: host memory of num_rows * k * feature_row_bytes bytes where the output feature
  // rows go instead of the launch's own buffer (an answer written into shared memory). A
  // host backend's kernels gather them straight there, and so does a device launch's host
  // gather of host-resident features; features read on a device come back with the other
  // outputs (one download into pinned memory) and are left there. LaunchOutput::features ==
  // features_out says they were written there.
  uint8_t* features_out = nullptr;
  // Optional FLOAT32 scores (SPEC section 7), one per element, in host memory, laid out and
  // indexed like the labels (row_offsets / row_start). Needed when spec.classes has a class
  // that is not UNIFORM; staged to the device with the labels.
  const float* scores = nullptr;
  // Whether a binary spec written as classes runs as the binary rows (BatchBuilder's
  // lowering); tests turn it off to run the class path on it.
  bool lower_binary = true;
};

// One request's outputs, in host memory owned by the StagedLaunch; valid until its next Run
// or Reserve. Row r's K slots are [r * k, (r + 1) * k).
struct LaunchOutput {
  int64_t num_rows = 0;
  int64_t k = 0;
  const int64_t* indices = nullptr;       // [num_rows * k], -1 for padding
  const uint8_t* labels = nullptr;        // [num_rows * k] in the request's label dtype
  const int32_t* num_positive = nullptr;  // [num_rows]
  const int32_t* num_negative = nullptr;  // [num_rows]
  const uint8_t* features = nullptr;      // [num_rows * k * feature_row_bytes]; null without
  // With spec.classes: C and m_c per row ([num_rows * num_classes]); 0 and null without.
  int32_t num_classes = 0;
  const int32_t* num_per_class = nullptr;
};

// What the last Run did, for metrics and benchmarks.
struct StagedStats {
  int64_t rows = 0;
  int64_t upload_bytes = 0;    // host to device (tables + staged labels)
  int64_t download_bytes = 0;  // device to host (outputs)
  // Stream operations the launch enqueued, as counted by the cuda-sim device; -1 where the
  // device does not count them (CUDA, host backends).
  int64_t stream_ops = -1;
  bool graph = false;  // the device work ran as one captured graph
  // ... which this launch captured (false: a graph captured by an earlier launch of the same
  // size class, buffers and copy sizes was replayed; see GraphCache)
  bool graph_captured = false;
};

// Sizes a launch may reach without allocating (StagedLaunch::Reserve).
struct StagedSizes {
  int64_t rows = 0;
  int64_t elements = 0;       // label elements staged from the host (at most 8 bytes each)
  int64_t slots = 0;          // output slots
  int64_t feature_bytes = 0;  // output feature bytes (all slots)
  // Classes (SPEC section 7): scores staged (one per element), compiled class-table bytes
  // (classes.hpp's ClassTableBytes per request with classes), num_per_class entries.
  int64_t scores = 0;
  int64_t class_table_bytes = 0;
  int64_t class_outputs = 0;
};

class StagedLaunch {
 public:
  // Over a host backend (memory_space() == kHost); `name` is its device label.
  explicit StagedLaunch(std::unique_ptr<Backend> backend);
  // Over CUDA device `device`, or the cuda-sim device (kSimDevice), with its own stream;
  // `timeout`: how long a launch may take before it is a device fault. Throws
  // Error(kUnavailable) without the device.
  StagedLaunch(int device, std::chrono::milliseconds timeout);
  ~StagedLaunch();
  StagedLaunch(const StagedLaunch&) = delete;
  StagedLaunch& operator=(const StagedLaunch&) = delete;

  // "cpu", "cuda:N" or "cuda-sim".
  const std::string& name() const { return name_; }
  bool on_device() const { return launcher_ != nullptr; }
  // The device index (kSimDevice for cuda-sim); -2 for a host backend.
  int device() const { return device_; }
  Backend& backend();
  // After a launch timed out every later Run throws kDeviceFault.
  bool faulted() const;

  // Grows staging, device buffers and scratch to hold a launch of `sizes` so that Run then
  // allocates nothing. Allocating synchronizes the device: call it at start-up or between
  // launches. Throws Error(kOutOfMemory).
  void Reserve(const StagedSizes& sizes);

  // Samples every request's rows fused into one launch and returns each request's outputs
  // (in request order). Blocks until they are on the host (a device launch waits at most the
  // timeout). Throws Error: kInvalidArgument (a bad row or a request without its labels),
  // kOutOfMemory, kDeviceFault.
  const std::vector<LaunchOutput>& Run(const std::vector<LaunchRequest>& requests);
  const StagedStats& last_stats() const { return stats_; }

  // Turns the capture of device work into CUDA graphs off (on: the default) — for tests and
  // for a device where capture fails. A failed capture also turns it off, with one note on
  // stderr, and the launch runs uncaptured.
  void set_use_graphs(bool on);

 private:
  using Plan = LaunchPlan;
  struct Bases {
    uintptr_t labels = 0;
    uintptr_t features = 0;
    uintptr_t out_features = 0;  // host backends: the kernels' feature output base
  };
  static Batch BatchOf(const Plan& plan, const Bases& bases, const RowDesc* rows,
                       const RowDesc* host_rows, uint8_t* out);
  Bases PlaceRows(const std::vector<LaunchRequest>& requests, const Plan& plan, uintptr_t staged,
                  uintptr_t out_features);
  void RunHost(const std::vector<LaunchRequest>& requests, Plan& plan);
  void RunDevice(const std::vector<LaunchRequest>& requests, Plan& plan);
  // RunDevice's steps.
  void Grow(const LaunchSizes& want);
  static void StageLabels(const std::vector<LaunchRequest>& requests, const Plan& plan,
                          uint8_t* h_labels);
  void LaunchWork(const std::vector<RowDesc>& rows, const std::string& key,
                  const std::function<bool()>& work);
  void Carve(const std::vector<LaunchRequest>& requests, const Plan& plan, const uint8_t* out);
  void GatherHostFeatures(const std::vector<LaunchRequest>& requests, const Plan& plan);
  // Classes: the requests' class tables and class rows (BatchBuilder), their scores staged
  // at the rows' score offsets, and the lowered requests' num_per_class.
  void PlanClasses(const std::vector<LaunchRequest>& requests, Plan* plan);
  void StageScores(const std::vector<LaunchRequest>& requests, float* h_scores) const;
  void LoweredClassCounts(const Plan& plan, uint8_t* out) const;

  std::unique_ptr<Backend> host_backend_;
  std::unique_ptr<CudaLauncher> launcher_;
  std::string name_;
  int device_ = -2;
  // The device's captured launches (launch/graph_cache.hpp). Declared after launcher_: they
  // go first.
  std::unique_ptr<GraphCache> graphs_;
  // Host backends: the outputs. Devices: host-gathered features.
  std::vector<uint8_t> host_out_;
  std::vector<uint8_t> host_features_;
  std::vector<RowDesc> rows_;
  BatchBuilder classes_;            // the class fields of rows_ (when any request has classes)
  std::vector<float> host_scores_;  // host backends: the staged scores
  std::vector<LaunchOutput> outputs_;
  StagedStats stats_;
};

}  // namespace gpusampler::kernels
