// Device-side copies for resident datasets (device.hpp): span copies into a launch's staged
// labels, and the feature gather of the sampled rows. The bodies are pipeline.hpp's, which
// cuda-sim runs on the host.
#include <cuda_runtime_api.h>

#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "cuda/pipeline_exec.cuh"
#include "cuda_api.hpp"
#include "gpusampler/kernels/device.hpp"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels::cuda_api {

void CopySpansAsync(const CopySpan* d_spans, int64_t n, const uint8_t* src, uint8_t* dst,
                    void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  pipeline::CudaExec(s).Launch(pipeline::CopySpansBody{d_spans, src, dst}, n);
}

void GatherFeatureRowsAsync(const int64_t* d_indices, const int64_t* d_row_start, int64_t rows,
                            int64_t k, int64_t row_bytes, const uint8_t* features, uint8_t* out,
                            void* stream) {
  if (rows == 0 || k == 0 || row_bytes == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  pipeline::CudaExec(s).Launch(
      pipeline::GatherFeaturesBody{d_indices, d_row_start, rows, k, row_bytes, features, out},
      (rows * k + pipeline::kThreads - 1) / pipeline::kThreads);
}

}  // namespace gpusampler::kernels::cuda_api
