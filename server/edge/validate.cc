#include "edge/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>

#include "datasets/datasets.hpp"

namespace gpusampler::server {
namespace {

using kernels::DType;

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

// The shortest text that reads back as exactly `x` (1.0000001, never a rounded "1").
std::string Num(double x) {
  std::ostringstream out;
  out << x;
  if (std::strtod(out.str().c_str(), nullptr) == x || !std::isfinite(x)) return out.str();
  out.str("");
  out << std::setprecision(17) << x;
  for (int p = 7; p < 17; ++p) {
    std::ostringstream shorter;
    shorter << std::setprecision(p) << x;
    if (std::strtod(shorter.str().c_str(), nullptr) == x) return shorter.str();
  }
  return out.str();
}

uint64_t DrawSeed() {
  // One random_device read per thread; mt19937_64 after that (random_device may be slow).
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    return (static_cast<uint64_t>(rd()) << 32) ^ rd();
  }());
  return gen();
}

// ---- The request as a whole ----

// The transport accepts a little more than the limit (TransportMessageLimit), so that a
// request just over it gets this message rather than gRPC's, which names no flag.
Status CheckRequestSize(const v1::SampleRequest& req, const Limits& limits) {
  const size_t request_bytes = req.ByteSizeLong();
  if (request_bytes > static_cast<size_t>(limits.max_message_bytes)) {
    return LimitExceeded("request has " + std::to_string(request_bytes) +
                         " bytes, over max_message_bytes = " +
                         std::to_string(limits.max_message_bytes) + " (--max-message-bytes)");
  }
  return Status::Ok();
}

// The checks every request ends with, inline or dataset: the response fits, and the seed.
Status FinishRequest(const v1::SampleRequest& req, const Limits& limits, Job* job) {
  const int64_t k = job->spec.num_samples;
  const DType ldtype = job->label_dtype;
  int64_t out = 0;
  const std::string size_terms =
      "(B " + std::to_string(job->num_rows()) + " * K " + std::to_string(k) + " * (8 + " +
      std::to_string(kernels::DTypeSize(ldtype)) + " + " + std::to_string(job->feature_row_bytes) +
      ") + request_id " + std::to_string(req.request_id().size()) + " + framing)";
  if (!ResponseBytes(*job, req.request_id().size(), &out)) {
    return InvalidArgument("response size " + size_terms + " overflows int64");
  }
  // Shared memory (SPEC section 9): an answer written into a region is not bound by
  // --max-message-bytes (PrepareJob checks that the region holds it).
  if (out > limits.max_message_bytes && !req.has_output_region()) {
    return LimitExceeded("response would have " + std::to_string(out) + " bytes " + size_terms +
                         ", over max_message_bytes = " + std::to_string(limits.max_message_bytes) +
                         " (--max-message-bytes)");
  }
  job->seed = req.has_seed() ? req.seed() : DrawSeed();
  return Status::Ok();
}

// ---- The spec ----

Status ParseFillPolicy(const v1::SamplingSpec& spec, kernels::FillPolicy* fill) {
  switch (static_cast<int>(spec.fill_policy())) {
    case v1::FILL_POLICY_UNSPECIFIED:
    case v1::FILL_POLICY_BOTH:
      *fill = kernels::FillPolicy::kBoth;
      return Status::Ok();
    case v1::FILL_POLICY_NEGATIVES_ONLY:
      *fill = kernels::FillPolicy::kNegativesOnly;
      return Status::Ok();
    case v1::FILL_POLICY_NONE:
      *fill = kernels::FillPolicy::kNone;
      return Status::Ok();
    default:
      return InvalidArgument("spec.fill_policy " + std::to_string(spec.fill_policy()) +
                             " is not a known FillPolicy");
  }
}

// ---- Classes (SPEC section 7) ----

// With classes, section 1's fields must be absent (fill_policy: unspecified).
Status CheckNoBinaryFields(const v1::SamplingSpec& spec) {
  for (const auto& [field, present] :
       {std::pair<const char*, bool>{"positive_fraction", spec.has_positive_fraction()},
        std::pair<const char*, bool>{"positive_label", spec.has_positive_label()},
        std::pair<const char*, bool>{"negative_label", spec.has_negative_label()},
        std::pair<const char*, bool>{"fill_policy",
                                     spec.fill_policy() != v1::FILL_POLICY_UNSPECIFIED}}) {
    if (present) {
      return InvalidArgument(std::string("spec.") + field +
                             " must be absent when spec.classes is set (the classes' shares and "
                             "spec.fill_order say it)");
    }
  }
  return Status::Ok();
}

