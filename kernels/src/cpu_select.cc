#include "cpu_select.hpp"

#include <algorithm>
#include <cstring>

#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// Structure-of-arrays Philox over kTileElements counters, written so the compiler
// vectorizes the lane loop (32x32->64 multiplies map to vpmuludq). Same rounds as
// Philox4x32().
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define GPUSAMPLER_MULTIVERSION __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define GPUSAMPLER_MULTIVERSION
#endif

GPUSAMPLER_MULTIVERSION
void PhiloxSoa(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint32_t k0,
               uint32_t k1) {
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    for (int j = 0; j < kTileElements; ++j) {
      const uint64_t p0 = static_cast<uint64_t>(kPhiloxM0) * c0[j];
      const uint64_t p1 = static_cast<uint64_t>(kPhiloxM1) * c2[j];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[j] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[j] ^ k1;
      c1[j] = static_cast<uint32_t>(p1);
      c3[j] = static_cast<uint32_t>(p0);
      c0[j] = n0;
      c2[j] = n2;
    }
  }
}

// Runs the tile and copies word `stream` of each result to out[0, n).
void FinishTile(uint32_t* c0, uint32_t* c1, uint32_t* c2, uint32_t* c3, uint64_t seed,
                uint32_t stream, int n, uint32_t* out) {
  PhiloxSoa(c0, c1, c2, c3, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  const uint32_t* word = stream == kSelectionStream ? c0 : c1;
  for (int j = 0; j < n; ++j) out[j] = word[j];
}

}  // namespace

void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]) {
  alignas(64) uint32_t c0[kTileElements], c1[kTileElements], c2[kTileElements],
      c3[kTileElements];
  for (int j = 0; j < kTileElements; ++j) {
    const uint64_t i = first + j;
    c0[j] = static_cast<uint32_t>(i);
    c1[j] = static_cast<uint32_t>(i >> 32);
    c2[j] = row;
    c3[j] = 0;
  }
  FinishTile(c0, c1, c2, c3, seed, stream, kTileElements, out);
}

void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices, int n,
                    uint32_t* out) {
  alignas(64) uint32_t c0[kTileElements], c1[kTileElements], c2[kTileElements],
      c3[kTileElements];
  for (int j = 0; j < kTileElements; ++j) {
    c0[j] = j < n ? indices[j] : 0;
    c1[j] = 0;  // element indices are < 2^31
    c2[j] = row;
    c3[j] = 0;
  }
  FinishTile(c0, c1, c2, c3, seed, stream, n, out);
}

void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp) {
  if (n < 2) return;
  if (n < 256) {
    // Small: a comparison sort on the whole word gives the same order (low words are
    // distinct indices, already the tie-break).
    std::sort(items, items + n);
    return;
  }
  // LSD radix sort, digits of 11, 11 and 10 bits over bits 32..63; each pass is stable.
  constexpr int kShifts[3] = {32, 43, 54};
  constexpr int kBits[3] = {11, 11, 10};
  if (static_cast<int64_t>(tmp->size()) < n) tmp->resize(n);
  uint64_t* src = items;
  uint64_t* dst = tmp->data();
  std::vector<int64_t> count(1 << 11);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const uint64_t mask = (uint64_t{1} << kBits[pass]) - 1;
    std::fill(count.begin(), count.end(), 0);
    for (int64_t j = 0; j < n; ++j) ++count[(src[j] >> shift) & mask];
    int64_t sum = 0;
    for (auto& c : count) {
      const int64_t here = c;
      c = sum;
      sum += here;
    }
    for (int64_t j = 0; j < n; ++j) dst[count[(src[j] >> shift) & mask]++] = src[j];
    std::swap(src, dst);
  }
  // Three passes leave the result in tmp.
  std::memcpy(items, src, static_cast<size_t>(n) * sizeof(uint64_t));
}

}  // namespace gpusampler::kernels::cpu
