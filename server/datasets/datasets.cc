#include "datasets/datasets.hpp"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <new>
#include <random>
#include <utility>

#include <malloc.h>
#include <openssl/evp.h>

#include <spdlog/spdlog.h>

#include "core/tensor_check.hpp"
#include "datasets/repository.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::server {
namespace {

using kernels::DType;

std::string Shape(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string s = "[";
  for (int i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string Shape(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string DTypeString(DType d) {
  return v1::DType_Name(static_cast<v1::DType>(static_cast<int>(d)));
}

// Retry pushback while uploads in progress or requests hold the budget: 500 ms plus jitter.
int64_t RetryPushbackMs() {
  thread_local std::minstd_rand gen(std::random_device{}());
  return 500 + static_cast<int64_t>(gen() % 500);
}

}  // namespace

// ---- Sha256 ----

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::bad_alloc();
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

Sha256::Sha256(const Sha256& other) : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_MD_CTX_copy_ex(ctx_, other.ctx_) != 1) {
    EVP_MD_CTX_free(ctx_);
    throw std::bad_alloc();
  }
}

Sha256& Sha256::operator=(const Sha256& other) {
  if (this != &other && EVP_MD_CTX_copy_ex(ctx_, other.ctx_) != 1) throw std::bad_alloc();
  return *this;
}

void Sha256::Update(const uint8_t* data, size_t n) {
  if (n == 0) return;  // `data` may be null then (an empty chunk)
  // SHA-256 in software: libcrypto fails only on a context it never initialized.
  (void)EVP_DigestUpdate(ctx_, data, n);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  (void)EVP_DigestFinal_ex(ctx_, digest, &len);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

// ---- Dataset ----

Dataset::~Dataset() {
  for (const DeviceCopy& c : device_copies) {
    kernels::DeviceFree(c.labels);
    kernels::DeviceFree(c.features);
  }
}

const uint8_t* Dataset::DeviceLabels(int device) const {
  for (const DeviceCopy& c : device_copies) {
    if (c.device == device) return c.labels;
  }
  return nullptr;
}

const uint8_t* Dataset::DeviceFeatures(int device) const {
  for (const DeviceCopy& c : device_copies) {
    if (c.device == device) return c.features;
  }
  return nullptr;
}

v1::DatasetInfo Dataset::Info() const {
  v1::DatasetInfo info;
  info.set_name(name);
  info.set_num_rows(num_rows());
  info.set_num_elements(num_elements());
  info.set_label_dtype(static_cast<v1::DType>(static_cast<int>(label_dtype)));
  info.set_feature_dtype(static_cast<v1::DType>(static_cast<int>(feature_dtype)));
  for (int64_t d : feature_shape) info.add_feature_shape(d);
  info.set_bytes(bytes);
  info.set_sha256(sha256);
  for (const auto& d : this->devices) info.add_devices(d);
  return info;
}

bool ValidDatasetName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return false;
  }
  return true;
}

// ---- DatasetBuilder ----

DatasetBuilder::DatasetBuilder(DatasetRegistry* registry, const Limits& limits)
    : registry_(registry), limits_(limits), ds_(std::make_shared<Dataset>()) {}

DatasetBuilder::~DatasetBuilder() {
  if (reserved_ > 0) registry_->Release(reserved_);
}

Status DatasetBuilder::Add(const v1::DatasetChunk& chunk) {
  const bool first = !started_;
  GPUSAMPLER_RETURN_IF_ERROR(first ? StartUpload(chunk) : CheckLaterChunk(chunk));
  int64_t n = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckLabels(chunk.labels(), first, &n));
  if (has_features_) {
    GPUSAMPLER_RETURN_IF_ERROR(CheckFeatures(chunk.features(), n, first));
  }
  if (has_scores_) {
    GPUSAMPLER_RETURN_IF_ERROR(CheckScores(chunk.scores(), n));
  }
  // Row splits (first chunk only).
  std::vector<int64_t> splits;
  if (first && chunk.has_row_splits()) {
    GPUSAMPLER_RETURN_IF_ERROR(
        ParseRowSplits(chunk.row_splits(), limits_, /*check_max_rows=*/false, &splits));
  }
  return Keep(chunk, std::move(splits));
}

