// The CUDA device of device_impl.hpp on the CUDA runtime, plus the CUDA availability queries of
// sampler.hpp.
#include <cuda_runtime_api.h>

#include <dlfcn.h>
#include <cstdio>

#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "device/device_impl.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace detail {
std::unique_ptr<Backend> MakeCudaRuntimeBackend(int device);  // cuda_backend.cu
}  // namespace detail
namespace {

cudaStream_t AsStream(void* stream) { return static_cast<cudaStream_t>(stream); }

// Host callbacks must not call the CUDA API, cudaGetErrorName included: the errors that can
// reach a stream callback are the sticky ones, named by their list (error.cuh).
std::string CallbackErrorName(cudaError_t status) {
  if (const detail::StickyCudaError* sticky = detail::FindStickyCudaError(status)) {
    return sticky->name;
  }
  return "cudaError(" + std::to_string(static_cast<int>(status)) + ")";
}

using HostCallback = std::function<void(const std::string& error)>;

void CUDART_CB RunHostCallback(cudaStream_t /*stream*/, cudaError_t status, void* user_data) {
  std::unique_ptr<HostCallback> fn(static_cast<HostCallback*>(user_data));
  // An exception must not unwind into the CUDA runtime's thread.
  try {
    (*fn)(status == cudaSuccess ? std::string() : CallbackErrorName(status));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpusampler: stream callback threw: %s\n", e.what());
  }
}

}  // namespace

// Whether the driver's library (libcuda.so.1) can be loaded at all: the static cudart
// loads it lazily, and without it every runtime call fails as "insufficient driver".
static bool DriverLibraryPresent() {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) return false;
  dlclose(h);
  return true;
}

bool CudaCompiled() { return true; }

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    // No driver or no device: not an error for a caller that falls back to the CPU. Clear
    // the (non-sticky) error so that later checks do not see it.
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::string CudaUnavailableReason() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0) return "";
  (void)cudaGetLastError();  // not sticky: later checks must not see it
  auto version = [](int v) {
    return v <= 0 ? std::string("none")
                  : std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
  };
  int driver = 0;
  (void)cudaDriverGetVersion(&driver);  // 0 when no driver is loaded
  if (driver <= 0 && !DriverLibraryPresent()) {
    // No driver at all: say so, rather than a version comparison that reads as "upgrade".
    std::string reason =
        "no NVIDIA driver found (libcuda.so.1 cannot be loaded); install the NVIDIA driver "
        "(>= 580 for this CUDA " +
        version(CUDART_VERSION) +
        " build), or in a container run with the NVIDIA container toolkit "
        "(NVIDIA_VISIBLE_DEVICES set)";
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    if (visible != nullptr) reason += "; CUDA_VISIBLE_DEVICES=\"" + std::string(visible) + "\"";
    return reason;
  }
  std::string reason;
  if (status != cudaSuccess) {
    reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(status) + " (" +
             cudaGetErrorString(status) + ")";
  } else {
    reason = "the CUDA driver reports no device";
  }
  reason += "; driver supports CUDA " + version(driver) + ", this build needs CUDA " +
            version(CUDART_VERSION) + " (NVIDIA driver >= 580 for CUDA 13)";
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr) reason += "; CUDA_VISIBLE_DEVICES=\"" + std::string(visible) + "\"";
  return reason;
}

namespace {
namespace runtime {

DeviceInfo GetDeviceInfo(int device) {
  if (device < 0 || device >= CudaDeviceCount()) {
    throw Error(Error::Code::kUnavailable, "CUDA device " + std::to_string(device) +
                                               " is absent (" + std::to_string(CudaDeviceCount()) +
                                               " present)");
  }
  cudaDeviceProp prop{};
  GPUSAMPLER_CUDA_TRY(cudaGetDeviceProperties(&prop, device));
  DeviceInfo info;
  info.index = device;
  info.name = prop.name;
  info.total_memory = prop.totalGlobalMem;
  const auto* b = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
  char uuid[64];
  std::snprintf(uuid, sizeof(uuid),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  info.uuid = uuid;
  return info;
}

void* DeviceAlloc(int device, size_t bytes) {
  detail::ScopedDevice guard(device);
  void* ptr = nullptr;
  GPUSAMPLER_CUDA_TRY(cudaMalloc(&ptr, bytes));
  return ptr;
}

void DeviceFree(void* ptr) noexcept {
  if (ptr != nullptr) GPUSAMPLER_CUDA_TRY_NO_THROW(cudaFree(ptr));
}

void* PinnedAlloc(int device, size_t bytes) {
  std::optional<detail::ScopedDevice> guard;
  if (device != kCurrentDevice) guard.emplace(device);
  void* ptr = nullptr;
  // Portable: a server may stage for several devices from one pool.
  GPUSAMPLER_CUDA_TRY(cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable));
  return ptr;
}

void BindThreadToDevice(int device) { GPUSAMPLER_CUDA_TRY(cudaSetDevice(device)); }

void PinnedFree(void* ptr) noexcept {
  if (ptr != nullptr) GPUSAMPLER_CUDA_TRY_NO_THROW(cudaFreeHost(ptr));
}

void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) {
  if (bytes == 0) return;
  detail::ScopedDevice guard(detail::StreamDevice(AsStream(stream)));
  GPUSAMPLER_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, AsStream(stream)));
}

