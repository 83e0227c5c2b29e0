// StagedLaunch (staged_launch.hpp) over device.hpp and launcher.hpp: no CUDA headers here,
// so one source serves builds with and without the CUDA backend.
#include "gpusampler/kernels/staged_launch.hpp"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/launcher.hpp"
#include "launch/graph_cache.hpp"
#include "launch/plan.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels {

StagedLaunch::StagedLaunch(std::unique_ptr<Backend> backend)
    : host_backend_(std::move(backend)),
      name_(host_backend_->name()),
      graphs_(std::make_unique<GraphCache>(name_)) {
  if (host_backend_->memory_space() != MemorySpace::kHost) {
    throw Error(Error::Code::kInvalidArgument,
                "StagedLaunch(backend): " + name_ + " is not a host backend; give the device");
  }
}

StagedLaunch::StagedLaunch(int device, std::chrono::milliseconds timeout)
    : launcher_(std::make_unique<CudaLauncher>(device, timeout)),
      name_(launcher_->name()),
      device_(device),
      graphs_(std::make_unique<GraphCache>(name_)) {}

// The graphs go before the launcher (declared after it): they refer to its buffers and stream.
StagedLaunch::~StagedLaunch() = default;

Backend& StagedLaunch::backend() { return launcher_ ? launcher_->backend() : *host_backend_; }

bool StagedLaunch::faulted() const { return launcher_ && launcher_->faulted(); }

void StagedLaunch::set_use_graphs(bool on) { graphs_->set_enabled(on); }

void StagedLaunch::PlanClasses(const std::vector<LaunchRequest>& requests, Plan* plan) {
  plan->any_classes = false;
  for (const LaunchRequest& q : requests) plan->any_classes |= !q.spec.classes.empty();
  if (!plan->any_classes) return;
  classes_ = BatchBuilder{};
  std::vector<int64_t> lengths;
  for (const LaunchRequest& q : requests) {
    lengths.resize(static_cast<size_t>(q.num_rows));
    for (int64_t r = 0; r < q.num_rows; ++r) {
      lengths[static_cast<size_t>(r)] = q.row_offsets[r + 1] - q.row_offsets[r];
    }
    classes_.set_lower_binary(q.lower_binary);
    // (compiles and validates the classes: Error(kInvalidArgument) naming the field)
    classes_.AddRequest(q.spec, q.seed, q.label_dtype, lengths, q.feature_row_bytes,
                        !q.spec.classes.empty() && q.scores != nullptr);
  }
  plan->class_table_bytes = static_cast<int64_t>(classes_.class_tables().size());
  plan->total_scores = classes_.total_scores();
  plan->total_class_outputs = classes_.total_class_outputs();
}

void StagedLaunch::StageScores(const std::vector<LaunchRequest>& requests, float* h_scores) const {
  const std::vector<RowDesc>& rows = classes_.rows();
  size_t at = 0;
  for (const LaunchRequest& q : requests) {
    for (int64_t r = 0; r < q.num_rows; ++r, ++at) {
      const RowDesc& row = rows[at];
      if (row.score_offset < 0 || row.length == 0) continue;
      const int64_t start = q.row_start != nullptr ? q.row_start[r] : q.row_offsets[r];
      std::memcpy(h_scores + row.score_offset, q.scores + start,
                  static_cast<size_t>(row.length) * sizeof(float));
    }
  }
}

