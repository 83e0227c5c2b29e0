// Device-side copies for resident datasets (device.hpp): span copies into a launch's staged
// labels, and the feature gather of the sampled rows.
#include <cuda_runtime_api.h>

#include <algorithm>

#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

constexpr int kThreads = 256;

// One block per span (grid-strided over spans), its threads over the bytes: spans are label
// rows, from a few bytes to megabytes.
__global__ void CopySpansKernel(const CopySpan* spans, int64_t n, const uint8_t* src,
                                uint8_t* dst) {
  for (int64_t j = blockIdx.x; j < n; j += gridDim.x) {
    const CopySpan s = spans[j];
    const uint8_t* from = src + s.src_offset;
    uint8_t* to = dst + s.dst_offset;
    for (int64_t b = threadIdx.x; b < s.bytes; b += blockDim.x) to[b] = from[b];
  }
}

// One warp per output slot, its lanes over the row's bytes.
__global__ void GatherFeatureRowsKernel(const int64_t* indices, const int64_t* row_start,
                                        int64_t rows, int64_t k, int64_t row_bytes,
                                        const uint8_t* features, uint8_t* out) {
  const int64_t warps = static_cast<int64_t>(gridDim.x) * (blockDim.x / 32);
  const int lane = threadIdx.x % 32;
  for (int64_t slot = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
       slot < rows * k; slot += warps) {
    const int64_t i = indices[slot];
    uint8_t* to = out + slot * row_bytes;
    if (i < 0) {
      for (int64_t b = lane; b < row_bytes; b += 32) to[b] = 0;
      continue;
    }
    const uint8_t* from = features + (row_start[slot / k] + i) * row_bytes;
    for (int64_t b = lane; b < row_bytes; b += 32) to[b] = from[b];
  }
}

int Blocks(int64_t work, int64_t per_block) {
  return static_cast<int>(std::clamp<int64_t>((work + per_block - 1) / per_block, 1, 65535));
}

}  // namespace

void CopySpansAsync(const CopySpan* d_spans, int64_t n, const uint8_t* src, uint8_t* dst,
                    void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  CopySpansKernel<<<Blocks(n, 1), kThreads, 0, s>>>(d_spans, n, src, dst);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

void GatherFeatureRowsAsync(const int64_t* d_indices, const int64_t* d_row_start, int64_t rows,
                            int64_t k, int64_t row_bytes, const uint8_t* features, uint8_t* out,
                            void* stream) {
  if (rows == 0 || k == 0 || row_bytes == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  GatherFeatureRowsKernel<<<Blocks(rows * k, kThreads / 32), kThreads, 0, s>>>(
      d_indices, d_row_start, rows, k, row_bytes, features, out);
  GPUSAMPLER_CUDA_CHECK_LAST();
}

}  // namespace gpusampler::kernels
