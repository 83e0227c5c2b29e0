// The strict .npy reader and writer: round trips for every dtype .npy can name, headers
// as NumPy writes them, and rejection of everything the wire format cannot carry.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/client/npy.hpp"
#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

std::string Npy(const std::string& header, const std::string& payload, int major = 1) {
  std::string text = header;
  const size_t prefix = major == 1 ? 10 : 12;
  text.append((64 - (prefix + text.size() + 1) % 64) % 64, ' ');
  text.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  const size_t len = text.size();
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i)
    out.push_back(static_cast<char>(len >> (8 * i)));
  return out + text + payload;
}

std::string Bytes(const std::vector<int64_t>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(int64_t));
}

TEST(Npy, ParsesHeaderAsNumpyWritesIt) {
  v1::Tensor t;
  const std::vector<int64_t> values = {1, -2, 3, 4, 5, -6};
  ASSERT_EQ(
      ParseNpy(Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", Bytes(values)),
               &t),
      "");
  EXPECT_EQ(t.dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(std::vector<int64_t>(t.shape().begin(), t.shape().end()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(TensorValues<int64_t>(t), values);
}

TEST(Npy, ParsesVersion2KeyOrderAndScalars) {
  v1::Tensor t;
  ASSERT_EQ(ParseNpy(Npy("{'shape': (), 'fortran_order': False, 'descr': '<f8'}",
                         std::string(8, '\0'), 2),
                     &t),
            "");
  EXPECT_EQ(t.dtype(), v1::DTYPE_FLOAT64);
  EXPECT_EQ(t.shape_size(), 0);
  ASSERT_EQ(ParseNpy(Npy("{'descr': '|u1', 'fortran_order': False, 'shape': (0,), }", ""), &t), "");
  EXPECT_EQ(t.shape(0), 0);
}

TEST(Npy, RoundTripsEveryDType) {
  const v1::DType dtypes[] = {v1::DTYPE_BOOL,    v1::DTYPE_INT8,    v1::DTYPE_UINT8,
                              v1::DTYPE_INT16,   v1::DTYPE_INT32,   v1::DTYPE_INT64,
                              v1::DTYPE_FLOAT16, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT64};
  for (v1::DType dtype : dtypes) {
    for (const std::vector<int64_t>& shape :
         std::vector<std::vector<int64_t>>{{}, {0}, {1}, {7}, {3, 5}, {2, 3, 4}}) {
      v1::Tensor in;
      in.set_dtype(dtype);
      for (int64_t d : shape) in.add_shape(d);
      std::string data(NumElements(in) * DTypeSize(dtype), '\0');
      for (size_t i = 0; i < data.size(); ++i) {
        data[i] = dtype == v1::DTYPE_BOOL ? static_cast<char>(i % 2) : static_cast<char>(i * 37);
      }
      in.set_data(data);
      std::string error;
      const std::string bytes = SerializeNpy(in, &error);
      ASSERT_EQ(error, "") << DTypeName(dtype);
      // NumPy requires the data to start on a 64-byte boundary (format 1.0 pads to it).
      const size_t header_len =
          static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
      EXPECT_EQ((10 + header_len) % 64, 0u);
      EXPECT_EQ(bytes[10 + header_len - 1], '\n');
      v1::Tensor out;
      ASSERT_EQ(ParseNpy(bytes, &out), "") << DTypeName(dtype);
      EXPECT_EQ(out.SerializeAsString(), in.SerializeAsString()) << DTypeName(dtype);
    }
  }
}

TEST(Npy, WritesOneDimensionalShapeWithTrailingComma) {
  v1::Tensor t = MakeTensor<int32_t>({1, 2, 3}, {3});
  std::string error;
  const std::string bytes = SerializeNpy(t, &error);
  EXPECT_NE(bytes.find("'shape': (3,)"), std::string::npos);
  EXPECT_NE(bytes.find("'descr': '<i4'"), std::string::npos);
}

struct Bad {
  const char* name;
  std::string bytes;
  const char* message;
};

TEST(Npy, RejectsWhatTheWireCannotCarry) {
  const std::string eight(8, '\0');
  const Bad cases[] = {
      {"fortran", Npy("{'descr': '<i8', 'fortran_order': True, 'shape': (1,), }", eight),
       "Fortran"},
      {"big_endian", Npy("{'descr': '>i8', 'fortran_order': False, 'shape': (1,), }", eight),
       "'>i8'"},
      {"native_order", Npy("{'descr': '=i8', 'fortran_order': False, 'shape': (1,), }", eight),
       "'=i8'"},
      {"uint32", Npy("{'descr': '<u4', 'fortran_order': False, 'shape': (2,), }", eight), "'<u4'"},
      {"object", Npy("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", eight), "'|O'"},
      {"structured",
       Npy("{'descr': [('a', '<i4')], 'fortran_order': False, 'shape': (2,), }", eight),
       "structured"},
      {"short", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (2,), }", eight), "need 16"},
      {"long", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (0,), }", eight), "need 0"},
      {"missing_key", Npy("{'descr': '<i8', 'shape': (1,), }", eight), "lacks"},
      {"extra_key", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), 'x': 1}", eight),
       "unexpected"},
      {"negative_dim", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (-1,), }", eight),
       "non-integer"},
      {"bool_byte", Npy("{'descr': '|b1', 'fortran_order': False, 'shape': (2,), }", "\x01\x02"),
       "0 or 1"},
      {"magic", "\x93NUMPZ\x01\x00\x00\x00", "magic"},
      {"version", Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", eight, 4),
       "version"},
      {"truncated", std::string("\x93NUMPY\x01\x00\xff\x00{", 11), "truncated"},
  };
  for (const Bad& c : cases) {
    v1::Tensor t;
    const std::string error = ParseNpy(c.bytes, &t);
    EXPECT_NE(error.find(c.message), std::string::npos) << c.name << ": " << error;
  }
}

TEST(Npy, WriterRefusesBfloat16AndInconsistentTensors) {
  v1::Tensor t;
  t.set_dtype(v1::DTYPE_BFLOAT16);
  t.add_shape(1);
  t.set_data(std::string(2, '\0'));
  std::string error;
  EXPECT_EQ(SerializeNpy(t, &error), "");
  EXPECT_NE(error.find("bfloat16"), std::string::npos);
  t = MakeTensor<int64_t>({1, 2}, {3});
  error.clear();
  EXPECT_EQ(SerializeNpy(t, &error), "");
  EXPECT_NE(error.find("does not match"), std::string::npos);
}

TEST(Npy, FilesRoundTrip) {
  const std::string path = ::testing::TempDir() + "/npy_test.npy";
  v1::Tensor in = MakeTensor<float>({1.5f, -2.f, 0.f, 3.25f}, {2, 2});
  ASSERT_EQ(WriteNpy(path, in), "");
  v1::Tensor out;
  ASSERT_EQ(ReadNpy(path, &out), "");
  EXPECT_EQ(TensorValues<float>(out), TensorValues<float>(in));
  EXPECT_NE(ReadNpy(path + ".missing", &out).find("cannot open"), std::string::npos);
}

}  // namespace
}  // namespace gpusampler::client