// A lowered request ran as binary rows: its num_per_class from num_positive / num_negative.
void StagedLaunch::LoweredClassCounts(const Plan& plan, uint8_t* out) const {
  if (!plan.any_classes) return;
  const Regions& reg = plan.regions;
  const auto* pos = reinterpret_cast<const int32_t*>(out + reg.idx + reg.olab);
  const auto* neg = reinterpret_cast<const int32_t*>(out + reg.idx + reg.olab + reg.counts);
  auto* per_class = reinterpret_cast<int32_t*>(out + reg.classes_at());
  const auto& infos = classes_.requests();
  for (size_t j = 0; j < infos.size(); ++j) {
    const BatchBuilder::RequestClasses& info = infos[j];
    if (!info.lowered) continue;
    const int64_t first = plan.requests[j].first_row;
    const int64_t rows =
        (j + 1 < infos.size() ? plan.requests[j + 1].first_row : plan.num_rows) - first;
    for (int64_t r = 0; r < rows; ++r) {
      BatchBuilder::LoweredCounts(info, pos[first + r], neg[first + r],
                                  per_class + info.out_class_offset + r * info.num_classes);
    }
  }
}

void StagedLaunch::Reserve(const StagedSizes& sizes) {
  if (!launcher_) return;
  Grow(SizesOf(RegionsFor(sizes), sizes.rows, sizes.elements, sizes.slots, sizes.class_outputs));
}

void StagedLaunch::Grow(const LaunchSizes& want) {
  if (launcher_->Holds(want)) return;
  // The buffers and the scratch may move: the captured graphs refer to them.
  graphs_->Release(launcher_->backend());
  launcher_->Reserve(want);
}

const std::vector<LaunchOutput>& StagedLaunch::Run(const std::vector<LaunchRequest>& requests) {
  if (faulted()) {
    throw Error(Error::Code::kDeviceFault,
                name_ + ": an earlier launch timed out; the device is not used");
  }
  const bool device = on_device();
  Plan plan;
  plan.requests.resize(requests.size());
  for (size_t j = 0; j < requests.size(); ++j) PlanRequest(j, requests[j], device, &plan);
  PlanClasses(requests, &plan);
  SizeRegions(&plan);

  stats_ = StagedStats{};
  stats_.rows = plan.num_rows;
  if (device) {
    RunDevice(requests, plan);
  } else {
    RunHost(requests, plan);
  }
  return outputs_;
}

namespace {

// The lowest of the addresses, as the base of offsets that reach all of them.
uintptr_t LowestOf(const std::vector<uintptr_t>& addresses) {
  return addresses.empty() ? 0 : *std::min_element(addresses.begin(), addresses.end());
}

// The rows of every request, with their offsets from the launch's base pointers: labels from
// `label_base` (a staged request's from `staged`), features from `feature_base`.
// The class fields of the rows (and the binary fields of lowered requests) from BatchBuilder's
// rows, which are in the same order.
void MergeClassRows(const std::vector<LaunchRequest>& requests, const BatchBuilder& classes,
                    std::vector<RowDesc>* rows) {
  const std::vector<RowDesc>& built = classes.rows();
  size_t at = 0;
  for (const LaunchRequest& q : requests) {
    for (int64_t r = 0; r < q.num_rows; ++r, ++at) {
      if (q.spec.classes.empty()) continue;
      RowDesc& row = (*rows)[at];
      const RowDesc& b = built[at];
      row.target = b.target;
      row.positive_label = b.positive_label;
      row.negative_label = b.negative_label;
      row.fill = b.fill;
      row.class_table = b.class_table;
      row.num_classes = b.num_classes;
      row.score_offset = b.score_offset;
      row.out_class_offset = b.out_class_offset;
    }
  }
}

void FillRows(const std::vector<LaunchRequest>& requests,
              const std::vector<uintptr_t>& in_place_labels, uintptr_t staged, uintptr_t label_base,
              uintptr_t feature_base, const std::vector<const uint8_t*>& in_place_features,
              const std::vector<int64_t>& stage_at, const std::vector<int64_t>& out_label_at,
              const std::vector<int64_t>& out_feature_at, std::vector<RowDesc>* rows) {
  rows->clear();
  int64_t slot = 0;
  for (size_t j = 0; j < requests.size(); ++j) {
    const LaunchRequest& q = requests[j];
    const int64_t item = static_cast<int64_t>(DTypeSize(q.label_dtype));
    const int64_t k = q.spec.num_samples;
    const int64_t target = TargetPositives(k, q.spec.positive_fraction);
    const int64_t first = q.num_rows > 0 ? q.row_offsets[0] : 0;
    for (int64_t r = 0; r < q.num_rows; ++r) {
      RowDesc row;
      row.length = q.row_offsets[r + 1] - q.row_offsets[r];
      row.num_samples = k;
      row.target = target;
      row.positive_label = q.spec.positive_label;
      row.negative_label = q.spec.negative_label;
      row.seed = q.seed;
      row.row_in_request = static_cast<uint32_t>(r);
      row.fill = q.spec.fill;
      row.label_dtype = q.label_dtype;
      const int64_t start = q.row_start != nullptr ? q.row_start[r] : q.row_offsets[r];
      if (row.length > 0) {
        if (in_place_labels[j] != 0) {
          row.label_offset = static_cast<int64_t>(in_place_labels[j] - label_base) + start * item;
        } else {
          row.label_offset = static_cast<int64_t>(staged - label_base) + stage_at[j] +
                             (q.row_offsets[r] - first) * item;
        }
      }
      if (in_place_features[j] != nullptr) {
        row.feature_row_bytes = q.feature_row_bytes;
        row.feature_offset =
            static_cast<int64_t>(reinterpret_cast<uintptr_t>(in_place_features[j]) - feature_base) +
            start * q.feature_row_bytes;
        row.out_feature_offset = out_feature_at[j] + r * k * q.feature_row_bytes;
      }
      row.out_slot = slot;
      row.out_label_offset = out_label_at[j] + r * k * item;
      slot += k;
      rows->push_back(row);
    }
  }
}

}  // namespace