Status DatasetBuilder::StartUpload(const v1::DatasetChunk& chunk) {
  if (!ValidDatasetName(chunk.name())) {
    return InvalidArgument("name '" + chunk.name().substr(0, 140) +
                           "' must match [A-Za-z0-9._-]{1,128}");
  }
  GPUSAMPLER_RETURN_IF_ERROR(registry_->CheckName(chunk.name(), chunk.replace()));
  if (!chunk.has_labels()) {
    return InvalidArgument("labels is missing in the first chunk (it fixes the label dtype)");
  }
  ds_->name = chunk.name();
  replace_ = chunk.replace();
  has_features_ = chunk.has_features();
  has_scores_ = chunk.has_scores();
  return Status::Ok();
}

Status DatasetBuilder::CheckLaterChunk(const v1::DatasetChunk& chunk) const {
  if (!chunk.name().empty()) {
    return InvalidArgument("name is set on a chunk after the first (only the first names it)");
  }
  if (chunk.replace()) return InvalidArgument("replace is set on a chunk after the first");
  if (chunk.has_row_splits()) {
    return InvalidArgument("row_splits is set on a chunk after the first");
  }
  if (chunk.has_features() != has_features_) {
    return InvalidArgument(std::string("features is ") +
                           (has_features_ ? "missing from" : "present in") +
                           " a later chunk; send features in all chunks or in none");
  }
  if (chunk.has_scores() != has_scores_) {
    return InvalidArgument(std::string("scores is ") +
                           (has_scores_ ? "missing from" : "present in") +
                           " a later chunk; send scores in all chunks or in none");
  }
  return Status::Ok();
}

// Labels: 1-D, an integer or BOOL dtype, the same in every chunk.
Status DatasetBuilder::CheckLabels(const v1::Tensor& labels, bool first, int64_t* n) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(labels, "labels", limits_, n));
  const DType dtype = static_cast<DType>(static_cast<int>(labels.dtype()));
  if (labels.shape_size() != 1) {
    return InvalidArgument("labels.shape " + Shape(labels.shape()) + " must be 1-D [n]");
  }
  if (!kernels::IsLabel(dtype)) {
    return InvalidArgument("labels.dtype " + DTypeString(dtype) +
                           " is not an integer or BOOL dtype");
  }
  if (first) {
    ds_->label_dtype = dtype;
  } else if (dtype != ds_->label_dtype) {
    return InvalidArgument("labels.dtype " + DTypeString(dtype) +
                           " differs from the first chunk's " + DTypeString(ds_->label_dtype));
  }
  if (dtype == DType::kBool) {
    return CheckBoolLabels(reinterpret_cast<const uint8_t*>(labels.data().data()), *n);
  }
  return Status::Ok();
}

// Features: [n, ...], the same dtype and row shape in every chunk.
Status DatasetBuilder::CheckFeatures(const v1::Tensor& feat, int64_t n, bool first) {
  int64_t fe = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(feat, "features", limits_, &fe));
  if (feat.shape_size() < 1 || feat.shape(0) != n) {
    return InvalidArgument("features.shape " + Shape(feat.shape()) + " must be [n, ...] with n = " +
                           std::to_string(n) + ", the chunk's label count");
  }
  const DType fdtype = static_cast<DType>(static_cast<int>(feat.dtype()));
  std::vector<int64_t> row_shape(feat.shape().begin() + 1, feat.shape().end());
  if (!first) {
    if (fdtype != ds_->feature_dtype || row_shape != ds_->feature_shape) {
      return InvalidArgument("features dtype " + DTypeString(fdtype) + " row shape " +
                             Shape(row_shape) + " differ from the first chunk's " +
                             DTypeString(ds_->feature_dtype) + " " + Shape(ds_->feature_shape));
    }
    return Status::Ok();
  }
  ds_->feature_dtype = fdtype;
  ds_->feature_shape = row_shape;
  int64_t row = static_cast<int64_t>(kernels::DTypeSize(fdtype));
  for (int64_t d : row_shape) {
    if (__builtin_mul_overflow(row, d, &row)) {
      return InvalidArgument("features.shape " + Shape(feat.shape()) +
                             ": one feature row overflows int64 bytes");
    }
  }
  if (row == 0) {
    return InvalidArgument("features.shape " + Shape(feat.shape()) + " has zero-byte feature rows");
  }
  ds_->feature_row_bytes = row;
  return Status::Ok();
}

