#include "status.hpp"

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
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kCancelled:
      return "CANCELLED";
    case Code::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case Code::kDeadlineExceeded:
      return "DEADLINE_EXCEEDED";
    case Code::kNotFound:
      return "NOT_FOUND";
    case Code::kAlreadyExists:
      return "ALREADY_EXISTS";
    case Code::kResourceExhausted:
      return "RESOURCE_EXHAUSTED";
    case Code::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case Code::kInternal:
      return "INTERNAL";
    case Code::kUnavailable:
      return "UNAVAILABLE";
    case Code::kUnauthenticated:
      return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

}  // namespace gpusampler::server
