#include "datasets/epochs.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "core/job.hpp"
#include "datasets/datasets.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/feistel.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::server {
namespace {

using kernels::DType;

std::string N(int64_t x) { return std::to_string(x); }

Status OutOfRange(const Epoch& e, int64_t epoch_steps) {
  return Status(Code::kOutOfRange, "epoch.step = " + N(e.step) + " is past the epoch: rank " +
                                       N(e.rank) + " of world_size " + N(e.world_size) +
                                       " has epoch_steps = " + N(epoch_steps) +
                                       " (steps 0 .. epoch_steps - 1)");
}

// ROWS (SPEC section 8, DistributedSampler's arithmetic): samples per rank.
int64_t RowsPerRank(int64_t b, int64_t w, bool drop_last) {
  if (drop_last && b % w != 0) return b < w ? 0 : (b - w + w - 1) / w;  // ceil((B - W) / W)
  return (b + w - 1) / w;                                               // ceil(B / W)
}

// The compiled class table of `spec.classes` for K (throws kernels::Error).
std::vector<uint8_t> CompileClasses(const kernels::SamplingSpec& spec) {
  std::vector<uint8_t> table;
  kernels::CompileClassTable(spec.classes, spec.fill_order, spec.num_samples, &table);
  return table;
}

// m_c of every class for the class sizes of `members` (sections 1 and 7).
std::vector<int64_t> Quotas(const kernels::SamplingSpec& spec, const ClassMembers& members) {
  std::vector<int64_t> n;
  for (const auto& m : members.members) n.push_back(static_cast<int64_t>(m.size()));
  const int64_t k = spec.num_samples;
  if (spec.classes.empty()) {
    const kernels::Quotas q = kernels::ComputeQuotas(
        n[0], n[1], k, kernels::TargetPositives(k, spec.positive_fraction), spec.fill);
    return {q.pos, q.neg};
  }
  const std::vector<uint8_t> table = CompileClasses(spec);
  const kernels::ClassTableView v = kernels::ViewClassTable(table.data());
  std::vector<int64_t> m(n.size());
  kernels::ClassQuotas(v.classes, v.header->num_classes, v.fill, v.header->num_fill, k, n.data(),
                       m.data());
  return m;
}

// Calls fn(i, c) for each element i of the row whose label is in class c.
template <class Fn>
void ForEachMember(const uint8_t* labels, DType dtype, int64_t n, const kernels::SamplingSpec& spec,
                   Fn&& fn) {
  std::vector<uint8_t> table;
  if (!spec.classes.empty()) table = CompileClasses(spec);
  kernels::WithLabelWord(dtype, [&](auto word) {
    using Word = decltype(word);
    const Word* p = reinterpret_cast<const Word*>(labels);
    if (table.empty()) {
      for (int64_t i = 0; i < n; ++i) {
        const int64_t label = static_cast<int64_t>(p[i]);
        if (label == spec.positive_label) {
          fn(i, 0);
        } else if (label == spec.negative_label) {
          fn(i, 1);
        }
      }
      return;
    }
    const kernels::ClassTableView v = kernels::ViewClassTable(table.data());
    for (int64_t i = 0; i < n; ++i) {
      const int32_t c =
          kernels::ClassOfLabel(v.ranges, v.header->num_ranges, static_cast<int64_t>(p[i]));
      if (c >= 0) fn(i, c);
    }
  });
}

// Where the workers keep the dataset's bytes, host-addressable: its host copy, or the
// cuda-sim device's copy (host memory). Null for a dataset held only in CUDA memory.
const uint8_t* HostLabels(const Dataset& ds) {
  if (ds.num_elements() == 0 || ds.labels.size() > 0) return ds.labels.data();
  return ds.DeviceLabels(kernels::kSimDevice);
}
const uint8_t* HostFeatures(const Dataset& ds) {
  if (ds.features.size() > 0) return ds.features.data();
  return ds.DeviceFeatures(kernels::kSimDevice);
}

// madvise(MADV_HUGEPAGE) on the whole 2 MiB pages inside [p, p + bytes), before they are
// first touched. A hint: ignored where transparent huge pages are off.
void AdviseHugePages(void* p, size_t bytes) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) (void)madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

