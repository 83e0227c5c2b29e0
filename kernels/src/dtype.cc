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
  if (dtype == DType::kBool) return value == 0 || value == 1;
  const DTypeTraits t = Traits(dtype);
  if (t.widen == Widen::kNone) return false;
  if (t.size >= 8) return t.widen == Widen::kSign || value >= 0;
  const int bits = 8 * t.size;
  if (t.widen == Widen::kSign) {
    return value >= -(int64_t{1} << (bits - 1)) && value < (int64_t{1} << (bits - 1));
  }
  return value >= 0 && value < (int64_t{1} << bits);
}

}  // namespace gpusampler::kernels
