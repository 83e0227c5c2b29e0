// gpusampler::common npy: the descrs numpy writes, header bytes padded to 64, preambles of
// versions one to three, refused headers and bool bytes.
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

TEST(CommonNpy, AcceptsWhatNumpyWritesForTheWireDTypes) {
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

TEST(CommonNpy, PadsTheDataTo64BytesAndParsesBack) {
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

TEST(CommonNpy, ReadsVersionsOneToThreeAndRefusesTheRest) {
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

TEST(CommonNpy, RefusesFortranOrderUnknownDTypesAndOverflow) {
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

TEST(CommonNpy, OnlyZeroAndOne) {
  EXPECT_EQ(CheckNpyBools(std::string("\x00\x01\x01", 3)), "");
  EXPECT_EQ(CheckNpyBools(std::string("\x00\x02", 2)),
            ".npy bool array holds a byte other than 0 or 1");
}

}  // namespace
}  // namespace gpusampler::common
