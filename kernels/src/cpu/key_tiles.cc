#include "cpu/key_tiles.hpp"

#include <algorithm>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// Two bulk shapes, each with explicit AVX-512 and AVX2 versions chosen once at load time
// (the compiler's own vectorization of the portable loop emulated full 64-bit multiplies
// and ran about 5x slower):
//   - a key tile: the 64 consecutive Philox calls (blocks) that hold the keys of 256
//     consecutive elements, written in element order;
//   - element keys: one call per listed element, keeping word i & 3 (v of the selected set).
// One chain of rounds is latency-bound, so every version runs four independent chains.
using KeyTileFn = void (*)(uint64_t first_block, uint32_t row, uint32_t stream, uint32_t k0,
                           uint32_t k1, uint32_t* out);
// Calls for n <= kCallsPerGroup elements given as block words (lo, hi) and lane.
inline constexpr int kCallsPerGroup = 64;
using ElementKeysFn = void (*)(const uint32_t* block_lo, const uint32_t* block_hi,
                               const uint32_t* lane, int n, uint32_t row, uint32_t stream,
                               uint32_t k0, uint32_t k1, uint32_t* out);

static_assert(kTileElements == kCallsPerGroup * kElementsPerCall, "a tile is one call group");

void KeyTilePortable(uint64_t first_block, uint32_t row, uint32_t stream, uint32_t k0, uint32_t k1,
                     uint32_t* out) {
  for (int b = 0; b < kCallsPerGroup; ++b) {
    const uint64_t block = first_block + b;
    const Philox4 x = Philox4x32(
        Philox4{{static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32), row, stream}},
        k0, k1);
    for (int w = 0; w < kElementsPerCall; ++w) out[kElementsPerCall * b + w] = x.v[w];
  }
}

void ElementKeysPortable(const uint32_t* block_lo, const uint32_t* block_hi, const uint32_t* lane,
                         int n, uint32_t row, uint32_t stream, uint32_t k0, uint32_t k1,
                         uint32_t* out) {
  for (int j = 0; j < n; ++j) {
    out[j] = Philox4x32(Philox4{{block_lo[j], block_hi[j], row, stream}}, k0, k1).v[lane[j]];
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
// Vector arguments of the target-specific helpers below never cross an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 flags its own AVX-512 header intrinsics (_mm512_undefined_epi32) as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// One Philox round on 16 lanes. vpmuludq multiplies the even 32-bit lanes; the odd lanes
// are swapped down with a shuffle, and the products' hi / lo words are put back in place
// with masked shuffles. Shifts and multiplies of zmm registers share one port on current
// Intel cores while shuffles use another, so this mix is ~1.6x faster than shift + blend.
__attribute__((target("avx512f"))) inline void MulHiLo512(__m512i a, __m512i m, __m512i* hi,
                                                          __m512i* lo) {
  const __m512i even = _mm512_mul_epu32(a, m);
  const __m512i odd = _mm512_mul_epu32(_mm512_shuffle_epi32(a, _MM_PERM_CDAB), m);
  *lo = _mm512_mask_shuffle_epi32(even, 0xAAAA, odd, _MM_PERM_CDAB);
  *hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, _MM_PERM_CDAB);
}

// Ten rounds on four chains of 16 calls; x[w][c] is word w of chain c.
__attribute__((target("avx512f"))) inline void Philox512(__m512i x[4][4], uint32_t k0,
                                                         uint32_t k1) {
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int c = 0; c < 4; ++c) {
      __m512i hi0, lo0, hi1, lo1;
      MulHiLo512(x[0][c], m0, &hi0, &lo0);
      MulHiLo512(x[2][c], m1, &hi1, &lo1);
      x[0][c] = _mm512_ternarylogic_epi32(hi1, x[1][c], key0, 0x96);  // three-way xor
      x[1][c] = lo1;
      x[2][c] = _mm512_ternarylogic_epi32(hi0, x[3][c], key1, 0x96);
      x[3][c] = lo0;
    }
  }
}

