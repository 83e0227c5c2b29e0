// Host byte buffers that start on a cache-line boundary.
//
// A feature row of 64 bytes (16 float32) in a buffer that starts 16 bytes past a line, as a
// plain std::vector<uint8_t> of a few hundred megabytes does (glibc places large blocks at
// an mmap page + 16), spans two cache lines: the random feature gather then misses twice per
// row. Measured at B = 32 x N = 1e5, K = 1e4, D = 16, 2 threads (docs/decisions.md K4):
// 4.8-5.0 ms from an aligned buffer, 5.5-5.9 ms from one at +16 bytes. Buffers the sampler
// reads rows from (resident datasets, benchmark inputs) use HostBytes; PyTorch's CPU
// allocator aligns its tensors the same way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

namespace gpusampler::kernels {

inline constexpr std::size_t kCacheLineBytes = 64;

// A std::allocator that aligns every block to kCacheLineBytes. Stateless and thread-safe.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  constexpr CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLineBytes});
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

// Bytes whose data() is a multiple of kCacheLineBytes (when not empty).
using HostBytes = std::vector<uint8_t, CacheLineAllocator<uint8_t>>;

// A std::allocator whose construct without arguments default-initializes: resize() of a
// vector of a trivial type leaves the new elements unwritten, so a buffer sized for the worst
// case costs only the pages that are written. Scratch for the candidates of a 64M-label row
// is 512 MiB per class, of which a launch writes a few pages per chunk: zeroing all of it
// was 0.95 s of page faults in the first sample of such a row (docs/decisions.md S18).
// Stateless and thread-safe.
template <typename T>
struct DefaultInitAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() = default;
  template <typename U>
  constexpr DefaultInitAllocator(const DefaultInitAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

// Scratch whose resize() does not write the new elements (DefaultInitAllocator): only for
// elements that are written before they are read.
template <typename T>
using ScratchVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace gpusampler::kernels
