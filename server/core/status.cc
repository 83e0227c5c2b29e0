#include "core/status.hpp"

#include "gpusampler/common/status_codes.hpp"

namespace gpusampler::server {

Status FromKernelError(const kernels::Error& error) {
  using K = kernels::Error::Code;
  switch (error.code()) {
    case K::kOutOfMemory:
      return ResourceExhausted(std::string("device out of memory: ") + error.what());
    case K::kDeviceFault:
      return Unavailable(std::string("device fault: ") + error.what());
    case K::kUnavailable:
      return Unavailable(error.what());
    case K::kInvalidArgument:
      return InvalidArgument(error.what());
    case K::kInternal:
    default:
      return Status(Code::kInternal, error.what());
  }
}

const char* CodeName(Code code) {
  const int i = static_cast<int>(code);
  return i >= 0 && i < common::kNumGrpcCodes ? common::kGrpcCodeNames[i] : "UNKNOWN";
}

grpc::Status ToGrpcStatus(const Status& status, grpc::CallbackServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  if (context && status.retry_pushback_ms() != kNoPushback) {
    context->AddTrailingMetadata("grpc-retry-pushback-ms",
                                 std::to_string(status.retry_pushback_ms()));
  }
  // Bounded, so that no message outgrows gRPC's metadata limit (the client then would see
  // a transport error instead); messages name shapes, never whole tensors.
  constexpr size_t kMaxMessage = 1024;
  std::string message = status.message();
  if (message.size() > kMaxMessage) message = message.substr(0, kMaxMessage - 3) + "...";
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

}  // namespace gpusampler::server