// One wire class as the kernels' ClassSpec: its share (exactly one; `rest` true) and its
// selection (UNSPECIFIED is UNIFORM). The rest is checked by CompileClassTable.
Status ParseClass(const v1::ClassSpec& wire, size_t c, kernels::ClassSpec* out) {
  const std::string name = "spec.classes[" + std::to_string(c) + "]";
  for (const v1::LabelRange& r : wire.labels()) out->labels.push_back({r.lo(), r.hi()});
  switch (wire.share_case()) {
    case v1::ClassSpec::kCount:
      out->share = kernels::Share::kCount;
      out->count = wire.count();
      break;
    case v1::ClassSpec::kFraction:
      out->share = kernels::Share::kFraction;
      out->fraction = wire.fraction();
      break;
    case v1::ClassSpec::kRest:
      if (!wire.rest()) {
        return InvalidArgument(name + ".rest is false; where rest is the share it must be true");
      }
      out->share = kernels::Share::kRest;
      break;
    default:
      return InvalidArgument(name + ": no share; set exactly one of count, fraction or rest");
  }
  const int selection = static_cast<int>(wire.selection());
  if (selection < v1::SELECTION_UNSPECIFIED || selection > v1::SELECTION_MIXED) {
    return InvalidArgument(name + ".selection " + std::to_string(selection) +
                           " is not a known Selection");
  }
  out->selection = selection == v1::SELECTION_UNSPECIFIED
                       ? kernels::Selection::kUniform
                       : static_cast<kernels::Selection>(selection);
  out->has_hard_fraction = wire.has_hard_fraction();
  out->hard_fraction = wire.hard_fraction();
  return Status::Ok();
}

// spec.classes and spec.fill_order, validated once per request by compiling the class table
// for this K (the kernels compile it again per launch; the table is small).
Status ParseClasses(const v1::SamplingSpec& spec, kernels::SamplingSpec* out) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckNoBinaryFields(spec));
  if (spec.classes_size() > kernels::kMaxClasses) {
    return InvalidArgument("spec.classes: " + std::to_string(spec.classes_size()) +
                           " classes; a spec with classes has 1 to " +
                           std::to_string(kernels::kMaxClasses));
  }
  out->classes.assign(static_cast<size_t>(spec.classes_size()), {});
  for (int c = 0; c < spec.classes_size(); ++c) {
    GPUSAMPLER_RETURN_IF_ERROR(
        ParseClass(spec.classes(c), static_cast<size_t>(c), &out->classes[static_cast<size_t>(c)]));
  }
  out->fill_order.assign(spec.fill_order().begin(), spec.fill_order().end());
  try {
    std::vector<uint8_t> table;
    kernels::CompileClassTable(out->classes, out->fill_order, out->num_samples, &table);
  } catch (const kernels::Error& e) {  // kernels -> server: the message names the field
    return InvalidArgument(std::string("spec.") + e.what());
  }
  return Status::Ok();
}

// Whether some class draws by weight (scores must then not be negative).
bool AnyWeighted(const kernels::SamplingSpec& spec) {
  for (const kernels::ClassSpec& c : spec.classes) {
    if (c.selection == kernels::Selection::kWeighted) return true;
  }
  return false;
}

// K, the positive fraction, the two labels (defaults 0.5, 1, 0) and the fill policy; or,
// with spec.classes, the classes and the fill order.
Status ParseSpec(const v1::SamplingSpec& spec, const Limits& limits, kernels::SamplingSpec* out) {
  const int64_t k = spec.num_samples();
  if (k < 1) {
    return InvalidArgument("spec.num_samples = " + std::to_string(k) + ", must be >= 1");
  }
  if (k > limits.max_num_samples) {
    return LimitExceeded("spec.num_samples = " + std::to_string(k) + " exceeds max_num_samples = " +
                         std::to_string(limits.max_num_samples) + " (--max-num-samples)");
  }
  if (spec.classes_size() > 0) {
    out->num_samples = k;
    return ParseClasses(spec, out);
  }
  if (spec.fill_order_size() > 0) {
    return InvalidArgument("spec.fill_order is set but spec.classes is not (it names classes)");
  }
  const double f = spec.has_positive_fraction() ? spec.positive_fraction() : 0.5;
  if (!(f >= 0.0 && f <= 1.0)) {  // also rejects NaN
    return InvalidArgument("spec.positive_fraction = " + Num(f) + " is outside [0, 1]");
  }
  const int64_t pos = spec.has_positive_label() ? spec.positive_label() : 1;
  const int64_t neg = spec.has_negative_label() ? spec.negative_label() : 0;
  if (pos == neg) {
    return InvalidArgument("spec.positive_label and spec.negative_label are both " +
                           std::to_string(pos));
  }
  kernels::FillPolicy fill = kernels::FillPolicy::kBoth;
  GPUSAMPLER_RETURN_IF_ERROR(ParseFillPolicy(spec, &fill));
  out->num_samples = k;
  out->positive_fraction = f;
  out->positive_label = pos;
  out->negative_label = neg;
  out->fill = fill;
  return Status::Ok();
}

