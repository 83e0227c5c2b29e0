// Bulk key generation and sorting helpers of the CPU backend. Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

namespace gpusampler::kernels::cpu {

// Elements per call of the tile generator: 64 Philox calls (four elements each).
inline constexpr int kTileElements = 256;

// out[j] = ElementKey(seed, row, stream, first + j) for the kTileElements elements from
// `first` (a multiple of 4): N / 4 Philox calls for N elements. Vectorized (AVX-512 / AVX2 /
// portable, chosen at load time or by GPUSAMPLER_PHILOX_ISA).
void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);

// out[j] = ElementKey(seed, row, stream, indices[j]) for j < n: one call per element (the
// order keys of a selected set). The 64-bit version takes any index (tests pin SPEC
// section 1's high block words with it).
void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out);
void KeysOfElements64(uint64_t seed, uint32_t row, uint32_t stream, const uint64_t* indices,
                      int64_t n, uint32_t* out);

// The key generator's instruction set in use: "avx512", "avx2" or "portable".
const char* KeyIsaName();

// Whether FilterTile has a vector (AVX-512) version on this CPU.
bool HasVectorFilter();

// Adds to *np / *nq the labels equal to pos_label / neg_label among the n (a multiple of 8)
// labels at `labels`. Requires HasVectorFilter().
void CountLabels(int dtype_size, bool is_signed, const void* labels, int64_t n, int64_t pos_label,
                 int64_t neg_label, int64_t* np, int64_t* nq);

// The candidate filter on one full tile: for j < kTileElements, element first + j (label
// bytes at labels_tile, `dtype`) goes to pos_out (and *np grows) when its label equals
// pos_label and keys[j] < pos_bound, to neg_out likewise; entries are PackKey(key, index),
// in index order. Labels compare after widening to int64. Requires HasVectorFilter().
void FilterTile(int dtype_size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out, int64_t* nq);

// Sorts items by their high 32 bits, stably (so items already ordered by their low 32 bits
// end up ordered by the whole 64-bit value). `tmp` is scratch. `equal_top_bits` (< 16) says
// how many top bits all items share (a bucket of an earlier pass), so that the small-n
// bucket pass looks below them.
void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp, int equal_top_bits = 0);

}  // namespace gpusampler::kernels::cpu
