#include "cpu_select.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// Philox over kTileElements counters [lo32(i), 0, row, 0] (indices are < 2^31, so the high
// word is 0), returning one output word per counter. Explicit AVX-512 and AVX2 versions are
// chosen once at load time: the compiler's own vectorization of the portable loop emulated
// full 64-bit multiplies and ran about 5x slower, and one chain of rounds is latency-bound,
// so each version runs four independent chains.
using PhiloxTileFn = void (*)(const uint32_t* index, uint32_t row, uint32_t k0, uint32_t k1,
                              uint32_t word, uint32_t* out);

void PhiloxTilePortable(const uint32_t* index, uint32_t row, uint32_t k0, uint32_t k1,
                        uint32_t word, uint32_t* out) {
  for (int j = 0; j < kTileElements; ++j) {
    out[j] = Philox4x32(Philox4{{index[j], 0u, row, 0u}}, k0, k1).v[word];
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

__attribute__((target("avx512f"))) inline void Round512(__m512i* x0, __m512i* x1, __m512i* x2,
                                                        __m512i* x3, __m512i m0, __m512i m1,
                                                        __m512i key0, __m512i key1) {
  __m512i hi0, lo0, hi1, lo1;
  MulHiLo512(*x0, m0, &hi0, &lo0);
  MulHiLo512(*x2, m1, &hi1, &lo1);
  *x0 = _mm512_ternarylogic_epi32(hi1, *x1, key0, 0x96);  // three-way xor
  *x1 = lo1;
  *x2 = _mm512_ternarylogic_epi32(hi0, *x3, key1, 0x96);
  *x3 = lo0;
}

__attribute__((target("avx512f"))) void PhiloxTileAvx512(const uint32_t* index, uint32_t row,
                                                         uint32_t k0, uint32_t k1, uint32_t word,
                                                         uint32_t* out) {
  static_assert(kTileElements == 64, "four chains of 16 lanes");
  const __m512i m0 = _mm512_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m512i m1 = _mm512_set1_epi32(static_cast<int>(kPhiloxM1));
  __m512i a0[4], a1[4], a2[4], a3[4];
  for (int c = 0; c < 4; ++c) {
    a0[c] = _mm512_loadu_si512(index + 16 * c);
    a1[c] = _mm512_setzero_si512();
    a2[c] = _mm512_set1_epi32(static_cast<int>(row));
    a3[c] = _mm512_setzero_si512();
  }
  for (int r = 0; r < 10; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    const __m512i key0 = _mm512_set1_epi32(static_cast<int>(k0));
    const __m512i key1 = _mm512_set1_epi32(static_cast<int>(k1));
    for (int c = 0; c < 4; ++c) Round512(&a0[c], &a1[c], &a2[c], &a3[c], m0, m1, key0, key1);
  }
  for (int c = 0; c < 4; ++c) _mm512_storeu_si512(out + 16 * c, word == 0 ? a0[c] : a1[c]);
}

__attribute__((target("avx2"))) inline void Round256(__m256i* x0, __m256i* x1, __m256i* x2,
                                                     __m256i* x3, __m256i m0, __m256i m1,
                                                     __m256i key0, __m256i key1) {
  // Same lane juggling as Round512, with blends for the masked shuffles.
  const __m256i e0 = _mm256_mul_epu32(*x0, m0);
  const __m256i o0 = _mm256_mul_epu32(_mm256_shuffle_epi32(*x0, 0xB1), m0);
  const __m256i e1 = _mm256_mul_epu32(*x2, m1);
  const __m256i o1 = _mm256_mul_epu32(_mm256_shuffle_epi32(*x2, 0xB1), m1);
  const __m256i lo0 = _mm256_blend_epi32(e0, _mm256_shuffle_epi32(o0, 0xB1), 0xAA);
  const __m256i hi0 = _mm256_blend_epi32(_mm256_shuffle_epi32(e0, 0xB1), o0, 0xAA);
  const __m256i lo1 = _mm256_blend_epi32(e1, _mm256_shuffle_epi32(o1, 0xB1), 0xAA);
  const __m256i hi1 = _mm256_blend_epi32(_mm256_shuffle_epi32(e1, 0xB1), o1, 0xAA);
  *x0 = _mm256_xor_si256(_mm256_xor_si256(hi1, *x1), key0);
  *x1 = lo1;
  *x2 = _mm256_xor_si256(_mm256_xor_si256(hi0, *x3), key1);
  *x3 = lo0;
}

__attribute__((target("avx2"))) void PhiloxTileAvx2(const uint32_t* index, uint32_t row,
                                                    uint32_t k0, uint32_t k1, uint32_t word,
                                                    uint32_t* out) {
  const __m256i m0 = _mm256_set1_epi32(static_cast<int>(kPhiloxM0));
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kPhiloxM1));
  for (int half = 0; half < kTileElements; half += 32) {
    __m256i a0[4], a1[4], a2[4], a3[4];
    for (int c = 0; c < 4; ++c) {
      a0[c] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(index + half + 8 * c));
      a1[c] = _mm256_setzero_si256();
      a2[c] = _mm256_set1_epi32(static_cast<int>(row));
      a3[c] = _mm256_setzero_si256();
    }
    uint32_t ka = k0, kb = k1;
    for (int r = 0; r < 10; ++r) {
      if (r > 0) {
        ka += kPhiloxW0;
        kb += kPhiloxW1;
      }
      const __m256i key0 = _mm256_set1_epi32(static_cast<int>(ka));
      const __m256i key1 = _mm256_set1_epi32(static_cast<int>(kb));
      for (int c = 0; c < 4; ++c) Round256(&a0[c], &a1[c], &a2[c], &a3[c], m0, m1, key0, key1);
    }
    for (int c = 0; c < 4; ++c) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + half + 8 * c),
                          word == 0 ? a0[c] : a1[c]);
    }
  }
}