// Both spec labels fit `dtype`; `where` names the labels ("labels dtype INT8").
// Class ranges are exempt: a range may reach past the dtype's values (SPEC section 7).
Status CheckLabelsRepresentable(const kernels::SamplingSpec& spec, DType dtype,
                                const std::string& where) {
  if (!spec.classes.empty()) return Status::Ok();
  for (auto [name, value] :
       {std::pair<const char*, int64_t>{"positive_label", spec.positive_label},
        std::pair<const char*, int64_t>{"negative_label", spec.negative_label}}) {
    if (!kernels::LabelRepresentable(dtype, value)) {
      return InvalidArgument(std::string("spec.") + name + " = " + std::to_string(value) +
                             " is not representable in " + where + " " + UpperDTypeName(dtype));
    }
  }
  return Status::Ok();
}

// ---- Rows ----

// Every row of `job` has at most max_row_elements; `what` names the rows ("labels").
Status CheckRowLengths(const Job& job, const char* what, const Limits& limits) {
  for (int64_t r = 0; r < job.num_rows(); ++r) {
    const int64_t len = job.row_offsets[r + 1] - job.row_offsets[r];
    if (len > limits.max_row_elements) {
      return LimitExceeded(std::string(what) + " row " + std::to_string(r) + " has " +
                           std::to_string(len) + " elements, over max_row_elements = " +
                           std::to_string(limits.max_row_elements) + " (--max-row-elements)");
    }
  }
  return Status::Ok();
}

void ClearFeatures(Job* job) {
  job->features = nullptr;
  job->feature_row_bytes = 0;
  job->feature_trailing_shape.clear();
  job->feature_dtype = DType::kUnspecified;
}

// ---- Scores (SPEC section 7) ----

// Every score of the job's rows, read at row_start(r) (`by_source`) or row_offsets[r] of
// `base`, is finite or NaN, and not negative when some class is WEIGHTED. `name(r, i, e)`
// names element i of row r (e: its index in the concatenation of the rows).
template <typename Name>
Status CheckScoreValues(const Job& job, const float* base, bool by_source, bool weighted,
                        const Name& name) {
  for (int64_t r = 0; r < job.num_rows(); ++r) {
    const int64_t start = by_source ? job.row_start(r) : job.row_offsets[static_cast<size_t>(r)];
    const int64_t len = job.row_offsets[static_cast<size_t>(r) + 1] - job.row_offsets[r];
    for (int64_t i = 0; i < len; ++i) {
      const float v = base[start + i];
      if (std::isinf(v)) {
        return InvalidArgument(name(r, i, job.row_offsets[r] + i) + " = " + Num(v) +
                               ": scores must be finite or NaN");
      }
      if (weighted && v < 0.0f) {
        return InvalidArgument(name(r, i, job.row_offsets[r] + i) + " = " + Num(v) +
                               ": scores must not be negative when a class is WEIGHTED");
      }
    }
  }
  return Status::Ok();
}

// The bytes of a FLOAT32 scores tensor as floats: in place, or copied into the job when they
// are not aligned for float.
const float* ScoreFloats(const v1::Tensor& scores, Job* job) {
  const char* data = scores.data().data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(data);
  }
  job->owned_scores.resize(scores.data().size() / sizeof(float));
  std::memcpy(job->owned_scores.data(), data, scores.data().size());
  return job->owned_scores.data();
}

