#include "cpu_select.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
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

// The candidate filter and the class count: one tile / n labels of any label dtype.
using FilterFn = void (*)(int size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                          uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                          uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out,
                          int64_t* nq);
using CountFn = void (*)(int size, bool is_signed, const uint8_t* labels, int64_t n,
                         int64_t pos_label, int64_t neg_label, int64_t* np, int64_t* nq);

// Calls fn with the labels typed by (size, signedness): the LabelWord of that width and rule.
template <int kSize, typename Fn>
void WithLabelWord(bool is_signed, const void* labels, Fn& fn) {
  if (is_signed)
    return fn(static_cast<const typename LabelWord<kSize, Widen::kSign>::type*>(labels));
  return fn(static_cast<const typename LabelWord<kSize, Widen::kZero>::type*>(labels));
}

template <typename Fn>
void WithLabelType(int size, bool is_signed, const void* labels, Fn&& fn) {
  switch (size) {
    case 1:
      return WithLabelWord<1>(is_signed, labels, fn);
    case 2:
      return WithLabelWord<2>(is_signed, labels, fn);
    case 4:
      return WithLabelWord<4>(is_signed, labels, fn);
    default:
      return WithLabelWord<8>(is_signed, labels, fn);
  }
}

// Branch-free: every element is written at the output position, which moves on only when
// the element is taken.
void FilterPortable(int size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                    uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                    uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out,
                    int64_t* nq) {
  WithLabelType(size, is_signed, labels_tile, [&](const auto* labels) {
    int64_t p = *np, q = *nq;
    for (int j = 0; j < kTileElements; ++j) {
      const int64_t x = static_cast<int64_t>(labels[j]);
      const uint64_t packed = PackKey(keys[j], uint64_t{first} + j);
      pos_out[p] = packed;
      p += (x == pos_label) & (keys[j] < pos_bound);
      neg_out[q] = packed;
      q += (x == neg_label) & (keys[j] < neg_bound);
    }
    *np = p;
    *nq = q;
  });
}

void CountPortable(int size, bool is_signed, const uint8_t* labels, int64_t n, int64_t pos_label,
                   int64_t neg_label, int64_t* np, int64_t* nq) {
  WithLabelType(size, is_signed, labels, [&](const auto* typed) {
    int64_t p = 0, q = 0;
    for (int64_t i = 0; i < n; ++i) {
      // Label rows may start at any byte (ragged rows of a dataset): load without alignment.
      std::remove_cv_t<std::remove_pointer_t<decltype(typed)>> value;
      std::memcpy(&value, typed + i, sizeof(value));
      const int64_t x = static_cast<int64_t>(value);
      p += x == pos_label;
      q += x == neg_label;
    }
    *np += p;
    *nq += q;
  });
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

// Labels widened to int64: eight (AVX-512) or four (AVX2) at a time, sign- or zero-extended
// at every width (each LabelWord of cpu_select.hpp: the dtype table says which a dtype uses).
__attribute__((target("avx512f"))) inline __m512i LoadLabels8(int size, bool is_signed,
                                                              const uint8_t* p) {
  switch (size) {
    case 1: {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      return is_signed ? _mm512_cvtepi8_epi64(b) : _mm512_cvtepu8_epi64(b);
    }
    case 2: {
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return is_signed ? _mm512_cvtepi16_epi64(w) : _mm512_cvtepu16_epi64(w);
    }
    case 4: {
      const __m256i d = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      return is_signed ? _mm512_cvtepi32_epi64(d) : _mm512_cvtepu32_epi64(d);
    }
    default:
      return _mm512_loadu_si512(p);
  }
}

__attribute__((target("avx2"))) inline __m256i LoadLabels4(int size, bool is_signed,
                                                           const uint8_t* p) {
  switch (size) {
    case 1: {
      int32_t word;
      std::memcpy(&word, p, 4);
      const __m128i b = _mm_cvtsi32_si128(word);
      return is_signed ? _mm256_cvtepi8_epi64(b) : _mm256_cvtepu8_epi64(b);
    }
    case 2: {
      const __m128i w = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      return is_signed ? _mm256_cvtepi16_epi64(w) : _mm256_cvtepu16_epi64(w);
    }
    case 4: {
      const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      return is_signed ? _mm256_cvtepi32_epi64(d) : _mm256_cvtepu32_epi64(d);
    }
    default:
      return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  }
}

// The AVX-512 filter. vpcompressq compresses the taken keys into a register, and a plain
// full-width store writes it at the output position (the slots past the taken ones are
// scratch, overwritten by the next store: kFilterSlack). The memory-destination form
// (_mm512_mask_compressstoreu_epi64) is microcoded on AMD Zen 4, about 6x slower per element
// than this form there (bench/cpu_forms_bench.cc, docs/decisions.md K3); on Intel the two
// cost the same. Keys are below 2^32 and bounds at most 2^32, so the compares are signed.
__attribute__((target("avx512f,popcnt"))) void FilterTileAvx512(
    int size, bool is_signed, const void* labels_tile, const uint32_t* keys, uint32_t first,
    int64_t pos_label, int64_t neg_label, uint64_t pos_bound, uint64_t neg_bound, uint64_t* pos_out,
    int64_t* np, uint64_t* neg_out, int64_t* nq) {
  const uint8_t* labels = static_cast<const uint8_t*>(labels_tile);
  const __m512i pos = _mm512_set1_epi64(pos_label), neg = _mm512_set1_epi64(neg_label);
  const __m512i pb = _mm512_set1_epi64(static_cast<long long>(pos_bound));
  const __m512i nb = _mm512_set1_epi64(static_cast<long long>(neg_bound));
  const __m512i iota = _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0);
  int64_t p = *np, q = *nq;
  for (int j = 0; j < kTileElements; j += 8) {
    const __m512i lab = LoadLabels8(size, is_signed, labels + j * size);
    const __m512i u =
        _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys + j)));
    const __m512i index = _mm512_add_epi64(iota, _mm512_set1_epi64(first + j));
    const __m512i packed = _mm512_or_si512(_mm512_slli_epi64(u, 32), index);
    const __mmask8 take_pos =
        _mm512_mask_cmplt_epi64_mask(_mm512_cmpeq_epi64_mask(lab, pos), u, pb);
    const __mmask8 take_neg =
        _mm512_mask_cmplt_epi64_mask(_mm512_cmpeq_epi64_mask(lab, neg), u, nb);
    _mm512_storeu_si512(pos_out + p, _mm512_maskz_compress_epi64(take_pos, packed));
    _mm512_storeu_si512(neg_out + q, _mm512_maskz_compress_epi64(take_neg, packed));
    p += _mm_popcnt_u32(take_pos);
    q += _mm_popcnt_u32(take_neg);
  }
  *np = p;
  *nq = q;
}

