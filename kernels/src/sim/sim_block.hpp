// The host executor of the GPU pipeline ("cuda-sim"): pipeline.hpp's bodies run here block
// by block, and inside a block phase by phase; within a phase the threads run one after the
// other in a scrambled order (so a body whose threads depend on each other inside a phase
// gives wrong answers here too). Counts launches, global bytes and Philox calls.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "gpusampler/kernels/sampler.hpp"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels::sim {

// Visit order of threads within a phase: a fixed permutation of [0, kThreads).
inline int ThreadAt(int k) { return (k * 97 + 13) % pipeline::kThreads; }

class SimBlock {
 public:
  explicit SimBlock(LaunchStats* stats) : stats_(stats) {}

  // A thread's kN items (device: registers), uninitialized like registers.
  template <class T, int kN>
  struct Items {
    std::vector<T> v = std::vector<T>(pipeline::kThreads * kN, Garbage<T>());
  };
  template <class T, int kN>
  T* Mine(Items<T, kN>& items, int t) {
    return items.v.data() + static_cast<size_t>(t) * kN;
  }

  // One phase: f(t) for every thread, then the barrier.
  template <class F>
  void Threads(F&& f) {
    for (int k = 0; k < pipeline::kThreads; ++k) f(ThreadAt(k));
  }

  // The block's shared memory, as one object of type T (uninitialized, like the device's).
  template <class T>
  T& SharedAs() {
    static_assert(std::is_trivially_copyable_v<T> && std::is_trivially_destructible_v<T>);
    shared_.assign(sizeof(T) + alignof(std::max_align_t), 0xA5);
    void* at = shared_.data();
    size_t space = shared_.size();
    return *static_cast<T*>(std::align(alignof(T), sizeof(T), at, space));
  }

  // Sorts a block's kThreads * kN keys ascending into the blocked arrangement (item k of
  // thread t is rank t * kN + k), as cub::BlockRadixSort does over bits [0, end_bit): every
  // key must fit in end_bit bits, or the device would sort differently.
  template <int kN>
  void SortKeys(Items<uint64_t, kN>& items, int end_bit) {
    if (end_bit < 64) {
      const uint64_t limit = uint64_t{1} << end_bit;
      for (uint64_t key : items.v) {
        if (key >= limit) {
          throw std::logic_error("cuda-sim: a sort key has bits above end_bit " +
                                 std::to_string(end_bit));
        }
      }
    }
    std::sort(items.v.begin(), items.v.end());
  }

  template <class T>
  T Load(const T* p) {
    stats_->bytes_read += sizeof(T);
    return *p;
  }
  template <class T>
  void Store(T* p, T value) {
    stats_->bytes_written += sizeof(T);
    *p = value;
  }
  // Feature rows: counted apart (LaunchStats::feature_bytes).
  template <class T>
  T LoadFeature(const T* p) {
    stats_->feature_bytes += sizeof(T);
    return *p;
  }
  template <class T>
  void StoreFeature(T* p, T value) {
    stats_->feature_bytes += sizeof(T);
    *p = value;
  }
  // atomicAdd on global memory: a read and a write.
  template <class T>
  T GlobalAdd(T* p, T value) {
    stats_->bytes_read += sizeof(T);
    stats_->bytes_written += sizeof(T);
    const T old = *p;
    *p = old + value;
    return old;
  }
  template <class T>
  T SharedAdd(T* p, T value) {
    const T old = *p;
    *p = old + value;
    return old;
  }
  void CountPhilox(int64_t calls) { stats_->philox_calls += calls; }

 private:
  template <class T>
  static T Garbage() {
    T value;
    std::memset(&value, 0xA5, sizeof(T));
    return value;
  }

  LaunchStats* stats_;
  std::vector<unsigned char> shared_;
};

// Runs kernels on the host: blocks in reverse order (the device promises no order either).
class SimExec {
 public:
  explicit SimExec(LaunchStats* stats) : stats_(stats) {}

  template <class Body>
  void Launch(const Body& body, int64_t blocks) {
    ++stats_->launches;
    for (int64_t block = blocks - 1; block >= 0; --block) {
      SimBlock b(stats_);
      body(b, block);
    }
  }

 private:
  LaunchStats* stats_;
};

}  // namespace gpusampler::kernels::sim
