// The keyed permutation pi(n, tag, pass) of [0, n) that epochs are made of (SPEC section 8):
// a four-round Feistel network on 2h bits, keyed by Philox4x32-10, with cycle walking.
// Integer only, so it is the same on every backend. Pure functions; thread-safe.
#pragma once

#include <cstdint>

#include "gpusampler/kernels/macros.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels {

// The tag of the ROWS permutation; ELEMENTS uses the class index as the tag.
inline constexpr uint32_t kRowsTag = 0xFFFF;

// The keys of one permutation family: pi depends on (shuffle_seed, epoch) and on
// (n, tag, pass) per call.
struct FeistelKey {
  uint64_t shuffle_seed = 0;
  uint32_t epoch = 0;
};

// h = max(1, ceil(ceil(log2 n) / 2)) for n >= 2: half the bits of the Feistel domain 4^h.
GPUSAMPLER_HD int FeistelHalfBits(uint64_t n) {
  int log2_ceil = 0;  // ceil(log2 n) = bit length of n - 1
  for (uint64_t v = n - 1; v != 0; v >>= 1) ++log2_ceil;
  const int h = (log2_ceil + 1) / 2;
  return h < 1 ? 1 : h;
}

// Four Feistel rounds on x in [0, 4^h): L = x >> h, R = x & M, F = Philox(...)[0] & M,
// (L, R) = (R, L ^ F).
GPUSAMPLER_HD uint64_t FeistelRounds(FeistelKey key, int h, uint32_t tag, uint32_t pass,
                                     uint64_t x) {
  const uint64_t mask = (h >= 64) ? ~uint64_t{0} : ((uint64_t{1} << h) - 1);
  uint64_t left = x >> h;
  uint64_t right = x & mask;
  for (uint32_t k = 0; k < 4; ++k) {
    const Philox4 ctr{
        {static_cast<uint32_t>(right), key.epoch, pass, 0x80000000u | (k << 16) | tag}};
    const uint64_t f = Philox4x32(ctr, static_cast<uint32_t>(key.shuffle_seed),
                                  static_cast<uint32_t>(key.shuffle_seed >> 32))
                           .v[0] &
                       mask;
    const uint64_t next_right = left ^ f;
    left = right;
    right = next_right;
  }
  return (left << h) | right;
}

// pi(n, tag, pass)(x) for x in [0, n), n >= 1: a bijection of [0, n). Cycle walking takes
// fewer than 4 tries on average (4^h < 4n), so its cost is a few Philox calls.
GPUSAMPLER_HD uint64_t FeistelPermute(FeistelKey key, uint64_t n, uint32_t tag, uint32_t pass,
                                      uint64_t x) {
  if (n <= 1) return 0;
  const int h = FeistelHalfBits(n);
  uint64_t y = FeistelRounds(key, h, tag, pass, x);
  while (y >= n) y = FeistelRounds(key, h, tag, pass, y);
  return y;
}

}  // namespace gpusampler::kernels