// Scores (SPEC section 7): FLOAT32 [n], each finite or NaN (whether negatives are allowed
// depends on the request's classes, checked then).
Status DatasetBuilder::CheckScores(const v1::Tensor& scores, int64_t n) const {
  if (scores.dtype() != v1::DTYPE_FLOAT32) {
    return InvalidArgument("scores.dtype must be DTYPE_FLOAT32, got " +
                           v1::DType_Name(scores.dtype()));
  }
  int64_t m = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(scores, "scores", limits_, &m));
  if (scores.shape_size() != 1 || m != n) {
    return InvalidArgument("scores.shape " + Shape(scores.shape()) + " must be [" +
                           std::to_string(n) + "], the chunk's label count");
  }
  const int64_t before = static_cast<int64_t>(ds_->scores.size());
  const char* data = scores.data().data();
  for (int64_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, data + i * 4, 4);
    if (std::isinf(v)) {
      return InvalidArgument("scores[" + std::to_string(i) + "] of the chunk (dataset element " +
                             std::to_string(before + i) + ") = " + (v > 0 ? "inf" : "-inf") +
                             ": scores must be finite or NaN");
    }
  }
  return Status::Ok();
}

// Reserves the chunk's bytes against the budget, then keeps them.
Status DatasetBuilder::Keep(const v1::DatasetChunk& chunk, std::vector<int64_t> splits) {
  const std::string& label_data = chunk.labels().data();
  const std::string* feature_data = has_features_ ? &chunk.features().data() : nullptr;
  const int64_t feature_bytes = feature_data ? static_cast<int64_t>(feature_data->size()) : 0;
  const std::string* score_data = has_scores_ ? &chunk.scores().data() : nullptr;
  const int64_t score_bytes = score_data ? static_cast<int64_t>(score_data->size()) : 0;
  const int64_t want = static_cast<int64_t>(label_data.size()) + feature_bytes + score_bytes +
                       static_cast<int64_t>(splits.size() * sizeof(int64_t));
  const int64_t prepaid = std::min(want, prepaid_);
  if (want > prepaid) {
    GPUSAMPLER_RETURN_IF_ERROR(registry_->Reserve(want - prepaid));
    reserved_ += want - prepaid;
  }
  prepaid_ -= prepaid;
  started_ = true;
  if (!splits.empty()) {
    ds_->rows = Dataset::Rows::kRagged;
    ds_->row_splits = std::move(splits);
  }
  const auto* lbytes = reinterpret_cast<const uint8_t*>(label_data.data());
  ds_->labels.insert(ds_->labels.end(), lbytes, lbytes + label_data.size());
  if (feature_data) {
    const auto* fbytes = reinterpret_cast<const uint8_t*>(feature_data->data());
    ds_->features.insert(ds_->features.end(), fbytes, fbytes + feature_bytes);
  }
  if (score_data) {
    const size_t at = ds_->scores.size();
    ds_->scores.resize(at + static_cast<size_t>(score_bytes) / 4);
    std::memcpy(ds_->scores.data() + at, score_data->data(), static_cast<size_t>(score_bytes));
    for (size_t i = at; i < ds_->scores.size(); ++i) {
      if (ds_->scores[i] < 0.0f) ds_->has_negative_scores = true;
    }
  }
  label_hash_.Update(lbytes, label_data.size());
  return Status::Ok();
}

Status DatasetBuilder::SetFixedRows(int64_t rows, int64_t row_length) {
  if (ds_->has_row_splits()) {
    return InvalidArgument("labels are [" + std::to_string(rows) + ", " +
                           std::to_string(row_length) +
                           "] rows of a fixed length, and row_splits is set too; give one");
  }
  if (rows < 0 || row_length < 0) {
    return InvalidArgument("labels shape [" + std::to_string(rows) + ", " +
                           std::to_string(row_length) + "] has a negative dimension");
  }
  ds_->rows = Dataset::Rows::kFixed;
  ds_->fixed_rows = rows;
  ds_->row_length = row_length;
  return Status::Ok();
}

