// Views of gpusampler::v1::Tensor: element sizes and names from the dtype table
// (gpusampler/kernels/dtype.hpp), element counts, and typed construction and reading.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::common {

// The dtype table's entry for a wire dtype (the two enums share their values; an unknown
// value gets the table's "unspecified" entry).
constexpr kernels::DTypeTraits Traits(v1::DType dtype) {
  return kernels::Traits(static_cast<kernels::DType>(dtype));
}

// Bytes per element; 0 for DTYPE_UNSPECIFIED or an unknown value.
inline int DTypeSize(v1::DType dtype) { return Traits(dtype).size; }
// Short lower-case name: "bool", "int8", ..., "bfloat16", "float64"; "unspecified" for
// DTYPE_UNSPECIFIED or an unknown value.
inline std::string_view DTypeName(v1::DType dtype) { return Traits(dtype).name; }
// Product of the dimensions (1 for a scalar shape).
int64_t NumElements(const v1::Tensor& tensor);

template <typename T>
constexpr v1::DType DTypeOf() {
  if constexpr (std::is_same_v<T, bool>) return v1::DTYPE_BOOL;
  if constexpr (std::is_same_v<T, int8_t>) return v1::DTYPE_INT8;
  if constexpr (std::is_same_v<T, uint8_t>) return v1::DTYPE_UINT8;
  if constexpr (std::is_same_v<T, int16_t>) return v1::DTYPE_INT16;
  if constexpr (std::is_same_v<T, int32_t>) return v1::DTYPE_INT32;
  if constexpr (std::is_same_v<T, int64_t>) return v1::DTYPE_INT64;
  if constexpr (std::is_same_v<T, float>) return v1::DTYPE_FLOAT32;
  if constexpr (std::is_same_v<T, double>) return v1::DTYPE_FLOAT64;
  return v1::DTYPE_UNSPECIFIED;
}

// A tensor of `shape` holding `values` (C order). The host must be little-endian, as
// every platform gpusampler builds on is.
template <typename T>
v1::Tensor MakeTensor(const std::vector<T>& values, const std::vector<int64_t>& shape) {
  static_assert(DTypeOf<T>() != v1::DTYPE_UNSPECIFIED, "unsupported element type");
  v1::Tensor tensor;
  tensor.set_dtype(DTypeOf<T>());
  for (int64_t d : shape) tensor.add_shape(d);
  std::string* data = tensor.mutable_data();
  data->resize(values.size() * sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < values.size(); ++i) (*data)[i] = values[i] ? 1 : 0;
  } else if (!values.empty()) {
    std::memcpy(data->data(), values.data(), data->size());
  }
  return tensor;
}

// The elements of `tensor` as T; empty unless its dtype is DTypeOf<T>().
template <typename T>
std::vector<T> TensorValues(const v1::Tensor& tensor) {
  std::vector<T> out;
  if (tensor.dtype() != DTypeOf<T>() || tensor.data().size() % sizeof(T) != 0) return out;
  out.resize(tensor.data().size() / sizeof(T));
  if constexpr (std::is_same_v<T, bool>) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = tensor.data()[i] != 0;
  } else if (!out.empty()) {
    std::memcpy(out.data(), tensor.data().data(), tensor.data().size());
  }
  return out;
}

}  // namespace gpusampler::common