// The launch of `plan` over `rows` (host_rows: their host copy), with every output in the
// region at `out` (host memory, or the device's).
Batch StagedLaunch::BatchOf(const Plan& plan, const Bases& bases, const RowDesc* rows,
                            const RowDesc* host_rows, uint8_t* out) {
  const Regions& reg = plan.regions;
  Batch batch;
  batch.rows = rows;
  batch.host_rows = host_rows;
  batch.num_rows = plan.num_rows;
  batch.labels = reinterpret_cast<const uint8_t*>(bases.labels);
  batch.features = reinterpret_cast<const uint8_t*>(bases.features);
  batch.out_indices = reinterpret_cast<int64_t*>(out);
  batch.out_labels = out + reg.idx;
  batch.out_num_positive = reinterpret_cast<int32_t*>(out + reg.idx + reg.olab);
  batch.out_num_negative = reinterpret_cast<int32_t*>(out + reg.idx + reg.olab + reg.counts);
  batch.out_features = bases.out_features != 0 ? reinterpret_cast<uint8_t*>(bases.out_features)
                                               : out + reg.feat_at();
  batch.out_num_per_class =
      plan.total_class_outputs > 0 ? reinterpret_cast<int32_t*>(out + reg.classes_at()) : nullptr;
  batch.class_table_bytes = plan.class_table_bytes;
  batch.total_class_outputs = plan.total_class_outputs;
  batch.total_scores = plan.total_scores;
  batch.total_elements = plan.total_elements;
  batch.total_slots = plan.total_slots;
  batch.max_length = plan.max_length;
  batch.max_samples = plan.max_samples;
  return batch;
}