// The rows' geometry against the total the chunks carried.
Status DatasetBuilder::CheckRows(int64_t total) {
  switch (ds_->rows) {
    case Dataset::Rows::kRagged:
      if (ds_->row_splits.back() != total) {
        return InvalidArgument("row_splits ends at " + std::to_string(ds_->row_splits.back()) +
                               " but the chunks carried " + std::to_string(total) +
                               " label elements");
      }
      return Status::Ok();
    case Dataset::Rows::kFixed: {
      int64_t want = 0;
      if (__builtin_mul_overflow(ds_->fixed_rows, ds_->row_length, &want) || want != total) {
        return InvalidArgument("labels are [" + std::to_string(ds_->fixed_rows) + ", " +
                               std::to_string(ds_->row_length) + "] but the chunks carried " +
                               std::to_string(total) + " label elements");
      }
      return Status::Ok();
    }
    case Dataset::Rows::kOneRow:
      ds_->fixed_rows = 1;
      ds_->row_length = total;
      return Status::Ok();
  }
  return Status::Ok();
}

Status DatasetBuilder::Seal() {
  if (!started_) return InvalidArgument("the upload has no chunks (an empty stream)");
  const int64_t total =
      static_cast<int64_t>(ds_->labels.size() / kernels::DTypeSize(ds_->label_dtype));
  GPUSAMPLER_RETURN_IF_ERROR(CheckRows(total));
  Sha256 hash = label_hash_;
  hash.Update(ds_->features.data(), ds_->features.size());
  hash.Update(reinterpret_cast<const uint8_t*>(ds_->scores.data()), ds_->scores.size() * 4);
  ds_->sha256 = hash.HexDigest();
  ds_->bytes =
      static_cast<int64_t>(ds_->labels.size() + ds_->features.size() + ds_->scores.size() * 4) +
      (ds_->has_row_splits() ? static_cast<int64_t>(ds_->row_splits.size() * 8) : 0);
  return Status::Ok();
}

Status DatasetBuilder::Prepay(int64_t bytes) {
  GPUSAMPLER_RETURN_IF_ERROR(registry_->Reserve(bytes));
  reserved_ += bytes;
  prepaid_ += bytes;
  return Status::Ok();
}

Status DatasetBuilder::Store(std::shared_ptr<const Dataset>* stored, bool placed, bool replace) {
  if (prepaid_ > 0) {  // reserved up front, never used: the registry counts ds_->bytes
    registry_->Release(prepaid_);
    reserved_ -= prepaid_;
    prepaid_ = 0;
  }
  if (!placed) {
    GPUSAMPLER_RETURN_IF_ERROR(registry_->Place(ds_.get()));
  }
  // The reservation counted the same bytes; the registry keeps them from now on.
  GPUSAMPLER_RETURN_IF_ERROR(registry_->Commit(ds_, replace || replace_));
  reserved_ = 0;
  *stored = ds_;
  return Status::Ok();
}

Status DatasetBuilder::Commit(std::shared_ptr<const Dataset>* stored) {
  GPUSAMPLER_RETURN_IF_ERROR(Seal());
  if (Repository* repo = registry_->repository()) return repo->CommitUpload(this, stored);
  return Store(stored);
}

// ---- DatasetRegistry ----

DeviceMemory DeviceMemory::Kernels() { return {kernels::DeviceAlloc, kernels::CopyToDevice}; }

DatasetRegistry::DatasetRegistry(int64_t max_bytes, std::vector<int> cuda_devices)
    : max_bytes_(max_bytes), cuda_devices_(std::move(cuda_devices)) {}

DatasetRegistry::~DatasetRegistry() { repository_.reset(); }

void DatasetRegistry::AttachRepository(std::unique_ptr<Repository> repository) {
  std::lock_guard<std::mutex> lock(mu_);
  repository_ = std::move(repository);
  evict_ = repository_ != nullptr;
}

