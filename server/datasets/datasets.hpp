// Resident datasets (uploaded once, sampled by name): the immutable Dataset, the builder
// that validates an upload chunk by chunk, and the registry with its byte budget.
// Thread-safety: Dataset is immutable once built; DatasetRegistry is thread-safe;
// DatasetBuilder is used by one upload at a time.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/job.hpp"
#include "core/status.hpp"
#include "datasets/epochs.hpp"
#include "gpusampler/kernels/host_buffer.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "gpusampler/v1/sampler.pb.h"

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX (openssl/evp.h stays out of this header)

namespace gpusampler::server {

// One stored dataset. Requests hold a shared_ptr, so deleting or replacing it never frees
// bytes that an accepted request still reads.
struct Dataset final : DatasetStorage {
  Dataset() = default;
  ~Dataset() override;
  Dataset(const Dataset&) = delete;
  Dataset& operator=(const Dataset&) = delete;

  std::string name;
  kernels::DType label_dtype = kernels::DType::kInt64;
  kernels::HostBytes labels;  // [total] in label_dtype; cache-line aligned
  // How the labels divide into rows (docs/datasets.md, "Row shapes"). kOneRow: 1-D labels,
  // one row, answered without a batch dim. kFixed: B rows of N elements each (a 2-D
  // NAME.labels.npy [B, N]), held as a stride: nothing O(B) is stored. kRagged: row_splits.
  enum class Rows { kOneRow, kFixed, kRagged };
  Rows rows = Rows::kOneRow;
  std::vector<int64_t> row_splits;  // [B + 1] for kRagged; empty otherwise
  int64_t fixed_rows = 1;           // B for kOneRow (1) and kFixed
  int64_t row_length = 0;           // N for kOneRow and kFixed
  kernels::DType feature_dtype = kernels::DType::kUnspecified;  // kUnspecified: none
  std::vector<int64_t> feature_shape;                           // one feature row's shape
  int64_t feature_row_bytes = 0;
  kernels::HostBytes features;  // [total, feature_shape...]; cache-line aligned, so a
                                // 64-byte row is one line for the gather
  // Optional FLOAT32 scores, one per label element (SPEC section 7); empty: none. Kept in
  // host memory also when the labels live on a device (launches stage them from there).
  std::vector<float, kernels::CacheLineAllocator<float>> scores;  // large: mapped pages
  bool has_negative_scores = false;  // checked against WEIGHTED classes per request
  std::string sha256;  // lowercase hex over the label, then the feature, then the score bytes
  int64_t bytes = 0;   // label + feature + score (+ row_splits for kRagged) bytes
  // The repository files this version was loaded from or committed to (repository.hpp:
  // their device, inode, size and mtime); empty when the dataset is not in a repository.
  std::string repo_version;

  // Copies in CUDA device memory (the host vectors above are then released).
  struct DeviceCopy {
    int device = 0;
    uint8_t* labels = nullptr;
    uint8_t* features = nullptr;
  };
  std::vector<DeviceCopy> device_copies;
  std::vector<std::string> devices;  // "cpu", or "cuda:N" for each device copy
  // Epochs (SPEC section 8): per-class member lists, built on first use by an ELEMENTS
  // request and kept (and charged to the budget, DatasetRegistry::KeepEpochLists) as long as
  // this version is stored.
  mutable EpochIndex epoch_index;

  const uint8_t* DeviceLabels(int device) const override;
  const uint8_t* DeviceFeatures(int device) const override;

  bool has_row_splits() const { return rows == Rows::kRagged; }
  // Whether answers to the whole dataset carry a batch dim ([B, K]; [K] for kOneRow).
  bool has_batch_dim() const { return rows != Rows::kOneRow; }
  int64_t num_rows() const {
    return has_row_splits() ? static_cast<int64_t>(row_splits.size()) - 1 : fixed_rows;
  }
  int64_t num_elements() const {
    return has_row_splits() ? row_splits.back() : fixed_rows * row_length;
  }
  // Row r (0 <= r < num_rows()) is elements [row_begin(r), row_end(r)) of the labels (and
  // feature rows of the features).
  int64_t row_begin(int64_t r) const {
    return has_row_splits() ? row_splits[static_cast<size_t>(r)] : r * row_length;
  }
  int64_t row_end(int64_t r) const {
    return has_row_splits() ? row_splits[static_cast<size_t>(r) + 1] : (r + 1) * row_length;
  }
  bool has_features() const { return feature_row_bytes > 0; }
  // The DatasetInfo message.
  v1::DatasetInfo Info() const;
};

// Lowercase hex SHA-256 (FIPS 180-4) of the bytes fed in order: OpenSSL's libcrypto, which
// picks the CPU's SHA instructions (x86 SHA-NI, ARMv8 SHA2) when it has them, about 10x the
// portable code (2 GiB hashed in about 2 s instead of 28 s; docs/decisions.md S15).
// A copy hashes on from where the original is. Throws std::bad_alloc when libcrypto cannot
// allocate its context.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256& other);
  Sha256& operator=(const Sha256& other);
  void Update(const uint8_t* data, size_t n);
  std::string HexDigest();  // finishes; call once