// The AVX2 filter: the same compress into a register, from a 16-entry vpermd table
// (vpermd is one micro-op on both families), then a plain store.
__attribute__((target("avx2,popcnt"))) void FilterTileAvx2(
    int size, bool is_signed, const void* labels_tile, const uint32_t* keys, uint32_t first,
    int64_t pos_label, int64_t neg_label, uint64_t pos_bound, uint64_t neg_bound, uint64_t* pos_out,
    int64_t* np, uint64_t* neg_out, int64_t* nq) {
  const uint8_t* labels = static_cast<const uint8_t*>(labels_tile);
  const __m256i pos = _mm256_set1_epi64x(pos_label), neg = _mm256_set1_epi64x(neg_label);
  const __m256i pb = _mm256_set1_epi64x(static_cast<long long>(pos_bound));
  const __m256i nb = _mm256_set1_epi64x(static_cast<long long>(neg_bound));
  const __m256i iota = _mm256_set_epi64x(3, 2, 1, 0);
  int64_t p = *np, q = *nq;
  for (int j = 0; j < kTileElements; j += 4) {
    const __m256i lab = LoadLabels4(size, is_signed, labels + j * size);
    const __m256i u =
        _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(keys + j)));
    const __m256i index = _mm256_add_epi64(iota, _mm256_set1_epi64x(first + j));
    const __m256i packed = _mm256_or_si256(_mm256_slli_epi64(u, 32), index);
    const int take_pos = _mm256_movemask_pd(_mm256_castsi256_pd(
        _mm256_and_si256(_mm256_cmpeq_epi64(lab, pos), _mm256_cmpgt_epi64(pb, u))));
    const int take_neg = _mm256_movemask_pd(_mm256_castsi256_pd(
        _mm256_and_si256(_mm256_cmpeq_epi64(lab, neg), _mm256_cmpgt_epi64(nb, u))));
    const __m256i perm_pos =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompressTable.perm[take_pos]));
    const __m256i perm_neg =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(kCompressTable.perm[take_neg]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(pos_out + p),
                        _mm256_permutevar8x32_epi32(packed, perm_pos));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(neg_out + q),
                        _mm256_permutevar8x32_epi32(packed, perm_neg));
    p += _mm_popcnt_u32(static_cast<unsigned>(take_pos));
    q += _mm_popcnt_u32(static_cast<unsigned>(take_neg));
  }
  *np = p;
  *nq = q;
}