// rows_ for `plan`, with the staged labels (if any) at `staged`, and the bases of the label and
// feature offsets: the lowest address among the sources in use.
// `out_features` (host backends; 0 for a device) is the kernels' own feature output: a request
// whose features go to its features_out is placed from the lowest of those addresses.
StagedLaunch::Bases StagedLaunch::PlaceRows(const std::vector<LaunchRequest>& requests,
                                            const Plan& plan, uintptr_t staged,
                                            uintptr_t out_features) {
  std::vector<uintptr_t> label_src(requests.size(), 0), sources, feature_sources;
  std::vector<const uint8_t*> feature_src(requests.size(), nullptr);
  std::vector<int64_t> stage_at(requests.size()), olab_at(requests.size()),
      ofeat_at(requests.size());
  if (plan.staged_label_bytes > 0) sources.push_back(staged);
  for (size_t j = 0; j < requests.size(); ++j) {
    const Plan::Request& pr = plan.requests[j];
    label_src[j] = reinterpret_cast<uintptr_t>(pr.in_place_labels);
    if (label_src[j] != 0) sources.push_back(label_src[j]);
    feature_src[j] = pr.in_place_features;
    if (feature_src[j] != nullptr) {
      feature_sources.push_back(reinterpret_cast<uintptr_t>(feature_src[j]));
    }
    stage_at[j] = pr.stage_at;
    olab_at[j] = pr.out_label_at;
    ofeat_at[j] = pr.out_feature_at;
  }
  Bases bases;
  bases.labels = LowestOf(sources);
  bases.features = LowestOf(feature_sources);
  if (out_features != 0) {
    std::vector<uintptr_t> outs = {out_features};
    for (const Plan::Request& pr : plan.requests) {
      if (pr.features_out != nullptr && pr.in_place_features != nullptr) {
        outs.push_back(reinterpret_cast<uintptr_t>(pr.features_out));
      }
    }
    bases.out_features = LowestOf(outs);
    for (size_t j = 0; j < requests.size(); ++j) {
      const Plan::Request& pr = plan.requests[j];
      if (pr.in_place_features == nullptr) continue;
      ofeat_at[j] = pr.features_out != nullptr
                        ? static_cast<int64_t>(reinterpret_cast<uintptr_t>(pr.features_out) -
                                               bases.out_features)
                        : static_cast<int64_t>(out_features - bases.out_features) + ofeat_at[j];
    }
  }
  FillRows(requests, label_src, staged, bases.labels, bases.features, feature_src, stage_at,
           olab_at, ofeat_at, &rows_);
  if (plan.any_classes) MergeClassRows(requests, classes_, &rows_);
  return bases;
}

void StagedLaunch::RunHost(const std::vector<LaunchRequest>& requests, Plan& plan) {
  const Regions& reg = plan.regions;
  host_out_.resize(reg.out() + kSection);
  uint8_t* out = host_out_.data();
  const Bases bases =
      PlaceRows(requests, plan, 0, reinterpret_cast<uintptr_t>(out + reg.feat_at()));
  Batch batch = BatchOf(plan, bases, rows_.data(), rows_.data(), out);
  if (plan.any_classes) {
    batch.class_tables = classes_.class_tables().data();
    host_scores_.resize(static_cast<size_t>(plan.total_scores));
    StageScores(requests, host_scores_.data());
    batch.scores = plan.total_scores > 0 ? host_scores_.data() : nullptr;
  }
  if (plan.num_rows > 0) host_backend_->Sample(batch);
  LoweredClassCounts(plan, out);
  Carve(requests, plan, out);
}

// Copies into `h_labels` (the staged labels' region) the labels of the requests read from the
// host, each at its stage_at, rows packed in row_offsets order.
void StagedLaunch::StageLabels(const std::vector<LaunchRequest>& requests, const Plan& plan,
                               uint8_t* h_labels) {
  for (size_t j = 0; j < requests.size(); ++j) {
    const LaunchRequest& q = requests[j];
    const Plan::Request& pr = plan.requests[j];
    if (pr.stage_at < 0) continue;
    const size_t item = DTypeSize(q.label_dtype);
    const int64_t first = q.row_offsets[0];
    if (q.row_start == nullptr) {
      std::memcpy(h_labels + pr.stage_at, q.labels + static_cast<size_t>(first) * item,
                  static_cast<size_t>(q.row_offsets[q.num_rows] - first) * item);
      continue;
    }
    for (int64_t r = 0; r < q.num_rows; ++r) {
      const size_t bytes = static_cast<size_t>(q.row_offsets[r + 1] - q.row_offsets[r]) * item;
      if (bytes > 0) {
        std::memcpy(h_labels + pr.stage_at + static_cast<size_t>(q.row_offsets[r] - first) * item,
                    q.labels + static_cast<size_t>(q.row_start[r]) * item, bytes);
      }
    }
  }
}

