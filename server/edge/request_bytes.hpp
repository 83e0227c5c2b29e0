// The request bytes of Sample and SampleStream, before they become a Job: the byte budget
// that every request and response is charged to (--max-inflight-bytes), and the checks run
// on the raw bytes before and while they are parsed.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <prometheus/gauge.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

// One call's bytes of the budget, counted in its connection's share too (issue 31, item 5):
// the fair-share rule needs to know which connection holds what. Thread-safe.
class ByteOwner {
 public:
  // `connection` is the share of every call on one connection (CallLimits keeps them), and
  // `id` names the connection (not 0), also across the shares it is given over time.
  ByteOwner(std::shared_ptr<std::atomic<int64_t>> connection, uintptr_t id)
      : connection_(std::move(connection)), id_(id) {}
  ByteOwner(const ByteOwner&) = delete;
  ByteOwner& operator=(const ByteOwner&) = delete;

  // The bytes every call of this connection holds.
  int64_t connection_bytes() const { return connection_->load(std::memory_order_relaxed); }
  uintptr_t connection_id() const { return id_; }
  int64_t held() const;
  void Add(int64_t bytes);
  void Remove(int64_t bytes);
  // The call ended: whatever it still holds leaves its connection's share, and later
  // Add/Remove change nothing.
  void Close();

  // The owner of the charges Charge() makes on this thread without one (unary calls: the
  // call admitted last on this thread, set by CallTicket::Take; SampleStream: a Scope).
  static std::shared_ptr<ByteOwner> Current();
  static void SetCurrent(std::shared_ptr<ByteOwner> owner);
  // Makes `owner` the current one until destroyed, then restores the previous one.
  class Scope {
   public:
    explicit Scope(std::shared_ptr<ByteOwner> owner);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    std::shared_ptr<ByteOwner> previous_;
  };

 private:
  const std::shared_ptr<std::atomic<int64_t>> connection_;
  const uintptr_t id_;
  mutable std::mutex mu_;
  int64_t held_ = 0;
  bool closed_ = false;
};

// Request and response bytes held at once (--max-inflight-bytes). Thread-safe.
//
// Fair share (issue 31, item 5): a refused charge marks the budget "under pressure" for
// kPressureWindow. While it is, a connection may not grow past half the budget when the
// refused charge was another connection's, and SampleStreams that have not read an answer for
// --pressure-write-timeout-ms end (sample_stream.cc), so never-readers lose their bytes first.
class ByteBudget {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr Clock::duration kPressureWindow = std::chrono::seconds(1);
  enum class Refusal { kNone, kFull, kOverShare };

  explicit ByteBudget(int64_t limit) : limit_(limit) {}
  // gpusampler_inflight_bytes: follows every charge and release from now on.
  void SetGauge(prometheus::Gauge* gauge) { gauge_ = gauge; }
  // Adds `bytes` unless that would pass the limit; false then.
  bool TryCharge(int64_t bytes) { return TryCharge(bytes, nullptr) == Refusal::kNone; }
  // The same, charged to `owner` (and its connection) too when not null; also refuses
  // (kOverShare) a charge that would take the owner's connection past half the budget while
  // another connection waits.
  Refusal TryCharge(int64_t bytes, ByteOwner* owner, Clock::time_point now = Clock::now());
  void Release(int64_t bytes);
  void Release(int64_t bytes, ByteOwner* owner);
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }
  // The most one connection may hold while another waits.
  int64_t share_limit() const { return limit_ / 2; }
  // A charge was refused within kPressureWindow of `now`.
  bool UnderPressure(Clock::time_point now = Clock::now()) const;
  // The most held since the last call (memory trimming after a burst).
  int64_t TakePeak();

 private:
  void Refused(uintptr_t connection, Clock::time_point now);
  // Another connection than `connection` was refused within kPressureWindow of `now`.
  bool AnotherWaits(uintptr_t connection, Clock::time_point now) const;

  const int64_t limit_;
  prometheus::Gauge* gauge_ = nullptr;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
  // The last refusal: when (Clock ticks; min: never) and whose connection (0: none known).
  std::atomic<int64_t> refused_at_{std::numeric_limits<int64_t>::min()};
  std::atomic<uintptr_t> refused_connection_{0};
};

// Retry pushback of a full queue or call limit: 100 ms plus jitter.
int64_t BudgetPushbackMs();
// Retry pushback of a full byte budget: 250 ms plus jitter, so that a client's few retries
// span the second in which the stall check frees a never-reading stream's bytes.
int64_t FullBudgetPushbackMs();

// Charges `bytes` (of `what`, for the message) to `budget` and to the thread's current
// ByteOwner (if any), or says why not: RESOURCE_EXHAUSTED naming --max-inflight-bytes, with a
// pushback (kDoNotRetry when `bytes` is over the whole budget); for the fair share, the bytes
// this connection holds.
Status Charge(ByteBudget& budget, int64_t bytes, const char* what);

// Parses a request's bytes. INVALID_ARGUMENT (not gRPC's bare INTERNAL or UNIMPLEMENTED)
// when they are not a SampleRequest, e.g. a truncated message or a non-UTF-8 request_id, or
// when a tensor shape has more than kMaxRank dims (checked on the wire bytes first). `what`
// names the message ("the request", "SampleStream message 3").
Status ParseRequest(const grpc::ByteBuffer& bytes, v1::SampleRequest* request,
                    const std::string& what);

}  // namespace gpusampler::server
