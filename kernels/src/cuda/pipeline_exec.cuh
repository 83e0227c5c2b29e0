// The device executor of the GPU pipeline (pipeline/pipeline.hpp): a body runs as one
// __global__ kernel of kThreads-thread blocks; Threads() is the thread's part of a phase and
// a __syncthreads(); block sorts are cub::BlockRadixSort; atomics are atomicAdd. Loads and
// stores are plain (the counting is cuda-sim's).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include <cub/block/block_radix_sort.cuh>

#include "cuda/error.cuh"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels::pipeline {

struct DeviceBlock {
  template <class T, int kN>
  struct Items {
    T v[kN];
  };
  template <class T, int kN>
  __device__ __forceinline__ T* Mine(Items<T, kN>& items, int /*t*/) {
    return items.v;
  }
  template <class F>
  __device__ __forceinline__ void Threads(F&& f) {
    f(static_cast<int>(threadIdx.x));
    __syncthreads();
  }
  template <class T>
  __device__ __forceinline__ T& SharedAs() {
    __shared__ alignas(T) unsigned char raw[sizeof(T)];
    return *reinterpret_cast<T*>(raw);
  }
  template <int kN>
  __device__ __forceinline__ void SortKeys(Items<uint64_t, kN>& items, int end_bit) {
    using Sort = cub::BlockRadixSort<uint64_t, kThreads, kN>;
    __shared__ typename Sort::TempStorage temp;
    Sort(temp).Sort(items.v, 0, end_bit);
    __syncthreads();
  }
  template <class T>
  __device__ __forceinline__ T Load(const T* p) {
    return *p;
  }
  template <class T>
  __device__ __forceinline__ void Store(T* p, T value) {
    *p = value;
  }
  template <class T>
  __device__ __forceinline__ T LoadFeature(const T* p) {
    return *p;
  }
  template <class T>
  __device__ __forceinline__ void StoreFeature(T* p, T value) {
    *p = value;
  }
  __device__ __forceinline__ int32_t GlobalAdd(int32_t* p, int32_t value) {
    return atomicAdd(p, value);
  }
  __device__ __forceinline__ unsigned long long GlobalAdd(unsigned long long* p,
                                                          unsigned long long value) {
    return atomicAdd(p, value);
  }
  __device__ __forceinline__ int32_t SharedAdd(int32_t* p, int32_t value) {
    return atomicAdd(p, value);
  }
  __device__ __forceinline__ void CountPhilox(int64_t /*calls*/) {}
};

template <class Body>
__global__ void __launch_bounds__(kThreads) RunBody(Body body) {
  DeviceBlock b;
  body(b, static_cast<int64_t>(blockIdx.x));
}

class CudaExec {
 public:
  explicit CudaExec(cudaStream_t stream) : stream_(stream) {}

  template <class Body>
  void Launch(const Body& body, int64_t blocks) {
    if (blocks <= 0) return;
    RunBody<Body><<<static_cast<unsigned>(blocks), kThreads, 0, stream_>>>(body);
    GPUSAMPLER_CUDA_CHECK_LAST();
  }

 private:
  cudaStream_t stream_;
};

}  // namespace gpusampler::kernels::pipeline