// Within every 128-bit lane, the 4x4 transpose of (x0, x1, x2, x3): r[s] holds, in each
// 128-bit lane, the four words of that lane's call at position s.
#define GPUSAMPLER_TRANSPOSE4(pre, x0, x1, x2, x3, r)                                \
  do {                                                                               \
    const auto t0 = pre##_unpacklo_epi32(x0, x1), t1 = pre##_unpackhi_epi32(x0, x1); \
    const auto t2 = pre##_unpacklo_epi32(x2, x3), t3 = pre##_unpackhi_epi32(x2, x3); \
    r[0] = pre##_unpacklo_epi64(t0, t2);                                             \
    r[1] = pre##_unpackhi_epi64(t0, t2);                                             \
    r[2] = pre##_unpacklo_epi64(t1, t3);                                             \
    r[3] = pre##_unpackhi_epi64(t1, t3);                                             \
  } while (0)

// Lane p = 4 L + s (128-bit lane L, position s) of chain c computes block
// first_block + 16 c + 4 s + L. After the in-lane transpose, r[s] then holds the words of
// blocks 4 s .. 4 s + 3 of the chain in order: elements 16 s .. 16 s + 15, one store each.
__attribute__((target("avx512f"))) void KeyTileAvx512(uint64_t first_block, uint32_t row,
                                                      uint32_t stream, uint32_t k0, uint32_t k1,
                                                      uint32_t* out) {
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  const __m512i lo = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first_block)));
  const __m512i hi = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(first_block >> 32)));
  __m512i x[4][4];
  for (int c = 0; c < 4; ++c) {
    const __m512i offset = _mm512_add_epi32(order, _mm512_set1_epi32(16 * c));
    x[0][c] = _mm512_add_epi32(lo, offset);
    // The low word wrapped: carry into the high word.
    x[1][c] = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(x[0][c], offset), hi,
                                    _mm512_set1_epi32(1));
    x[2][c] = _mm512_set1_epi32(static_cast<int>(row));
    x[3][c] = _mm512_set1_epi32(static_cast<int>(stream));
  }
  Philox512(x, k0, k1);
  for (int c = 0; c < 4; ++c) {
    __m512i r[4];
    GPUSAMPLER_TRANSPOSE4(_mm512, x[0][c], x[1][c], x[2][c], x[3][c], r);
    for (int s = 0; s < 4; ++s) _mm512_storeu_si512(out + 64 * c + 16 * s, r[s]);
  }
}

__attribute__((target("avx512f"))) void ElementKeysAvx512(const uint32_t* block_lo,
                                                          const uint32_t* block_hi,
                                                          const uint32_t* lane, int n, uint32_t row,
                                                          uint32_t stream, uint32_t k0, uint32_t k1,
                                                          uint32_t* out) {
  __m512i x[4][4];
  for (int c = 0; c < 4; ++c) {
    x[0][c] = _mm512_loadu_si512(block_lo + 16 * c);
    x[1][c] = _mm512_loadu_si512(block_hi + 16 * c);
    x[2][c] = _mm512_set1_epi32(static_cast<int>(row));
    x[3][c] = _mm512_set1_epi32(static_cast<int>(stream));
  }
  Philox512(x, k0, k1);
  for (int c = 0; c < 4 && 16 * c < n; ++c) {
    const __m512i w = _mm512_loadu_si512(lane + 16 * c);
    __m512i r = x[0][c];
    for (int k = 1; k < 4; ++k) {
      r = _mm512_mask_mov_epi32(r, _mm512_cmpeq_epi32_mask(w, _mm512_set1_epi32(k)), x[k][c]);
    }
    const int left = n - 16 * c;
    _mm512_mask_storeu_epi32(out + 16 * c,
                             static_cast<__mmask16>(left >= 16 ? 0xFFFF : (1u << left) - 1), r);
  }
}