// Class counts with the matches accumulated in vector registers (a masked subtract of -1
// per lane): no mask-to-GPR move and popcount per vector, which is the slower form on
// Zen 4 and no faster on Intel (bench/cpu_forms_bench.cc).
__attribute__((target("avx512f"))) void CountAvx512(int size, bool is_signed, const uint8_t* labels,
                                                    int64_t n, int64_t pos_label, int64_t neg_label,
                                                    int64_t* np, int64_t* nq) {
  const __m512i pos = _mm512_set1_epi64(pos_label), neg = _mm512_set1_epi64(neg_label);
  const __m512i minus_one = _mm512_set1_epi64(-1);
  __m512i acc_p = _mm512_setzero_si512(), acc_q = _mm512_setzero_si512();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m512i lab = LoadLabels8(size, is_signed, labels + i * size);
    acc_p = _mm512_mask_sub_epi64(acc_p, _mm512_cmpeq_epi64_mask(lab, pos), acc_p, minus_one);
    acc_q = _mm512_mask_sub_epi64(acc_q, _mm512_cmpeq_epi64_mask(lab, neg), acc_q, minus_one);
  }
  *np += _mm512_reduce_add_epi64(acc_p);
  *nq += _mm512_reduce_add_epi64(acc_q);
  CountPortable(size, is_signed, labels + i * size, n - i, pos_label, neg_label, np, nq);
}

__attribute__((target("avx2"))) void CountAvx2(int size, bool is_signed, const uint8_t* labels,
                                               int64_t n, int64_t pos_label, int64_t neg_label,
                                               int64_t* np, int64_t* nq) {
  const __m256i pos = _mm256_set1_epi64x(pos_label), neg = _mm256_set1_epi64x(neg_label);
  __m256i acc_p = _mm256_setzero_si256(), acc_q = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256i lab = LoadLabels4(size, is_signed, labels + i * size);
    acc_p = _mm256_sub_epi64(acc_p, _mm256_cmpeq_epi64(lab, pos));  // a match is -1
    acc_q = _mm256_sub_epi64(acc_q, _mm256_cmpeq_epi64(lab, neg));
  }
  alignas(32) int64_t sum_p[4], sum_q[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(sum_p), acc_p);
  _mm256_store_si256(reinterpret_cast<__m256i*>(sum_q), acc_q);
  *np += sum_p[0] + sum_p[1] + sum_p[2] + sum_p[3];
  *nq += sum_q[0] + sum_q[1] + sum_q[2] + sum_q[3];
  CountPortable(size, is_signed, labels + i * size, n - i, pos_label, neg_label, np, nq);
}
#endif  // x86-64 GCC

struct IsaFns {
  KeyTileFn tile;
  ElementKeysFn elements;
  FilterFn filter;
  CountFn count;
};

const IsaFns& FnsOf(Isa isa) {
  static const IsaFns portable{KeyTilePortable, ElementKeysPortable, FilterPortable, CountPortable};
#if defined(__x86_64__) && defined(__GNUC__)
  static const IsaFns avx2{KeyTileAvx2, ElementKeysAvx2, FilterTileAvx2, CountAvx2};
  static const IsaFns avx512{KeyTileAvx512, ElementKeysAvx512, FilterTileAvx512, CountAvx512};
  if (isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512)) return avx512;
  if (isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2)) return avx2;
#else
  (void)isa;
#endif
  return portable;
}

struct Choice {
  Isa isa = Isa::kPortable;
  std::string why;
};

const Choice& ActiveChoice() {
  static const Choice choice = [] {
    Choice c;
    const CpuId cpu = DetectCpu();
    const Isa best = DefaultIsa(cpu, IsaSupported(Isa::kAvx2), IsaSupported(Isa::kAvx512));
    char family[64];
    std::snprintf(family, sizeof(family), " family 0x%x model 0x%x", cpu.family, cpu.model);
    const std::string default_why = "default for " + cpu.vendor + family;
    const char* env = std::getenv("GPUSAMPLER_PHILOX_ISA");
    Isa wanted;
    if (env == nullptr || *env == '\0') {
      c.isa = best;
      c.why = default_why;
    } else if (!ParseIsa(env, &wanted)) {
      c.isa = best;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env + " is not portable, avx2 or avx512; " +
              default_why;
    } else if (!IsaSupported(wanted)) {
      c.isa = best;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env + " is not supported by this CPU; " +
              default_why;
    } else {
      c.isa = wanted;
      c.why = std::string("GPUSAMPLER_PHILOX_ISA=") + env;
    }
    return c;
  }();
  return choice;
}