Status DatasetRegistry::Place(Dataset* ds, bool keep_host) {
  if (cuda_devices_.empty()) {
    ds->devices = {"cpu"};
    return Status::Ok();
  }
  // Upload with a stream of our own, synchronized here: this runs at upload commit, load or
  // start-up, never on the sampling path. A failure frees what was copied; with a
  // repository, the device copies of unused datasets are the cache and are evicted first.
  while (true) {
    ds->device_copies.clear();
    ds->devices.clear();
    try {
      for (int device : cuda_devices_) {
        Dataset::DeviceCopy copy;
        copy.device = device;
        ds->device_copies.push_back(copy);
        Dataset::DeviceCopy& c = ds->device_copies.back();
        if (!ds->labels.empty()) {
          c.labels = static_cast<uint8_t*>(memory_.alloc(device, ds->labels.size()));
          memory_.copy(device, c.labels, ds->labels.data(), ds->labels.size());
        }
        if (!ds->features.empty()) {
          c.features = static_cast<uint8_t*>(memory_.alloc(device, ds->features.size()));
          memory_.copy(device, c.features, ds->features.data(), ds->features.size());
        }
        ds->devices.push_back(device == kernels::kSimDevice ? std::string("cuda-sim")
                                                            : "cuda:" + std::to_string(device));
      }
      break;
    } catch (...) {  // kernels -> server: DeviceAlloc and CopyToDevice throw kernels::Error
      const Status status =
          FromCurrentException("dataset '" + ds->name + "' cannot be copied to the device");
      for (const Dataset::DeviceCopy& c : ds->device_copies) {
        kernels::DeviceFree(c.labels);
        kernels::DeviceFree(c.features);
      }
      ds->device_copies.clear();
      // Only a lack of memory is cured by evicting the cache; a device fault is not (and is
      // never reported as RESOURCE_EXHAUSTED).
      if (status.code() == Code::kResourceExhausted && EvictOne()) continue;
      return status;
    }
  }
  // The CUDA workers read only the device copies.
  if (!keep_host) ReleaseHost(ds);
  return Status::Ok();
}

void DatasetRegistry::ReleaseHost(Dataset* ds) {
  if (ds->device_copies.empty()) return;
  kernels::HostBytes().swap(ds->labels);
  kernels::HostBytes().swap(ds->features);
}

std::shared_ptr<const Dataset> DatasetRegistry::Find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return nullptr;
  TouchLocked(it->first, it->second);
  return it->second.ds;
}

void DatasetRegistry::TouchLocked(const std::string& name, const Entry& e) const {
  const uint64_t now = ++tick_;
  if (e.last_used == 0) {
    lru_.emplace_hint(lru_.end(), now, name);
  } else {  // every request: move the entry's node to the end, no allocation or name copy
    auto node = lru_.extract(e.last_used);
    node.key() = now;
    lru_.insert(lru_.end(), std::move(node));
  }
  e.last_used = now;
}

void DatasetRegistry::EraseLocked(std::map<std::string, Entry>::iterator it) {
  lru_.erase(it->second.last_used);
  by_name_.erase(it);
}

std::shared_ptr<const Dataset> DatasetRegistry::Acquire(const std::string& name,
                                                        Status* status) const {
  if (auto ds = Find(name)) return ds;
  if (Repository* repo = repository()) {
    std::shared_ptr<const Dataset> ds;
    *status = repo->LoadOnMiss(name, &ds);
    return ds;
  }
  *status = Status(Code::kNotFound,
                   "dataset '" + name.substr(0, 140) + "' not found (CreateDataset uploads it)");
  return nullptr;
}

std::vector<std::shared_ptr<const Dataset>> DatasetRegistry::List() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<const Dataset>> out;
  out.reserve(by_name_.size());
  for (const auto& [name, e] : by_name_) out.push_back(e.ds);
  return out;
}

bool DatasetRegistry::Delete(const std::string& name) {
  std::shared_ptr<const Dataset> gone;  // destroyed outside the lock (device frees)
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_name_.find(name);
  if (it == by_name_.end()) return false;
  used_ -= StoredBytes(*it->second.ds);
  gone = std::move(it->second.ds);
  EraseLocked(it);
  return true;
}

bool DatasetRegistry::Drop(const std::string& name, const Dataset* expected) {
  std::shared_ptr<const Dataset> gone;
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = by_name_.find(name);
  if (it == by_name_.end() || it->second.ds.get() != expected) return false;
  used_ -= StoredBytes(*it->second.ds);
  gone = std::move(it->second.ds);
  EraseLocked(it);
  return true;
}

Status DatasetRegistry::CheckName(const std::string& name, bool replace) const {
  if (replace) return Status::Ok();
  bool exists;
  {
    std::lock_guard<std::mutex> lock(mu_);
    exists = by_name_.count(name) > 0;
  }
  if (!exists && repository_) exists = repository_->Exists(name);
  if (exists) {
    return Status(Code::kAlreadyExists,
                  "dataset '" + name + "' already exists (set replace to overwrite it)");
  }
  return Status::Ok();
}