 private:
  evp_md_ctx_st* ctx_;
};

class DatasetRegistry;

// Validates the chunks of one upload in order (SPEC section 5) and builds the Dataset.
// Every byte appended is reserved against the registry's budget first; the reservation is
// released by the destructor unless Commit succeeded.
class DatasetBuilder {
 public:
  DatasetBuilder(DatasetRegistry* registry, const Limits& limits);
  ~DatasetBuilder();
  DatasetBuilder(const DatasetBuilder&) = delete;
  DatasetBuilder& operator=(const DatasetBuilder&) = delete;

  // Appends one chunk; the first one names the dataset. INVALID_ARGUMENT naming the field,
  // ALREADY_EXISTS, or RESOURCE_EXHAUSTED (budget) on failure; nothing is kept after one.
  Status Add(const v1::DatasetChunk& chunk);
  // Ends the upload: checks the totals and stores the dataset (ALREADY_EXISTS is checked
  // again here: of two uploads of one name, the first to commit wins). With a repository the
  // dataset is committed there first (Repository::CommitUpload).
  Status Commit(std::shared_ptr<const Dataset>* stored);

  // The steps of Commit, for the repository: Seal checks the totals and computes sha256 and
  // bytes; Store places the sealed dataset where the workers sample and registers it.
  Status Seal();
  // The upload's labels are `rows` rows of `row_length` elements each (a 2-D labels file
  // [B, N], repository.hpp): stored as a stride, without row_splits. Call before Seal, which
  // checks rows * row_length against the total. INVALID_ARGUMENT with row_splits, or with a
  // negative count.
  Status SetFixedRows(int64_t rows, int64_t row_length);
  // `placed`: Place already ran. `replace`: overwrite a dataset of the same name in memory.
  Status Store(std::shared_ptr<const Dataset>* stored, bool placed = false, bool replace = false);
  Dataset* dataset() { return ds_.get(); }
  bool replace() const { return replace_; }
  // The reserved bytes: what the upload holds of the budget so far.
  int64_t reserved() const { return reserved_; }
  // Reserves `bytes` at once, before any chunk (a load from disk, whose size the headers
  // give): the chunks draw on it and reserve only what goes beyond, and Store gives back what
  // is left. A large load that started is then not starved by smaller loads taking the room
  // that its evictions freed while it reads. RESOURCE_EXHAUSTED as Add's.
  Status Prepay(int64_t bytes);

 private:
  // The steps of Add: the first chunk names the upload, later ones may not; each chunk's
  // labels and features are checked against the first's; Keep reserves and appends.
  Status StartUpload(const v1::DatasetChunk& chunk);
  Status CheckLaterChunk(const v1::DatasetChunk& chunk) const;
  Status CheckLabels(const v1::Tensor& labels, bool first, int64_t* n);
  Status CheckFeatures(const v1::Tensor& features, int64_t n, bool first);
  Status CheckScores(const v1::Tensor& scores, int64_t n) const;
  Status Keep(const v1::DatasetChunk& chunk, std::vector<int64_t> splits);
  Status CheckRows(int64_t total);

  DatasetRegistry* registry_;
  const Limits limits_;
  std::shared_ptr<Dataset> ds_;
  bool started_ = false;
  bool replace_ = false;
  bool has_features_ = false;
  bool has_scores_ = false;
  int64_t reserved_ = 0;
  int64_t prepaid_ = 0;  // of reserved_, what Prepay reserved and no chunk has used yet
  Sha256 label_hash_;    // the label bytes arrive first in the digest: hashed as they come
};

class Repository;

// How DatasetRegistry::Place reaches device memory: kernels' DeviceAlloc and CopyToDevice
// unless a test sets its own (a device that faults or runs out of memory). Each throws
// kernels::Error like kernels' functions; `alloc` returns memory kernels::DeviceFree frees.
struct DeviceMemory {
  std::function<void*(int device, size_t bytes)> alloc;
  std::function<void(int device, void* dst, const void* src, size_t bytes)> copy;
  static DeviceMemory Kernels();
};

class DatasetRegistry {
 public:
  // `max_bytes`: --max-dataset-bytes. `cuda_devices`: where the CUDA workers sample; a
  // committed dataset is copied to each of them and kept only there (empty: host memory,
  // where the CPU workers sample; kernels::kSimDevice: the cuda-sim device's "device" copy).
  explicit DatasetRegistry(int64_t max_bytes, std::vector<int> cuda_devices = {});
  ~DatasetRegistry();  // stops the repository's polling first

  // Puts `ds` where the workers sample (device copies, host copy released unless
  // `keep_host`), before it is visible. RESOURCE_EXHAUSTED when a device is out of memory,
  // after evicting what may be evicted; UNAVAILABLE when a device faults (never
  // RESOURCE_EXHAUSTED: no eviction cures it). Synchronizes with the copies: call it off
  // gRPC's threads.
  Status Place(Dataset* ds, bool keep_host = false);
  // Replaces kernels' device memory functions (tests). Call before the first Place.
  void SetDeviceMemory(DeviceMemory memory) { memory_ = std::move(memory); }
  // Frees the host copy of a dataset that has device copies (after Place with keep_host).
  static void ReleaseHost(Dataset* ds);