// A scores tensor sent with the request: FLOAT32, well formed, of shape `want`.
Status CheckScoresTensor(const v1::Tensor& scores, const std::vector<int64_t>& want,
                         const std::string& want_text, const Limits& limits) {
  if (scores.dtype() != v1::DTYPE_FLOAT32) {
    return InvalidArgument("scores.dtype must be DTYPE_FLOAT32, got " +
                           v1::DType_Name(scores.dtype()));
  }
  int64_t n = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(scores, "scores", limits, &n));
  const bool same =
      std::equal(scores.shape().begin(), scores.shape().end(), want.begin(), want.end());
  if (!same) {
    return InvalidArgument("scores.shape " + ShapeString(scores.shape()) + " must equal " +
                           want_text);
  }
  return Status::Ok();
}

// Inline: scores laid out like the labels ([N], [B, N] or [total]).
Status InlineScores(const v1::SampleRequest& req, const Limits& limits, bool weighted, Job* job) {
  if (!req.has_scores()) return Status::Ok();
  const v1::Tensor& labels = req.labels();
  const std::vector<int64_t> want(labels.shape().begin(), labels.shape().end());
  GPUSAMPLER_RETURN_IF_ERROR(
      CheckScoresTensor(req.scores(), want, "labels.shape " + ShapeString(labels.shape()), limits));
  job->scores = ScoreFloats(req.scores(), job);
  const int rank = labels.shape_size();
  const bool ragged = req.has_row_splits();
  return CheckScoreValues(*job, job->scores, false, weighted, [&](int64_t r, int64_t i, int64_t e) {
    if (ragged) {
      return "scores[" + std::to_string(e) + "] (row " + std::to_string(r) + ", element " +
             std::to_string(i) + ")";
    }
    if (rank == 1) return "scores[" + std::to_string(i) + "]";
    return "scores[" + std::to_string(r) + "][" + std::to_string(i) + "]";
  });
}

// Dataset rows named with `rows`, with scores sent for them: the scores are read where the
// labels are (row_start), so they are scattered into a copy laid out like the dataset. A row
// named twice must then carry the same scores both times.
Status ScatterDatasetScores(const float* sent, const Dataset& ds, Job* job) {
  std::vector<float> scattered(static_cast<size_t>(ds.num_elements()),
                               std::numeric_limits<float>::quiet_NaN());
  std::unordered_map<int64_t, int64_t> named_at;  // row start -> first request row
  for (int64_t r = 0; r < job->num_rows(); ++r) {
    const int64_t start = job->row_start(r);
    const int64_t len = job->row_offsets[r + 1] - job->row_offsets[r];
    const float* src = sent + job->row_offsets[r];
    const auto [it, first] = named_at.emplace(start, r);
    if (!first && len > 0 &&
        std::memcmp(&scattered[static_cast<size_t>(start)], src, len * sizeof(float)) != 0) {
      return InvalidArgument("scores: rows[" + std::to_string(r) + "] names the same dataset row " +
                             "as rows[" + std::to_string(it->second) +
                             "] with other scores; one dataset row has one score per element");
    }
    std::memcpy(&scattered[static_cast<size_t>(start)], src, len * sizeof(float));
  }
  job->owned_scores = std::move(scattered);
  job->scores = job->owned_scores.data();
  return Status::Ok();
}

// Dataset: scores sent with the request (aligned with the concatenation of the requested
// rows; they win), else the dataset's stored scores, if any.
Status DatasetScores(const v1::SampleRequest& req, const Limits& limits, const Dataset& ds,
                     bool weighted, Job* job) {
  if (!req.has_scores()) {
    if (ds.scores.empty()) return Status::Ok();
    job->scores = ds.scores.data();
    // Stored scores are finite or NaN (checked at upload); negatives only matter here.
    if (!weighted || !ds.has_negative_scores) return Status::Ok();
    return CheckScoreValues(*job, job->scores, true, true, [&](int64_t r, int64_t i, int64_t) {
      return "dataset '" + ds.name + "' scores of row " + std::to_string(r) + " element " +
             std::to_string(i);
    });
  }
  const int64_t total = job->num_elements();
  GPUSAMPLER_RETURN_IF_ERROR(CheckScoresTensor(
      req.scores(), {total},
      "[" + std::to_string(total) + "], the elements of the requested dataset rows", limits));
  const float* sent = ScoreFloats(req.scores(), job);
  GPUSAMPLER_RETURN_IF_ERROR(
      CheckScoreValues(*job, sent, false, weighted, [&](int64_t r, int64_t i, int64_t e) {
        return "scores[" + std::to_string(e) + "] (row " + std::to_string(r) + ", element " +
               std::to_string(i) + ")";
      }));
  if (job->row_source.empty()) {
    job->scores = sent;
    return Status::Ok();
  }
  return ScatterDatasetScores(sent, ds, job);
}

