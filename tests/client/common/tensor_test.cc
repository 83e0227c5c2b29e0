// gpusampler::common tensor views: sizes and names from the dtype table, element counts.
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

}  // namespace
}  // namespace gpusampler::common
