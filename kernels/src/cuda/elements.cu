// elements.hpp on a CUDA device: one thread per slot runs the slot body (Feistel position,
// member, label and feature row) over the device-resident member lists and dataset, on the
// calling thread's per-thread default stream (no implicit synchronization with the workers'
// streams), then one copy back.
#include <cuda_runtime_api.h>

#include <memory>

#include "cuda/device_guard.cuh"
#include "cuda/error.cuh"
#include "device/elements_cuda.hpp"

namespace gpusampler::kernels::detail {
namespace {

__global__ void ElementsStepKernel(const ElementsClass* classes, int num_classes, FeistelKey key,
                                   int64_t g, int64_t slots, const uint8_t* labels,
                                   size_t label_bytes, const uint8_t* features,
                                   size_t feature_row_bytes, int64_t* out_indices,
                                   uint8_t* out_labels, uint8_t* out_features) {
  const int64_t s = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (s >= slots) return;
  ElementsSlot(classes, num_classes, key, g, labels, label_bytes, features, feature_row_bytes, s,
               out_indices, out_labels, out_features);
}

// The step's buffers come from the stream-ordered allocator: cudaFree would synchronize the
// whole device (every worker's stream) once per step.
struct FreeAsync {
  void operator()(void* p) const noexcept {
    GPUSAMPLER_CUDA_TRY_NO_THROW(cudaFreeAsync(p, cudaStreamPerThread));
  }
};

}  // namespace

void ElementsStepCuda(int device, const ElementsStepArgs& a, ElementsStepOut* out) {
  ScopedDevice guard(device);
  const size_t slots = static_cast<size_t>(a.slots);
  const size_t table = a.classes.size() * sizeof(ElementsClass);
  const size_t idx = slots * sizeof(int64_t);
  const size_t lab = a.labels ? slots * a.label_bytes : 0;
  const size_t fea = a.features ? slots * a.feature_row_bytes : 0;
  const size_t total = table + idx + lab + fea;
  const cudaStream_t stream = cudaStreamPerThread;
  void* raw = nullptr;
  GPUSAMPLER_CUDA_TRY(cudaMallocAsync(&raw, total, stream));
  std::unique_ptr<uint8_t, FreeAsync> buf(static_cast<uint8_t*>(raw));
  uint8_t* p = buf.get();
  GPUSAMPLER_CUDA_TRY(cudaMemcpyAsync(p, a.classes.data(), table, cudaMemcpyHostToDevice, stream));
  auto* indices = reinterpret_cast<int64_t*>(p + table);  // table is a multiple of 8
  uint8_t* labels = p + table + idx;
  uint8_t* features = labels + lab;
  constexpr int kThreads = 256;
  const unsigned blocks = static_cast<unsigned>((a.slots + kThreads - 1) / kThreads);
  ElementsStepKernel<<<blocks, kThreads, 0, stream>>>(
      reinterpret_cast<const ElementsClass*>(p), static_cast<int>(a.classes.size()), a.key, a.g,
      a.slots, a.labels, a.label_bytes, a.features, a.feature_row_bytes, indices, labels, features);
  GPUSAMPLER_CUDA_CHECK_LAST();
  // The outputs copied back straight into the caller's buffers (no host staging copy).
  GPUSAMPLER_CUDA_TRY(
      cudaMemcpyAsync(out->indices.data(), indices, idx, cudaMemcpyDeviceToHost, stream));
  if (lab > 0) {
    GPUSAMPLER_CUDA_TRY(
        cudaMemcpyAsync(out->labels.data(), labels, lab, cudaMemcpyDeviceToHost, stream));
  }
  if (fea > 0) {
    GPUSAMPLER_CUDA_TRY(
        cudaMemcpyAsync(out->features.data(), features, fea, cudaMemcpyDeviceToHost, stream));
  }
  GPUSAMPLER_CUDA_TRY(cudaStreamSynchronize(stream));
}

void ElementsCopyToHostCuda(int device, void* dst, const void* src, size_t bytes) {
  ScopedDevice guard(device);
  GPUSAMPLER_CUDA_TRY(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

}  // namespace gpusampler::kernels::detail
