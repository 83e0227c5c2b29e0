// The one table of tensor dtypes: every size, name, .npy descriptor, padding label and widening
// rule in the project comes from `Traits` below, on the host and on the device. The server and
// both clients' C++ code use it; the Python client keeps one table of its own
// (client/python/gpusampler/_tensors.py). Adding a dtype is one row here, the wire enum value in
// proto/gpusampler/v1/sampler.proto, and (for a label dtype) its kernels.
#pragma once

#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include "gpusampler/kernels/macros.hpp"

namespace gpusampler::kernels {

// Values match the wire enum gpusampler.v1.DType.
enum class DType : int32_t {
  kUnspecified = 0,
  kBool = 1,
  kInt8 = 2,
  kUInt8 = 3,
  kInt16 = 4,
  kInt32 = 5,
  kInt64 = 6,
  kFloat16 = 7,
  kBFloat16 = 8,
  kFloat32 = 9,
  kFloat64 = 10,
};
inline constexpr int kNumDTypes = 11;  // enum values 0 .. kNumDTypes - 1

// How a label loader turns a label of this dtype into an int64 class value.
enum class Widen : int8_t {
  kNone = 0,  // not a label dtype
  kSign = 1,  // signed integers: sign-extended (int8 -1 stays -1)
  kZero = 2,  // bool and unsigned integers: zero-extended (uint8 255 is 255)
};

struct DTypeTraits {
  int size;               // bytes per element; 0 for kUnspecified and unknown values
  const char* name;       // as numpy and torch spell it; "unspecified" for unknown values
  const char* npy_descr;  // the .npy header's descr written for it; "" where numpy has none
  Widen widen;            // kNone: labels may not have this dtype
  int64_t padding_label;  // the label of a padding slot: -1 signed, 0 bool/unsigned
};

// The table, one row per dtype. A switch rather than an array so that device code can use it
// without a copy in device memory (it folds to a constant wherever the dtype is known).
GPUSAMPLER_HD constexpr DTypeTraits Traits(DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return {1, "bool", "|b1", Widen::kZero, 0};
    case DType::kInt8:
      return {1, "int8", "|i1", Widen::kSign, -1};
    case DType::kUInt8:
      return {1, "uint8", "|u1", Widen::kZero, 0};
    case DType::kInt16:
      return {2, "int16", "<i2", Widen::kSign, -1};
    case DType::kInt32:
      return {4, "int32", "<i4", Widen::kSign, -1};
    case DType::kInt64:
      return {8, "int64", "<i8", Widen::kSign, -1};
    case DType::kFloat16:
      return {2, "float16", "<f2", Widen::kNone, 0};
    case DType::kBFloat16:
      return {2, "bfloat16", "", Widen::kNone, 0};  // numpy has no bfloat16
    case DType::kFloat32:
      return {4, "float32", "<f4", Widen::kNone, 0};
    case DType::kFloat64:
      return {8, "float64", "<f8", Widen::kNone, 0};
    default:
      return {0, "unspecified", "", Widen::kNone, 0};
  }
}

GPUSAMPLER_HD constexpr int DTypeSize(DType dtype) { return Traits(dtype).size; }
GPUSAMPLER_HD constexpr bool IsLabel(DType dtype) { return Traits(dtype).widen != Widen::kNone; }

// The dtype named `name` (Traits(dtype).name, "int64", "bfloat16", ...); false when unknown.
inline bool ParseDType(std::string_view name, DType* out) {
  for (int v = 1; v < kNumDTypes; ++v) {
    if (name == Traits(static_cast<DType>(v)).name) {
      *out = static_cast<DType>(v);
      return true;
    }
  }
  return false;
}

// Whether `value` is representable in the label dtype (BOOL: 0 or 1); false for a dtype labels
// may not have.
GPUSAMPLER_HD constexpr bool LabelRepresentable(DType dtype, int64_t value) {
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

// How every label dtype is widened, in one place for every loader (the CPU backend's portable,
// AVX2 and AVX-512 paths and the GPU pipeline): LabelWord is the C++ type whose conversion to
// int64 is the table's widening of a label of that width and rule. A label dtype with a width
// or rule no loader implements fails to compile here, not silently at run time.
template <int kSize, Widen kRule>
struct LabelWord {
  static_assert(kSize == 1 || kSize == 2 || kSize == 4 || kSize == 8,
                "no label loader implements this width");
  static_assert(kRule == Widen::kSign || kRule == Widen::kZero,
                "no label loader implements this widening rule");
  using Signed = std::conditional_t<
      kSize == 1, int8_t,
      std::conditional_t<kSize == 2, int16_t, std::conditional_t<kSize == 4, int32_t, int64_t>>>;
  using type = std::conditional_t<kRule == Widen::kSign, Signed, std::make_unsigned_t<Signed>>;
};
template <DType kDType>
using LabelWordOf = typename LabelWord<Traits(kDType).size, Traits(kDType).widen>::type;

namespace detail {
template <DType kDType, class Fn>
GPUSAMPLER_HD bool CallWithLabelWord(Fn& fn) {
  if constexpr (IsLabel(kDType)) {
    fn(LabelWordOf<kDType>{});
    return true;
  } else {
    return false;
  }
}
template <class Fn, size_t... kDTypes>
GPUSAMPLER_HD bool WithLabelWord(DType dtype, Fn& fn, std::index_sequence<kDTypes...>) {
  return ((dtype == static_cast<DType>(kDTypes) &&
           CallWithLabelWord<static_cast<DType>(kDTypes)>(fn)) ||
          ...);
}
}  // namespace detail

// Calls fn(LabelWordOf<dtype>{}) (a value of the label word type, as a tag) and returns true;
// false (fn not called) when `dtype` is not a label dtype.
template <class Fn>
GPUSAMPLER_HD bool WithLabelWord(DType dtype, Fn&& fn) {
  return detail::WithLabelWord(dtype, fn, std::make_index_sequence<kNumDTypes>{});
}

}  // namespace gpusampler::kernels