// Eight labels widened to int64.
__attribute__((target("avx512f"))) inline __m512i LoadLabels8(int size, bool is_signed,
                                                              const uint8_t* p) {
  switch (size) {
    case 1: {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      return is_signed ? _mm512_cvtepi8_epi64(b) : _mm512_cvtepu8_epi64(b);
    }
    case 2:
      return _mm512_cvtepi16_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    case 4:
      return _mm512_cvtepi32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
    default:
      return _mm512_loadu_si512(p);
  }
}

__attribute__((target("avx512f"))) void FilterTileAvx512(
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
    const __mmask8 take_pos = _mm512_cmpeq_epi64_mask(lab, pos) & _mm512_cmplt_epu64_mask(u, pb);
    const __mmask8 take_neg = _mm512_cmpeq_epi64_mask(lab, neg) & _mm512_cmplt_epu64_mask(u, nb);
    _mm512_mask_compressstoreu_epi64(pos_out + p, take_pos, packed);
    _mm512_mask_compressstoreu_epi64(neg_out + q, take_neg, packed);
    p += __builtin_popcount(take_pos);
    q += __builtin_popcount(take_neg);
  }
  *np = p;
  *nq = q;
}

__attribute__((target("avx512f,popcnt"))) void CountAvx512(int size, bool is_signed,
                                                           const uint8_t* labels, int64_t n,
                                                           int64_t pos_label, int64_t neg_label,
                                                           int64_t* np, int64_t* nq) {
  const __m512i pos = _mm512_set1_epi64(pos_label), neg = _mm512_set1_epi64(neg_label);
  int64_t p = 0, q = 0;
  for (int64_t i = 0; i < n; i += 8) {
    const __m512i lab = LoadLabels8(size, is_signed, labels + i * size);
    p += __builtin_popcount(_mm512_cmpeq_epi64_mask(lab, pos));
    q += __builtin_popcount(_mm512_cmpeq_epi64_mask(lab, neg));
  }
  *np += p;
  *nq += q;
}

PhiloxTileFn BestPhiloxTile() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) return PhiloxTileAvx512;
  if (__builtin_cpu_supports("avx2")) return PhiloxTileAvx2;
  return PhiloxTilePortable;
}
#else
PhiloxTileFn BestPhiloxTile() { return PhiloxTilePortable; }
#endif

// GPUSAMPLER_PHILOX_ISA=portable|avx2 narrows the choice, for the key generator and the
// candidate filter alike (tests run every version).
PhiloxTileFn SelectedPhiloxTile() {
  static const PhiloxTileFn fn = [] {
    const char* isa = std::getenv("GPUSAMPLER_PHILOX_ISA");
    if (isa != nullptr && std::strcmp(isa, "portable") == 0) return &PhiloxTilePortable;
#if defined(__x86_64__) && defined(__GNUC__)
    if (isa != nullptr && std::strcmp(isa, "avx2") == 0 && __builtin_cpu_supports("avx2")) {
      return &PhiloxTileAvx2;
    }
#endif
    return BestPhiloxTile();
  }();
  return fn;
}

}  // namespace

