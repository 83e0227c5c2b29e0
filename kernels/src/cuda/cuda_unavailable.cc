// The CUDA device of a build without the CUDA backend: queries report no device, everything
// else throws Error(kUnavailable).
#include "device/device_impl.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

[[noreturn]] void Unavailable() {
  throw Error(Error::Code::kUnavailable, "gpusampler was built without the CUDA backend");
}

class UnavailableCuda final : public DeviceImpl {
 public:
  bool OwnsStream(const void*) const override { return true; }
  bool OwnsMemory(const void*) const override { return true; }
  std::unique_ptr<Backend> MakeBackend(int) const override { Unavailable(); }
  DeviceInfo Info(int) const override { Unavailable(); }
  void* Alloc(int, size_t) const override { Unavailable(); }
  void Free(void*) const noexcept override {}
  void* PinnedAlloc(int, size_t) const override { Unavailable(); }
  void PinnedFree(void*) const noexcept override {}
  void BindThread(int) const override { Unavailable(); }
  void CopyToDevice(int, void*, const void*, size_t) const override { Unavailable(); }
  void CopyAsync(void*, const void*, size_t, void*) const override { Unavailable(); }
  void MemsetAsync(void*, int, size_t, void*) const override { Unavailable(); }
  void EnqueueHostCallback(void*, std::function<void(const std::string&)>) const override {
    Unavailable();
  }
  void Synchronize(void*) const override { Unavailable(); }
  int64_t Operations(void*) const override { return -1; }
  void GraphLaunch(void*, void**, const std::function<void()>&) const override { Unavailable(); }
  void GraphDestroy(void*) const noexcept override {}
  void GraphReplay(void*, void*) const override { Unavailable(); }
  void TimerCreate(void*, void**, void**) const override { Unavailable(); }
  void TimerDestroy(void*, void*) const noexcept override {}
  void TimerRecord(void*, void*) const override { Unavailable(); }
  float TimerElapsedMs(void*, void*, void*) const override { Unavailable(); }
};

}  // namespace

bool CudaCompiled() { return false; }
int CudaDeviceCount() { return 0; }
std::string CudaUnavailableReason() {
  return "this build has no CUDA backend (configured without nvcc; use the CUDA image or "
         "build with the CUDA toolkit)";
}

const DeviceImpl& CudaDeviceImpl() {
  static const UnavailableCuda device;
  return device;
}

}  // namespace gpusampler::kernels
