// device.hpp and MakeCudaBackend: each call goes to the device that owns its device index,
// stream or pointer — the cuda-sim device or the CUDA device — through their one interface
// (device_impl.hpp).
#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "device/device_impl.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

const DeviceImpl& OfDevice(int device) {
  return device == kSimDevice ? SimDeviceImpl() : CudaDeviceImpl();
}
const DeviceImpl& OfStream(const void* stream) {
  return SimDeviceImpl().OwnsStream(stream) ? SimDeviceImpl() : CudaDeviceImpl();
}
const DeviceImpl& OfMemory(const void* ptr) {
  return SimDeviceImpl().OwnsMemory(ptr) ? SimDeviceImpl() : CudaDeviceImpl();
}

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int device) {
  return OfDevice(device).MakeBackend(device);
}
DeviceInfo GetDeviceInfo(int device) { return OfDevice(device).Info(device); }

void* DeviceAlloc(int device, size_t bytes) { return OfDevice(device).Alloc(device, bytes); }
void DeviceFree(void* ptr) noexcept { OfMemory(ptr).Free(ptr); }
void* PinnedAlloc(size_t bytes) { return CudaDeviceImpl().PinnedAlloc(kCurrentDevice, bytes); }
void* PinnedAllocOn(int device, size_t bytes) {
  return OfDevice(device).PinnedAlloc(device, bytes);
}
void PinnedFree(void* ptr) noexcept { OfMemory(ptr).PinnedFree(ptr); }
void BindThreadToDevice(int device) { OfDevice(device).BindThread(device); }
void CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  OfDevice(device).CopyToDevice(device, dst, src, bytes);
}

void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  OfStream(stream).CopyAsync(dst, src, bytes, stream);
}
void MemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  OfStream(stream).MemsetAsync(dst, value, bytes, stream);
}
void EnqueueHostCallback(void* stream, std::function<void(const std::string& error)> fn) {
  OfStream(stream).EnqueueHostCallback(stream, std::move(fn));
}
void StreamSynchronize(void* stream) { OfStream(stream).Synchronize(stream); }
int64_t StreamOperations(void* stream) { return OfStream(stream).Operations(stream); }

StreamGraph::StreamGraph(void* stream) : stream_(stream) {}
StreamGraph::~StreamGraph() { Reset(); }
void StreamGraph::Reset() noexcept {
  OfStream(stream_).GraphDestroy(exec_);
  exec_ = nullptr;
}
void StreamGraph::Launch(const std::function<void()>& enqueue) {
  ++captures_;
  OfStream(stream_).GraphLaunch(stream_, &exec_, enqueue);
}
void StreamGraph::Replay() {
  if (exec_ == nullptr) {
    throw Error(Error::Code::kInternal, "StreamGraph::Replay: no graph is instantiated");
  }
  OfStream(stream_).GraphReplay(stream_, exec_);
}

StreamTimer::StreamTimer(void* stream) : stream_(stream) {
  OfStream(stream).TimerCreate(stream, &start_, &stop_);
}
StreamTimer::~StreamTimer() { OfStream(stream_).TimerDestroy(start_, stop_); }
void StreamTimer::Start() { OfStream(stream_).TimerRecord(start_, stream_); }
void StreamTimer::Stop() { OfStream(stream_).TimerRecord(stop_, stream_); }
float StreamTimer::ElapsedMs() { return OfStream(stream_).TimerElapsedMs(stream_, start_, stop_); }

}  // namespace gpusampler::kernels