  std::shared_ptr<const Dataset> Find(const std::string& name) const;
  // Find, and on a miss, with a repository, load the committed version (read your writes).
  // Null with `*status` NOT_FOUND (or why the load failed) when there is none.
  std::shared_ptr<const Dataset> Acquire(const std::string& name, Status* status) const;
  std::vector<std::shared_ptr<const Dataset>> List() const;  // sorted by name
  // False when no dataset has that name.
  bool Delete(const std::string& name);
  // Removes `name` from memory if it is still `expected` (a repository re-scan saw it
  // replaced or deleted). Requests that hold it keep it alive.
  bool Drop(const std::string& name, const Dataset* expected);
  // OK when `name` may be uploaded (free, or `replace`); else ALREADY_EXISTS. With a
  // repository, a committed dataset there counts as existing too.
  Status CheckName(const std::string& name, bool replace) const;

  // Budget: stored datasets plus reservations of uploads in progress. With eviction on (a
  // repository), Reserve first evicts the least recently sampled datasets that no accepted
  // request uses. Over budget: RESOURCE_EXHAUSTED naming --max-dataset-bytes, with a positive
  // retry pushback when what blocks it is transient (uploads in progress, datasets in use).
  Status Reserve(int64_t bytes);
  void Release(int64_t bytes);
  // Evicts until `bytes` more fit; false when they cannot (nothing evicted then stays out).
  bool MakeRoom(int64_t bytes);
  // Evicts the least recently sampled unused dataset; false when there is none.
  bool EvictOne();
  // Stores `ds` (its bytes already reserved) under its name. A replaced dataset's bytes
  // leave the budget now; requests that hold it keep it alive.
  Status Commit(std::shared_ptr<const Dataset> ds, bool replace);

  int64_t count() const;
  int64_t bytes() const;  // stored and reserved
  int64_t max_bytes() const { return max_bytes_; }
  int64_t free_bytes() const;

  // Keeps `lists` in `ds`'s epoch index under `key` when `ds` is still stored, charging their
  // bytes to the budget (evicting what may be evicted); `*out` is what the request uses.
  // RESOURCE_EXHAUSTED naming --max-dataset-bytes when they do not fit.
  Status KeepEpochLists(const Dataset& ds, const std::string& key,
                        std::shared_ptr<const ClassMembers> lists,
                        std::shared_ptr<const ClassMembers>* out);

  // The repository (SPEC section 6): owned by the registry, which turns eviction on.
  void AttachRepository(std::unique_ptr<Repository> repository);
  Repository* repository() const { return repository_.get(); }
  // Called after each eviction (metrics).
  void SetEvictionHook(std::function<void()> hook) { on_evict_ = std::move(hook); }

 private:
  // A stored dataset's share of the budget: its bytes and its epoch index's.
  static int64_t StoredBytes(const Dataset& ds) { return ds.bytes + ds.epoch_index.bytes(); }
  struct Entry {
    std::shared_ptr<const Dataset> ds;
    mutable uint64_t last_used = 0;  // tick of the last Find (LRU); its key in lru_
  };
  // Under mu_: marks `it` used now (a new tick, and its place in lru_).
  void TouchLocked(const std::string& name, const Entry& e) const;
  // Under mu_: forgets `it` (by_name_ and lru_).
  void EraseLocked(std::map<std::string, Entry>::iterator it);
  // Under mu_: evicts unused datasets, least recently used first, until `bytes` more fit.
  // The evicted ones go to `out`, to be destroyed outside the lock.
  bool EvictLocked(int64_t bytes, std::vector<std::shared_ptr<const Dataset>>* out);
  void Evicted(std::vector<std::shared_ptr<const Dataset>> evicted);

  const int64_t max_bytes_;
  const std::vector<int> cuda_devices_;
  DeviceMemory memory_ = DeviceMemory::Kernels();
  mutable std::mutex mu_;
  std::map<std::string, Entry> by_name_;
  // The same entries by last use, oldest first: eviction walks it from the front, so that
  // finding a victim costs the datasets in use before it, not every dataset (issue 31: a
  // 512 MiB load over 100k resident datasets scanned all of them once per victim, O(N^2)
  // under the lock, and froze every request that needed it).
  mutable std::map<uint64_t, std::string> lru_;
  int64_t used_ = 0;      // stored datasets' bytes + reservations
  int64_t reserved_ = 0;  // of which reservations of uploads and loads in progress
  mutable uint64_t tick_ = 0;
  bool evict_ = false;
  std::function<void()> on_evict_;
  // Bytes of evicted datasets that went back to glibc's heap (blocks below
  // kernels::kMappedBlockBytes; larger ones were unmapped) since the last malloc_trim.
  std::atomic<int64_t> heap_evicted_{0};
  std::unique_ptr<Repository> repository_;
};

// True when `name` matches [A-Za-z0-9._-]{1,128}.
bool ValidDatasetName(const std::string& name);

}  // namespace gpusampler::server