void CopyToDevice(int device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  detail::ScopedDevice guard(device);
  GPUSAMPLER_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void MemsetAsync(void* dst, int value, size_t bytes, void* stream) {
  if (bytes == 0) return;
  detail::ScopedDevice guard(detail::StreamDevice(AsStream(stream)));
  GPUSAMPLER_CUDA_TRY(cudaMemsetAsync(dst, value, bytes, AsStream(stream)));
}

// cudaStreamAddCallback rather than cudaLaunchHostFunc: it runs the callback exactly once and
// passes the stream's error, whereas a host function is silently dropped after a device
// fault, which would leave the caller waiting forever (and leak `fn`).
void EnqueueHostCallback(void* stream, std::function<void(const std::string& error)> fn) {
  auto heap_fn = std::make_unique<HostCallback>(std::move(fn));
  detail::ScopedDevice guard(detail::StreamDevice(AsStream(stream)));
  GPUSAMPLER_CUDA_TRY(
      cudaStreamAddCallback(AsStream(stream), RunHostCallback, heap_fn.get(), /*flags=*/0));
  heap_fn.release();  // owned by RunHostCallback from now on
}

void StreamSynchronize(void* stream) {
  detail::ScopedDevice guard(detail::StreamDevice(AsStream(stream)));
  GPUSAMPLER_CUDA_TRY(cudaStreamSynchronize(AsStream(stream)));
}

// Capture is thread-local: another thread's CUDA calls (a second worker's) neither join
// nor break it. An update keeps the instantiated graph (and the driver's work of building
// it) whenever the new capture has the same nodes with new sizes or pointers; a different
// launch sequence (other stages) instantiates anew.
void GraphLaunch(void* stream, void** exec_io, const std::function<void()>& enqueue) {
  const cudaStream_t s = AsStream(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  GPUSAMPLER_CUDA_TRY(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaGraph_t graph = nullptr;
  try {
    enqueue();
  } catch (...) {
    if (cudaStreamEndCapture(s, &graph) == cudaSuccess && graph != nullptr) {
      GPUSAMPLER_CUDA_TRY_NO_THROW(cudaGraphDestroy(graph));
    }
    (void)cudaGetLastError();
    throw;
  }
  GPUSAMPLER_CUDA_TRY(cudaStreamEndCapture(s, &graph));
  struct GraphGuard {
    cudaGraph_t g;
    ~GraphGuard() { GPUSAMPLER_CUDA_TRY_NO_THROW(cudaGraphDestroy(g)); }
  } graph_guard{graph};
  auto exec = static_cast<cudaGraphExec_t>(*exec_io);
  if (exec != nullptr) {
    cudaGraphExecUpdateResultInfo info{};
    if (cudaGraphExecUpdate(exec, graph, &info) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: the topology changed
      GPUSAMPLER_CUDA_TRY_NO_THROW(cudaGraphExecDestroy(exec));
      exec = nullptr;
      *exec_io = nullptr;
    }
  }
  if (exec == nullptr) {
    GPUSAMPLER_CUDA_TRY(cudaGraphInstantiate(&exec, graph, 0));
    *exec_io = exec;
  }
  GPUSAMPLER_CUDA_TRY(cudaGraphLaunch(exec, s));
}

void GraphReplay(void* stream, void* exec) {
  const cudaStream_t s = AsStream(stream);
  detail::ScopedDevice guard(detail::StreamDevice(s));
  GPUSAMPLER_CUDA_TRY(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), s));
}

void GraphDestroy(void* exec) noexcept {
  if (exec != nullptr) {
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec)));
  }
}