// A class that is not UNIFORM needs scores.
Status RequireScores(const Job& job, const Dataset* ds) {
  if (job.scores != nullptr) return Status::Ok();
  for (size_t c = 0; c < job.spec.classes.size(); ++c) {
    const kernels::Selection sel = job.spec.classes[c].selection;
    if (sel == kernels::Selection::kUniform) continue;
    static const char* const kNames[] = {"", "UNIFORM", "WEIGHTED", "HARDEST", "MIXED"};
    return InvalidArgument(
        "scores: spec.classes[" + std::to_string(c) + "] is " + kNames[static_cast<int>(sel)] +
        " and needs scores, but the request " +
        (ds ? "sends none and dataset '" + ds->name + "' stores none" : std::string("sends none")));
  }
  return Status::Ok();
}

// ---- A request naming a resident dataset (SPEC section 5) ----

// Without dataset, rows and return_features must be absent; with it, the inline tensors.
Status CheckDatasetFields(const v1::SampleRequest& req) {
  if (req.dataset().empty()) {
    if (req.has_rows())
      return InvalidArgument("rows is set but dataset is not (rows names dataset rows)");
    if (req.return_features()) {
      return InvalidArgument(
          "return_features is set but dataset is not (inline requests "
          "get features back when they send them)");
    }
    return Status::Ok();
  }
  for (const auto& [field, present] :
       {std::pair<const char*, bool>{"labels", req.has_labels()},
        std::pair<const char*, bool>{"features", req.has_features()},
        std::pair<const char*, bool>{"row_splits", req.has_row_splits()}}) {
    if (present) {
      return InvalidArgument(std::string(field) + " must be absent when dataset is set (dataset '" +
                             req.dataset().substr(0, 140) + "' supplies it)");
    }
  }
  return Status::Ok();
}

// The dataset rows that `rows` names, in its order, read in place.
Status NamedDatasetRows(const v1::Tensor& rows, const Dataset& ds, const Limits& limits, Job* job) {
  if (rows.dtype() != v1::DTYPE_INT64) {
    return InvalidArgument("rows.dtype must be DTYPE_INT64, got " + v1::DType_Name(rows.dtype()));
  }
  int64_t b = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(rows, "rows", limits, &b));
  if (rows.shape_size() != 1) {
    return InvalidArgument("rows.shape " + ShapeString(rows.shape()) + " must be 1-D [B']");
  }
  if (b > limits.max_rows) {
    return LimitExceeded("rows has " + std::to_string(b) + " rows, over max_rows = " +
                         std::to_string(limits.max_rows) + " (--max-rows)");
  }
  const char* data = rows.data().data();
  for (int64_t j = 0; j < b; ++j) {
    int64_t id;
    std::memcpy(&id, data + j * 8, 8);  // the bytes need not be 8-byte aligned
    if (id < 0 || id >= ds.num_rows()) {
      return InvalidArgument("rows[" + std::to_string(j) + "] = " + std::to_string(id) +
                             " is out of range [0, " + std::to_string(ds.num_rows()) +
                             ") of dataset '" + ds.name + "'");
    }
    const int64_t begin = ds.row_begin(id);
    job->row_source.push_back(begin);
    job->row_offsets.push_back(job->row_offsets.back() + (ds.row_end(id) - begin));
  }
  job->drop_batch_dim = false;
  return Status::Ok();
}

// Every row of the dataset, in order. The row limit comes first: the offsets built after
// it are O(B), and a dataset of fixed-length rows may have billions (it stores none).
Status AllDatasetRows(const Dataset& ds, const Limits& limits, Job* job) {
  const int64_t b = ds.num_rows();
  if (b > limits.max_rows) {
    return LimitExceeded("dataset '" + ds.name + "' has " + std::to_string(b) +
                         " rows, over max_rows = " + std::to_string(limits.max_rows) +
                         " (--max-rows); name fewer with rows");
  }
  if (ds.has_row_splits()) {
    job->row_offsets = ds.row_splits;
  } else {
    job->row_offsets.resize(static_cast<size_t>(b) + 1);
    for (int64_t r = 0; r <= b; ++r) job->row_offsets[static_cast<size_t>(r)] = r * ds.row_length;
  }
  job->drop_batch_dim = !ds.has_batch_dim();
  return Status::Ok();
}

