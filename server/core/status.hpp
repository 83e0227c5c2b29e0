// The server's status value. Everything below the gRPC layer speaks Status; it becomes a
// grpc::Status in exactly one place (ToGrpcStatus, below), and kernels::Error becomes a
// Status in exactly one place (FromKernelError).
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <utility>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::server {

// Values match grpc::StatusCode, so the conversion is a cast.
enum class Code : int {
  kOk = 0,
  kCancelled = 1,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kInternal = 13,
  kUnavailable = 14,
  kUnauthenticated = 16,
};

// No `grpc-retry-pushback-ms` trailer: the client's own retry policy decides.
constexpr int64_t kNoPushback = 0;
// `grpc-retry-pushback-ms: -1`, gRPC's "do not retry" (gRFC A6): a limit error fails the
// same way on every attempt.
constexpr int64_t kDoNotRetry = -1;

// An immutable (code, message) pair, plus the retry pushback the client gets in the
// trailing metadata. Thread-compatible.
class Status {
 public:
  Status() = default;
  Status(Code code, std::string message, int64_t retry_pushback_ms = kNoPushback)
      : code_(code), message_(std::move(message)), retry_pushback_ms_(retry_pushback_ms) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // kNoPushback, kDoNotRetry, or a positive delay in milliseconds before a retry.
  int64_t retry_pushback_ms() const { return retry_pushback_ms_; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  int64_t retry_pushback_ms_ = kNoPushback;
};

inline Status InvalidArgument(std::string m) {
  return Status(Code::kInvalidArgument, std::move(m));
}
inline Status ResourceExhausted(std::string m) {
  return Status(Code::kResourceExhausted, std::move(m));
}
// A request over a configured limit: RESOURCE_EXHAUSTED that no retry can cure. `message`
// names the limit, its value and its flag.
inline Status LimitExceeded(std::string m) {
  return Status(Code::kResourceExhausted, std::move(m), kDoNotRetry);
}
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }

// The status a backend error becomes: out of memory -> RESOURCE_EXHAUSTED, device fault
// and unavailable -> UNAVAILABLE, invalid argument -> INVALID_ARGUMENT, else INTERNAL.
Status FromKernelError(const kernels::Error& error);

// "OK", "INVALID_ARGUMENT", ... (the gRPC code names, used as metric label values).
const char* CodeName(Code code);

// The one place a Status becomes a grpc::Status. A retry pushback goes into `context`'s
// trailing metadata as `grpc-retry-pushback-ms` (gRFC A6: -1 = do not retry, N > 0 = retry
// after N ms), which gRPC's client-side retry policy honours.
// `context` may be null (no call to carry the pushback). The message is cut to 1 KiB.
grpc::Status ToGrpcStatus(const Status& status, grpc::CallbackServerContext* context = nullptr);

}  // namespace gpusampler::server
