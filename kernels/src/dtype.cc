#include <cstring>
#include <limits>
#include <string>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {

size_t ItemSize(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
    default:
      return 0;
  }
}

bool IsLabelDType(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
    case DType::kInt16:
    case DType::kInt32:
    case DType::kInt64:
      return true;
    default:
      return false;
  }
}

namespace {
constexpr const char* kNames[] = {"unspecified", "bool",    "int8",   "uint8",
                                  "int16",       "int32",   "int64",  "float16",
                                  "bfloat16",    "float32", "float64"};
constexpr int kNumNames = sizeof(kNames) / sizeof(kNames[0]);
}  // namespace

const char* DTypeName(DType dtype) {
  const int v = static_cast<int>(dtype);
  return (v >= 0 && v < kNumNames) ? kNames[v] : kNames[0];
}

bool ParseDType(const std::string& name, DType* out) {
  for (int v = 1; v < kNumNames; ++v) {
    if (name == kNames[v]) {
      *out = static_cast<DType>(v);
      return true;
    }
  }
  return false;
}

int64_t PaddingLabel(DType dtype) {
  return (dtype == DType::kUInt8 || dtype == DType::kBool) ? 0 : -1;
}

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
