// One device behind device.hpp. device.hpp's functions are the API; a DeviceImpl is what a
// kind of device does for them. There are two: the cuda-sim device (sim/sim_device.cc: its
// streams, its memory, its backend) and the CUDA device (cuda/device.cu, or
// cuda/cuda_unavailable.cc in a build without CUDA, where every call throws Error(kUnavailable)).
// device.cc only picks one per call — by device index, or by whether the simulator owns the
// stream or pointer — and forwards, so it knows neither the simulator's nor CUDA's insides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {

inline constexpr int kCurrentDevice = -2;  // PinnedAlloc(bytes): no device made current

class DeviceImpl {
 public:
  virtual ~DeviceImpl() = default;

  // Whether this device made `stream` / allocated `ptr` (the CUDA device owns all others).
  virtual bool OwnsStream(const void* stream) const = 0;
  virtual bool OwnsMemory(const void* ptr) const = 0;

  virtual std::unique_ptr<Backend> MakeBackend(int device) const = 0;
  virtual DeviceInfo Info(int device) const = 0;
  virtual void* Alloc(int device, size_t bytes) const = 0;
  virtual void Free(void* ptr) const noexcept = 0;
  // With `device` current during the call, or whichever is current for kCurrentDevice.
  virtual void* PinnedAlloc(int device, size_t bytes) const = 0;
  virtual void PinnedFree(void* ptr) const noexcept = 0;
  virtual void BindThread(int device) const = 0;
  virtual void CopyToDevice(int device, void* dst, const void* src, size_t bytes) const = 0;

  virtual void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) const = 0;
  virtual void MemsetAsync(void* dst, int value, size_t bytes, void* stream) const = 0;
  virtual void EnqueueHostCallback(void* stream,
                                   std::function<void(const std::string& error)> fn) const = 0;
  virtual void Synchronize(void* stream) const = 0;
  virtual int64_t Operations(void* stream) const = 0;

  // StreamGraph: capture of `enqueue` on `stream`, updated into or instantiated as *exec,
  // then launched; GraphDestroy releases *exec.
  virtual void GraphLaunch(void* stream, void** exec,
                           const std::function<void()>& enqueue) const = 0;
  virtual void GraphDestroy(void* exec) const noexcept = 0;
  // StreamGraph::Replay: launches `exec` (from GraphLaunch) again without capturing.
  virtual void GraphReplay(void* stream, void* exec) const = 0;
  // StreamTimer's two events on `stream`.
  virtual void TimerCreate(void* stream, void** start, void** stop) const = 0;
  virtual void TimerDestroy(void* start, void* stop) const noexcept = 0;
  virtual void TimerRecord(void* event, void* stream) const = 0;
  virtual float TimerElapsedMs(void* stream, void* start, void* stop) const = 0;
};

const DeviceImpl& SimDeviceImpl();   // sim/sim_device.cc
const DeviceImpl& CudaDeviceImpl();  // cuda/device.cu, or cuda/cuda_unavailable.cc

}  // namespace gpusampler::kernels
