#include "edge/regions.hpp"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <prometheus/gauge.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>

#include "edge/service.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::server {
namespace {

// Each region holds a file descriptor and a mapping: a bound, so that one token cannot
// exhaust the process's descriptors.
constexpr size_t kMaxRegionsPerScope = 256;

bool ValidName(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
  });
}

// A POSIX shm name: "/" then up to 254 bytes without another "/" or a NUL.
bool ValidKey(const std::string& key) {
  return key.size() >= 2 && key.size() <= 255 && key[0] == '/' &&
         key.find('/', 1) == std::string::npos && key.find('\0') == std::string::npos &&
         key != "/." && key != "/..";
}

int64_t AlignUp(int64_t n) {
  return (n + kRegionAlignment - 1) / kRegionAlignment * kRegionAlignment;
}

std::string Quoted(const std::string& name) { return "region '" + name + "'"; }

// Opens and maps [offset, offset + byte_size) of the object `key` (never named in statuses).
Status OpenRegion(const v1::RegisterRegionRequest& r, std::shared_ptr<Region>* out) {
  const int fd = shm_open(r.shm_key().c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW, 0);
  if (fd < 0) {
    if (errno == ENOENT) return Status(Code::kNotFound, "no shared-memory object for the key");
    return Status(Code::kFailedPrecondition,
                  std::string("cannot open the shared-memory object: ") + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return InvalidArgument("the shared-memory key names no regular shm object");
  }
  if (r.offset() > st.st_size || r.byte_size() > st.st_size - r.offset()) {
    close(fd);
    return InvalidArgument("offset + byte_size = " + std::to_string(r.offset()) + " + " +
                           std::to_string(r.byte_size()) + " is past the object's end (" +
                           std::to_string(st.st_size) + " bytes)");
  }
  const int64_t page = sysconf(_SC_PAGESIZE);
  const int64_t map_start = r.offset() / page * page;
  const size_t map_bytes = static_cast<size_t>(r.offset() + r.byte_size() - map_start);
  void* map = mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, map_start);
  if (map == MAP_FAILED) {
    close(fd);
    return Status(Code::kFailedPrecondition,
                  std::string("cannot map the shared-memory object: ") + std::strerror(errno));
  }
  *out = std::make_shared<Region>(r.name(), fd, map, map_bytes, r.offset(), r.byte_size());
  return Status::Ok();
}

// The present tensors of `response` in SPEC section 9's order.
std::array<const v1::Tensor*, 6> Tensors(const v1::SampleResponse& r) {
  return {r.has_indices() ? &r.indices() : nullptr,
          r.has_labels() ? &r.labels() : nullptr,
          r.has_features() ? &r.features() : nullptr,
          r.has_num_positive() ? &r.num_positive() : nullptr,
          r.has_num_negative() ? &r.num_negative() : nullptr,
          r.has_num_per_class() ? &r.num_per_class() : nullptr};
}

std::array<v1::Tensor*, 6> MutableTensors(v1::SampleResponse* r) {
  return {r->has_indices() ? r->mutable_indices() : nullptr,
          r->has_labels() ? r->mutable_labels() : nullptr,
          r->has_features() ? r->mutable_features() : nullptr,
          r->has_num_positive() ? r->mutable_num_positive() : nullptr,
          r->has_num_negative() ? r->mutable_num_negative() : nullptr,
          r->has_num_per_class() ? r->mutable_num_per_class() : nullptr};
}

// A store into a mapping whose object a client shrank meanwhile (after the fstat check)
// raises SIGBUS. Two guards, in this order:
//   - The mapped ranges of regions (kGuardSlots of them): a fault inside one gets a private
//     zero page mapped over the faulting page (MAP_FIXED), the region is poisoned, and the
//     store is retried and completes. That covers stores from any thread, the CPU backend's
//     gather threads included, which write answers straight into regions.
//   - GuardedCopy's copy runs with a thread-local jump buffer that the handler returns to.
// A SIGBUS elsewhere goes to the handler that was there before (or the default).
// volatile, with signal fences: the stores around the copy must not be merged or dropped.
thread_local sigjmp_buf* volatile tl_guard = nullptr;
struct sigaction g_previous_sigbus {};

constexpr int kGuardSlots = 4096;
struct GuardSlot {
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<Region*> region{nullptr};  // set last, cleared first
};
GuardSlot g_guard_slots[kGuardSlots];
const uintptr_t g_page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));

