// The CUDA entry points of a build without the CUDA backend: queries report no device,
// everything else throws Error(kUnavailable).
#include "cuda_api.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {
namespace {
[[noreturn]] void Unavailable() {
  throw Error(Error::Code::kUnavailable, "gpusampler was built without the CUDA backend");
}
}  // namespace

bool CudaCompiled() { return false; }
int CudaDeviceCount() { return 0; }
std::string CudaUnavailableReason() {
  return "this build has no CUDA backend (configured without nvcc; use the CUDA image or "
         "build with the CUDA toolkit)";
}

namespace cuda_api {
std::unique_ptr<Backend> MakeCudaBackend(int) { Unavailable(); }
DeviceInfo GetDeviceInfo(int) { Unavailable(); }
void* DeviceAlloc(int, size_t) { Unavailable(); }
void DeviceFree(void*) noexcept {}
void* PinnedAlloc(size_t) { Unavailable(); }
void* PinnedAllocOn(int, size_t) { Unavailable(); }
void PinnedFree(void*) noexcept {}
void BindThreadToDevice(int) { Unavailable(); }
void CopyAsync(void*, const void*, size_t, void*) { Unavailable(); }
void CopyToDevice(int, void*, const void*, size_t) { Unavailable(); }
void MemsetAsync(void*, int, size_t, void*) { Unavailable(); }
void EnqueueHostCallback(void*, std::function<void(const std::string&)>) { Unavailable(); }
void StreamSynchronize(void*) { Unavailable(); }
void GraphLaunch(void*, void**, const std::function<void()>&) { Unavailable(); }
void GraphDestroy(void*) noexcept {}
void TimerCreate(void*, void**, void**) { Unavailable(); }
void TimerDestroy(void*, void*) noexcept {}
void TimerRecord(void*, void*) { Unavailable(); }
float TimerElapsedMs(void*, void*) { Unavailable(); }
}  // namespace cuda_api

}  // namespace gpusampler::kernels