bool HasVectorFilter() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = [] {
    const char* isa = std::getenv("GPUSAMPLER_PHILOX_ISA");
    if (isa != nullptr && std::strcmp(isa, "avx512") != 0) return false;
    __builtin_cpu_init();
    return static_cast<bool>(__builtin_cpu_supports("avx512f"));
  }();
  return has;
#else
  return false;
#endif
}

void CountLabels(int dtype_size, bool is_signed, const void* labels, int64_t n, int64_t pos_label,
                 int64_t neg_label, int64_t* np, int64_t* nq) {
#if defined(__x86_64__) && defined(__GNUC__)
  CountAvx512(dtype_size, is_signed, static_cast<const uint8_t*>(labels), n, pos_label, neg_label,
              np, nq);
#else
  (void)dtype_size, (void)is_signed, (void)labels, (void)n, (void)pos_label, (void)neg_label;
  (void)np, (void)nq;
#endif
}

void FilterTile(int dtype_size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out,
                int64_t* nq) {
#if defined(__x86_64__) && defined(__GNUC__)
  FilterTileAvx512(dtype_size, is_signed, labels_tile, keys, first, pos_label, neg_label, pos_bound,
                   neg_bound, pos_out, np, neg_out, nq);
#else
  (void)dtype_size, (void)is_signed, (void)labels_tile, (void)keys, (void)first;
  (void)pos_label, (void)neg_label, (void)pos_bound, (void)neg_bound;
  (void)pos_out, (void)np, (void)neg_out, (void)nq;
#endif
}

void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]) {
  alignas(64) uint32_t index[kTileElements];
  for (int j = 0; j < kTileElements; ++j) index[j] = static_cast<uint32_t>(first) + j;
  SelectedPhiloxTile()(index, row, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                       stream, out);
}

void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices, int n,
                    uint32_t* out) {
  alignas(64) uint32_t index[kTileElements] = {};
  alignas(64) uint32_t keys[kTileElements];
  std::memcpy(index, indices, static_cast<size_t>(n) * sizeof(uint32_t));
  SelectedPhiloxTile()(index, row, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                       stream, keys);
  std::memcpy(out, keys, static_cast<size_t>(n) * sizeof(uint32_t));
}

// Per-thread bucket counters of the small-n path of SortByHighWord.
std::vector<uint32_t>& BucketCounts() {
  thread_local std::vector<uint32_t> counts((1 << 14) + 1);
  return counts;
}

void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp) {
  if (n < 2) return;
  if (static_cast<int64_t>(tmp->size()) < n) tmp->resize(n);
  if (n < 32) {
    // Tiny: a comparison sort on the whole word gives the same order (low words are
    // distinct, already the tie-break).
    std::sort(items, items + n);
    return;
  }
  if (n <= 16384) {
    // Small: one stable counting pass on the top bits of the key into about n buckets
    // (keys are uniform, so buckets hold about one item), then insertion sort inside each
    // bucket on the whole word. O(n) expected; std::sort was 20% of a 1000-element row.
    int bits = 5;
    while ((int64_t{1} << bits) < n) ++bits;
    const int shift = 64 - bits;
    // 64 KiB of counters at most: stays in L2.
    std::vector<uint32_t>& count_buf = BucketCounts();
    std::fill(count_buf.begin(), count_buf.begin() + (int64_t{1} << bits) + 1, 0u);
    uint32_t* count = count_buf.data();
    for (int64_t j = 0; j < n; ++j) ++count[(items[j] >> shift) + 1];
    for (int b = 1; b <= (1 << bits); ++b) count[b] += count[b - 1];
    uint64_t* out = tmp->data();
    for (int64_t j = 0; j < n; ++j) out[count[items[j] >> shift]++] = items[j];
    // count[b] is now the end of bucket b.
    int64_t begin = 0;
    for (int b = 0; b < (1 << bits); ++b) {
      const int64_t end = count[b];
      for (int64_t j = begin + 1; j < end; ++j) {
        const uint64_t x = out[j];
        int64_t at = j;
        while (at > begin && out[at - 1] > x) {
          out[at] = out[at - 1];
          --at;
        }
        out[at] = x;
      }
      begin = end;
    }
    std::memcpy(items, out, static_cast<size_t>(n) * sizeof(uint64_t));
    return;
  }
  // LSD radix sort, digits of 11, 11 and 10 bits over bits 32..63; each pass is stable.
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

}  // namespace gpusampler::kernels::cpu
