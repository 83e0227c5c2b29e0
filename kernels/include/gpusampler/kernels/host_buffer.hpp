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

#include <sys/mman.h>

namespace gpusampler::kernels {

inline constexpr std::size_t kCacheLineBytes = 64;

// Blocks of at least this many bytes are pages mapped for them alone, unmapped when freed, so
// that their memory goes back to the system at once. From glibc's heap, a freed large block
// stays in the process once glibc's dynamic mmap threshold has grown past its size (the first
// free of a mapped block raises it, up to 32 MiB), and only malloc_trim gives it back, which
// holds each arena's lock while it walks the heap: up to 90 ms per call under dataset
// eviction churn, stalling every thread that allocates meanwhile (docs/decisions.md S20).
// AddressSanitizer builds keep every block on the heap, where its redzones catch overruns.
inline constexpr std::size_t kMappedBlockBytes = std::size_t{1} << 20;
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kMapLargeBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kMapLargeBlocks = false;
#else
inline constexpr bool kMapLargeBlocks = true;
#endif
#else
inline constexpr bool kMapLargeBlocks = true;
#endif

// Whether CacheLineAllocator gives a block of `bytes` bytes pages of its own.
constexpr bool IsMappedBlock(std::size_t bytes) {
  return kMapLargeBlocks && bytes >= kMappedBlockBytes;
}

// Pages for `bytes` bytes (zeroed, page-aligned); throws std::bad_alloc. Thread-safe.
inline void* MapBlock(std::size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  return p;
}
inline void UnmapBlock(void* p, std::size_t bytes) noexcept { ::munmap(p, bytes); }

// A std::allocator that aligns every block to kCacheLineBytes; blocks of kMappedBlockBytes or
// more are mapped pages (page-aligned). Stateless and thread-safe.
template <typename T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <typename U>
  constexpr CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);  // n <= max_size(): std::vector checks
    if (IsMappedBlock(bytes)) return static_cast<T*>(MapBlock(bytes));
    return static_cast<T*>(::operator new (bytes, std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    const std::size_t bytes = n * sizeof(T);
    if (IsMappedBlock(bytes)) {
      UnmapBlock(p, bytes);
      return;
    }
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