// Same lane juggling as MulHiLo512, with blends for the masked shuffles.
__attribute__((target("avx2"))) inline void Philox256(__m256i x[4][4], uint32_t k0, uint32_t k1) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const __m256i key0 = _mm256_set1_epi32(static_cast<int>(k0));
    const __m256i key1 = _mm256_set1_epi32(static_cast<int>(k1));
    for (int c = 0; c < 4; ++c) {
      const __m256i e0 = _mm256_mul_epu32(x[0][c], m0);
      const __m256i o0 = _mm256_mul_epu32(_mm256_shuffle_epi32(x[0][c], 0xB1), m0);
      const __m256i e1 = _mm256_mul_epu32(x[2][c], m1);
      const __m256i o1 = _mm256_mul_epu32(_mm256_shuffle_epi32(x[2][c], 0xB1), m1);
      const __m256i lo0 = _mm256_blend_epi32(e0, _mm256_shuffle_epi32(o0, 0xB1), 0xAA);
      const __m256i hi0 = _mm256_blend_epi32(_mm256_shuffle_epi32(e0, 0xB1), o0, 0xAA);
      const __m256i lo1 = _mm256_blend_epi32(e1, _mm256_shuffle_epi32(o1, 0xB1), 0xAA);
      const __m256i hi1 = _mm256_blend_epi32(_mm256_shuffle_epi32(e1, 0xB1), o1, 0xAA);
      x[0][c] = _mm256_xor_si256(_mm256_xor_si256(hi1, x[1][c]), key0);
      x[1][c] = lo1;
      x[2][c] = _mm256_xor_si256(_mm256_xor_si256(hi0, x[3][c]), key1);
      x[3][c] = lo0;
    }
  }
}

// As KeyTileAvx512 with two 128-bit lanes: lane p = 4 L + s computes block 2 s + L of its
// group of eight, so r[s] holds elements 8 s .. 8 s + 7 of the group. Two halves of four
// chains each cover the 64 calls.
__attribute__((target("avx2"))) void KeyTileAvx2(uint64_t first_block, uint32_t row,
                                                 uint32_t stream, uint32_t k0, uint32_t k1,
                                                 uint32_t* out) {
  const __m256i order = _mm256_set_epi32(7, 5, 3, 1, 6, 4, 2, 0);
  const __m256i bias = _mm256_set1_epi32(INT32_MIN);  // unsigned compare via signed
  for (int half = 0; half < 2; ++half) {
    const uint64_t base = first_block + 32 * half;
    const __m256i lo = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base)));
    const __m256i hi = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(base >> 32)));
    __m256i x[4][4];
    for (int c = 0; c < 4; ++c) {
      const __m256i offset = _mm256_add_epi32(order, _mm256_set1_epi32(8 * c));
      x[0][c] = _mm256_add_epi32(lo, offset);
      // Carry where the low word wrapped (sum < offset, unsigned): all-ones, i.e. -1.
      const __m256i carry =
          _mm256_cmpgt_epi32(_mm256_xor_si256(offset, bias), _mm256_xor_si256(x[0][c], bias));
      x[1][c] = _mm256_sub_epi32(hi, carry);
      x[2][c] = _mm256_set1_epi32(static_cast<int>(row));
      x[3][c] = _mm256_set1_epi32(static_cast<int>(stream));
    }
    Philox256(x, k0, k1);
    for (int c = 0; c < 4; ++c) {
      __m256i r[4];
      GPUSAMPLER_TRANSPOSE4(_mm256, x[0][c], x[1][c], x[2][c], x[3][c], r);
      for (int s = 0; s < 4; ++s) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 128 * half + 32 * c + 8 * s), r[s]);
      }
    }
  }
}

