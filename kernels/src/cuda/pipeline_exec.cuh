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
  // Shared memory: plain accesses (the counting and race checks are cuda-sim's).
  template <class T>
  __device__ __forceinline__ T SLoad(const T* p) {
    return *p;
  }
  template <class T>
  __device__ __forceinline__ void SStore(T* p, T value) {
    *p = value;
  }
  // Block radix sorts; the temp storage is the small sort's key and counter arrays (not in
  // use while the sort runs), so a body pays for one 41 KB buffer, not two.
  template <int kN>
  __device__ __forceinline__ void SortKeysStriped(Items<uint64_t, kN>& items, int end_bit,
                                                  SortShared* storage) {
    using Sort = cub::BlockRadixSort<uint64_t, kThreads, kN>;
    static_assert(
        sizeof(typename Sort::TempStorage) <= sizeof(storage->keys) + sizeof(storage->count),
        "cub's temp storage must fit the small sort's arrays");
    static_assert(alignof(typename Sort::TempStorage) <= alignof(SortShared),
                  "cub's temp storage needs more alignment than SortShared gives");
    Sort(*reinterpret_cast<typename Sort::TempStorage*>(storage->keys))
        .SortBlockedToStriped(items.v, 0, end_bit);
    __syncthreads();
  }
  // A bounded step overflowed: raise the launch's error flag (the host turns it into
  // INTERNAL); the body goes on without writing what overflowed.
  __device__ __forceinline__ void Fail(uint32_t* flag, uint32_t code, const char* /*what*/) {
    if (flag != nullptr) atomicOr(flag, code);
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

// Blocks per SM that a body's kernel must fit (__launch_bounds__' minimum): the tiles of
// Pass1 and Pass2 are sized for one wave of kResidentBlocks (params.hpp: 4 blocks on each of
// 132 SMs), which needs at most 64 registers per thread; the other stages, 1. The build checks
// what ptxas gives against this (resources_check.cu, check_resources.cmake).
template <class Body>
struct MinBlocksPerSm {
  static constexpr int value = 1;
};
template <>
struct MinBlocksPerSm<Pass1Body> {
  static constexpr int value = kResidentBlocksPerSm;
};
template <>
struct MinBlocksPerSm<Pass2Body> {
  static constexpr int value = kResidentBlocksPerSm;
};

template <class Body>
__global__ void __launch_bounds__(kThreads, MinBlocksPerSm<Body>::value) RunBody(Body body) {
  DeviceBlock b;
  body(b, static_cast<int64_t>(blockIdx.x));
}

class CudaExec {
 public:
  explicit CudaExec(cudaStream_t stream) : stream_(stream) {}

  // (cuda-sim poisons the scratch per launch; the device leaves it as it is)
  void Scratch(uint8_t* /*begin*/, size_t /*bytes*/) {}

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
