// CUDA error checking for the CUDA backend: every cudaError_t becomes a kernels::Error with
// file:line and the error's name, classified for the server (out of memory, sticky device
// fault, other).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdio>
#include <string>

#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels::detail {

// Errors after which the CUDA context is unusable until the process exits: every later call
// in the process fails, so the server must stop serving from this device. The one list: the
// classification below and the stream callbacks' error names (device.cu) read it. Names are
// spelled out because a host callback must not call the CUDA API (cudaGetErrorName included).
// Every error that driver_types.h says leaves the process unusable ("must be terminated and
// relaunched"), plus the uncorrectable ECC and NVLink errors (a GPU reset's business).
struct StickyCudaError {
  cudaError_t status;
  const char* name;
};
inline constexpr StickyCudaError kStickyCudaErrors[] = {
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure"},
    {cudaErrorLaunchTimeout, "cudaErrorLaunchTimeout"},
    {cudaErrorAssert, "cudaErrorAssert"},
    {cudaErrorHardwareStackError, "cudaErrorHardwareStackError"},
    {cudaErrorIllegalInstruction, "cudaErrorIllegalInstruction"},
    {cudaErrorMisalignedAddress, "cudaErrorMisalignedAddress"},
    {cudaErrorInvalidAddressSpace, "cudaErrorInvalidAddressSpace"},
    {cudaErrorInvalidPc, "cudaErrorInvalidPc"},
    {cudaErrorECCUncorrectable, "cudaErrorECCUncorrectable"},
    {cudaErrorNvlinkUncorrectable, "cudaErrorNvlinkUncorrectable"},
    {cudaErrorContained, "cudaErrorContained"},
    {cudaErrorTensorMemoryLeak, "cudaErrorTensorMemoryLeak"},
    {cudaErrorExternalDevice, "cudaErrorExternalDevice"},
    {cudaErrorMpsClientTerminated, "cudaErrorMpsClientTerminated"},
};

// The list's entry for `status`, or null when it is not sticky.
inline const StickyCudaError* FindStickyCudaError(cudaError_t status) {
  for (const StickyCudaError& e : kStickyCudaErrors) {
    if (e.status == status) return &e;
  }
  return nullptr;
}

inline bool IsStickyCudaError(cudaError_t status) { return FindStickyCudaError(status) != nullptr; }

inline Error::Code CudaErrorCode(cudaError_t status) {
  if (status == cudaErrorMemoryAllocation) return Error::Code::kOutOfMemory;
  if (IsStickyCudaError(status)) return Error::Code::kDeviceFault;
  return Error::Code::kInternal;
}

inline std::string CudaErrorMessage(cudaError_t status, const char* call, const char* file,
                                    int line) {
  return std::string(file) + ":" + std::to_string(line) + ": " + call +
         " failed: " + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) + ")";
}

// A failed runtime call also records its error as the thread's last error. A non-sticky one
// (out of memory, an invalid argument) must be cleared before throwing: otherwise the next
// GPUSAMPLER_CUDA_CHECK_LAST on this thread (the first launch of the request that the server
// reruns alone after out-of-memory) reports the stale error and fails a request that fits.
// A sticky error cannot be cleared and is left as it is. `clear` is cudaGetLastError; tests
// pass a recorder.
[[noreturn]] inline void ThrowCudaError(cudaError_t status, const char* call, const char* file,
                                        int line, cudaError_t (*clear)() = &cudaGetLastError) {
  if (!IsStickyCudaError(status) && clear != nullptr) (void)clear();
  throw Error(CudaErrorCode(status), CudaErrorMessage(status, call, file, line));
}

}  // namespace gpusampler::kernels::detail

// Evaluates a call returning cudaError_t and throws kernels::Error when it fails.
#define GPUSAMPLER_CUDA_TRY(call)                                                        \
  do {                                                                                   \
    const cudaError_t gpusampler_status_ = (call);                                       \
    if (gpusampler_status_ != cudaSuccess) {                                             \
      ::gpusampler::kernels::detail::ThrowCudaError(gpusampler_status_, #call, __FILE__, \
                                                    __LINE__);                           \
    }                                                                                    \
  } while (0)

// After every <<<>>> launch: configuration errors are reported here, synchronously.
// cudaGetLastError also clears a non-sticky error so that it is not reported twice.
#define GPUSAMPLER_CUDA_CHECK_LAST() GPUSAMPLER_CUDA_TRY(cudaGetLastError())

// For destructors and other noexcept paths: prints the error to stderr instead of throwing.
#define GPUSAMPLER_CUDA_TRY_NO_THROW(call)                                      \
  do {                                                                          \
    const cudaError_t gpusampler_status_ = (call);                              \
    if (gpusampler_status_ != cudaSuccess) {                                    \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, \
                   cudaGetErrorName(gpusampler_status_));                       \
    }                                                                           \
  } while (0)