// The job's rows, from `req.rows` or the whole dataset, within the element limits.
Status DatasetRows(const v1::SampleRequest& req, const Dataset& ds, const Limits& limits,
                   Job* job) {
  job->row_offsets.assign(1, 0);
  job->row_source.clear();
  const Status rows = req.has_rows() ? NamedDatasetRows(req.rows(), ds, limits, job)
                                     : AllDatasetRows(ds, limits, job);
  GPUSAMPLER_RETURN_IF_ERROR(rows);
  if (job->num_elements() > limits.max_elements) {
    return LimitExceeded("the named dataset rows have " + std::to_string(job->num_elements()) +
                         " elements, over max_elements = " + std::to_string(limits.max_elements) +
                         " (--max-elements)");
  }
  return CheckRowLengths(*job, "dataset", limits);
}

// The job reads the dataset's labels (and features when asked for) and keeps it alive.
Status AttachDataset(std::shared_ptr<const Dataset> ds, bool return_features, Job* job) {
  job->label_dtype = ds->label_dtype;
  job->labels = ds->labels.data();
  ClearFeatures(job);
  if (return_features) {
    if (!ds->has_features()) {
      return InvalidArgument("return_features is set but dataset '" + ds->name +
                             "' has no features");
    }
    job->features = ds->features.data();
    job->feature_row_bytes = ds->feature_row_bytes;
    job->feature_trailing_shape = ds->feature_shape;
    job->feature_dtype = ds->feature_dtype;
  }
  job->dataset = std::move(ds);
  return Status::Ok();
}

// ---- An epoch (SPEC section 8) ----

// An epoch names dataset requests only, and never with rows.
Status CheckEpochFields(const v1::SampleRequest& req) {
  if (!req.has_epoch()) return Status::Ok();
  if (req.dataset().empty()) {
    return InvalidArgument("epoch is set but dataset is not (epochs run over a resident dataset)");
  }
  if (req.has_rows()) {
    return InvalidArgument("epoch and rows are both set (the epoch chooses the rows)");
  }
  return Status::Ok();
}

// The epoch's rows for this step (ROWS), or the check that the dataset has one row
// (ELEMENTS, answered in AnswerElementsStep); sets job->epoch_steps for ROWS.
Status EpochRows(const v1::SampleRequest& req, const Dataset& ds, const Limits& limits, Job* job) {
  Epoch epoch;
  GPUSAMPLER_RETURN_IF_ERROR(ParseEpoch(req.epoch(), &epoch));
  if (epoch.mode == EpochMode::kElements) {
    if (ds.num_rows() != 1) {
      return InvalidArgument("epoch.mode EPOCH_MODE_ELEMENTS needs a dataset of one row, but '" +
                             ds.name + "' has " + std::to_string(ds.num_rows()) + " rows");
    }
    GPUSAMPLER_RETURN_IF_ERROR(CheckElementsSpec(job->spec));
    if (req.has_scores()) {
      return InvalidArgument(
          "scores is set with epoch.mode EPOCH_MODE_ELEMENTS: an ELEMENTS step selects by its "
          "permutation only, so it takes no scores (send the request without scores)");
    }
    return DatasetRows(req, ds, limits, job);
  }
  std::vector<int64_t> rows;
  GPUSAMPLER_RETURN_IF_ERROR(RowsEpochStep(epoch, ds.num_rows(), &rows, &job->epoch_steps));
  v1::Tensor named;
  named.set_dtype(v1::DTYPE_INT64);
  named.add_shape(static_cast<int64_t>(rows.size()));
  named.set_data(rows.data(), rows.size() * 8);
  // Exactly a `rows` request from here on (the epoch's contract).
  job->row_offsets.assign(1, 0);
  job->row_source.clear();
  GPUSAMPLER_RETURN_IF_ERROR(NamedDatasetRows(named, ds, limits, job));
  if (job->num_elements() > limits.max_elements) {
    return LimitExceeded("the epoch step's dataset rows have " +
                         std::to_string(job->num_elements()) + " elements, over max_elements = " +
                         std::to_string(limits.max_elements) + " (--max-elements)");
  }
  return CheckRowLengths(*job, "dataset", limits);
}