bool DatasetRegistry::EvictLocked(int64_t bytes, std::vector<std::shared_ptr<const Dataset>>* out) {
  if (bytes <= max_bytes_ - used_) return true;
  if (!evict_) return false;
  // Least recently used first; one pass, since what is skipped (in use) stays in use while
  // mu_ is held: an accepted request holds it (the registry's reference is the only other;
  // new references are taken only under mu_, so the count cannot grow meanwhile).
  // All or nothing: the victims are chosen first and evicted only when they free enough. A
  // reservation that cannot succeed (datasets in use hold the rest) evicts nothing, so a
  // client retrying a load that does not fit cannot evict the datasets others are about to
  // sample (issue 31's load storm: a refused 512 MiB miss, retried, emptied the cache).
  std::vector<std::map<std::string, Entry>::iterator> victims;
  int64_t freed = 0;
  for (auto next = lru_.begin(); bytes > max_bytes_ - used_ + freed && next != lru_.end(); ++next) {
    const auto it = by_name_.find(next->second);
    if (it->second.ds.use_count() > 1) continue;
    freed += StoredBytes(*it->second.ds);
    victims.push_back(it);
  }
  if (bytes > max_bytes_ - used_ + freed) return false;
  for (const auto& victim : victims) {
    used_ -= StoredBytes(*victim->second.ds);
    out->push_back(std::move(victim->second.ds));
    EraseLocked(victim);  // removes its own place in lru_ and by_name_, no other's
  }
  return true;
}

namespace {

// The bytes of `ds`'s buffers that live in glibc's heap rather than in mapped pages of their
// own (kernels::CacheLineAllocator). Epoch member lists are counted whole (plain vectors:
// glibc maps a large one only while its threshold is below that size).
int64_t HeapBytes(const Dataset& ds) {
  const auto heap = [](size_t bytes) {
    return kernels::IsMappedBlock(bytes) ? int64_t{0} : static_cast<int64_t>(bytes);
  };
  return heap(ds.labels.capacity()) + heap(ds.features.capacity()) +
         heap(ds.scores.capacity() * sizeof(float)) +
         static_cast<int64_t>(ds.row_splits.capacity() * sizeof(int64_t)) + ds.epoch_index.bytes();
}

}  // namespace

void DatasetRegistry::Evicted(std::vector<std::shared_ptr<const Dataset>> evicted) {
  // One line per dataset for a few; one line for many (a 512 MiB load can evict 100k small
  // datasets, and 100k lines would hold the log's lock for as long as they take).
  constexpr size_t kNamedEvictions = 8;
  int64_t bytes = 0;
  for (const auto& ds : evicted) {
    if (evicted.size() <= kNamedEvictions) {
      spdlog::info("dataset '{}' evicted from memory ({} bytes; it stays in --dataset-dir)",
                   ds->name, ds->bytes);
    }
    bytes += ds->bytes;
    if (on_evict_) on_evict_();
  }
  if (evicted.size() > kNamedEvictions) {
    spdlog::info(
        "{} datasets evicted from memory ({} bytes; they stay in --dataset-dir), '{}' first "
        "and '{}' last",
        evicted.size(), bytes, evicted.front()->name, evicted.back()->name);
  }
  int64_t heap = 0;
  for (const auto& ds : evicted) heap += HeapBytes(*ds);
  evicted.clear();  // device copies are freed here, outside the lock
  // A dataset's large buffers are mapped pages, unmapped as they are freed here. Its small
  // ones go back to glibc's heap, which keeps them: once those come to kTrimHeapBytes, give
  // them back too, so that RSS follows the budget under churn of small datasets. Not on every
  // eviction: malloc_trim holds each arena's lock while it walks the heap (up to 90 ms under
  // churn, stalling every request that allocates meanwhile; docs/decisions.md S20).
  constexpr int64_t kTrimHeapBytes = int64_t{64} << 20;
  if (heap > 0 && heap_evicted_.fetch_add(heap) + heap >= kTrimHeapBytes) {
    heap_evicted_.store(0);
    malloc_trim(0);
  }
}