// Runs `work` on the launcher's stream, captured as the graph of `rows`' stage set when graphs
// are on (GraphCache); returns whether it ran as a graph.
void StagedLaunch::LaunchWork(const std::vector<RowDesc>& rows, const std::string& key,
                              const std::function<bool()>& work) {
  GraphCache::Ran ran;
  launcher_->Launch([&] { ran = graphs_->Run(launcher_->stream(), rows, key, work); });
  stats_.graph = ran.graph;
  stats_.graph_captured = ran.captured;
}

namespace {

// The fused kernel's size class: the power of two at or above the row count.
int32_t SmallClassRows(int64_t rows) {
  int64_t c = 1;
  while (c < rows) c *= 2;
  return static_cast<int32_t>(c);
}

// What a size class's captured launch depends on besides device memory: the grid, the copies'
// addresses and sizes, and every pointer the kernel receives (the rest it reads from the row
// table and the sizes word when it runs). Equal keys capture the same operations.
std::string SmallClassKey(int32_t class_rows, const Batch& batch, const void* h_in,
                          const void* d_in, size_t upload, const void* h_out, const void* d_out,
                          size_t download, const void* sizes) {
  const uintptr_t fields[] = {
      static_cast<uintptr_t>(class_rows),
      reinterpret_cast<uintptr_t>(h_in),
      reinterpret_cast<uintptr_t>(d_in),
      upload,
      reinterpret_cast<uintptr_t>(h_out),
      reinterpret_cast<uintptr_t>(d_out),
      download,
      reinterpret_cast<uintptr_t>(sizes),
      reinterpret_cast<uintptr_t>(batch.rows),
      reinterpret_cast<uintptr_t>(batch.labels),
      reinterpret_cast<uintptr_t>(batch.features),
      reinterpret_cast<uintptr_t>(batch.out_indices),
      reinterpret_cast<uintptr_t>(batch.out_labels),
      reinterpret_cast<uintptr_t>(batch.out_features),
      reinterpret_cast<uintptr_t>(batch.out_num_positive),
      reinterpret_cast<uintptr_t>(batch.out_num_negative),
  };
  return std::string("small:") + std::string(reinterpret_cast<const char*>(fields), sizeof(fields));
}

// The one upload's bytes: row table, staged labels, class tables and scores are adjacent.
size_t UploadBytes(const LaunchPlan& plan) {
  const Regions& reg = plan.regions;
  if (plan.total_scores > 0) {
    return reg.rows + reg.labels + reg.tables +
           static_cast<size_t>(plan.total_scores) * sizeof(float);
  }
  if (plan.class_table_bytes > 0) {
    return reg.rows + reg.labels + static_cast<size_t>(plan.class_table_bytes);
  }
  return reg.rows + static_cast<size_t>(plan.staged_label_bytes);
}

// The launch's row count in the sizes word at the end of the rows section (staged in `h_in`,
// uploaded with the row table); returns its device address.
const void* StageSizes(const LaunchPlan& plan, uint8_t* h_in, const uint8_t* d_in) {
  const size_t at = plan.regions.rows - static_cast<size_t>(kSizesBytes);
  pipeline::LaunchSizes sizes;
  sizes.num_rows = static_cast<int32_t>(plan.num_rows);
  std::memcpy(h_in + at, &sizes, sizeof(sizes));
  return d_in + at;
}

// A bounded step of the kernels overflowed (never expected): the results are not used.
void ThrowOnErrorFlags(const std::string& name, uint32_t flags) {
  if (flags == 0) return;
  throw Error(Error::Code::kInternal,
              name + ": the launch raised device error flags " + std::to_string(flags) +
                  " (1: Pass2 found more boundary candidates than counted, 2: Boundary had " +
                  "more candidates than a block holds, 4: the class path selected more than K); "
                  "its results are not used");
}

}  // namespace

