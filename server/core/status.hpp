// The server's status value. Everything below the gRPC layer speaks Status; it becomes a
// grpc::Status in exactly one place (ToGrpcStatus, below), and an exception (kernels::Error
// or any other) becomes a Status in exactly one place (FromCurrentException).
#pragma once

#include <grpcpp/server_context.h>
#include <grpcpp/support/status.h>

#include <cstdint>
#include <string>
#include <string_view>
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
  kOutOfRange = 11,  // an epoch step past the epoch (SPEC section 8)
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
// trailing metadata. Thread-compatible. [[nodiscard]]: a Status is handled, returned
// (GPUSAMPLER_RETURN_IF_ERROR) or dropped on purpose with a (void) cast and a comment.
class [[nodiscard]] Status {
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

// Returns the error `expr` (a Status) evaluates to from the enclosing function, which
// returns Status; carries on when it is OK. Every early return on error goes through it.
#define GPUSAMPLER_RETURN_IF_ERROR(expr)                                                      \
  do {                                                                                        \
    if (::gpusampler::server::Status gpusampler_status_ = (expr); !gpusampler_status_.ok()) { \
      return gpusampler_status_;                                                              \
    }                                                                                         \
  } while (false)

// The one mapping of an exception to a Status. Call it only inside a `catch (...)`, where an
// exception crosses into the server (from the kernels, gRPC or a thread's top):
//   kernels::Error   kInvalidArgument -> INVALID_ARGUMENT, kOutOfMemory -> RESOURCE_EXHAUSTED,
//                    kDeviceFault and kUnavailable -> UNAVAILABLE, kInternal -> INTERNAL
//   std::bad_alloc   RESOURCE_EXHAUSTED
//   anything else    INTERNAL
// A device fault is UNAVAILABLE rather than INTERNAL: the replica marks itself unhealthy
// (the scheduler's fatal path) and the same request succeeds on another replica, which is
// what UNAVAILABLE tells clients and their retry policies; INTERNAL says "do not retry".
// `context` (may be empty) prefixes the message, "context: what". `*device_fault` (may be
// null) is set to whether the exception is a kernels::Error kDeviceFault.
Status FromCurrentException(std::string_view context = {}, bool* device_fault = nullptr);

// "OK", "INVALID_ARGUMENT", ... (the gRPC code names, used as metric label values).
const char* CodeName(Code code);

// The one place a Status becomes a grpc::Status. A retry pushback goes into `context`'s
// trailing metadata as `grpc-retry-pushback-ms` (gRFC A6: -1 = do not retry, N > 0 = retry
// after N ms), which gRPC's client-side retry policy honours.
// `context` may be null (no call to carry the pushback). The message is cut to 1 KiB.
grpc::Status ToGrpcStatus(const Status& status, grpc::CallbackServerContext* context = nullptr);

}  // namespace gpusampler::server
