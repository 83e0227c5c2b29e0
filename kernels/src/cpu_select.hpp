// Bulk key generation and sorting helpers of the CPU backend. Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

namespace gpusampler::kernels::cpu {

// Elements per call of the vectorized generator.
inline constexpr int kTileElements = 16;

// out[j] = ElementKey(seed, row, stream, first + j) for the kTileElements elements from
// `first`. Vectorized (AVX-512 / AVX2 / baseline chosen at load time).
void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);

// out[j] = ElementKey(seed, row, stream, indices[j]) for j < n <= kTileElements.
void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices, int n,
                    uint32_t* out);

// Sorts items by their high 32 bits, stably (so items already ordered by their low 32 bits
// end up ordered by the whole 64-bit value). `tmp` is scratch.
void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp);

}  // namespace gpusampler::kernels::cpu
