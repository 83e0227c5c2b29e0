#include "datasets/epochs.hpp"

#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <thread>
#include <utility>

#include "core/job.hpp"
#include "datasets/datasets.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/elements.hpp"
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
  for (size_t c = 0; c < members.num_classes(); ++c) n.push_back(members.count(c));
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

// BuildClassMembers, mutable (BuildDatasetMembers places it).
std::shared_ptr<ClassMembers> BuildMembers(const uint8_t* labels, DType dtype, int64_t n,
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

// The device a dataset's bytes live on (its first device copy: cuda-sim or CUDA), or
// ClassMembers::kOnHost for a dataset held in host memory.
int DatasetDevice(const Dataset& ds) {
  if (ds.num_elements() == 0 || ds.device_copies.empty()) {
    return ClassMembers::kOnHost;
  }
  return ds.device_copies.front().device;
}

// The member lists of `ds` for `spec`, in the memory the dataset lives in: built from its
// host labels, or from a host copy of its device labels and then placed on that device.
std::shared_ptr<ClassMembers> BuildDatasetMembers(const Dataset& ds,
                                                  const kernels::SamplingSpec& spec) {
  const int device = DatasetDevice(ds);
  if (device == ClassMembers::kOnHost) {
    return BuildMembers(ds.labels.data(), ds.label_dtype, ds.num_elements(), spec);
  }
  const size_t bytes = static_cast<size_t>(ds.num_elements()) * kernels::DTypeSize(ds.label_dtype);
  std::unique_ptr<uint8_t[]> host(new uint8_t[bytes]);  // one O(N) copy, for this build only
  kernels::ElementsCopyToHost(device, host.get(), ds.DeviceLabels(device), bytes);
  auto built = BuildMembers(host.get(), ds.label_dtype, ds.num_elements(), spec);
  built->PlaceOnDevice(device);
  return built;
}

// The member lists for `job`'s spec: from the dataset's index, or built now and kept there
// (charged to the registry; not kept when the budget cannot take them).
Status MemberLists(DatasetRegistry* registry, const Dataset& ds, const Job& job,
                   std::shared_ptr<const ClassMembers>* out) {
  const std::string key = MembershipKey(job.spec);
  if ((*out = ds.epoch_index.Find(key))) return Status::Ok();
  std::shared_ptr<const ClassMembers> built = BuildDatasetMembers(ds, job.spec);
  return registry ? registry->KeepEpochLists(ds, key, std::move(built), out)
                  : (*out = std::move(built), Status::Ok());
}

// The step's slots (class-major, as the kernel writes them) in (v, i) order for the request
// seed and row 0: section 1's output order.
std::vector<size_t> SlotOrder(uint64_t seed, const std::vector<int64_t>& indices) {
  struct Keyed {
    uint32_t v;
    int64_t i;
    size_t slot;
  };
  std::vector<Keyed> keyed;
  keyed.reserve(indices.size());
  for (size_t s = 0; s < indices.size(); ++s) {
    const int64_t i = indices[s];
    keyed.push_back(
        {kernels::ElementKey(seed, 0, kernels::kOrderStream, static_cast<uint64_t>(i)), i, s});
  }
  std::sort(keyed.begin(), keyed.end(),
            [](const Keyed& a, const Keyed& b) { return a.v != b.v ? a.v < b.v : a.i < b.i; });
  std::vector<size_t> order;
  order.reserve(keyed.size());
  for (const Keyed& k : keyed) order.push_back(k.slot);
  return order;
}

// Section 1's output row from the step's gathered slots: K slots in (v, i) order, padding
// after the selected.
// `step.labels` empty (the binary spec): each class is one label value, so a slot's label is
// its class's (the kernel skips a random read of the row for it). Little-endian: the value's
// low bytes are the label in its dtype (the edge checked it is representable), the bytes the
// row holds for every member.
void WriteElementsAnswer(const Dataset& ds, const Job& job, const kernels::ElementsStepArgs& args,
                         const kernels::ElementsStepOut& step, const std::vector<int64_t>& quotas,
                         v1::SampleResponse* response) {
  const int64_t k = job.spec.num_samples;
  const size_t item = static_cast<size_t>(kernels::DTypeSize(ds.label_dtype));
  const bool signed_labels = kernels::Traits(ds.label_dtype).widen == kernels::Widen::kSign;
  std::string indices(static_cast<size_t>(k) * 8, '\xff');
  std::string labels(static_cast<size_t>(k) * item, signed_labels ? '\xff' : '\0');
  const size_t frow = static_cast<size_t>(job.feature_row_bytes);
  std::string features(static_cast<size_t>(k) * frow, '\0');
  const std::vector<size_t> order = SlotOrder(job.seed, step.indices);
  const int64_t class_label[2] = {job.spec.positive_label, job.spec.negative_label};
  for (size_t s = 0; s < order.size(); ++s) {
    const size_t from = order[s];
    std::memcpy(&indices[s * 8], &step.indices[from], 8);
    if (step.labels.empty()) {
      size_t c = 0;  // the slot's class: the last whose first slot is <= from
      while (c + 1 < args.classes.size() && args.classes[c + 1].first_slot <= int64_t(from)) ++c;
      std::memcpy(&labels[s * item], &class_label[args.classes[c].tag], item);
    } else {
      std::memcpy(&labels[s * item], &step.labels[from * item], item);
    }
    if (frow > 0) std::memcpy(&features[s * frow], &step.features[from * frow], frow);
  }
  const bool binary = job.spec.classes.empty();
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
  // answer's batch dim ([C]; [1, C] with row_splits or labels [1, N]); absent when binary.
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

ClassMembers::~ClassMembers() {
  for (uint32_t* p : device_lists) kernels::DeviceFree(p);
}

int64_t ClassMembers::count(size_t c) const {
  return on_device() ? device_counts[c] : static_cast<int64_t>(members[c].size());
}

const uint32_t* ClassMembers::list(size_t c) const {
  return on_device() ? device_lists[c] : members[c].data();
}

int64_t ClassMembers::bytes() const {
  int64_t total = 0;
  for (size_t c = 0; c < num_classes(); ++c) total += count(c) * int64_t{sizeof(uint32_t)};
  return total;
}

void ClassMembers::PlaceOnDevice(int to) {
  std::vector<uint32_t*> lists;
  try {
    for (const std::vector<uint32_t>& m : members) {
      const size_t bytes = m.size() * sizeof(uint32_t);
      lists.push_back(static_cast<uint32_t*>(kernels::DeviceAlloc(to, bytes == 0 ? 4 : bytes)));
      // cuda-sim device memory is host memory: huge pages there too, before the first touch.
      if (to == kernels::kSimDevice) AdviseHugePages(lists.back(), bytes);
      kernels::CopyToDevice(to, lists.back(), m.data(), bytes);
    }
  } catch (...) {
    for (uint32_t* p : lists) kernels::DeviceFree(p);
    throw;
  }
  device = to;
  device_lists = std::move(lists);
  device_counts.clear();
  for (const std::vector<uint32_t>& m : members) {
    device_counts.push_back(static_cast<int64_t>(m.size()));
  }
  members.clear();
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
  return BuildMembers(labels, dtype, n, spec);
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

namespace {

// Quotas, epoch_steps and the kernel's class table of the step (the classes with m_c > 0).
Status PlanElementsStep(const Epoch& e, const kernels::SamplingSpec& spec,
                        const ClassMembers& members, ElementsStep* out,
                        kernels::ElementsStepArgs* args) {
  out->quotas = Quotas(spec, members);
  int64_t g_total = 0;  // G = max_c floor(n_c / m_c)
  for (size_t c = 0; c < members.num_classes(); ++c) {
    const int64_t m = out->quotas[c];
    if (m > 0) g_total = std::max(g_total, members.count(c) / m);
  }
  out->epoch_steps = g_total / e.world_size;
  if (e.step >= out->epoch_steps) return OutOfRange(e, out->epoch_steps);
  args->key = kernels::FeistelKey{e.shuffle_seed, e.epoch};
  args->g = e.step * e.world_size + e.rank;
  args->classes.clear();
  args->slots = 0;
  for (size_t c = 0; c < members.num_classes(); ++c) {
    const int64_t m = out->quotas[c];
    if (m <= 0) continue;
    kernels::ElementsClass k;
    k.members = members.list(c);
    k.n = static_cast<uint64_t>(members.count(c));
    k.m = m;
    k.pass_len = members.count(c) / m * m;  // P_c
    k.tag = static_cast<uint32_t>(c);
    k.first_slot = args->slots;
    args->slots += m;
    args->classes.push_back(k);
  }
  return Status::Ok();
}

// Runs the planned step where `members` are.
void RunElementsStep(const ClassMembers& members, const kernels::ElementsStepArgs& args,
                     kernels::ElementsStepOut* out) {
  if (members.on_device()) {
    kernels::ElementsStepOnDevice(members.device, args, out);
  } else {
    kernels::ElementsStepHost(args, out);
  }
}

}  // namespace

Status ElementsEpochStep(const Epoch& e, const kernels::SamplingSpec& spec,
                         const ClassMembers& members, ElementsStep* out) {
  kernels::ElementsStepArgs args;
  GPUSAMPLER_RETURN_IF_ERROR(PlanElementsStep(e, spec, members, out, &args));
  kernels::ElementsStepOut step;
  RunElementsStep(members, args, &step);
  out->selected = std::move(step.indices);
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
  kernels::ElementsStepArgs args;
  kernels::ElementsStepOut out;
  try {
    GPUSAMPLER_RETURN_IF_ERROR(MemberLists(registry, ds, job, &members));
    GPUSAMPLER_RETURN_IF_ERROR(PlanElementsStep(epoch, job.spec, *members, &step, &args));
    // The labels and feature rows where the member lists are (the dataset's memory).
    const bool dev = members->on_device();
    if (!job.spec.classes.empty()) {  // the binary spec's labels are its classes' values
      args.labels = dev ? ds.DeviceLabels(members->device) : ds.labels.data();
      args.label_bytes = static_cast<size_t>(kernels::DTypeSize(ds.label_dtype));
    }
    if (job.feature_row_bytes > 0) {
      args.features = dev ? ds.DeviceFeatures(members->device) : ds.features.data();
      args.feature_row_bytes = static_cast<size_t>(job.feature_row_bytes);
    }
    RunElementsStep(*members, args, &out);
  } catch (const kernels::Error& e) {
    if (e.code() == kernels::Error::Code::kInvalidArgument) return InvalidArgument(e.what());
    return Status(
        e.code() == kernels::Error::Code::kOutOfMemory ? Code::kResourceExhausted : Code::kInternal,
        std::string("ELEMENTS step: ") + e.what());
  }
  WriteElementsAnswer(ds, job, args, out, step.quotas, response);
  response->set_epoch_steps(step.epoch_steps);
  v1::ServerTiming* t = response->mutable_timing();
  t->set_queue_us(0);
  t->set_compute_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - started).count());
  t->set_batch_rows(1);
  return Status::Ok();
}

bool ElementsListsBuilt(const Job& job) {
  const Dataset& ds = static_cast<const Dataset&>(*job.dataset);
  return ds.epoch_index.Find(MembershipKey(job.spec)) != nullptr;
}

bool ElementsStepRunsInline(const Job& job) {
  const Dataset& ds = static_cast<const Dataset&>(*job.dataset);
  const std::shared_ptr<const ClassMembers> members = ds.epoch_index.Find(MembershipKey(job.spec));
  return members != nullptr && !members->on_device();
}

namespace {

// The epoch thread: tasks run one after the other, in the order posted; the thread drains
// what is queued and stops at exit.
class EpochThread {
 public:
  EpochThread() : thread_([this] { Loop(); }) {}
  ~EpochThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Post(std::function<void()> fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(fn));
    }
    cv_.notify_one();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping, and nothing left
      std::function<void()> fn = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the rest is constructed
};

}  // namespace

void RunOffGrpcThread(std::function<void()> fn) {
  static EpochThread thread;
  thread.Post(std::move(fn));
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
