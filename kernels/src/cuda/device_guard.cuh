// Makes a device current for a scope and restores the caller's device afterwards, so that
// the backend works from any thread whatever device that thread had selected.
#pragma once

#include <cuda_runtime_api.h>

#include "cuda/error.cuh"

namespace gpusampler::kernels::detail {

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    GPUSAMPLER_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) {
      GPUSAMPLER_CUDA_TRY(cudaSetDevice(device));
      changed_ = true;
    }
  }
  ~ScopedDevice() {
    if (changed_) GPUSAMPLER_CUDA_TRY_NO_THROW(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

// The device `stream` belongs to (the current device for the legacy default stream).
inline int StreamDevice(cudaStream_t stream) {
  int device = 0;
  GPUSAMPLER_CUDA_TRY(cudaStreamGetDevice(stream, &device));
  return device;
}

}  // namespace gpusampler::kernels::detail