void SetTensor(v1::Tensor* t, DType dtype, const std::vector<int64_t>& shape, std::string bytes) {
  t->set_dtype(static_cast<v1::DType>(dtype));
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  *t->mutable_data() = std::move(bytes);
}

// The member lists for `job`'s spec: from the dataset's index, or built now and kept there
// (charged to the registry; not kept when the budget cannot take them).
Status MemberLists(DatasetRegistry* registry, const Dataset& ds, const Job& job,
                   std::shared_ptr<const ClassMembers>* out) {
  const std::string key = MembershipKey(job.spec);
  if ((*out = ds.epoch_index.Find(key))) return Status::Ok();
  const uint8_t* labels = HostLabels(ds);
  if (labels == nullptr) {
    return Status(Code::kFailedPrecondition,
                  "epoch.mode EPOCH_MODE_ELEMENTS is served by CPU and cuda-sim workers only; "
                  "dataset '" +
                      ds.name + "' is held in CUDA device memory");
  }
  auto built = BuildClassMembers(labels, ds.label_dtype, ds.num_elements(), job.spec);
  return registry ? registry->KeepEpochLists(ds, key, std::move(built), out)
                  : (*out = std::move(built), Status::Ok());
}

// Section 1's output row for the ordered selection: K slots, padding after the selected.
// The selection in (v, i) order, with each element's class: ElementsEpochStep lists class 0's
// m_0 elements first, then class 1's, ...
void OrderWithClasses(uint64_t seed, const ElementsStep& step, std::vector<int64_t>* selected,
                      std::vector<int32_t>* classes) {
  struct Keyed {
    uint32_t v;
    int64_t i;
    int32_t c;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(step.selected.size());
  size_t s = 0;
  for (size_t c = 0; c < step.quotas.size(); ++c) {
    for (int64_t j = 0; j < step.quotas[c]; ++j, ++s) {
      const int64_t i = step.selected[s];
      keyed.push_back(
          {kernels::ElementKey(seed, 0, kernels::kOrderStream, static_cast<uint64_t>(i)), i,
           static_cast<int32_t>(c)});
    }
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const Keyed& a, const Keyed& b) { return a.v != b.v ? a.v < b.v : a.i < b.i; });
  selected->clear();
  classes->clear();
  for (const Keyed& k : keyed) {
    selected->push_back(k.i);
    classes->push_back(k.c);
  }
}

