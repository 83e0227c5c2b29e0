#include "cpu/filter_tiles.hpp"

#include <cstring>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

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

// Labels widened to int64: eight (AVX-512) or four (AVX2) at a time, sign- or zero-extended
// at every width (each LabelWord of dtype.hpp: the dtype table says which a dtype uses).
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

struct FilterFns {
  FilterFn filter;
  CountFn count;
};

const FilterFns& FnsOf(Isa isa) {
  static const FilterFns portable{FilterPortable, CountPortable};
#if defined(__x86_64__) && defined(__GNUC__)
  static const FilterFns avx2{FilterTileAvx2, CountAvx2};
  static const FilterFns avx512{FilterTileAvx512, CountAvx512};
  return ChooseByIsa(isa, portable, &avx2, &avx512);
#else
  return ChooseByIsa<FilterFns>(isa, portable, nullptr, nullptr);
#endif
}

const FilterFns& Active() {
  static const FilterFns& fns = FnsOf(ActiveIsa());
  return fns;
}

}  // namespace

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

}  // namespace gpusampler::kernels::cpu
