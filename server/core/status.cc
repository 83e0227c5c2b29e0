#include "core/status.hpp"

#include <exception>
#include <new>

#include "gpusampler/common/status_codes.hpp"

namespace gpusampler::server {
namespace {

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

Status WithContext(std::string_view context, const Status& status) {
  if (context.empty()) return status;
  return Status(status.code(), std::string(context) + ": " + status.message(),
                status.retry_pushback_ms());
}

}  // namespace

Status FromCurrentException(std::string_view context, bool* device_fault) {
  if (device_fault) *device_fault = false;
  try {
    throw;
  } catch (const kernels::Error& e) {
    if (device_fault) *device_fault = e.code() == kernels::Error::Code::kDeviceFault;
    return WithContext(context, FromKernelError(e));
  } catch (const std::bad_alloc&) {
    return WithContext(context, ResourceExhausted("server out of memory"));
  } catch (const std::exception& e) {
    return WithContext(context, Status(Code::kInternal, e.what()));
  } catch (...) {
    return WithContext(context, Status(Code::kInternal, "unknown exception"));
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
