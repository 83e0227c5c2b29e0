// Makes a device current for a scope and restores the caller's device afterwards, so that
// the backend works from any thread whatever device that thread had selected.
#pragma once

#include <cuda.h>  // types only (CUcontext, CUresult): the driver is reached via the runtime
#include <cuda_runtime_api.h>

#include "cuda/error.cuh"

namespace gpusampler::kernels::detail {

// Whether the calling thread has a CUDA context current. cudaGetDevice answers 0 on a thread
// that never used CUDA, and cudaSetDevice(0) would then create (initialise) the primary
// context of GPU 0: a server serving only cuda:1 would hold memory on GPU 0 and make it
// visible to its users. The driver's cuCtxGetCurrent tells the two cases apart; it is
// fetched through the runtime so that the binary keeps no link-time dependency on
// libcuda. When it cannot be fetched the answer is "yes" (restore as before).
inline bool ThreadHasContext() {
  using CtxGetCurrent = CUresult (*)(CUcontext*);
  static const CtxGetCurrent get_current = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // non-sticky: must not leak into the next check
      fn = nullptr;
    }
    return reinterpret_cast<CtxGetCurrent>(fn);
  }();
  if (get_current == nullptr) return true;
  CUcontext context = nullptr;
  return get_current(&context) != CUDA_SUCCESS || context != nullptr;
}

class ScopedDevice {
 public:
  explicit ScopedDevice(int device) {
    GPUSAMPLER_CUDA_TRY(cudaGetDevice(&previous_));
    if (previous_ != device) {
      // Decided before cudaSetDevice, which makes `device`'s context current.
      restore_ = ThreadHasContext();
      GPUSAMPLER_CUDA_TRY(cudaSetDevice(device));
    }
  }
  ~ScopedDevice() {
    // A thread with no context before the scope is left on `device`: restoring "device 0"
    // there would create GPU 0's context for nothing.
    if (restore_) GPUSAMPLER_CUDA_TRY_NO_THROW(cudaSetDevice(previous_));
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

// The device `stream` belongs to (the current device for the legacy default stream).
inline int StreamDevice(cudaStream_t stream) {
  int device = 0;
  GPUSAMPLER_CUDA_TRY(cudaStreamGetDevice(stream, &device));
  return device;
}

}  // namespace gpusampler::kernels::detail