bool DatasetRegistry::MakeRoom(int64_t bytes) {
  std::vector<std::shared_ptr<const Dataset>> evicted;
  bool ok;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ok = EvictLocked(bytes, &evicted);
  }
  Evicted(std::move(evicted));
  return ok;
}

bool DatasetRegistry::EvictOne() {
  std::vector<std::shared_ptr<const Dataset>> evicted;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!evict_) return false;
    // Evict as if the budget were one byte short of everything stored.
    const int64_t stored = used_ - reserved_;
    if (stored <= 0) return false;
    const size_t before = by_name_.size();
    const int64_t want = max_bytes_ - used_ + 1;
    EvictLocked(want, &evicted);
    if (by_name_.size() == before) return false;
  }
  Evicted(std::move(evicted));
  return true;
}

Status DatasetRegistry::Reserve(int64_t bytes) {
  std::vector<std::shared_ptr<const Dataset>> evicted;
  Status status = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (EvictLocked(bytes, &evicted)) {
      used_ += bytes;
      reserved_ += bytes;
    } else {
      // Transient when only uploads in progress (and, with eviction, datasets in use) keep
      // it from fitting: they end. Stored datasets that cannot be evicted do not.
      const int64_t permanent = evict_ ? 0 : used_ - reserved_;
      const bool transient = bytes <= max_bytes_ - permanent;
      status = Status(Code::kResourceExhausted,
                      "dataset needs " + std::to_string(bytes) + " more bytes, but " +
                          std::to_string(used_) +
                          " of max_dataset_bytes = " + std::to_string(max_bytes_) +
                          " are in use (" + std::to_string(reserved_) + " by uploads in progress" +
                          (evict_ ? ", the rest by datasets that requests are sampling" : "") +
                          ") (--max-dataset-bytes)",
                      transient ? RetryPushbackMs() : kDoNotRetry);
    }
  }
  Evicted(std::move(evicted));
  return status;
}

void DatasetRegistry::Release(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  used_ -= bytes;
  reserved_ -= bytes;
}

Status DatasetRegistry::KeepEpochLists(const Dataset& ds, const std::string& key,
                                       std::shared_ptr<const ClassMembers> lists,
                                       std::shared_ptr<const ClassMembers>* out) {
  std::vector<std::shared_ptr<const Dataset>> evicted;
  Status status = Status::Ok();
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = by_name_.find(ds.name);
    const int64_t bytes = lists->bytes();
    if (it == by_name_.end() || it->second.ds.get() != &ds) {
      *out = std::move(lists);  // replaced, deleted or evicted meanwhile: this request only
    } else if (!EvictLocked(bytes, &evicted)) {
      status = Status(Code::kResourceExhausted,
                      "the epoch member lists of dataset '" + ds.name + "' need " +
                          std::to_string(bytes) + " more bytes, but " + std::to_string(used_) +
                          " of max_dataset_bytes = " + std::to_string(max_bytes_) +
                          " are in use (--max-dataset-bytes)",
                      kDoNotRetry);
    } else {
      bool added = false;
      *out = ds.epoch_index.Keep(key, std::move(lists), &added);
      if (added) used_ += bytes;
    }
  }
  Evicted(std::move(evicted));
  return status;
}

Status DatasetRegistry::Commit(std::shared_ptr<const Dataset> ds, bool replace) {
  std::shared_ptr<const Dataset> gone;  // destroyed outside the lock (device frees)
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t bytes = ds->bytes;
  auto it = by_name_.find(ds->name);
  if (it != by_name_.end()) {
    if (!replace) {
      return Status(Code::kAlreadyExists, "dataset '" + ds->name +
                                              "' was created by another upload first (set "
                                              "replace to overwrite it)");
    }
    used_ -= StoredBytes(*it->second.ds);
    gone = std::move(it->second.ds);
    it->second.ds = std::move(ds);
    TouchLocked(it->first, it->second);
  } else {
    const std::string name = ds->name;
    const auto added = by_name_.emplace(name, Entry{std::move(ds), 0}).first;
    TouchLocked(added->first, added->second);
  }
  // The dataset's bytes move from the reservations to the stored datasets.
  reserved_ -= bytes;
  return Status::Ok();
}

int64_t DatasetRegistry::count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(by_name_.size());
}

int64_t DatasetRegistry::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return used_;
}

int64_t DatasetRegistry::free_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return max_bytes_ - used_;
}

}  // namespace gpusampler::server