int ClaimGuardSlot(Region* region, const void* map, size_t bytes) {
  for (int i = 0; i < kGuardSlots; ++i) {
    GuardSlot& slot = g_guard_slots[i];
    Region* expected = nullptr;
    // A slot is claimed by a sentinel first, so that begin/end are written before a handler
    // can match it.
    Region* const claiming = reinterpret_cast<Region*>(uintptr_t{1});
    if (!slot.region.compare_exchange_strong(expected, claiming)) continue;
    slot.begin.store(reinterpret_cast<uintptr_t>(map));
    slot.end.store(reinterpret_cast<uintptr_t>(map) + bytes);
    slot.region.store(region);
    return i;
  }
  return -1;
}

void ReleaseGuardSlot(int i) {
  if (i < 0) return;
  GuardSlot& slot = g_guard_slots[i];
  Region* const claiming = reinterpret_cast<Region*>(uintptr_t{1});
  slot.region.store(claiming);
  slot.begin.store(0);
  slot.end.store(0);
  slot.region.store(nullptr);
}

// Async-signal-safe: atomics and one mmap(2) system call, made raw (no libc wrapper, and
// none of a sanitizer's interceptors, runs inside the handler).
bool PatchRegionFault(uintptr_t address) {
  Region* const claiming = reinterpret_cast<Region*>(uintptr_t{1});
  for (GuardSlot& slot : g_guard_slots) {
    Region* region = slot.region.load();
    if (region == nullptr || region == claiming) continue;
    if (address < slot.begin.load() || address >= slot.end.load()) continue;
    void* page = reinterpret_cast<void*>(address & ~(g_page - 1));
    const long got = syscall(SYS_mmap, page, g_page, PROT_READ | PROT_WRITE,
                             MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (got != reinterpret_cast<long>(page)) return false;
    region->Poison();
    return true;
  }
  return false;
}

void OnSigbus(int sig, siginfo_t* info, void* context) {
  if (info != nullptr && PatchRegionFault(reinterpret_cast<uintptr_t>(info->si_addr))) return;
  if (tl_guard != nullptr) siglongjmp(*tl_guard, 1);
  if ((g_previous_sigbus.sa_flags & SA_SIGINFO) != 0 && g_previous_sigbus.sa_sigaction != nullptr) {
    g_previous_sigbus.sa_sigaction(sig, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler != SIG_DFL) {
    g_previous_sigbus.sa_handler(sig);
    return;
  }
  signal(SIGBUS, SIG_DFL);  // not ours: die as without the guard
  raise(SIGBUS);
}

void InstallSigbusGuard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = OnSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

}  // namespace

bool GuardedCopy(uint8_t* dst, const void* src, size_t bytes) {
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    tl_guard = nullptr;
    return false;
  }
  tl_guard = &jump;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (src != nullptr) {
    std::memcpy(dst, src, bytes);
  } else {
    std::memset(dst, 0, bytes);
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  tl_guard = nullptr;
  return true;
}

Region::Region(std::string name, int fd, void* map, size_t map_bytes, int64_t object_offset,
               int64_t byte_size)
    : name_(std::move(name)),
      fd_(fd),
      map_(map),
      map_bytes_(map_bytes),
      object_offset_(object_offset),
      byte_size_(byte_size),
      guard_slot_(ClaimGuardSlot(this, map, map_bytes)) {}

uint8_t* Region::at(int64_t offset) const {
  // The mapping starts at the page holding object_offset_.
  const auto page = static_cast<int64_t>(g_page);
  return static_cast<uint8_t*>(map_) + (object_offset_ - object_offset_ / page * page) + offset;
}

Region::~Region() {
  ReleaseGuardSlot(guard_slot_);
  munmap(map_, map_bytes_);
  close(fd_);
}

RegionTable::RegionTable(bool allowed, std::string key_prefix, prometheus::Gauge* gauge)
    : allowed_(allowed), prefix_(std::move(key_prefix)), gauge_(gauge) {
  if (allowed_) InstallSigbusGuard();
  UpdateGauge();
}

RegionTable::~RegionTable() { Clear(); }

Status RegionTable::Register(const std::string& scope, const v1::RegisterRegionRequest& r,
                             v1::RegionInfo* info) {
  if (!allowed_) {
    return Status(Code::kFailedPrecondition,
                  "shared memory is off on this server (start it with --allow-shared-memory)");
  }
  if (!ValidName(r.name())) {
    return InvalidArgument("name must match [A-Za-z0-9._-]{1,128}");
  }
  if (r.shm_key().compare(0, prefix_.size(), prefix_) != 0 || !ValidKey(r.shm_key())) {
    return InvalidArgument("shm_key must be a POSIX shm name starting with \"" + prefix_ +
                           "\" (--shm-key-prefix)");
  }
  if (r.offset() < 0 || r.byte_size() < 1) {
    return InvalidArgument("offset = " + std::to_string(r.offset()) + " must be >= 0 and " +
                           "byte_size = " + std::to_string(r.byte_size()) + " >= 1");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (regions_.count({scope, r.name()}) != 0) {
      return Status(Code::kAlreadyExists, Quoted(r.name()) + " is already registered");
    }
  }
  std::shared_ptr<Region> region;
  GPUSAMPLER_RETURN_IF_ERROR(OpenRegion(r, &region));
  std::lock_guard<std::mutex> lock(mu_);
  size_t mine = 0;
  for (const auto& entry : regions_) mine += entry.first.first == scope ? 1 : 0;
  if (mine >= kMaxRegionsPerScope) {
    return LimitExceeded("this token has " + std::to_string(mine) + " regions, the most allowed");
  }
  if (!regions_.emplace(std::make_pair(scope, r.name()), region).second) {
    return Status(Code::kAlreadyExists, Quoted(r.name()) + " is already registered");
  }
  UpdateGauge();
  info->set_name(r.name());
  info->set_byte_size(r.byte_size());
  return Status::Ok();
}

Status RegionTable::Unregister(const std::string& scope, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = regions_.find({scope, name});
  if (it == regions_.end()) return Status(Code::kNotFound, Quoted(name) + " is not registered");
  it->second->Retire();
  regions_.erase(it);
  UpdateGauge();
  return Status::Ok();
}

std::vector<v1::RegionInfo> RegionTable::List(const std::string& scope) const {
  std::vector<v1::RegionInfo> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [key, region] : regions_) {
    if (key.first != scope) continue;
    out.emplace_back();
    out.back().set_name(region->name());
    out.back().set_byte_size(region->byte_size());
  }
  return out;
}