void WriteElementsAnswer(const Dataset& ds, const Job& job, const std::vector<int64_t>& selected,
                         const std::vector<int32_t>& classes, const std::vector<int64_t>& quotas,
                         v1::SampleResponse* response) {
  const int64_t k = job.spec.num_samples;
  const size_t item = static_cast<size_t>(kernels::DTypeSize(ds.label_dtype));
  const bool signed_labels = kernels::Traits(ds.label_dtype).widen == kernels::Widen::kSign;
  std::string indices(static_cast<size_t>(k) * 8, '\xff');
  std::string labels(static_cast<size_t>(k) * item, signed_labels ? '\xff' : '\0');
  const size_t frow = static_cast<size_t>(job.feature_row_bytes);
  std::string features(static_cast<size_t>(k) * frow, '\0');
  const uint8_t* src_labels = HostLabels(ds);
  const uint8_t* src_features = frow > 0 ? HostFeatures(ds) : nullptr;
  // The binary spec's classes are one label value each: the labels are known without
  // reading the row (a random read each in a large one). Little-endian: the value's low
  // bytes are the label in its dtype (the edge checked it is representable).
  const bool binary = job.spec.classes.empty();
  const int64_t class_label[2] = {job.spec.positive_label, job.spec.negative_label};
  for (const int64_t i : selected) {  // the misses of a large row overlap (see above)
    if (!binary) __builtin_prefetch(src_labels + static_cast<size_t>(i) * item);
    if (src_features) __builtin_prefetch(src_features + static_cast<size_t>(i) * frow);
  }
  for (size_t s = 0; s < selected.size(); ++s) {
    const int64_t i = selected[s];
    std::memcpy(&indices[s * 8], &i, 8);
    const uint8_t* label = binary ? reinterpret_cast<const uint8_t*>(&class_label[classes[s]])
                                  : src_labels + static_cast<size_t>(i) * item;
    std::memcpy(&labels[s * item], label, item);
    if (src_features) std::memcpy(&features[s * frow], src_features + i * frow, frow);
  }
  std::vector<int64_t> shape;
  if (!job.drop_batch_dim) shape.push_back(1);
  shape.push_back(k);
  SetTensor(response->mutable_indices(), DType::kInt64, shape, std::move(indices));
  SetTensor(response->mutable_labels(), ds.label_dtype, shape, std::move(labels));
  if (frow > 0) {
    std::vector<int64_t> fshape = shape;
    fshape.insert(fshape.end(), ds.feature_shape.begin(), ds.feature_shape.end());
    SetTensor(response->mutable_features(), ds.feature_dtype, fshape, std::move(features));
  }
  // num_positive / num_negative: m_0 / m_1 with two classes, m_0 / 0 with one, zeros with
  // three or more (section 7).
  const size_t c = quotas.size();
  const int32_t pos = c <= 2 ? static_cast<int32_t>(quotas[0]) : 0;
  const int32_t neg = c == 2 ? static_cast<int32_t>(quotas[1]) : 0;
  SetTensor(response->mutable_num_positive(), DType::kInt32, {1},
            std::string(reinterpret_cast<const char*>(&pos), 4));
  SetTensor(response->mutable_num_negative(), DType::kInt32, {1},
            std::string(reinterpret_cast<const char*>(&neg), 4));
  // num_per_class (section 7): m_c of every class, with classes only, shaped like the
  // answer's batch dim ([C], or [1, C] with row_splits); absent for the binary spec.
  if (!binary) {
    std::vector<int32_t> per_class(quotas.begin(), quotas.end());
    std::vector<int64_t> cshape;
    if (!job.drop_batch_dim) cshape.push_back(1);
    cshape.push_back(static_cast<int64_t>(c));
    SetTensor(response->mutable_num_per_class(), DType::kInt32, cshape,
              std::string(reinterpret_cast<const char*>(per_class.data()), c * 4));
  }
  response->set_seed(job.seed);
  response->set_device(ds.devices.empty() ? "cpu" : ds.devices.front());
}

}  // namespace

Status ParseEpoch(const v1::EpochSpec& spec, Epoch* out) {
  if (spec.mode() != v1::EPOCH_MODE_ROWS && spec.mode() != v1::EPOCH_MODE_ELEMENTS) {
    return InvalidArgument("epoch.mode must be EPOCH_MODE_ROWS or EPOCH_MODE_ELEMENTS, got " +
                           std::to_string(spec.mode()));
  }
  if (spec.world_size() < 1) {
    return InvalidArgument("epoch.world_size = " + N(spec.world_size()) + " must be >= 1");
  }
  if (spec.rank() < 0 || spec.rank() >= spec.world_size()) {
    return InvalidArgument("epoch.rank = " + N(spec.rank()) +
                           " is outside [0, world_size = " + N(spec.world_size()) + ")");
  }
  if (spec.step() < 0) return InvalidArgument("epoch.step = " + N(spec.step()) + " must be >= 0");
  if (spec.mode() == v1::EPOCH_MODE_ROWS && spec.rows_per_step() < 1) {
    return InvalidArgument("epoch.rows_per_step = " + N(spec.rows_per_step()) +
                           " must be >= 1 in EPOCH_MODE_ROWS");
  }
  out->shuffle_seed = spec.shuffle_seed();
  out->epoch = spec.epoch();
  out->world_size = spec.world_size();
  out->rank = spec.rank();
  out->step = spec.step();
  out->mode = static_cast<EpochMode>(spec.mode());
  out->rows_per_step = spec.rows_per_step();
  out->drop_last = spec.drop_last();
  return Status::Ok();
}

