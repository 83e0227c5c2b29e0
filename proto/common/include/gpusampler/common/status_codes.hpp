// The names of gRPC's status codes, written once for the server (metric labels, logs) and the
// clients (messages, bench reports).
#pragma once

#include <string>

namespace gpusampler::common {

inline constexpr int kNumGrpcCodes = 17;  // grpc::StatusCode 0 (OK) .. 16 (UNAUTHENTICATED)

// "OK", "CANCELLED", ..., "UNAUTHENTICATED", indexed by the code's value.
extern const char* const kGrpcCodeNames[kNumGrpcCodes];

// kGrpcCodeNames[code], or "CODE_<n>" for a value gRPC does not define.
std::string GrpcCodeName(int code);

}  // namespace gpusampler::common