// A request that names a resident dataset: its rows become the job's rows, read in place
// from the dataset, which the job keeps alive. A request naming none is left as it is.
Status ResolveDataset(const v1::SampleRequest& req, const Limits& limits,
                      const DatasetRegistry* datasets, Job* job) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckDatasetFields(req));
  GPUSAMPLER_RETURN_IF_ERROR(CheckEpochFields(req));
  if (req.dataset().empty()) return Status::Ok();
  // With a repository, a dataset this replica lacks is loaded from it first (SPEC section 6).
  Status found(Code::kNotFound, "dataset '" + req.dataset().substr(0, 140) +
                                    "' not found (CreateDataset uploads it)");
  std::shared_ptr<const Dataset> ds = datasets ? datasets->Acquire(req.dataset(), &found) : nullptr;
  if (!ds) return found;
  GPUSAMPLER_RETURN_IF_ERROR(CheckLabelsRepresentable(job->spec, ds->label_dtype,
                                                      "dataset '" + ds->name + "' label dtype"));
  GPUSAMPLER_RETURN_IF_ERROR(req.has_epoch() ? EpochRows(req, *ds, limits, job)
                                             : DatasetRows(req, *ds, limits, job));
  const Dataset& stored = *ds;
  GPUSAMPLER_RETURN_IF_ERROR(AttachDataset(std::move(ds), req.return_features(), job));
  GPUSAMPLER_RETURN_IF_ERROR(DatasetScores(req, limits, stored, AnyWeighted(job->spec), job));
  return RequireScores(*job, &stored);
}

// ---- An inline request ----

// The rows' offsets: [total] with row_splits, [N] (one row) or [B, N].
Status InlineRows(const v1::SampleRequest& req, int64_t total, const Limits& limits, Job* job) {
  const v1::Tensor& labels = req.labels();
  const int rank = labels.shape_size();
  job->row_offsets.clear();
  job->drop_batch_dim = false;
  if (req.has_row_splits()) {
    if (rank != 1) {
      return InvalidArgument("labels.shape " + ShapeString(labels.shape()) +
                             " must be [total] when row_splits is given");
    }
    std::vector<int64_t> v;
    GPUSAMPLER_RETURN_IF_ERROR(
        ParseRowSplits(req.row_splits(), limits, /*check_max_rows=*/true, &v));
    if (v.back() != total) {
      return InvalidArgument("row_splits[" + std::to_string(v.size() - 1) +
                             "] = " + std::to_string(v.back()) + ", must equal the " +
                             std::to_string(total) + " labels elements");
    }
    job->row_offsets = std::move(v);
    return Status::Ok();
  }
  if (rank != 1 && rank != 2) {
    return InvalidArgument("labels.shape " + ShapeString(labels.shape()) +
                           " must be [N] or [B, N] (or [total] with row_splits)");
  }
  const int64_t b = rank == 1 ? 1 : labels.shape(0);
  const int64_t len = labels.shape(rank - 1);
  if (b > limits.max_rows) {
    return LimitExceeded("labels has " + std::to_string(b) + " rows, over max_rows = " +
                         std::to_string(limits.max_rows) + " (--max-rows)");
  }
  job->row_offsets.resize(static_cast<size_t>(b + 1));
  for (int64_t r = 0; r <= b; ++r) job->row_offsets[r] = r * len;
  job->drop_batch_dim = rank == 1;
  return Status::Ok();
}

// The labels tensor and the rows it holds.
Status InlineLabels(const v1::SampleRequest& req, const Limits& limits, Job* job) {
  const v1::Tensor& labels = req.labels();
  int64_t total = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(labels, "labels", limits, &total));
  const DType ldtype = static_cast<DType>(labels.dtype());
  if (!kernels::IsLabel(ldtype)) {
    return InvalidArgument("labels.dtype " + UpperDTypeName(ldtype) +
                           " is not an integer or BOOL dtype");
  }
  GPUSAMPLER_RETURN_IF_ERROR(CheckLabelsRepresentable(job->spec, ldtype, "labels dtype"));
  if (total > limits.max_elements) {
    return LimitExceeded("labels has " + std::to_string(total) + " elements, over max_elements = " +
                         std::to_string(limits.max_elements) + " (--max-elements)");
  }
  GPUSAMPLER_RETURN_IF_ERROR(InlineRows(req, total, limits, job));
  GPUSAMPLER_RETURN_IF_ERROR(CheckRowLengths(*job, "labels", limits));
  const auto* lbytes = reinterpret_cast<const uint8_t*>(labels.data().data());
  if (ldtype == DType::kBool) {
    GPUSAMPLER_RETURN_IF_ERROR(CheckBoolLabels(lbytes, total));
  }
  job->label_dtype = ldtype;
  job->labels = lbytes;
  return Status::Ok();
}

