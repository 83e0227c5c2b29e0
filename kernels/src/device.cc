// device.hpp and MakeCudaBackend: each call goes to the cuda-sim device (kSimDevice, its
// streams and memory; sim/sim_device.hpp) or to the CUDA runtime (cuda_api.hpp).
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <utility>

#include "cuda_api.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "sim/sim_device.hpp"

namespace gpusampler::kernels {
namespace {

using sim::AsSimStream;
using sim::IsSimStream;

// StreamTimer on a sim stream: the times at which the stream reached Start and Stop.
struct SimEvent {
  std::chrono::steady_clock::time_point at{};
};

}  // namespace

std::unique_ptr<Backend> MakeCudaBackend(int device) {
  if (device == kSimDevice) return sim::MakeStreamBackend();
  return cuda_api::MakeCudaBackend(device);
}

DeviceInfo GetDeviceInfo(int device) {
  if (device != kSimDevice) return cuda_api::GetDeviceInfo(device);
  DeviceInfo info;
  info.index = kSimDevice;
  info.name = "cuda-sim (the CUDA pipeline on the host)";
  info.uuid = "SIM-00000000-0000-0000-0000-000000000000";
  return info;
}

void* DeviceAlloc(int device, size_t bytes) {
  return device == kSimDevice ? sim::Alloc(bytes) : cuda_api::DeviceAlloc(device, bytes);
}

void DeviceFree(void* ptr) noexcept {
  if (sim::IsSimMemory(ptr)) {
    sim::Free(ptr);
  } else {
    cuda_api::DeviceFree(ptr);
  }
}

void* PinnedAlloc(size_t bytes) { return cuda_api::PinnedAlloc(bytes); }

void* PinnedAllocOn(int device, size_t bytes) {
  return device == kSimDevice ? sim::Alloc(bytes) : cuda_api::PinnedAllocOn(device, bytes);
}

void PinnedFree(void* ptr) noexcept {
  if (sim::IsSimMemory(ptr)) {
    sim::Free(ptr);
  } else {
    cuda_api::PinnedFree(ptr);
  }
}

void BindThreadToDevice(int device) {
  if (device != kSimDevice) cuda_api::BindThreadToDevice(device);
}

void CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  if (device != kSimDevice) {
    cuda_api::CopyToDevice(device, dst, src, bytes);
  } else if (bytes > 0) {
    std::memcpy(dst, src, bytes);
  }
}

void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (!IsSimStream(stream)) return cuda_api::CopyAsync(dst, src, bytes, stream);
  if (bytes == 0) return;
  AsSimStream(stream)->Enqueue([dst, src, bytes] { std::memcpy(dst, src, bytes); });
}

void MemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  if (!IsSimStream(stream)) return cuda_api::MemsetAsync(dst, value, bytes, stream);
  if (bytes == 0) return;
  AsSimStream(stream)->Enqueue([dst, value, bytes] { std::memset(dst, value, bytes); });
}

void EnqueueHostCallback(void* stream, std::function<void(const std::string& error)> fn) {
  if (!IsSimStream(stream)) return cuda_api::EnqueueHostCallback(stream, std::move(fn));
  AsSimStream(stream)->EnqueueCallback(std::move(fn));
}

void StreamSynchronize(void* stream) {
  if (!IsSimStream(stream)) return cuda_api::StreamSynchronize(stream);
  AsSimStream(stream)->Synchronize();
}

int64_t StreamOperations(void* stream) {
  return IsSimStream(stream) ? AsSimStream(stream)->operations() : -1;
}

StreamGraph::StreamGraph(void* stream) : stream_(stream) {}

StreamGraph::~StreamGraph() { Reset(); }

void StreamGraph::Reset() noexcept {
  if (!IsSimStream(stream_)) cuda_api::GraphDestroy(exec_);
  exec_ = nullptr;
}

void StreamGraph::Launch(const std::function<void()>& enqueue) {
  if (!IsSimStream(stream_)) return cuda_api::GraphLaunch(stream_, &exec_, enqueue);
  sim::SimStream* stream = AsSimStream(stream_);
  stream->BeginCapture();
  try {
    enqueue();
  } catch (...) {
    stream->EndCapture(/*launch=*/false);
    throw;
  }
  stream->EndCapture(/*launch=*/true);
  exec_ = stream_;  // "instantiated": nothing to keep on the host
}

StreamTimer::StreamTimer(void* stream) : stream_(stream) {
  if (IsSimStream(stream)) {
    start_ = new SimEvent;
    stop_ = new SimEvent;
  } else {
    cuda_api::TimerCreate(stream, &start_, &stop_);
  }
}

StreamTimer::~StreamTimer() {
  if (IsSimStream(stream_)) {
    delete static_cast<SimEvent*>(start_);
    delete static_cast<SimEvent*>(stop_);
  } else {
    cuda_api::TimerDestroy(start_, stop_);
  }
}

void StreamTimer::Start() {
  if (!IsSimStream(stream_)) return cuda_api::TimerRecord(start_, stream_);
  auto* event = static_cast<SimEvent*>(start_);
  AsSimStream(stream_)->Enqueue([event] { event->at = std::chrono::steady_clock::now(); });
}

void StreamTimer::Stop() {
  if (!IsSimStream(stream_)) return cuda_api::TimerRecord(stop_, stream_);
  auto* event = static_cast<SimEvent*>(stop_);
  AsSimStream(stream_)->Enqueue([event] { event->at = std::chrono::steady_clock::now(); });
}

float StreamTimer::ElapsedMs() {
  if (!IsSimStream(stream_)) return cuda_api::TimerElapsedMs(start_, stop_);
  AsSimStream(stream_)->Synchronize();
  return std::chrono::duration<float, std::milli>(static_cast<SimEvent*>(stop_)->at -
                                                  static_cast<SimEvent*>(start_)->at)
      .count();
}

}  // namespace gpusampler::kernels
