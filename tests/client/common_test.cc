// gpusampler::common: the status-code names, the tensor views' dtype table and the .npy steps
// the server's repository uses on their own (ParseNpy's whole-file path is in npy_test.cc).
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

TEST(TensorViews, SizesAndNamesComeFromTheDTypeTable) {
  struct Row {
    v1::DType dtype;
    int size;
    const char* name;
  };
  const Row rows[] = {
      {v1::DTYPE_UNSPECIFIED, 0, "unspecified"},
      {v1::DTYPE_BOOL, 1, "bool"},
      {v1::DTYPE_INT8, 1, "int8"},
      {v1::DTYPE_UINT8, 1, "uint8"},
      {v1::DTYPE_INT16, 2, "int16"},
      {v1::DTYPE_INT32, 4, "int32"},
      {v1::DTYPE_INT64, 8, "int64"},
      {v1::DTYPE_FLOAT16, 2, "float16"},
      {v1::DTYPE_BFLOAT16, 2, "bfloat16"},
      {v1::DTYPE_FLOAT32, 4, "float32"},
      {v1::DTYPE_FLOAT64, 8, "float64"},
      {static_cast<v1::DType>(99), 0, "unspecified"},
  };
  for (const Row& r : rows) {
    EXPECT_EQ(DTypeSize(r.dtype), r.size) << r.name;
    EXPECT_EQ(DTypeName(r.dtype), r.name);
  }
}

TEST(TensorViews, NumElementsIsTheShapeProduct) {
  v1::Tensor scalar;
  EXPECT_EQ(NumElements(scalar), 1);
  EXPECT_EQ(NumElements(MakeTensor<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3})), 6);
  EXPECT_EQ(NumElements(MakeTensor<float>({}, {4, 0})), 0);
}

TEST(NpyDescr, AcceptsWhatNumpyWritesForTheWireDTypes) {
  struct Row {
    const char* descr;
    v1::DType dtype;
  };
  const Row rows[] = {
      {"|b1", v1::DTYPE_BOOL},    {"<b1", v1::DTYPE_BOOL},    {"|i1", v1::DTYPE_INT8},
      {"<i1", v1::DTYPE_INT8},    {"|u1", v1::DTYPE_UINT8},   {"<u1", v1::DTYPE_UINT8},
      {"<i2", v1::DTYPE_INT16},   {"<i4", v1::DTYPE_INT32},   {"<i8", v1::DTYPE_INT64},
      {"<f2", v1::DTYPE_FLOAT16}, {"<f4", v1::DTYPE_FLOAT32}, {"<f8", v1::DTYPE_FLOAT64},
  };
  for (const Row& r : rows) EXPECT_EQ(DTypeFromNpyDescr(r.descr), r.dtype) << r.descr;
  for (const char* refused :
       {"", ">i8", "=i8", "|i8", ">b1", "=u1", "<u2", "<c8", "O", "<V2", "<i", "i8", "|b1 "}) {
    EXPECT_EQ(DTypeFromNpyDescr(refused), v1::DTYPE_UNSPECIFIED) << refused;
  }
}

TEST(NpyHeaderBytes, PadsTheDataTo64BytesAndParsesBack) {
  for (const std::vector<int64_t>& shape :
       std::vector<std::vector<int64_t>>{{}, {0}, {7}, {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8}}) {
    const std::string bytes = NpyHeaderBytes("<i8", shape);
    ASSERT_EQ(bytes.size() % 64, 0u);
    EXPECT_EQ(bytes.back(), '\n');
    NpyPreamble preamble;
    ASSERT_EQ(ParseNpyPreamble(bytes.substr(0, kNpyPreambleBytes), &preamble), "");
    EXPECT_EQ(preamble.header_start, 10u);
    EXPECT_EQ(preamble.header_start + preamble.header_len, bytes.size());
    NpyHeader header;
    ASSERT_EQ(ParseNpyHeader(bytes.substr(preamble.header_start), &header), "");
    EXPECT_EQ(header.descr, "<i8");
    EXPECT_EQ(header.dtype, v1::DTYPE_INT64);
    EXPECT_EQ(header.shape, shape);
    int64_t elements = 1;
    for (int64_t d : shape) elements *= d;
    EXPECT_EQ(header.payload_bytes, 8 * elements);
  }
}

TEST(NpyPreamble, ReadsVersionsOneToThreeAndRefusesTheRest) {
  NpyPreamble p;
  EXPECT_EQ(ParseNpyPreamble(std::string("\x93NUMPY\x01\x00\x76\x00", 10), &p), "");
  EXPECT_EQ(p.header_start, 10u);
  EXPECT_EQ(p.header_len, 0x76u);
  EXPECT_EQ(ParseNpyPreamble(std::string("\x93NUMPY\x02\x00\x01\x02\x00\x00", 12), &p), "");
  EXPECT_EQ(p.header_start, 12u);
  EXPECT_EQ(p.header_len, 0x0201u);
  EXPECT_EQ(ParseNpyPreamble(std::string("\x93NUMPY\x03\x00\x10\x00", 10), &p),
            "truncated .npy header");
  EXPECT_EQ(ParseNpyPreamble(std::string("\x93NUMPY\x04\x00\x10\x00", 10), &p),
            "unsupported .npy version 4.0");
  EXPECT_EQ(ParseNpyPreamble(std::string("\x93NUMPY\x01\x01\x10\x00", 10), &p),
            "unsupported .npy version 1.1");
  EXPECT_EQ(ParseNpyPreamble("\x93NUMPY", &p), "not a .npy file (bad magic)");
  EXPECT_EQ(ParseNpyPreamble("NUMPY!\x01\x00\x10\x00", &p), "not a .npy file (bad magic)");
}

TEST(NpyHeader, RefusesFortranOrderUnknownDTypesAndOverflow) {
  NpyHeader h;
  EXPECT_EQ(ParseNpyHeader("{'descr': '<i8', 'fortran_order': True, 'shape': (3,), }", &h),
            "Fortran-order .npy is unsupported; save a C-order array");
  EXPECT_NE(ParseNpyHeader("{'descr': '>i8', 'fortran_order': False, 'shape': (3,), }", &h)
                .find("unsupported .npy dtype '>i8'"),
            std::string::npos);
  EXPECT_EQ(ParseNpyHeader("{'descr': '<i8', 'fortran_order': False, "
                           "'shape': (4294967296, 4294967296), }",
                           &h),
            ".npy shape overflows");
  EXPECT_EQ(
      ParseNpyHeader("{'descr': '<i8', 'fortran_order': False}", &h).rfind(".npy header: ", 0), 0u);
}

TEST(NpyBools, OnlyZeroAndOne) {
  EXPECT_EQ(CheckNpyBools(std::string("\x00\x01\x01", 3)), "");
  EXPECT_EQ(CheckNpyBools(std::string("\x00\x02", 2)),
            ".npy bool array holds a byte other than 0 or 1");
}

}  // namespace
}  // namespace gpusampler::common
