// The CUDA runtime side of device.hpp, and MakeCudaBackend's: implemented in cuda/*.cu, or
// in cuda_unavailable.cc (every call throws Error(kUnavailable)) in a build without CUDA.
// device.cc sends each call here or to the cuda-sim device (sim/sim_device.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels::cuda_api {

std::unique_ptr<Backend> MakeCudaBackend(int device);
DeviceInfo GetDeviceInfo(int device);
void* DeviceAlloc(int device, size_t bytes);
void DeviceFree(void* ptr) noexcept;
void* PinnedAlloc(size_t bytes);
void* PinnedAllocOn(int device, size_t bytes);
void PinnedFree(void* ptr) noexcept;
void BindThreadToDevice(int device);
void CopyToDevice(int device, void* dst, const void* src, size_t bytes);
void CopyAsync(void* dst, const void* src, size_t bytes, void* stream);
void MemsetAsync(void* dst, int value, size_t bytes, void* stream);
void EnqueueHostCallback(void* stream, std::function<void(const std::string& error)> fn);
void StreamSynchronize(void* stream);
// StreamGraph: capture of `enqueue` on `stream`, updated into or instantiated as *exec (a
// cudaGraphExec_t), then launched.
void GraphLaunch(void* stream, void** exec, const std::function<void()>& enqueue);
void GraphDestroy(void* exec) noexcept;
// StreamTimer's events.
void TimerCreate(void* stream, void** start, void** stop);
void TimerDestroy(void* start, void* stop) noexcept;
void TimerRecord(void* event, void* stream);
float TimerElapsedMs(void* start, void* stop);

}  // namespace gpusampler::kernels::cuda_api