const IsaFns& Active() {
  static const IsaFns& fns = FnsOf(ActiveChoice().isa);
  return fns;
}

}  // namespace

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "avx512";
    case Isa::kAvx2:
      return "avx2";
    default:
      return "portable";
  }
}

bool ParseIsa(const std::string& name, Isa* isa) {
  for (Isa candidate : kAllIsas) {
    if (name == IsaName(candidate)) {
      *isa = candidate;
      return true;
    }
  }
  return false;
}

bool IsaSupported(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool avx2 = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
  }();
  static const bool avx512 = [] {
    __builtin_cpu_init();
    return avx2 && __builtin_cpu_supports("avx512f");
  }();
  switch (isa) {
    case Isa::kAvx512:
      return avx512;
    case Isa::kAvx2:
      return avx2;
    default:
      return true;
  }
#else
  return isa == Isa::kPortable;
#endif
}

CpuId DetectCpu() {
  CpuId id;
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
    char vendor[13];
    std::memcpy(vendor, &ebx, 4);
    std::memcpy(vendor + 4, &edx, 4);
    std::memcpy(vendor + 8, &ecx, 4);
    vendor[12] = '\0';
    id.vendor = vendor;
  }
  if (__get_cpuid(1, &eax, &ebx, &ecx, &edx)) {
    const int base_family = static_cast<int>((eax >> 8) & 0xF);
    const int base_model = static_cast<int>((eax >> 4) & 0xF);
    id.family =
        base_family == 0xF ? base_family + static_cast<int>((eax >> 20) & 0xFF) : base_family;
    id.model = (base_family == 0x6 || base_family == 0xF)
                   ? base_model + (static_cast<int>((eax >> 16) & 0xF) << 4)
                   : base_model;
  }
#endif
  if (id.vendor.empty()) id.vendor = "unknown";
  return id;
}

Isa DefaultIsa(const CpuId& cpu, bool has_avx2, bool has_avx512) {
  (void)cpu;
  if (has_avx512) return Isa::kAvx512;
  if (has_avx2) return Isa::kAvx2;
  return Isa::kPortable;
}

Isa ActiveIsa() { return ActiveChoice().isa; }
const char* IsaChoice() { return ActiveChoice().why.c_str(); }
const char* KeyIsaName() { return IsaName(ActiveIsa()); }

void CountLabels(Isa isa, int dtype_size, bool is_signed, const void* labels, int64_t n,
                 int64_t pos_label, int64_t neg_label, int64_t* np, int64_t* nq) {
  FnsOf(isa).count(dtype_size, is_signed, static_cast<const uint8_t*>(labels), n, pos_label,
                   neg_label, np, nq);
}

void CountLabels(int dtype_size, bool is_signed, const void* labels, int64_t n, int64_t pos_label,
                 int64_t neg_label, int64_t* np, int64_t* nq) {
  Active().count(dtype_size, is_signed, static_cast<const uint8_t*>(labels), n, pos_label,
                 neg_label, np, nq);
}

void FilterTile(Isa isa, int dtype_size, bool is_signed, const void* labels_tile,
                const uint32_t* keys, uint32_t first, int64_t pos_label, int64_t neg_label,
                uint64_t pos_bound, uint64_t neg_bound, uint64_t* pos_out, int64_t* np,
                uint64_t* neg_out, int64_t* nq) {
  FnsOf(isa).filter(dtype_size, is_signed, labels_tile, keys, first, pos_label, neg_label,
                    pos_bound, neg_bound, pos_out, np, neg_out, nq);
}

void FilterTile(int dtype_size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out,
                int64_t* nq) {
  Active().filter(dtype_size, is_signed, labels_tile, keys, first, pos_label, neg_label, pos_bound,
                  neg_bound, pos_out, np, neg_out, nq);
}

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

