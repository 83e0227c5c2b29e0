// Shared-memory regions (SPEC section 9): POSIX shm objects of this host that a client
// registered so that answers are written there instead of into the response. A region is
// opened (shm_open), checked (fstat) and mapped once, at registration; it belongs to the
// token that registered it. Requests hold a lease (a reference) from validation until the
// answer is written, so unregistering, revoking the token or shutting down while a request
// uses the region fails that request (CANCELLED) and never unmaps memory in use: the last
// holder unmaps. Keys never appear in statuses or logs.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/job.hpp"
#include "core/status.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace prometheus {
class Gauge;
}

namespace gpusampler::server {

// Tensors of an answer start at multiples of this many bytes past OutputRegion.offset.
constexpr int64_t kRegionAlignment = 256;

// One registered, mapped region. Immutable but for `live`; unmapped and closed by the
// destructor (the last lease).
class Region {
 public:
  Region(std::string name, int fd, void* map, size_t map_bytes, int64_t object_offset,
         int64_t byte_size);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

  const std::string& name() const { return name_; }
  int64_t byte_size() const { return byte_size_; }
  int64_t object_offset() const { return object_offset_; }
  int fd() const { return fd_; }
  // The region's byte `offset` in this process's mapping (0 <= offset <= byte_size).
  uint8_t* at(int64_t offset) const;
  bool live() const { return live_.load(); }
  void Retire() { live_.store(false); }
  // A store into the mapping hit pages the client had truncated away (SIGBUS): the guard
  // put private zero pages there so that the store (on any thread: a kernel's gather included)
  // completes, and the region no longer shows the client what the server writes. Every later
  // answer into it fails FAILED_PRECONDITION; the client registers it again.
  bool poisoned() const { return poisoned_.load(); }
  void Poison() { poisoned_.store(true); }
  // Whether the SIGBUS guard covers this mapping for stores from any thread (it tracks a
  // fixed number of mappings; beyond them, only GuardedCopy's copies are covered).
  bool guarded() const { return guard_slot_ >= 0; }

 private:
  const std::string name_;
  const int fd_;
  void* const map_;
  const size_t map_bytes_;
  const int64_t object_offset_;  // where the region starts in the shm object
  const int64_t byte_size_;
  std::atomic<bool> live_{true};
  std::atomic<bool> poisoned_{false};
  int guard_slot_ = -1;
};

class RegionWriter;

// Where one answer goes: [offset, offset + capacity) of `region`; `writer`, when set, writes
// a scheduled job's tensors there as its worker produces them.
struct RegionLease {
  std::shared_ptr<Region> region;
  int64_t offset = 0;
  int64_t capacity = 0;
  std::shared_ptr<RegionWriter> writer;
};

// The regions of every token. Thread-safe.
class RegionTable {
 public:
  // `gauge` (may be null) shows the regions registered.
  RegionTable(bool allowed, std::string key_prefix, prometheus::Gauge* gauge = nullptr);
  ~RegionTable();

  // `scope` is the registering token ("" with authentication off).
  Status Register(const std::string& scope, const v1::RegisterRegionRequest& request,
                  v1::RegionInfo* info);
  // Requests still holding a lease fail CANCELLED; the mapping goes with the last of them.
  Status Unregister(const std::string& scope, const std::string& name);
  std::vector<v1::RegionInfo> List(const std::string& scope) const;
  // The lease for `output`: NOT_FOUND for a region this scope has not registered,
  // INVALID_ARGUMENT for a window outside it, FAILED_PRECONDITION with the flag off.
  Status Lease(const std::string& scope, const v1::OutputRegion& output, RegionLease* lease) const;
  // Drops the regions of tokens no longer in `tokens` (token revocation; empty `tokens`:
  // authentication is off and only the "" scope stays).
  void Revoke(const std::vector<std::string>& tokens);
  // Drops every region (exit).
  void Clear();
  int64_t size() const;

 private:
  void UpdateGauge() const;  // under mu_

  const bool allowed_;
  const std::string prefix_;
  prometheus::Gauge* gauge_;
  mutable std::mutex mu_;
  std::map<std::pair<std::string, std::string>, std::shared_ptr<Region>> regions_;  // (scope, name)
};

// The bytes an answer for `job` needs in a region (SPEC section 9's layout), for the check
// before the launch.
int64_t RegionBytesNeeded(const Job& job);

// The layout of `job`'s answer: each tensor's start and size past the lease's offset, in
// SPEC's order (start -1 when the answer has no such tensor); returns its end.
int64_t RegionLayout(const Job& job, std::array<int64_t, kNumAnswerTensors>* starts,
                     std::array<int64_t, kNumAnswerTensors>* sizes);

// Job::answer_sink for an answer into a region: the worker's output is copied once, from
// the launch's output buffers into the mapping (never through the response), at `job`'s
// layout. The first write checks that the region is still registered (CANCELLED) and that
// the object still holds the window (fstat: FAILED_PRECONDITION); every copy runs under the
// SIGBUS guard, so a truncation racing it fails the request, not the server.
class RegionWriter final : public AnswerSink {
 public:
  RegionWriter(RegionLease lease, const Job& job);
  uint8_t* Destination(AnswerTensor tensor) override;
  void Write(AnswerTensor tensor, const void* bytes, size_t size) override;
  // After the job is done: whether the worker wrote, and OK or why the answer is not in the
  // region (a write failed, or the region was unregistered meanwhile).
  bool used() const { return used_; }
  Status Finish() const;
  int64_t written() const { return written_; }

 private:
  bool Check();        // the first store's checks; false: status_ says why
  RegionLease lease_;  // without writer
  std::array<int64_t, kNumAnswerTensors> starts_{};
  std::array<int64_t, kNumAnswerTensors> sizes_{};
  bool used_ = false;
  bool checked_ = false;
  Status status_ = Status::Ok();
  int64_t written_ = 0;
};

// The layout of `response`'s tensors in a region: each present tensor's start past the
// lease's offset (-1 when absent), in SPEC's order (indices, labels, features, num_positive,
// num_negative, num_per_class); returns the end of the layout.
int64_t RegionLayout(const v1::SampleResponse& response, std::array<int64_t, 6>* starts);

// Writes `response`'s tensor bytes into the lease's window and empties their data (dtype and
// shape stay). CANCELLED when the region was unregistered meanwhile; FAILED_PRECONDITION
// when the object was truncated after registration (checked with fstat before the copy into
// the mapping; a truncation racing the copy raises SIGBUS, which a guard installed with the
// table (--allow-shared-memory) turns into the same status);
// RESOURCE_EXHAUSTED naming the bytes needed when the window is too small. `*written` gets
// the tensor bytes written.
Status WriteToRegion(const RegionLease& lease, v1::SampleResponse* response, int64_t* written);

// memcpy into a region's mapping that returns false instead of killing the process when the
// pages are gone (the object was shrunk: SIGBUS). The guard's handler is installed by the
// first RegionTable with shared memory allowed; a SIGBUS outside a copy goes to the handler
// that was installed before it, or kills the process as usual.
// `src` null writes `bytes` zero bytes.
bool GuardedCopy(uint8_t* dst, const void* src, size_t bytes);

// The scope of a call: its bearer token, or "" with authentication off. Call after the
// call was authorized.
std::string RegionScope(const grpc::CallbackServerContext& ctx, bool auth_on);

}  // namespace gpusampler::server
