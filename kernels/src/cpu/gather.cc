#include "gpusampler/kernels/gather.hpp"

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace gpusampler::kernels {
namespace {

// Rows are prefetched kPrefetchRows ahead: when the features are not cached (a new batch
// every step), the gather waits on DRAM and page walks, and prefetching cut B = 32 x 1e5
// from 17.3 to 16.0 ms; when they are cached (the same row benchmarked again) it costs ~3%
// (docs/decisions.md K4). The prefetch touches the row's first and last byte: a row that
// does not start on a cache line (a request's own bytes) spans two lines, and fetching only
// the first left B = 32 x 1e5 at 5.9 ms against 5.5-5.7 ms with both.
constexpr int64_t kPrefetchRows = 64;

// Copies one row of `width` bytes; kStream: with non-temporal 16-byte stores when `dst` is
// 16-byte aligned and the width a multiple of 16 (SSE2, every x86-64 CPU).
template <bool kStream>
inline void CopyRow(uint8_t* dst, const uint8_t* src, int64_t width) {
#if defined(__x86_64__)
  if (kStream && width % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0) {
    for (int64_t b = 0; b < width; b += 16) {
      const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + b));
      _mm_stream_si128(reinterpret_cast<__m128i*>(dst + b), x);
    }
    return;
  }
#endif
  std::memcpy(dst, src, static_cast<size_t>(width));
}

// kBytes > 0: a copy of compile-time length (inlined moves instead of a memcpy call per
// row); 0: `bytes` at run time.
template <int64_t kBytes, bool kStream, typename Index>
void Copy(const Index* src, const uint32_t* dst_slots, int64_t n, int64_t bytes, const uint8_t* in,
          uint8_t* out) {
  const int64_t width = kBytes > 0 ? kBytes : bytes;
  for (int64_t j = 0; j < n; ++j) {
    if (j + kPrefetchRows < n) {
      const int64_t ahead = static_cast<int64_t>(src[j + kPrefetchRows]);
      if (!std::is_signed_v<Index> || ahead >= 0) {
        __builtin_prefetch(in + ahead * width);
        __builtin_prefetch(in + ahead * width + width - 1);
      }
    }
    const int64_t slot = dst_slots != nullptr ? int64_t{dst_slots[j]} : j;
    uint8_t* dst = out + slot * width;
    const int64_t i = static_cast<int64_t>(src[j]);
    if (std::is_signed_v<Index> && i < 0) {
      std::memset(dst, 0, static_cast<size_t>(width));
    } else {
      CopyRow<kStream>(dst, in + i * width, width);
    }
  }
#if defined(__x86_64__)
  // Non-temporal stores are weakly ordered: make them visible before the caller signals
  // that the output is ready.
  if (kStream) _mm_sfence();
#endif
}

// Copy<kWidth> for the first compile-time width equal to `bytes`, else Copy<0>.
template <bool kStream, int64_t... kWidths, typename Index>
void GatherWidths(const Index* src, const uint32_t* dst_slots, int64_t n, int64_t bytes,
                  const uint8_t* in, uint8_t* out) {
  const bool fixed =
      ((bytes == kWidths && (Copy<kWidths, kStream>(src, dst_slots, n, bytes, in, out), true)) ||
       ...);
  if (!fixed) Copy<0, kStream>(src, dst_slots, n, bytes, in, out);
}

template <typename Index>
void Gather(const Index* src, const uint32_t* dst_slots, int64_t n, int64_t bytes,
            const uint8_t* in, uint8_t* out, RowStores stores) {
  if (stores == RowStores::kStreaming) {
    GatherWidths<true, 4, 8, 16, 32, 64, 128>(src, dst_slots, n, bytes, in, out);
  } else {
    GatherWidths<false, 4, 8, 16, 32, 64, 128>(src, dst_slots, n, bytes, in, out);
  }
}

}  // namespace

void GatherRows(const uint32_t* src, const uint32_t* dst_slots, int64_t n, int64_t row_bytes,
                const uint8_t* in, uint8_t* out, RowStores stores) {
  Gather(src, dst_slots, n, row_bytes, in, out, stores);
}

void GatherRows(const int64_t* src, const uint32_t* dst_slots, int64_t n, int64_t row_bytes,
                const uint8_t* in, uint8_t* out, RowStores stores) {
  Gather(src, dst_slots, n, row_bytes, in, out, stores);
}

}  // namespace gpusampler::kernels
