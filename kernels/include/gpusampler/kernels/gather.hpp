// The feature gather: copies the selected elements' feature rows into their output slots.
// One implementation for the CPU backend (index-ordered, with slot targets) and the server's
// host gather (slot-ordered, from a request's own bytes). Host memory only; thread-safe on
// disjoint outputs; callers split large gathers over threads by range.
#pragma once

#include <cstdint>

namespace gpusampler::kernels {

// For j in [0, n): row src[j] of `in` (rows of `row_bytes` bytes) is copied to row
// dst_slot(j) of `out`, where dst_slot(j) = dst_slots[j], or j when dst_slots is null. A
// negative src[j] writes a zero row (padding). Source rows are prefetched 64 ahead, so a
// caller that can pass src in increasing order (a forward sweep) should: the prefetchers
// follow it, and an uncached random gather is bound by cache and TLB misses.
//
// `stores`: kCached writes the rows with plain stores, so a reader that follows finds them in
// cache. kStreaming writes rows whose width and destination are multiples of 16 bytes with
// non-temporal stores (other rows as kCached) and fences before it returns: no line of the
// output is read for ownership first, which for an uncached random gather of 64-byte rows
// moves a third less memory traffic (B = 32 x 1e5, K = 1e4, 2 threads: docs/decisions.md
// K4). For outputs larger than the caches, which a reader would fetch from DRAM anyway.
enum class RowStores { kCached, kStreaming };
void GatherRows(const uint32_t* src, const uint32_t* dst_slots, int64_t n, int64_t row_bytes,
                const uint8_t* in, uint8_t* out, RowStores stores = RowStores::kCached);
void GatherRows(const int64_t* src, const uint32_t* dst_slots, int64_t n, int64_t row_bytes,
                const uint8_t* in, uint8_t* out, RowStores stores = RowStores::kCached);

}  // namespace gpusampler::kernels