void TimerCreate(void* stream, void** start_out, void** stop_out) {
  // Events must live on the stream's device to be recorded on it.
  detail::ScopedDevice guard(detail::StreamDevice(AsStream(stream)));
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  GPUSAMPLER_CUDA_TRY(cudaEventCreate(&start));
  const cudaError_t status = cudaEventCreate(&stop);
  if (status != cudaSuccess) {
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaEventDestroy(start));
    GPUSAMPLER_CUDA_TRY(status);
  }
  *start_out = start;
  *stop_out = stop;
}

void TimerDestroy(void* start, void* stop) noexcept {
  GPUSAMPLER_CUDA_TRY_NO_THROW(cudaEventDestroy(static_cast<cudaEvent_t>(start)));
  GPUSAMPLER_CUDA_TRY_NO_THROW(cudaEventDestroy(static_cast<cudaEvent_t>(stop)));
}

void TimerRecord(void* event, void* stream) {
  GPUSAMPLER_CUDA_TRY(cudaEventRecord(static_cast<cudaEvent_t>(event), AsStream(stream)));
}

float TimerElapsedMs(void* start, void* stop) {
  GPUSAMPLER_CUDA_TRY(cudaEventSynchronize(static_cast<cudaEvent_t>(stop)));
  float ms = 0.0f;
  GPUSAMPLER_CUDA_TRY(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(stop)));
  return ms;
}

}  // namespace runtime

class CudaDevice final : public DeviceImpl {
 public:
  bool OwnsStream(const void*) const override { return true; }
  bool OwnsMemory(const void*) const override { return true; }
  std::unique_ptr<Backend> MakeBackend(int device) const override {
    return detail::MakeCudaRuntimeBackend(device);
  }
  DeviceInfo Info(int device) const override { return runtime::GetDeviceInfo(device); }
  void* Alloc(int device, size_t bytes) const override {
    return runtime::DeviceAlloc(device, bytes);
  }
  void Free(void* ptr) const noexcept override { runtime::DeviceFree(ptr); }
  void* PinnedAlloc(int device, size_t bytes) const override {
    return runtime::PinnedAlloc(device, bytes);
  }
  void PinnedFree(void* ptr) const noexcept override { runtime::PinnedFree(ptr); }
  void BindThread(int device) const override { runtime::BindThreadToDevice(device); }
  void CopyToDevice(int device, void* dst, const void* src, size_t bytes) const override {
    runtime::CopyToDevice(device, dst, src, bytes);
  }
  void CopyAsync(void* dst, const void* src, size_t bytes, void* stream) const override {
    runtime::CopyAsync(dst, src, bytes, stream);
  }
  void MemsetAsync(void* dst, int value, size_t bytes, void* stream) const override {
    runtime::MemsetAsync(dst, value, bytes, stream);
  }
  void EnqueueHostCallback(void* stream,
                           std::function<void(const std::string& error)> fn) const override {
    runtime::EnqueueHostCallback(stream, std::move(fn));
  }
  void Synchronize(void* stream) const override { runtime::StreamSynchronize(stream); }
  int64_t Operations(void*) const override { return -1; }  // CUDA does not count them
  void GraphLaunch(void* stream, void** exec, const std::function<void()>& enqueue) const override {
    runtime::GraphLaunch(stream, exec, enqueue);
  }
  void GraphReplay(void* stream, void* exec) const override { runtime::GraphReplay(stream, exec); }
  void GraphDestroy(void* exec) const noexcept override { runtime::GraphDestroy(exec); }
  void TimerCreate(void* stream, void** start, void** stop) const override {
    runtime::TimerCreate(stream, start, stop);
  }
  void TimerDestroy(void* start, void* stop) const noexcept override {
    runtime::TimerDestroy(start, stop);
  }
  void TimerRecord(void* event, void* stream) const override {
    runtime::TimerRecord(event, stream);
  }
  float TimerElapsedMs(void*, void* start, void* stop) const override {
    return runtime::TimerElapsedMs(start, stop);
  }
};

}  // namespace

const DeviceImpl& CudaDeviceImpl() {
  static const CudaDevice device;
  return device;
}

}  // namespace gpusampler::kernels
