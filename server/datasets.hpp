// Resident datasets (uploaded once, sampled by name): the immutable Dataset, the builder
// that validates an upload chunk by chunk, and the registry with its byte budget.
// Thread-safety: Dataset is immutable once built; DatasetRegistry is thread-safe;
// DatasetBuilder is used by one upload at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "gpusampler/v1/sampler.pb.h"
#include "job.hpp"
#include "status.hpp"

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
  std::vector<uint8_t> labels;      // [total] in label_dtype
  bool has_row_splits = false;      // absent: one row, the whole dataset
  std::vector<int64_t> row_splits;  // [B + 1]; {0, total} without row_splits
  kernels::DType feature_dtype = kernels::DType::kUnspecified;  // kUnspecified: none
  std::vector<int64_t> feature_shape;                           // one feature row's shape
  int64_t feature_row_bytes = 0;
  std::vector<uint8_t> features;  // [total, feature_shape...]
  std::string sha256;             // lowercase hex over the label bytes, then the feature bytes
  int64_t bytes = 0;              // label + feature + row_splits bytes

  // Copies in CUDA device memory (the host vectors above are then released).
  struct DeviceCopy {
    int device = 0;
    uint8_t* labels = nullptr;
    uint8_t* features = nullptr;
  };
  std::vector<DeviceCopy> device_copies;
  std::vector<std::string> devices;  // "cpu", or "cuda:N" for each device copy

  const uint8_t* DeviceLabels(int device) const override;
  const uint8_t* DeviceFeatures(int device) const override;

  int64_t num_rows() const { return static_cast<int64_t>(row_splits.size()) - 1; }
  int64_t num_elements() const { return row_splits.back(); }
  bool has_features() const { return feature_row_bytes > 0; }
  // The DatasetInfo message.
  v1::DatasetInfo Info() const;
};

// Lowercase hex SHA-256 (FIPS 180-4) of the bytes fed in order.
class Sha256 {
 public:
  Sha256();
  void Update(const uint8_t* data, size_t n);
  std::string HexDigest();  // finishes; call once

 private:
  void Block(const uint8_t* p);
  uint32_t h_[8];
  uint8_t buf_[64];
  size_t buf_len_ = 0;
  uint64_t total_ = 0;
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
  // again here: of two uploads of one name, the first to commit wins).
  Status Commit(std::shared_ptr<const Dataset>* stored);

 private:
  DatasetRegistry* registry_;
  const Limits limits_;
  std::shared_ptr<Dataset> ds_;
  bool started_ = false;
  bool replace_ = false;
  bool has_features_ = false;
  int64_t reserved_ = 0;
  Sha256 label_hash_;  // the label bytes arrive first in the digest: hashed as they come
};

class DatasetRegistry {
 public:
  // `max_bytes`: --max-dataset-bytes. `cuda_devices`: where the CUDA workers sample; a
  // committed dataset is copied to each of them and kept only there (empty: host memory,
  // where the CPU workers sample; kernels::kSimDevice: the cuda-sim device's "device" copy).
  explicit DatasetRegistry(int64_t max_bytes, std::vector<int> cuda_devices = {})
      : max_bytes_(max_bytes), cuda_devices_(std::move(cuda_devices)) {}

  // Puts `ds` where the workers sample (device copies, host copy released), before it is
  // visible. RESOURCE_EXHAUSTED when a device is out of memory. Synchronizes with the
  // copies: call it off gRPC's threads.
  Status Place(Dataset* ds) const;

  std::shared_ptr<const Dataset> Find(const std::string& name) const;
  std::vector<std::shared_ptr<const Dataset>> List() const;
  // False when no dataset has that name.
  bool Delete(const std::string& name);
  // OK when `name` may be uploaded (free, or `replace`); else ALREADY_EXISTS.
  Status CheckName(const std::string& name, bool replace) const;

  // Budget: stored datasets plus reservations of uploads in progress.
  Status Reserve(int64_t bytes);
  void Release(int64_t bytes);
  // Stores `ds` (its bytes already reserved) under its name. A replaced dataset's bytes
  // leave the budget now; requests that hold it keep it alive.
  Status Commit(std::shared_ptr<const Dataset> ds, bool replace);

  int64_t count() const;
  int64_t bytes() const;  // stored and reserved
  int64_t max_bytes() const { return max_bytes_; }

 private:
  const int64_t max_bytes_;
  const std::vector<int> cuda_devices_;
  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<const Dataset>> by_name_;
  int64_t used_ = 0;  // stored datasets' bytes + reservations
};

// True when `name` matches [A-Za-z0-9._-]{1,128}.
bool ValidDatasetName(const std::string& name);

// Loads every NAME.labels.npy of `dir` (with NAME.features.npy and NAME.row_splits.npy when
// present) into `registry`. Returns "" or a message naming the file.
std::string LoadDatasetDir(const std::string& dir, const Limits& limits, DatasetRegistry* registry);

}  // namespace gpusampler::server