Status RegionTable::Lease(const std::string& scope, const v1::OutputRegion& output,
                          RegionLease* lease) const {
  if (!allowed_) {
    return Status(Code::kFailedPrecondition,
                  "output_region: shared memory is off on this server (--allow-shared-memory)");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = regions_.find({scope, output.name()});
    if (it == regions_.end()) {
      return Status(Code::kNotFound, "output_region: " + Quoted(output.name()) +
                                         " is not registered (for this token)");
    }
    lease->region = it->second;
  }
  if (lease->region->poisoned()) {
    const std::string name = output.name();
    lease->region.reset();
    return Status(Code::kFailedPrecondition,
                  "output_region: the shared-memory object of " + Quoted(name) +
                      " was truncated while an answer was written; unregister it and register "
                      "it again");
  }
  const int64_t size = lease->region->byte_size();
  const int64_t capacity = output.byte_size() == 0 ? size - output.offset() : output.byte_size();
  if (output.offset() < 0 || output.offset() > size || capacity < 0 ||
      capacity > size - output.offset()) {
    const std::string name = output.name();
    lease->region.reset();
    return InvalidArgument(
        "output_region: offset + byte_size = " + std::to_string(output.offset()) + " + " +
        std::to_string(output.byte_size()) + " is outside " + Quoted(name) + " (" +
        std::to_string(size) + " bytes)");
  }
  lease->offset = output.offset();
  lease->capacity = capacity;
  return Status::Ok();
}

void RegionTable::Revoke(const std::vector<std::string>& tokens) {
  const std::set<std::string> valid(tokens.begin(), tokens.end());
  std::lock_guard<std::mutex> lock(mu_);
  bool changed = false;
  for (auto it = regions_.begin(); it != regions_.end();) {
    const std::string& scope = it->first.first;
    if (tokens.empty() ? scope.empty() : valid.count(scope) != 0) {
      ++it;
      continue;
    }
    it->second->Retire();
    it = regions_.erase(it);
    changed = true;
  }
  if (changed) UpdateGauge();
}

void RegionTable::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& entry : regions_) entry.second->Retire();
  regions_.clear();
  UpdateGauge();
}

int64_t RegionTable::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int64_t>(regions_.size());
}