__attribute__((target("avx2"))) void ElementKeysAvx2(const uint32_t* block_lo,
                                                     const uint32_t* block_hi, const uint32_t* lane,
                                                     int n, uint32_t row, uint32_t stream,
                                                     uint32_t k0, uint32_t k1, uint32_t* out) {
  for (int half = 0; half < 2 && 32 * half < n; ++half) {
    __m256i x[4][4];
    for (int c = 0; c < 4; ++c) {
      const int at = 32 * half + 8 * c;
      x[0][c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block_lo + at));
      x[1][c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block_hi + at));
      x[2][c] = _mm256_set1_epi32(static_cast<int>(row));
      x[3][c] = _mm256_set1_epi32(static_cast<int>(stream));
    }
    Philox256(x, k0, k1);
    for (int c = 0; c < 4; ++c) {
      const int at = 32 * half + 8 * c;
      if (at >= n) break;
      const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(lane + at));
      __m256i r = x[0][c];
      for (int k = 1; k < 4; ++k) {
        r = _mm256_blendv_epi8(r, x[k][c], _mm256_cmpeq_epi32(w, _mm256_set1_epi32(k)));
      }
      alignas(32) uint32_t tmp[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), r);
      std::memcpy(out + at, tmp, static_cast<size_t>(std::min(8, n - at)) * sizeof(uint32_t));
    }
  }
}
#undef GPUSAMPLER_TRANSPOSE4
#endif  // x86-64 GCC

struct KeyFns {
  KeyTileFn tile;
  ElementKeysFn elements;
};

const KeyFns& FnsOf(Isa isa) {
  static const KeyFns portable{KeyTilePortable, ElementKeysPortable};
#if defined(__x86_64__) && defined(__GNUC__)
  static const KeyFns avx2{KeyTileAvx2, ElementKeysAvx2};
  static const KeyFns avx512{KeyTileAvx512, ElementKeysAvx512};
  return ChooseByIsa(isa, portable, &avx2, &avx512);
#else
  return ChooseByIsa<KeyFns>(isa, portable, nullptr, nullptr);
#endif
}

const KeyFns& Active() {
  static const KeyFns& fns = FnsOf(ActiveIsa());
  return fns;
}

}  // namespace

const char* KeyIsaName() { return IsaName(ActiveIsa()); }

void KeyTile(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]) {
  FnsOf(isa).tile(first / kElementsPerCall, row, stream, static_cast<uint32_t>(seed),
                  static_cast<uint32_t>(seed >> 32), out);
}

void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]) {
  Active().tile(first / kElementsPerCall, row, stream, static_cast<uint32_t>(seed),
                static_cast<uint32_t>(seed >> 32), out);
}

namespace {
// Splits each element index into its call's block words and its word in the call, then
// generates a group of calls at a time.
template <typename Index>
void KeysOfIndices(ElementKeysFn fn, uint64_t seed, uint32_t row, uint32_t stream,
                   const Index* indices, int64_t n, uint32_t* out) {
  alignas(64) uint32_t lo[kCallsPerGroup] = {}, hi[kCallsPerGroup] = {}, lane[kCallsPerGroup] = {};
  for (int64_t g = 0; g < n; g += kCallsPerGroup) {
    const int count = static_cast<int>(std::min<int64_t>(kCallsPerGroup, n - g));
    for (int j = 0; j < count; ++j) {
      const uint64_t i = indices[g + j];
      lo[j] = static_cast<uint32_t>(i >> 2);
      hi[j] = static_cast<uint32_t>(i >> 34);
      lane[j] = static_cast<uint32_t>(i & 3);
    }
    fn(lo, hi, lane, count, row, stream, static_cast<uint32_t>(seed),
       static_cast<uint32_t>(seed >> 32), out + g);
  }
}
}  // namespace

void KeysOfElements(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out) {
  KeysOfIndices(FnsOf(isa).elements, seed, row, stream, indices, n, out);
}

void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out) {
  KeysOfIndices(Active().elements, seed, row, stream, indices, n, out);
}

void KeysOfElements64(uint64_t seed, uint32_t row, uint32_t stream, const uint64_t* indices,
                      int64_t n, uint32_t* out) {
  KeysOfIndices(Active().elements, seed, row, stream, indices, n, out);
}

}  // namespace gpusampler::kernels::cpu