Status RowsEpochStep(const Epoch& e, int64_t num_rows, std::vector<int64_t>* rows,
                     int64_t* epoch_steps) {
  const int64_t w = e.world_size;
  const int64_t b = e.rows_per_step;
  const int64_t num = RowsPerRank(num_rows, w, e.drop_last);
  *epoch_steps = num / b + (num % b != 0);  // ceil(num / b)
  if (e.step >= *epoch_steps) return OutOfRange(e, *epoch_steps);
  const kernels::FeistelKey key{e.shuffle_seed, e.epoch};
  const int64_t first = e.step * b;
  const int64_t last = std::min(first + b, num);
  rows->clear();
  for (int64_t j = first; j < last; ++j) {
    // List position p of the rank's j-th sample; past B the list repeats its head (padding
    // without drop_last; with drop_last the list is cut to total <= B).
    const int64_t p = e.rank + j * w;
    rows->push_back(static_cast<int64_t>(
        kernels::FeistelPermute(key, static_cast<uint64_t>(num_rows), kernels::kRowsTag, 0,
                                static_cast<uint64_t>(p % num_rows))));
  }
  return Status::Ok();
}

int64_t ClassMembers::bytes() const {
  int64_t total = 0;
  for (const auto& m : members) total += static_cast<int64_t>(m.size() * sizeof(uint32_t));
  return total;
}

std::string MembershipKey(const kernels::SamplingSpec& spec) {
  if (spec.classes.empty())
    return "binary:" + N(spec.positive_label) + ":" + N(spec.negative_label);
  std::string key = "classes";
  for (const kernels::ClassSpec& c : spec.classes) {
    key += "|";
    for (const kernels::LabelRange& r : c.labels) key += N(r.lo) + ":" + N(r.hi) + ",";
  }
  return key;
}

std::shared_ptr<const ClassMembers> BuildClassMembers(const uint8_t* labels, DType dtype, int64_t n,
                                                      const kernels::SamplingSpec& spec) {
  auto out = std::make_shared<ClassMembers>();
  const size_t classes = spec.classes.empty() ? 2 : spec.classes.size();
  out->members.resize(classes);
  // Counted first, so that each list is one allocation of its final size, backed by huge
  // pages where the kernel offers them: a step reads K members at random places of lists
  // that may be hundreds of MB, and with 4 KiB pages nearly every read is a TLB miss too.
  std::vector<size_t> counts(classes, 0);
  ForEachMember(labels, dtype, n, spec,
                [&](int64_t, int32_t c) { ++counts[static_cast<size_t>(c)]; });
  for (size_t c = 0; c < classes; ++c) {
    out->members[c].reserve(counts[c]);
    AdviseHugePages(out->members[c].data(), counts[c] * sizeof(uint32_t));
  }
  ForEachMember(labels, dtype, n, spec, [&](int64_t i, int32_t c) {
    out->members[static_cast<size_t>(c)].push_back(static_cast<uint32_t>(i));
  });
  return out;
}

Status CheckElementsSpec(const kernels::SamplingSpec& spec) {
  for (size_t c = 0; c < spec.classes.size(); ++c) {
    if (spec.classes[c].selection != kernels::Selection::kUniform) {
      return InvalidArgument("spec.classes[" + std::to_string(c) +
                             "].selection must be UNIFORM with epoch.mode EPOCH_MODE_ELEMENTS "
                             "(an epoch selects by its permutation only)");
    }
  }
  if (spec.classes.empty()) return Status::Ok();
  try {
    (void)CompileClasses(spec);  // checked again where it is used; here for the message
  } catch (const kernels::Error& e) {
    return InvalidArgument(e.what());
  }
  return Status::Ok();
}

