#include "gpusampler/common/tensor.hpp"

namespace gpusampler::common {

// Traits(v1::DType) casts one enum to the other.
#define GPUSAMPLER_SAME_DTYPE(wire, table) \
  static_assert(static_cast<int>(v1::wire) == static_cast<int>(kernels::DType::table))
GPUSAMPLER_SAME_DTYPE(DTYPE_UNSPECIFIED, kUnspecified);
GPUSAMPLER_SAME_DTYPE(DTYPE_BOOL, kBool);
GPUSAMPLER_SAME_DTYPE(DTYPE_INT8, kInt8);
GPUSAMPLER_SAME_DTYPE(DTYPE_UINT8, kUInt8);
GPUSAMPLER_SAME_DTYPE(DTYPE_INT16, kInt16);
GPUSAMPLER_SAME_DTYPE(DTYPE_INT32, kInt32);
GPUSAMPLER_SAME_DTYPE(DTYPE_INT64, kInt64);
GPUSAMPLER_SAME_DTYPE(DTYPE_FLOAT16, kFloat16);
GPUSAMPLER_SAME_DTYPE(DTYPE_BFLOAT16, kBFloat16);
GPUSAMPLER_SAME_DTYPE(DTYPE_FLOAT32, kFloat32);
GPUSAMPLER_SAME_DTYPE(DTYPE_FLOAT64, kFloat64);
#undef GPUSAMPLER_SAME_DTYPE
static_assert(v1::DType_ARRAYSIZE == kernels::kNumDTypes);

int64_t NumElements(const v1::Tensor& tensor) {
  int64_t n = 1;
  for (int64_t d : tensor.shape()) n *= d;
  return n;
}

}  // namespace gpusampler::common