// Features: the labels' leading dims, then one opaque feature row.
Status InlineFeatures(const v1::SampleRequest& req, const Limits& limits, Job* job) {
  ClearFeatures(job);
  if (!req.has_features()) return Status::Ok();
  const v1::Tensor& labels = req.labels();
  const v1::Tensor& feat = req.features();
  const int lead = req.has_row_splits() ? 1 : labels.shape_size();
  bool match = feat.shape_size() >= lead;
  for (int i = 0; match && i < lead; ++i) match = feat.shape(i) == labels.shape(i);
  if (!match) {
    return InvalidArgument("features.shape " + ShapeString(feat.shape()) +
                           " must start with the labels' shape " + ShapeString(labels.shape()));
  }
  int64_t n = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(feat, "features", limits, &n));
  job->feature_dtype = static_cast<DType>(feat.dtype());
  int64_t row = static_cast<int64_t>(kernels::DTypeSize(job->feature_dtype));
  for (int i = lead; i < feat.shape_size(); ++i) {
    job->feature_trailing_shape.push_back(feat.shape(i));
    if (__builtin_mul_overflow(row, feat.shape(i), &row)) {
      return InvalidArgument(
          "features.shape " + ShapeString(feat.shape()) + ": one feature row (trailing dims * " +
          std::to_string(kernels::DTypeSize(job->feature_dtype)) + " bytes) overflows int64");
    }
  }
  job->feature_row_bytes = row;
  job->features = reinterpret_cast<const uint8_t*>(feat.data().data());
  return Status::Ok();
}

}  // namespace

int TransportMessageLimit(int64_t max_message_bytes) {
  const int64_t margin = std::max<int64_t>(max_message_bytes / 4, int64_t{1} << 20);
  const int64_t limit = max_message_bytes > kIntMax - margin ? kIntMax : max_message_bytes + margin;
  return static_cast<int>(limit);
}

bool ResponseBytes(const Job& job, size_t request_id_bytes, int64_t* bytes) {
  const int64_t b = job.num_rows();
  const int64_t k = job.spec.num_samples;
  const int64_t item = static_cast<int64_t>(kernels::DTypeSize(job.label_dtype));
  // Every product and sum checked: the dims come from the client.
  int64_t per_slot = 0, slots = 0, payload = 0, total = 0;
  if (__builtin_add_overflow(8 + item, job.feature_row_bytes, &per_slot) ||
      __builtin_mul_overflow(b, k, &slots) || __builtin_mul_overflow(slots, per_slot, &payload) ||
      // The framing allowance covers every echoed shape: at most kMaxRank dims of up to
      // 10 bytes each per tensor.
      __builtin_add_overflow(payload, 8 * b + kResponseOverheadBytes, &total) ||
      __builtin_add_overflow(total, 4 * b * job.num_classes(), &total) ||  // num_per_class
      __builtin_add_overflow(total, static_cast<int64_t>(request_id_bytes), &total)) {
    return false;
  }
  *bytes = total;
  return true;
}

Status ValidateRequest(const v1::SampleRequest& req, const Limits& limits, Job* job,
                       const DatasetRegistry* datasets) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckRequestSize(req, limits));
  GPUSAMPLER_RETURN_IF_ERROR(ParseSpec(req.spec(), limits, &job->spec));
  GPUSAMPLER_RETURN_IF_ERROR(ResolveDataset(req, limits, datasets, job));
  if (!job->dataset) {
    GPUSAMPLER_RETURN_IF_ERROR(InlineLabels(req, limits, job));
    GPUSAMPLER_RETURN_IF_ERROR(InlineFeatures(req, limits, job));
    GPUSAMPLER_RETURN_IF_ERROR(InlineScores(req, limits, AnyWeighted(job->spec), job));
    GPUSAMPLER_RETURN_IF_ERROR(RequireScores(*job, nullptr));
  }
  return FinishRequest(req, limits, job);
}

}  // namespace gpusampler::server