namespace {

constexpr int64_t kSmallSortMax = 16384;
constexpr int64_t kMediumSortMax = 256 * kSmallSortMax / 4;  // buckets of 4k items on average

// Per-thread digit counters of the small-n path of SortByHighWord (two digits of at most
// 11 bits).
std::vector<uint32_t>& DigitCounts() {
  thread_local std::vector<uint32_t> counts(2 << 11);
  return counts;
}

// Small n (<= kSmallSortMax): two stable counting passes (LSD) on the 2d bits below the
// shared top bits, d chosen so that 2^(2d) is well above n^2 (n = 1e3: 16 bits, n = 1e4: 20
// bits); keys are uniform, so only about n^2 / 2^(2d+1) pairs (8 for n = 1e3, 48 for 1e4) are
// left out of order, and one insertion sort on the whole word finishes with almost no
// mispredicted branch. The earlier single pass into ~n buckets left ~n/4 pairs out of order,
// one mispredicted branch each, and summed ~n counters: 10-25% slower (n = 1e3 .. 1.6e4,
// best of 300, Zen 4: 3.2-3.5 vs 2.75 ns per item at n = 1e3).
void SortSmall(uint64_t* items, int64_t n, uint64_t* mid, int equal_top_bits) {
  int lg = 0;
  while ((int64_t{1} << lg) < n) ++lg;
  const int d = std::clamp((lg + 6) / 2, 6, 11);
  const int top_shift = 64 - equal_top_bits - d;
  const int low_shift = std::max(0, top_shift - d);
  const uint64_t mask = (uint64_t{1} << d) - 1;
  std::vector<uint32_t>& count_buf = DigitCounts();
  uint32_t* c_low = count_buf.data();
  uint32_t* c_top = count_buf.data() + (size_t{1} << d);
  std::fill(count_buf.begin(), count_buf.begin() + (int64_t{2} << d), 0u);
  for (int64_t j = 0; j < n; ++j) {
    ++c_low[(items[j] >> low_shift) & mask];
    ++c_top[(items[j] >> top_shift) & mask];
  }
  uint32_t sum_low = 0, sum_top = 0;
  for (int b = 0; b < (1 << d); ++b) {
    const uint32_t l = c_low[b], t = c_top[b];
    c_low[b] = sum_low;
    c_top[b] = sum_top;
    sum_low += l;
    sum_top += t;
  }
  for (int64_t j = 0; j < n; ++j) mid[c_low[(items[j] >> low_shift) & mask]++] = items[j];
  for (int64_t j = 0; j < n; ++j) items[c_top[(mid[j] >> top_shift) & mask]++] = mid[j];
  for (int64_t j = 1; j < n; ++j) {
    const uint64_t x = items[j];
    int64_t at = j;
    while (at > 0 && items[at - 1] > x) {
      items[at] = items[at - 1];
      --at;
    }
    items[at] = x;
  }
}

// Medium n (up to 256 small sorts): one pass scatters the items into 256 buckets by the 8
// bits below the shared top bits, then each bucket (a few thousand items, in L1 or L2) is
// sorted by SortSmall. Against the three-pass radix sort below, B = 32 x 1e6 (1e5 items a
// row) on one thread took 153 ms against 157-160 ms (docs/decisions.md K2).
void SortMedium(uint64_t* items, int64_t n, uint64_t* tmp, int equal_top_bits) {
  constexpr int kBits = 8, kBuckets = 1 << kBits;
  const int shift = 64 - equal_top_bits - kBits;
  int64_t start[kBuckets + 1] = {};
  for (int64_t j = 0; j < n; ++j) ++start[((items[j] >> shift) & (kBuckets - 1)) + 1];
  for (int b = 0; b < kBuckets; ++b) start[b + 1] += start[b];
  int64_t at[kBuckets];
  std::copy(start, start + kBuckets, at);
  for (int64_t j = 0; j < n; ++j) tmp[at[(items[j] >> shift) & (kBuckets - 1)]++] = items[j];
  for (int b = 0; b < kBuckets; ++b) {
    const int64_t size = start[b + 1] - start[b];
    uint64_t* bucket = tmp + start[b];
    if (size < 32) {
      std::sort(bucket, bucket + size);
    } else if (size <= kSmallSortMax) {
      SortSmall(bucket, size, items + start[b], equal_top_bits + kBits);
    } else {
      std::sort(bucket, bucket + size);  // not for uniform keys: a bucket holds ~n / 256
    }
  }
  std::memcpy(items, tmp, static_cast<size_t>(n) * sizeof(uint64_t));
}

// Large n: LSD radix sort, digits of 11, 11 and 10 bits over bits 32..63; each pass is stable.
void SortLarge(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp) {
  constexpr int kShifts[3] = {32, 43, 54};
  constexpr int kBits[3] = {11, 11, 10};
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

}  // namespace

void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp, int equal_top_bits) {
  if (n < 2) return;
  if (static_cast<int64_t>(tmp->size()) < n) tmp->resize(n);
  if (n < 32) {
    // Tiny: a comparison sort on the whole word gives the same order (low words are
    // distinct, already the tie-break).
    std::sort(items, items + n);
  } else if (n <= kSmallSortMax) {
    SortSmall(items, n, tmp->data(), equal_top_bits);
  } else if (n <= kMediumSortMax && equal_top_bits <= 16) {
    SortMedium(items, n, tmp->data(), equal_top_bits);
  } else {
    SortLarge(items, n, tmp);
  }
}

}  // namespace gpusampler::kernels::cpu
