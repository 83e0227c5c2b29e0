// The CPU backend's radix sorts of packed 64-bit keys. Not part of the public API.
#pragma once

#include <cstdint>
#include <vector>

namespace gpusampler::kernels::cpu {

// Sorts items by their high 32 bits, stably (so items already ordered by their low 32 bits
// end up ordered by the whole 64-bit value). `tmp` is scratch. `equal_top_bits` (< 16) says
// how many top bits all items share (a bucket of an earlier pass), so that the small-n
// bucket pass looks below them.
void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp, int equal_top_bits = 0);

}  // namespace gpusampler::kernels::cpu
