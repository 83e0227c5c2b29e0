#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {

int DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BOOL:
    case v1::DTYPE_INT8:
    case v1::DTYPE_UINT8:
      return 1;
    case v1::DTYPE_INT16:
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16:
      return 2;
    case v1::DTYPE_INT32:
    case v1::DTYPE_FLOAT32:
      return 4;
    case v1::DTYPE_INT64:
    case v1::DTYPE_FLOAT64:
      return 8;
    default:
      return 0;
  }
}

std::string_view DTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BOOL:
      return "bool";
    case v1::DTYPE_INT8:
      return "int8";
    case v1::DTYPE_UINT8:
      return "uint8";
    case v1::DTYPE_INT16:
      return "int16";
    case v1::DTYPE_INT32:
      return "int32";
    case v1::DTYPE_INT64:
      return "int64";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT64:
      return "float64";
    default:
      return "unspecified";
  }
}

int64_t NumElements(const v1::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape()) n *= d;
  return n;
}

}  // namespace gpusampler::client