void RegionTable::UpdateGauge() const {
  if (gauge_ != nullptr) gauge_->Set(static_cast<double>(regions_.size()));
}

int64_t RegionLayout(const Job& job, std::array<int64_t, kNumAnswerTensors>* starts,
                     std::array<int64_t, kNumAnswerTensors>* sizes) {
  const int64_t b = job.num_rows();
  const int64_t slots = b * job.spec.num_samples;
  int64_t end = 0;
  const auto place = [&](AnswerTensor t, bool present, int64_t bytes) {
    const auto i = static_cast<size_t>(t);
    (*starts)[i] = present ? AlignUp(end) : -1;
    (*sizes)[i] = present ? bytes : 0;
    if (present) end = (*starts)[i] + bytes;
  };
  place(AnswerTensor::kIndices, true, slots * 8);
  place(AnswerTensor::kLabels, true,
        slots * static_cast<int64_t>(kernels::DTypeSize(job.label_dtype)));
  place(AnswerTensor::kFeatures, job.feature_row_bytes > 0, slots * job.feature_row_bytes);
  place(AnswerTensor::kNumPositive, true, b * 4);
  place(AnswerTensor::kNumNegative, true, b * 4);
  place(AnswerTensor::kNumPerClass, !job.spec.classes.empty(), b * job.num_classes() * 4);
  return end;
}

int64_t RegionBytesNeeded(const Job& job) {
  std::array<int64_t, kNumAnswerTensors> starts{}, sizes{};
  return RegionLayout(job, &starts, &sizes);
}

namespace {

Status Unregistered(const Region& region) {
  return Status(Code::kCancelled, "output_region: " + Quoted(region.name()) +
                                      " was unregistered while this request used it");
}

// A client may shrink the object after registration; a store into the mapping past its new
// end would raise SIGBUS in the server, so the size is checked before the first store, and a
// shrink that races the copy is caught by the SIGBUS guard.
Status CheckObject(const Region& region, int64_t offset, int64_t needed) {
  struct stat st {};
  const int64_t base = region.object_offset() + offset;
  if (fstat(region.fd(), &st) != 0 || st.st_size < base + needed) {
    return Status(Code::kFailedPrecondition,
                  "output_region: the shared-memory object of " + Quoted(region.name()) +
                      " is now " + std::to_string(st.st_size) + " bytes, shorter than the " +
                      std::to_string(base + needed) +
                      " this answer needs (truncated after registration)");
  }
  return Status::Ok();
}

Status TruncatedWhileWritten(const Region& region) {
  return Status(Code::kFailedPrecondition, "output_region: the shared-memory object of " +
                                               Quoted(region.name()) +
                                               " was truncated while the answer was written");
}

}  // namespace

RegionWriter::RegionWriter(RegionLease lease, const Job& job) : lease_(std::move(lease)) {
  lease_.writer = nullptr;
  RegionLayout(job, &starts_, &sizes_);
}

bool RegionWriter::Check() {
  if (checked_) return status_.ok();
  checked_ = true;
  const Region& region = *lease_.region;
  if (!region.live()) {
    status_ = Unregistered(region);
    return false;
  }
  int64_t end = 0;
  for (size_t t = 0; t < starts_.size(); ++t) {
    if (starts_[t] >= 0) end = std::max(end, starts_[t] + sizes_[t]);
  }
  status_ = CheckObject(region, lease_.offset, end);
  return status_.ok();
}

uint8_t* RegionWriter::Destination(AnswerTensor tensor) {
  const auto i = static_cast<size_t>(tensor);
  // Only a mapping the fault guard covers may be written from threads that GuardedCopy's
  // jump buffer does not cover.
  if (starts_[i] < 0 || !lease_.region->guarded() || !Check()) return nullptr;
  return lease_.region->at(lease_.offset + starts_[i]);
}

void RegionWriter::Write(AnswerTensor tensor, const void* bytes, size_t size) {
  used_ = true;
  if (!status_.ok()) return;
  const Region& region = *lease_.region;
  const auto i = static_cast<size_t>(tensor);
  if (starts_[i] < 0 || static_cast<int64_t>(size) != sizes_[i]) {  // the layout is the job's
    status_ = Status(Code::kInternal, "output_region: tensor " + std::to_string(i) + " has " +
                                          std::to_string(size) + " bytes, the layout " +
                                          std::to_string(sizes_[i]));
    return;
  }
  if (!Check()) return;
  uint8_t* dst = region.at(lease_.offset + starts_[i]);
  if (bytes != dst && !GuardedCopy(dst, bytes, size)) {
    status_ = TruncatedWhileWritten(region);
    return;
  }
  written_ += static_cast<int64_t>(size);
}