void StagedLaunch::RunDevice(const std::vector<LaunchRequest>& requests, Plan& plan) {
  const Regions& reg = plan.regions;
  // Within the reserved sizes this allocates nothing; beyond them it is one deliberate growth
  // before anything of this launch is enqueued (the previous launch has finished).
  Grow(
      SizesOf(reg, plan.num_rows, plan.total_elements, plan.total_slots, plan.total_class_outputs));
  uint8_t* h_in = launcher_->h_in();
  uint8_t* d_in = launcher_->d_in();
  uint8_t* h_out = launcher_->h_out();
  uint8_t* d_out = launcher_->d_out();

  const Bases bases =
      PlaceRows(requests, plan, reinterpret_cast<uintptr_t>(d_in + reg.rows), /*out_features=*/0);
  // Checked here, before anything is enqueued or captured (the backend checks them again).
  ValidateRows(rows_.data(), plan.num_rows);
  // Staging: the row table, then the labels of the requests read from the host.
  if (plan.num_rows > 0) std::memcpy(h_in, rows_.data(), rows_.size() * sizeof(RowDesc));
  StageLabels(requests, plan, h_in + reg.rows);
  // Classes: the compiled tables and the scores after the labels.
  if (plan.any_classes) {
    if (!classes_.class_tables().empty()) {  // every class request may have been lowered
      std::memcpy(h_in + reg.rows + reg.labels, classes_.class_tables().data(),
                  classes_.class_tables().size());
    }
    StageScores(requests, reinterpret_cast<float*>(h_in + reg.rows + reg.labels + reg.tables));
  }
  // One upload (row table, staged labels, class tables and scores are adjacent), the
  // kernels, one download of every output up to the last section in use.
  const size_t upload = UploadBytes(plan);
  const size_t download = reg.feat_at() + static_cast<size_t>(plan.out_feature_bytes);
  Batch batch = BatchOf(plan, bases, reinterpret_cast<const RowDesc*>(d_in), rows_.data(), d_out);
  if (plan.any_classes) {
    batch.class_tables = d_in + reg.rows + reg.labels;
    batch.scores = plan.total_scores > 0
                       ? reinterpret_cast<const float*>(d_in + reg.rows + reg.labels + reg.tables)
                       : nullptr;
  }

  void* stream = launcher_->stream();
  Backend& backend = launcher_->backend();
  // Small binary rows only: the fused kernel's size class, its row count in the sizes word
  // at the end of the rows section (uploaded with the row table), so a graph captured once
  // replays for every launch with the same key.
  const bool small = !plan.any_classes && plan.num_rows > 0 &&
                     AllSmallBinaryRows(rows_.data(), plan.num_rows, pipeline::kSmallRowMax);
  const int32_t class_rows = small ? SmallClassRows(plan.num_rows) : 0;
  const void* d_sizes = StageSizes(plan, h_in, d_in);
  const std::string key =
      small ? SmallClassKey(class_rows, batch, h_in, d_in, upload, h_out, d_out, download, d_sizes)
            : std::string();
  // The kernels' error word (Backend::error_flags) comes back with the outputs, after them,
  // and is reset on the device for the next launch.
  uint8_t* h_flags = h_out + reg.out();
  std::memset(h_flags, 0, sizeof(uint32_t));
  uint32_t* d_flags = nullptr;
  const auto work = [&] {
    CopyAsync(d_in, h_in, upload, stream);
    const bool classed = small && backend.SampleSmallClass(batch, class_rows, d_sizes);
    if (!classed) backend.Sample(batch);
    d_flags = backend.error_flags();
    if (d_flags != nullptr) {
      CopyAsync(h_flags, d_flags, sizeof(uint32_t), stream);
      MemsetAsync(d_flags, 0, sizeof(uint32_t), stream);
    }
    CopyAsync(h_out, d_out, download, stream);
    return classed && d_flags == nullptr;  // (a replay skips this: no error word to read)
  };
  const int64_t ops_before = StreamOperations(stream);
  LaunchWork(rows_, key, work);
  const int64_t ops_after = StreamOperations(stream);
  uint32_t flags = 0;
  if (d_flags != nullptr) std::memcpy(&flags, h_flags, sizeof(flags));
  ThrowOnErrorFlags(name_, flags);
  LoweredClassCounts(plan, h_out);

  stats_.stream_ops = ops_before >= 0 && ops_after >= 0 ? ops_after - ops_before : -1;
  stats_.upload_bytes = plan.num_rows > 0 ? static_cast<int64_t>(upload) : 0;
  stats_.download_bytes = plan.num_rows > 0 ? static_cast<int64_t>(download) : 0;
  Carve(requests, plan, h_out);
  GatherHostFeatures(requests, plan);
}

