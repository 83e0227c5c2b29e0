// Philox4x32 counter-based generator (Salmon et al., SC'11) and the selection / order keys
// of SPEC section 1. Pure functions usable from host and device code; thread-safe.
#pragma once

#include <cstdint>

#include "gpusampler/kernels/macros.hpp"

namespace gpusampler::kernels {

struct Philox4 {
  uint32_t v[4];
};

inline constexpr uint32_t kPhiloxM0 = 0xD2511F53u;
inline constexpr uint32_t kPhiloxM1 = 0xCD9E8D57u;
inline constexpr uint32_t kPhiloxW0 = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxW1 = 0xBB67AE85u;

// The two key streams of SPEC section 1 (counter word 3).
inline constexpr uint32_t kSelectionStream = 0;  // u: selection key
inline constexpr uint32_t kOrderStream = 1;      // v: output-order key

// Elements per Philox call: one call yields the keys of four consecutive elements.
inline constexpr int kElementsPerCall = 4;

GPUSAMPLER_HD void PhiloxMulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t p = static_cast<uint64_t>(a) * b;
  *hi = static_cast<uint32_t>(p >> 32);
  *lo = static_cast<uint32_t>(p);
}

// Philox4x32 with `rounds` rounds (the product uses 10; the KAT also checks 7).
GPUSAMPLER_HD Philox4 Philox4x32(Philox4 ctr, uint32_t k0, uint32_t k1, int rounds = 10) {
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    PhiloxMulHiLo(kPhiloxM0, ctr.v[0], &hi0, &lo0);
    PhiloxMulHiLo(kPhiloxM1, ctr.v[2], &hi1, &lo1);
    ctr = Philox4{{hi1 ^ ctr.v[1] ^ k0, lo1, hi0 ^ ctr.v[3] ^ k1, lo0}};
  }
  return ctr;
}

// The Philox call that holds the keys of elements [4 * block, 4 * block + 4) of row `row`
// in stream `stream` (SPEC section 1):
//   x = Philox4x32_10(counter = [lo32(block), hi32(block), row, stream], key = [lo32(S), hi32(S)])
GPUSAMPLER_HD Philox4 BlockPhilox(uint64_t seed, uint32_t row, uint32_t stream, uint64_t block) {
  const Philox4 ctr{
      {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), row, stream}};
  return Philox4x32(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
}

// u(r, i) (stream kSelectionStream) or v(r, i) (stream kOrderStream): word i & 3 of the call
// of block i >> 2. Computes a whole call for one word; bulk code generates four at a time.
GPUSAMPLER_HD uint32_t ElementKey(uint64_t seed, uint32_t row, uint32_t stream, uint64_t i) {
  return BlockPhilox(seed, row, stream, i >> 2).v[i & 3];
}

// (key, index) packed so that unsigned comparison is the lexicographic order of the pair.
GPUSAMPLER_HD uint64_t PackKey(uint32_t key, uint64_t index) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint32_t>(index);
}
GPUSAMPLER_HD uint32_t PackedIndex(uint64_t packed) { return static_cast<uint32_t>(packed); }

}  // namespace gpusampler::kernels
