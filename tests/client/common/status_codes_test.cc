// gpusampler::common status codes: every gRPC code named at its value, others numbered.
#include <grpcpp/support/status.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/common/npy.hpp"
#include "gpusampler/common/status_codes.hpp"
#include "gpusampler/common/tensor.hpp"

namespace gpusampler::common {
namespace {

TEST(StatusCodes, NamesEveryGrpcCodeAtItsValue) {
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::OK], "OK");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::CANCELLED], "CANCELLED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::UNKNOWN], "UNKNOWN");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::INVALID_ARGUMENT], "INVALID_ARGUMENT");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::DEADLINE_EXCEEDED], "DEADLINE_EXCEEDED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::NOT_FOUND], "NOT_FOUND");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::ALREADY_EXISTS], "ALREADY_EXISTS");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::PERMISSION_DENIED], "PERMISSION_DENIED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::RESOURCE_EXHAUSTED], "RESOURCE_EXHAUSTED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::FAILED_PRECONDITION], "FAILED_PRECONDITION");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::ABORTED], "ABORTED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::OUT_OF_RANGE], "OUT_OF_RANGE");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::UNIMPLEMENTED], "UNIMPLEMENTED");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::INTERNAL], "INTERNAL");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::UNAVAILABLE], "UNAVAILABLE");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::DATA_LOSS], "DATA_LOSS");
  EXPECT_STREQ(kGrpcCodeNames[grpc::StatusCode::UNAUTHENTICATED], "UNAUTHENTICATED");
  EXPECT_EQ(kNumGrpcCodes, grpc::StatusCode::UNAUTHENTICATED + 1);
}

TEST(StatusCodes, UndefinedValuesGetANumber) {
  EXPECT_EQ(GrpcCodeName(0), "OK");
  EXPECT_EQ(GrpcCodeName(16), "UNAUTHENTICATED");
  EXPECT_EQ(GrpcCodeName(17), "CODE_17");
  EXPECT_EQ(GrpcCodeName(-1), "CODE_-1");
}

}  // namespace
}  // namespace gpusampler::common
