#include "gpusampler/common/status_codes.hpp"

namespace gpusampler::common {

const char* const kGrpcCodeNames[kNumGrpcCodes] = {
    "OK",        "CANCELLED",      "UNKNOWN",           "INVALID_ARGUMENT",   "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED",   "OUT_OF_RANGE",   "UNIMPLEMENTED",     "INTERNAL",           "UNAVAILABLE",
    "DATA_LOSS", "UNAUTHENTICATED"};

std::string GrpcCodeName(int code) {
  return code >= 0 && code < kNumGrpcCodes ? kGrpcCodeNames[code] : "CODE_" + std::to_string(code);
}

}  // namespace gpusampler::common
