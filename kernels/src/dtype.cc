#include <cstring>
#include <limits>
#include <string>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {

size_t ItemSize(DType dtype) { return static_cast<size_t>(DTypeSize(dtype)); }

bool IsLabelDType(DType dtype) { return IsLabel(dtype); }

const char* DTypeName(DType dtype) { return Traits(dtype).name; }

bool ParseDType(const std::string& name, DType* out) {
  for (int v = 1; v < kNumDTypes; ++v) {
    if (name == Traits(static_cast<DType>(v)).name) {
      *out = static_cast<DType>(v);
      return true;
    }
  }
  return false;
}

int64_t PaddingLabel(DType dtype) { return Traits(dtype).padding_label; }

bool LabelRepresentable(DType dtype, int64_t value) {
  switch (dtype) {
    case DType::kBool:
      return value == 0 || value == 1;
    case DType::kInt8:
      return value >= std::numeric_limits<int8_t>::min() &&
             value <= std::numeric_limits<int8_t>::max();
    case DType::kUInt8:
      return value >= 0 && value <= std::numeric_limits<uint8_t>::max();
    case DType::kInt16:
      return value >= std::numeric_limits<int16_t>::min() &&
             value <= std::numeric_limits<int16_t>::max();
    case DType::kInt32:
      return value >= std::numeric_limits<int32_t>::min() &&
             value <= std::numeric_limits<int32_t>::max();
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

}  // namespace gpusampler::kernels
