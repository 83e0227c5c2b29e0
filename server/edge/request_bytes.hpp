// The request bytes of Sample and SampleStream, before they become a Job: the byte budget
// that every request and response is charged to (--max-inflight-bytes), and the checks run
// on the raw bytes before and while they are parsed.
#pragma once

#include <grpcpp/support/byte_buffer.h>
#include <prometheus/gauge.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "core/status.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

// Request and response bytes held at once (--max-inflight-bytes). Thread-safe.
class ByteBudget {
 public:
  explicit ByteBudget(int64_t limit) : limit_(limit) {}
  // gpusampler_inflight_bytes: follows every charge and release from now on.
  void SetGauge(prometheus::Gauge* gauge) { gauge_ = gauge; }
  // Adds `bytes` unless that would pass the limit; false then.
  bool TryCharge(int64_t bytes);
  void Release(int64_t bytes);
  int64_t used() const { return used_.load(std::memory_order_relaxed); }
  int64_t limit() const { return limit_; }
  // The most held since the last call (memory trimming after a burst).
  int64_t TakePeak();

 private:
  const int64_t limit_;
  prometheus::Gauge* gauge_ = nullptr;
  std::atomic<int64_t> used_{0};
  std::atomic<int64_t> peak_{0};
};

// Retry pushback of a full byte budget: like a full queue, 100 ms plus jitter.
int64_t BudgetPushbackMs();

// Charges `bytes` (of `what`, for the message) to `budget`, or says why not:
// RESOURCE_EXHAUSTED naming --max-inflight-bytes, with a pushback (kDoNotRetry when `bytes`
// is over the whole budget).
Status Charge(ByteBudget& budget, int64_t bytes, const char* what);

// Parses a request's bytes. INVALID_ARGUMENT (not gRPC's bare INTERNAL or UNIMPLEMENTED)
// when they are not a SampleRequest, e.g. a truncated message or a non-UTF-8 request_id, or
// when a tensor shape has more than kMaxRank dims (checked on the wire bytes first). `what`
// names the message ("the request", "SampleStream message 3").
Status ParseRequest(const grpc::ByteBuffer& bytes, v1::SampleRequest* request,
                    const std::string& what);

}  // namespace gpusampler::server
