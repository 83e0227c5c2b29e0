// The CPU backend's bulk Philox key generation (key tiles and element keys), one version per
// instruction set (isa.hpp). Not part of the public API.
#pragma once

#include <cstdint>

#include "cpu/isa.hpp"

namespace gpusampler::kernels::cpu {

// Elements per call of the tile generator: 64 Philox calls (four elements each).
inline constexpr int kTileElements = 256;

// out[j] = ElementKey(seed, row, stream, first + j) for the kTileElements elements from
// `first` (a multiple of 4): N / 4 Philox calls for N elements.
void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);
void KeyTile(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);

// out[j] = ElementKey(seed, row, stream, indices[j]) for j < n: one call per element (the
// order keys of a selected set). Writes nothing past out[n - 1]. The 64-bit version takes
// any index (tests pin SPEC section 1's high block words with it).
void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out);
void KeysOfElements(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out);
void KeysOfElements64(uint64_t seed, uint32_t row, uint32_t stream, const uint64_t* indices,
                      int64_t n, uint32_t* out);

// The key generator's instruction set in use: IsaName(ActiveIsa()).
const char* KeyIsaName();

}  // namespace gpusampler::kernels::cpu
