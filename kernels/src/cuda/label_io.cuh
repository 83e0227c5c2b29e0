// Device-side reads and writes of labels in their wire dtype (little-endian, as the device).
#pragma once

#include <cstdint>
#include <cstring>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels::detail {

// Bytes of one label; 0 for dtypes labels may not have (their rows are all "ignored").
__device__ __forceinline__ int LabelItemSize(DType dtype) {
  switch (dtype) {
    case DType::kBool:
    case DType::kInt8:
    case DType::kUInt8:
      return 1;
    case DType::kInt16:
      return 2;
    case DType::kInt32:
      return 4;
    case DType::kInt64:
      return 8;
    default:
      return 0;
  }
}

// Rows of different dtypes are packed back to back in one buffer, so a label need not be
// aligned to its size.
template <typename T>
__device__ __forceinline__ T LoadUnaligned(const uint8_t* p) {
  if (reinterpret_cast<uintptr_t>(p) % sizeof(T) == 0) return *reinterpret_cast<const T*>(p);
  T value;
  memcpy(&value, p, sizeof(T));
  return value;
}

// Label `i` of a row starting at `row_labels`, widened to int64 (BOOL reads its byte as
// 0/1, UINT8 zero-extends). Returns false for a dtype labels may not have.
__device__ __forceinline__ bool LoadLabel(const uint8_t* row_labels, DType dtype, int64_t i,
                                          int64_t* value) {
  switch (dtype) {
    case DType::kBool:
    case DType::kUInt8:
      *value = row_labels[i];
      return true;
    case DType::kInt8:
      *value = static_cast<int8_t>(row_labels[i]);
      return true;
    case DType::kInt16:
      *value = LoadUnaligned<int16_t>(row_labels + i * 2);
      return true;
    case DType::kInt32:
      *value = LoadUnaligned<int32_t>(row_labels + i * 4);
      return true;
    case DType::kInt64:
      *value = LoadUnaligned<int64_t>(row_labels + i * 8);
      return true;
    default:
      return false;
  }
}

// The padding label of SPEC section 1 as a byte pattern: -1 (all ones) for signed dtypes,
// 0 for UINT8 and BOOL.
__device__ __forceinline__ uint8_t PaddingLabelByte(DType dtype) {
  return (dtype == DType::kUInt8 || dtype == DType::kBool) ? 0x00 : 0xFF;
}

}  // namespace gpusampler::kernels::detail