Status ElementsEpochStep(const Epoch& e, const kernels::SamplingSpec& spec,
                         const ClassMembers& members, ElementsStep* out) {
  out->quotas = Quotas(spec, members);
  int64_t g_total = 0;  // G = max_c floor(n_c / m_c)
  for (size_t c = 0; c < members.members.size(); ++c) {
    const int64_t m = out->quotas[c];
    const int64_t n = static_cast<int64_t>(members.members[c].size());
    if (m > 0) g_total = std::max(g_total, n / m);
  }
  out->epoch_steps = g_total / e.world_size;
  if (e.step >= out->epoch_steps) return OutOfRange(e, out->epoch_steps);
  const int64_t g = e.step * e.world_size + e.rank;
  const kernels::FeistelKey key{e.shuffle_seed, e.epoch};
  // Two phases: the permutation (compute only) for every position, then the gather of the
  // members, so that the cache misses of a large row's member list overlap instead of
  // waiting one behind each Feistel evaluation.
  std::vector<uint64_t> at;
  out->selected.clear();
  for (size_t c = 0; c < members.members.size(); ++c) {
    const int64_t m = out->quotas[c];
    if (m <= 0) continue;
    const std::vector<uint32_t>& list = members.members[c];
    const uint64_t n = list.size();
    const int64_t pass_len = static_cast<int64_t>(n) / m * m;  // P_c
    at.clear();
    for (int64_t q = g * m; q < (g + 1) * m; ++q) {
      at.push_back(kernels::FeistelPermute(key, n, static_cast<uint32_t>(c),
                                           static_cast<uint32_t>(q / pass_len),
                                           static_cast<uint64_t>(q % pass_len)));
    }
    for (const uint64_t j : at) __builtin_prefetch(&list[j]);
    for (const uint64_t j : at) out->selected.push_back(list[j]);
  }
  return Status::Ok();
}

void OrderBySeed(uint64_t seed, std::vector<int64_t>* selected) {
  std::vector<std::pair<uint32_t, int64_t>> keyed;
  keyed.reserve(selected->size());
  for (const int64_t i : *selected) {
    keyed.emplace_back(
        kernels::ElementKey(seed, 0, kernels::kOrderStream, static_cast<uint64_t>(i)), i);
  }
  std::sort(keyed.begin(), keyed.end());
  for (size_t s = 0; s < keyed.size(); ++s) (*selected)[s] = keyed[s].second;
}

Status AnswerElementsStep(DatasetRegistry* registry, const Epoch& epoch, const Job& job,
                          v1::SampleResponse* response) {
  const auto started = Clock::now();
  const Dataset& ds = static_cast<const Dataset&>(*job.dataset);
  std::shared_ptr<const ClassMembers> members;
  ElementsStep step;
  try {
    GPUSAMPLER_RETURN_IF_ERROR(MemberLists(registry, ds, job, &members));
    GPUSAMPLER_RETURN_IF_ERROR(ElementsEpochStep(epoch, job.spec, *members, &step));
  } catch (const kernels::Error& e) {
    return InvalidArgument(e.what());
  }
  std::vector<int64_t> selected;
  std::vector<int32_t> classes;
  OrderWithClasses(job.seed, step, &selected, &classes);
  WriteElementsAnswer(ds, job, selected, classes, step.quotas, response);
  response->set_epoch_steps(step.epoch_steps);
  v1::ServerTiming* t = response->mutable_timing();
  t->set_queue_us(0);
  t->set_compute_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
  t->set_batch_rows(1);
  return Status::Ok();
}

std::shared_ptr<const ClassMembers> EpochIndex::Find(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

std::shared_ptr<const ClassMembers> EpochIndex::Keep(const std::string& key,
                                                     std::shared_ptr<const ClassMembers> lists,
                                                     bool* added) {
  std::lock_guard<std::mutex> lock(mu_);
  auto [it, inserted] = by_key_.emplace(key, lists);
  *added = inserted;
  if (inserted) bytes_ += lists->bytes();
  return it->second;
}

int64_t EpochIndex::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

}  // namespace gpusampler::server
