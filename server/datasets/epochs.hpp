// Epochs over resident datasets (SPEC section 8): a dataset request that names an epoch is
// answered with this rank's step of a fixed permutation, a pure function of (dataset
// version, request, epoch spec). No state is kept between steps.
// - ROWS resolves the step's dataset rows (DistributedSampler's arithmetic with the Feistel
//   permutation of kernels/feistel.hpp); the request then runs as a `rows` request.
// - ELEMENTS reads per-class member lists of a one-row dataset (built once per version and
//   class spec, kept with the dataset in an EpochIndex, on the device the dataset lives on)
//   and answers in O(K): on the host, or as the ELEMENTS kernel (kernels/elements.hpp).
// Thread-safety: the functions are pure; EpochIndex is thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.hpp"
#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/kernels/types.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

enum class EpochMode : int32_t { kRows = 1, kElements = 2 };  // values of v1::EpochMode

// A validated EpochSpec as plain values.
struct Epoch {
  uint64_t shuffle_seed = 0;
  uint32_t epoch = 0;
  int64_t world_size = 1;
  int64_t rank = 0;
  int64_t step = 0;
  EpochMode mode = EpochMode::kRows;
  int64_t rows_per_step = 1;
  bool drop_last = false;
};

// Checks the fields SPEC section 8 constrains (mode, world_size, rank, step, and
// rows_per_step in ROWS): INVALID_ARGUMENT naming the field.
Status ParseEpoch(const v1::EpochSpec& spec, Epoch* out);

// ROWS: this rank's dataset rows at `epoch.step`, in order, over a dataset of `num_rows`
// rows, and the rank's steps in the epoch. OUT_OF_RANGE (with epoch_steps in the message)
// for a step past the epoch.
Status RowsEpochStep(const Epoch& epoch, int64_t num_rows, std::vector<int64_t>* rows,
                     int64_t* epoch_steps);

// The members of each class of a row, in index order (SPEC section 8: "members counted in
// index order"). Element indices are < 2^32 (a row has fewer than 2^31 elements). Held in
// host memory, or (PlaceOnDevice) in the memory of the device the dataset lives on, where
// the ELEMENTS kernel (kernels/elements.hpp) reads them; freed with the last reference.
struct ClassMembers {
  ClassMembers() = default;
  ~ClassMembers();
  ClassMembers(const ClassMembers&) = delete;
  ClassMembers& operator=(const ClassMembers&) = delete;

  std::vector<std::vector<uint32_t>> members;  // [class][j] on the host; empty once placed
  int device = kOnHost;                        // kOnHost, kernels::kSimDevice or a CUDA device
  std::vector<uint32_t*> device_lists;         // [class], in `device`'s memory
  std::vector<int64_t> device_counts;          // [class]

  static constexpr int kOnHost = -100;
  bool on_device() const { return device != kOnHost; }
  size_t num_classes() const { return on_device() ? device_counts.size() : members.size(); }
  int64_t count(size_t c) const;  // n_c
  const uint32_t* list(size_t c) const;
  int64_t bytes() const;
  // Moves the host lists into new memory of `device` (throws kernels::Error).
  void PlaceOnDevice(int device);
};

// A key naming the membership `spec` defines (the binary spec's two label values, or the
// classes' label ranges): member lists are cached under it.
std::string MembershipKey(const kernels::SamplingSpec& spec);
// The members of every class of `spec` (binary: positives are class 0, negatives class 1)
// among a row's `n` labels of `dtype`: one pass, O(n).
std::shared_ptr<const ClassMembers> BuildClassMembers(const uint8_t* labels, kernels::DType dtype,
                                                      int64_t n, const kernels::SamplingSpec& spec);

// ELEMENTS: the step's selected elements (unordered), the quota m_c of every class and the
// rank's steps in the epoch. O(sum m_c) Feistel evaluations, whatever the row's size.
struct ElementsStep {
  std::vector<int64_t> selected;
  std::vector<int64_t> quotas;
  int64_t epoch_steps = 0;
};
// Runs where `members` are: the host reference, or the ELEMENTS kernel on their device.
Status ElementsEpochStep(const Epoch& epoch, const kernels::SamplingSpec& spec,
                         const ClassMembers& members, ElementsStep* out);

// INVALID_ARGUMENT when ELEMENTS cannot take `spec` (a class whose selection is not
// UNIFORM, or classes that do not compile for this K), naming the field.
Status CheckElementsSpec(const kernels::SamplingSpec& spec);

// Sorts `selected` by (v, i) for the request seed and row 0 (SPEC section 1's output order).
void OrderBySeed(uint64_t seed, std::vector<int64_t>* selected);

// The member lists of one dataset version, by membership key: built on first use, kept as
// long as the dataset. `bytes()` is what they add to the dataset's share of
// --max-dataset-bytes (the registry charges it, DatasetRegistry::ChargeEpochIndex).
struct Dataset;
class DatasetRegistry;
struct Job;

// Answers an ELEMENTS step of `ds` (one row) into `response` on the host: the member lists
// (from the dataset's EpochIndex, built and charged to the registry on first use), the
// step's selection, ordered by (v, i), then labels, features (when `job` gathers them),
// padding and counts as section 1 says, and epoch_steps. `job` is the validated request.
// Where the dataset lives on a device (cuda-sim or CUDA), the member lists are placed there
// and the step runs as the ELEMENTS kernel; on the host otherwise. The bytes are the same.
Status AnswerElementsStep(DatasetRegistry* registry, const Epoch& epoch, const Job& job,
                          v1::SampleResponse* response);

// Whether `job`'s member lists are built (its step is O(K), answered on the caller's thread);
// when not, the first step builds them (O(N)) and runs through RunOffGrpcThread.
bool ElementsListsBuilt(const Job& job);
// Whether `job`'s step may be answered on the caller's (gRPC) thread: its member lists are
// built and on the host. A step on a device waits for its copy back (a host sync), so it runs
// through RunOffGrpcThread like a first step.
bool ElementsStepRunsInline(const Job& job);
// Runs `fn` on the epoch thread (one per process, started on first use; tasks in order), so
// that a member-list build never holds a gRPC callback thread.
void RunOffGrpcThread(std::function<void()> fn);

class EpochIndex {
 public:
  // The lists for `key`, or null when none is built yet.
  std::shared_ptr<const ClassMembers> Find(const std::string& key) const;
  // Keeps `lists` under `key` (a concurrent build of the same key may have won: then its
  // lists are returned and nothing is added).
  std::shared_ptr<const ClassMembers> Keep(const std::string& key,
                                           std::shared_ptr<const ClassMembers> lists, bool* added);
  int64_t bytes() const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const ClassMembers>> by_key_;
  int64_t bytes_ = 0;
};

}  // namespace gpusampler::server