void StagedLaunch::Carve(const std::vector<LaunchRequest>& requests, const Plan& plan,
                         const uint8_t* out) {
  const Regions& reg = plan.regions;
  outputs_.assign(requests.size(), LaunchOutput{});
  for (size_t j = 0; j < requests.size(); ++j) {
    const LaunchRequest& q = requests[j];
    const Plan::Request& pr = plan.requests[j];
    LaunchOutput& o = outputs_[j];
    o.num_rows = q.num_rows;
    o.k = q.spec.num_samples;
    o.indices = reinterpret_cast<const int64_t*>(out) + pr.first_slot;
    o.labels = out + reg.idx + pr.out_label_at;
    o.num_positive = reinterpret_cast<const int32_t*>(out + reg.idx + reg.olab) + pr.first_row;
    o.num_negative =
        reinterpret_cast<const int32_t*>(out + reg.idx + reg.olab + reg.counts) + pr.first_row;
    if (pr.out_feature_at >= 0) o.features = out + reg.feat_at() + pr.out_feature_at;
    if (pr.features_out != nullptr && pr.in_place_features != nullptr) o.features = pr.features_out;
    if (plan.any_classes) {
      const BatchBuilder::RequestClasses& info = classes_.requests()[j];
      if (info.num_classes > 0) {
        o.num_classes = info.num_classes;
        o.num_per_class =
            reinterpret_cast<const int32_t*>(out + reg.classes_at()) + info.out_class_offset;
      }
    }
  }
}

// Features that stayed on the host while the launch ran on a device: the K selected rows per
// row, gathered by the returned indices (a negative index, padding, gives a zero row).
void StagedLaunch::GatherHostFeatures(const std::vector<LaunchRequest>& requests,
                                      const Plan& plan) {
  host_features_.resize(static_cast<size_t>(plan.host_feature_bytes));
  for (size_t j = 0; j < requests.size(); ++j) {
    const LaunchRequest& q = requests[j];
    const Plan::Request& pr = plan.requests[j];
    const bool to_caller = pr.features_out != nullptr && pr.in_place_features == nullptr;
    if (pr.host_feature_at < 0 && !to_caller) continue;
    const int64_t k = q.spec.num_samples;
    const int64_t frb = q.feature_row_bytes;
    uint8_t* dst = to_caller ? pr.features_out : host_features_.data() + pr.host_feature_at;
    for (int64_t r = 0; r < q.num_rows; ++r) {
      const int64_t start = q.row_start != nullptr ? q.row_start[r] : q.row_offsets[r];
      GatherRows(outputs_[j].indices + r * k, nullptr, k, frb, q.features + start * frb,
                 dst + r * k * frb);
    }
    outputs_[j].features = dst;
  }
}

}  // namespace gpusampler::kernels