Status RegionWriter::Finish() const {
  if (!status_.ok()) return status_;
  if (lease_.region->poisoned()) return TruncatedWhileWritten(*lease_.region);
  if (!lease_.region->live()) return Unregistered(*lease_.region);
  return Status::Ok();
}

int64_t RegionLayout(const v1::SampleResponse& response, std::array<int64_t, 6>* starts) {
  int64_t end = 0;
  const auto tensors = Tensors(response);
  for (size_t i = 0; i < tensors.size(); ++i) {
    (*starts)[i] = -1;
    if (tensors[i] == nullptr) continue;
    (*starts)[i] = AlignUp(end);
    end = (*starts)[i] + static_cast<int64_t>(tensors[i]->data().size());
  }
  return end;
}

Status WriteToRegion(const RegionLease& lease, v1::SampleResponse* response, int64_t* written) {
  const Region& region = *lease.region;
  if (!region.live()) return Unregistered(region);
  std::array<int64_t, 6> starts{};
  const int64_t needed = RegionLayout(*response, &starts);
  if (needed > lease.capacity) {
    return LimitExceeded("output_region: the answer needs " + std::to_string(needed) + " bytes, " +
                         Quoted(region.name()) + " has " + std::to_string(lease.capacity) +
                         " from offset " + std::to_string(lease.offset));
  }
  GPUSAMPLER_RETURN_IF_ERROR(CheckObject(region, lease.offset, needed));
  *written = 0;
  const auto tensors = MutableTensors(response);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i] == nullptr) continue;
    const std::string& data = tensors[i]->data();
    if (!GuardedCopy(region.at(lease.offset + starts[i]), data.data(), data.size())) {
      return TruncatedWhileWritten(region);
    }
    *written += static_cast<int64_t>(data.size());
  }
  if (region.poisoned()) return TruncatedWhileWritten(region);
  for (v1::Tensor* t : tensors) {
    if (t != nullptr) t->clear_data();
  }
  return Status::Ok();
}

std::string RegionScope(const grpc::CallbackServerContext& ctx, bool auth_on) {
  if (!auth_on) return "";
  constexpr std::string_view kBearer = "Bearer ";
  const auto it = ctx.client_metadata().find("authorization");
  if (it == ctx.client_metadata().end()) return "";
  const std::string_view value(it->second.data(), it->second.size());
  if (value.substr(0, kBearer.size()) != kBearer) return "";
  return std::string(value.substr(kBearer.size()));
}

}  // namespace gpusampler::server

// The shared-memory RPCs of SamplerService (service.hpp): authorized like every Sampler call;
// answered inline (no I/O beyond shm_open, fstat and mmap of one object).
namespace gpusampler::server {

grpc::ServerUnaryReactor* SamplerService::RegisterRegion(grpc::CallbackServerContext* context,
                                                         const v1::RegisterRegionRequest* request,
                                                         v1::RegionInfo* response) {
  Status status = Authorize(*context);
  if (status.ok()) status = regions_.Register(RegionScope(*context), *request, response);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

grpc::ServerUnaryReactor* SamplerService::UnregisterRegion(
    grpc::CallbackServerContext* context, const v1::UnregisterRegionRequest* request,
    v1::UnregisterRegionResponse*) {
  Status status = Authorize(*context);
  if (status.ok()) status = regions_.Unregister(RegionScope(*context), request->name());
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

grpc::ServerUnaryReactor* SamplerService::ListRegions(grpc::CallbackServerContext* context,
                                                      const v1::ListRegionsRequest*,
                                                      v1::ListRegionsResponse* response) {
  const Status status = Authorize(*context);
  if (status.ok()) {
    for (v1::RegionInfo& info : regions_.List(RegionScope(*context))) {
      *response->add_regions() = std::move(info);
    }
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

std::string SamplerService::RegionScope(const grpc::CallbackServerContext& context) const {
  bool auth_on = !config_.auth_tokens.empty();
  if (tokens_) auth_on = !tokens_->Get()->empty();
  return server::RegionScope(context, auth_on);
}

}  // namespace gpusampler::server
