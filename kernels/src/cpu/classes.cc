// The class path of the CPU backend (SPEC section 7). Per row:
//   1. the class-code pass: the only pass that reads the labels (and the scores, for
//      membership). Each element gets a code, class + 1 or 0 for "no class", and each chunk
//      counts its elements per code. Codes are one byte when the row has at most 255 classes
//      and two bytes with 256 (a uint8 code + membership bitmap would also fit 256 classes,
//      but every later pass would then read two arrays; 256 classes is the rare edge, and
//      two-byte codes keep one array and one branch-free lookup);
//   2. quotas (ClassQuotas) from the counts, and candidate bounds: UNIFORM from the counts
//      (CandidateBound: u is uniform), HARDEST and WEIGHTED from the keys of a strided sample
//      of the class's members (SampledBound: their law follows the scores);
//   3. the candidate pass reads the codes (and the scores of ranked and weighted members),
//      generates u (and u2 for WEIGHTED) per key tile and keeps, per class: every member when
//      the class keeps all of itself; for UNIFORM, members whose u is below the bound, for
//      HARDEST members whose HardestKey is, for WEIGHTED members whose key is at most it
//      (each reruns without its bound when it misses, so the result stays exact). UNIFORM and
//      keep-all go packed u << 32 | i, HARDEST HardestKey << 32 | i (8 bytes each), and a row
//      of only such classes takes a branch-free loop that stores every member and advances
//      its class's cursor by (key < bound). WEIGHTED keeps the 64-bit key bits of E / w,
//      MIXED HardestKey << 32 | u, as 16-byte (key, i) records. Such a row's loop has no
//      branch on the class (RecordRange), and with AVX-512 / AVX2 the WEIGHTED keys of a tile
//      are computed eight / four lanes at a time, bit-identical to the scalar WeightedE;
//   4. per class: UNIFORM selects by a histogram of the packed keys' top bits (the keys are
//      uniform below the bound, so the bucket of the m-th smallest holds a few keys and only
//      it needs nth_element), the binary path's SelectSmallest; HARDEST by nth_element on
//      the packed keys, its ties at the m-th key ranked again by (u, i); WEIGHTED by a radix
//      selection on the 64-bit key (RadixSelectFront); MIXED selects its h hardest, then
//      the smallest (u, i) of the rest (nth_element);
//   5. the selection ordered by (v, i), labels and feature rows gathered, padding.
#include "cpu/classes.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "cpu/filter_tiles.hpp"
#include "cpu/key_tiles.hpp"
#include "cpu/radix_sort.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// The bound of a packed class that keeps every member (its keys are 32-bit: below the bound),
// and of a WEIGHTED class (its 64-bit keys are kept when at most the bound).
constexpr uint64_t kKeepAll = uint64_t{1} << 32;
constexpr uint64_t kAnyKey = ~uint64_t{0};

// What the candidate pass keeps of a class.
enum Mode : uint8_t {
  kSkip = 0,      // m_c == 0: nothing
  kAll = 1,       // m_c == n_c: every member, no key
  kUniform = 2,   // u below the class's bound
  kWeighted = 3,  // WeightedKeyBits
  kRanked = 4,    // HardestKey << 32 | u (MIXED)
  kHardest = 5,   // packed HardestKey << 32 | i, HardestKey below the class's bound
};

// ---------------------------------------------------------------------------------------------
// WEIGHTED keys of a key tile, eight (AVX-512) or four (AVX2) elements at a time: the same
// IEEE double operations as WeightedE and WeightedKeyBits, in the same order, lane by lane, so
// the same bits (the kernels build with -ffp-contract=off, and these functions' targets do not
// include FMA, so no multiply and add can fuse). Two steps differ in form, not in value:
// double(t) (t < 2^53) is the sum of its high and low words through the 2^84 and 2^52 magic
// numbers (both exact), and m = y * 2^-e is y's mantissa under the exponent of 1.0 (the
// product is exact). keys[j] for j < n; u and u2 are whole tiles, w has n entries. Elements
// that are not WEIGHTED members get a key too (from whatever their score is), never used.
using WeightedKeysFn = void (*)(const uint32_t* u, const uint32_t* u2, const float* w, int n,
                                uint64_t* keys);

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

constexpr double kSqrt2 = 0x1.6a09e667f3bcdp+0;
constexpr double kLn2 = 0x1.62e42fefa39efp-1;
constexpr int64_t kBits2p52 = 0x4330000000000000;  // 2^52
constexpr int64_t kBits2p84 = 0x4530000000000000;  // 2^84

__attribute__((target("avx512f"))) void WeightedGroupAvx512(const uint32_t* u, const uint32_t* u2,
                                                            const float* w, uint64_t* keys) {
  const __m512i hi = _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u)));
  const __m512i lo =
      _mm512_cvtepu32_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u2)));
  const __m512i x =
      _mm512_xor_si512(_mm512_or_si512(_mm512_slli_epi64(hi, 32), lo), _mm512_set1_epi64(-1));
  const __m512i t =
      _mm512_or_si512(_mm512_slli_epi64(_mm512_srli_epi64(x, 12), 1), _mm512_set1_epi64(1));
  const __m512i m52 = _mm512_set1_epi64(kBits2p52), m84 = _mm512_set1_epi64(kBits2p84);
  const __m512d th =
      _mm512_sub_pd(_mm512_castsi512_pd(_mm512_or_si512(_mm512_srli_epi64(t, 32), m84)),
                    _mm512_castsi512_pd(m84));
  const __m512d tl = _mm512_sub_pd(
      _mm512_castsi512_pd(_mm512_or_si512(_mm512_and_si512(t, _mm512_set1_epi64(0xffffffff)), m52)),
      _mm512_castsi512_pd(m52));
  const __m512i y = _mm512_castpd_si512(_mm512_add_pd(th, tl));
  __m512d m = _mm512_castsi512_pd(
      _mm512_or_si512(_mm512_and_si512(y, _mm512_set1_epi64(0x000fffffffffffff)),
                      _mm512_set1_epi64(int64_t{1023} << 52)));
  const __mmask8 big = _mm512_cmp_pd_mask(m, _mm512_set1_pd(kSqrt2), _CMP_GT_OQ);
  m = _mm512_mask_mul_pd(m, big, m, _mm512_set1_pd(0.5));
  // e - 53 (+ 1 where m was halved): the biased exponent eb as 2^52 + eb, less 2^52 + 1076.
  __m512d ed = _mm512_sub_pd(_mm512_castsi512_pd(_mm512_or_si512(_mm512_srli_epi64(y, 52), m52)),
                             _mm512_set1_pd(0x1p52 + 1076.0));
  ed = _mm512_mask_add_pd(ed, big, ed, _mm512_set1_pd(1.0));
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512d s = _mm512_div_pd(_mm512_sub_pd(m, one), _mm512_add_pd(m, one));
  const __m512d z = _mm512_mul_pd(s, s);
  __m512d p = _mm512_set1_pd(1.0 / 21.0);
  for (const double c : {1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0,
                         1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0}) {
    p = _mm512_add_pd(_mm512_mul_pd(p, z), _mm512_set1_pd(c));
  }
  const __m512d two_s = _mm512_mul_pd(_mm512_set1_pd(2.0), s);
  const __m512d ln_m = _mm512_add_pd(two_s, _mm512_mul_pd(two_s, _mm512_mul_pd(z, p)));
  const __m512i sum =
      _mm512_castpd_si512(_mm512_add_pd(_mm512_mul_pd(ed, _mm512_set1_pd(kLn2)), ln_m));
  const __m512d e = _mm512_castsi512_pd(_mm512_xor_si512(sum, _mm512_set1_epi64(INT64_MIN)));
  const __m512d key = _mm512_div_pd(e, _mm512_cvtps_pd(_mm256_loadu_ps(w)));
  _mm512_storeu_si512(keys, _mm512_castpd_si512(key));
}

__attribute__((target("avx2"))) void WeightedGroupAvx2(const uint32_t* u, const uint32_t* u2,
                                                       const float* w, uint64_t* keys) {
  const __m256i hi = _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u)));
  const __m256i lo = _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(u2)));
  const __m256i x =
      _mm256_xor_si256(_mm256_or_si256(_mm256_slli_epi64(hi, 32), lo), _mm256_set1_epi64x(-1));
  const __m256i t =
      _mm256_or_si256(_mm256_slli_epi64(_mm256_srli_epi64(x, 12), 1), _mm256_set1_epi64x(1));
  const __m256i m52 = _mm256_set1_epi64x(kBits2p52), m84 = _mm256_set1_epi64x(kBits2p84);
  const __m256d th =
      _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(t, 32), m84)),
                    _mm256_castsi256_pd(m84));
  const __m256d tl = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(
                                       _mm256_and_si256(t, _mm256_set1_epi64x(0xffffffff)), m52)),
                                   _mm256_castsi256_pd(m52));
  const __m256i y = _mm256_castpd_si256(_mm256_add_pd(th, tl));
  __m256d m = _mm256_castsi256_pd(
      _mm256_or_si256(_mm256_and_si256(y, _mm256_set1_epi64x(0x000fffffffffffff)),
                      _mm256_set1_epi64x(int64_t{1023} << 52)));
  const __m256d big = _mm256_cmp_pd(m, _mm256_set1_pd(kSqrt2), _CMP_GT_OQ);
  m = _mm256_blendv_pd(m, _mm256_mul_pd(m, _mm256_set1_pd(0.5)), big);
  __m256d ed = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(y, 52), m52)),
                             _mm256_set1_pd(0x1p52 + 1076.0));
  ed = _mm256_add_pd(ed, _mm256_and_pd(big, _mm256_set1_pd(1.0)));  // + 0.0 or + 1.0, exact
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d s = _mm256_div_pd(_mm256_sub_pd(m, one), _mm256_add_pd(m, one));
  const __m256d z = _mm256_mul_pd(s, s);
  __m256d p = _mm256_set1_pd(1.0 / 21.0);
  for (const double c : {1.0 / 19.0, 1.0 / 17.0, 1.0 / 15.0, 1.0 / 13.0, 1.0 / 11.0, 1.0 / 9.0,
                         1.0 / 7.0, 1.0 / 5.0, 1.0 / 3.0}) {
    p = _mm256_add_pd(_mm256_mul_pd(p, z), _mm256_set1_pd(c));
  }
  const __m256d two_s = _mm256_mul_pd(_mm256_set1_pd(2.0), s);
  const __m256d ln_m = _mm256_add_pd(two_s, _mm256_mul_pd(two_s, _mm256_mul_pd(z, p)));
  const __m256d sum = _mm256_add_pd(_mm256_mul_pd(ed, _mm256_set1_pd(kLn2)), ln_m);
  const __m256d e = _mm256_xor_pd(sum, _mm256_set1_pd(-0.0));
  const __m256d key = _mm256_div_pd(e, _mm256_cvtps_pd(_mm_loadu_ps(w)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(keys), _mm256_castpd_si256(key));
}
#pragma GCC diagnostic pop

// The last group's scores past n are 1 (u and u2 are whole tiles, so they are in bounds).
template <int kLanes, void (*kGroup)(const uint32_t*, const uint32_t*, const float*, uint64_t*)>
void WeightedKeysVector(const uint32_t* u, const uint32_t* u2, const float* w, int n,
                        uint64_t* keys) {
  int j = 0;
  for (; j + kLanes <= n; j += kLanes) kGroup(u + j, u2 + j, w + j, keys + j);
  if (j < n) {
    float tail[kLanes];
    for (int q = 0; q < kLanes; ++q) tail[q] = j + q < n ? w[j + q] : 1.0f;
    kGroup(u + j, u2 + j, tail, keys + j);
  }
}
#endif

// The vector version for `isa`, or null (portable: keys are computed per member instead).
WeightedKeysFn ChooseWeightedKeys(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512)) {
    return WeightedKeysVector<8, WeightedGroupAvx512>;
  }
  if (isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2))
    return WeightedKeysVector<4, WeightedGroupAvx2>;
#endif
  (void)isa;
  return nullptr;
}

// The row's fixed inputs, shared by the passes.
struct RowContext {
  const RowDesc* row;
  ClassTableView table;
  int32_t num_classes;
  const float* scores;  // null: the row has none (non-UNIFORM classes then have no members)
  int64_t chunks;
  int64_t chunk_len;
  int64_t begin(int64_t c) const { return std::min(row->length, c * chunk_len); }
};

template <typename Fn>
void Split(ThreadPool* pool, int64_t count, Fn&& fn) {
  if (pool != nullptr && count > 1) {
    pool->ParallelFor(count, [&](int64_t c, int) { fn(c); });
  } else {
    for (int64_t c = 0; c < count; ++c) fn(c);
  }
}

template <typename Fn>
void DispatchLabels(DType dtype, const uint8_t* bytes, Fn&& fn) {
  if (!WithLabelWords(dtype, bytes, fn)) {
    throw Error(Error::Code::kInvalidArgument,
                std::string("label dtype ") + Traits(dtype).name + " is not an integer type");
  }
}

// The class (+ 1, 0: none) of every label value in [lo, lo + size), when the ranges, cut to
// the dtype's values, span at most kMaxLutValues: the class-code pass then looks a label up
// without the binary search's unpredictable branches (every one-byte dtype qualifies).
struct LabelLut {
  bool on = false;
  int64_t lo = 0;
  uint64_t size = 0;
  const int16_t* table = nullptr;
};
constexpr int64_t kMaxLutValues = int64_t{1} << 16;

template <typename T>
LabelLut BuildLut(const RowContext& x, ClassScratch* s) {
  LabelLut lut;
  const int32_t num_ranges = x.table.header->num_ranges;
  if (num_ranges == 0) return lut;
  const int64_t lo = std::max<int64_t>(x.table.ranges[0].lo, std::numeric_limits<T>::min());
  const int64_t hi = std::min<int64_t>(x.table.ranges[num_ranges - 1].hi,
                                       static_cast<int64_t>(std::numeric_limits<T>::max()));
  if (hi < lo || static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) >= kMaxLutValues) {
    return lut;
  }
  lut.size = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo) + 1;
  s->lut.resize(lut.size);
  for (uint64_t j = 0; j < lut.size; ++j) {
    s->lut[j] = static_cast<int16_t>(
        ClassOfLabel(x.table.ranges, num_ranges, lo + static_cast<int64_t>(j)) + 1);
  }
  lut.on = true;
  lut.lo = lo;
  lut.table = s->lut.data();
  return lut;
}

constexpr int kMaxCodes = 257;  // 256 classes + "none"
constexpr int kCountLanes = 4;

// Pass 1's loop, with the table lookup or search and the score test chosen outside it, and
// every input in a local: the codes are bytes, which may alias anything, so the compiler
// would otherwise reload the table's fields after every store. Element i counts in lane
// i % 4: with few classes, one counter per code would make every element wait for the
// previous one's store (a store-to-load chain). A chunk is < 2^32 elements.
template <bool kLut, bool kNeedScores, typename T, typename Code>
void CodeLoop(const RowContext& x, const T* labels, const LabelLut& lut, int64_t begin, int64_t end,
              Code* codes, uint32_t (*lanes)[kMaxCodes]) {
  const uint64_t lut_lo = static_cast<uint64_t>(lut.lo), lut_size = lut.size;
  const int16_t* lut_table = lut.table;
  const ClassRange* ranges = x.table.ranges;
  const int32_t num_ranges = x.table.header->num_ranges;
  const float* scores = x.scores;
  // ScoreAdmits per code, without a branch on the class: 0 admits every score (no class,
  // UNIFORM), 1 a score > 0 (WEIGHTED), 2 a score that is not NaN (HARDEST, MIXED).
  int32_t test[kMaxCodes] = {};
  if constexpr (kNeedScores) {
    for (int32_t c = 0; c < x.num_classes; ++c) {
      const auto sel = static_cast<Selection>(x.table.classes[c].selection);
      test[c + 1] = sel == Selection::kUniform ? 0 : sel == Selection::kWeighted ? 1 : 2;
    }
  }
  auto code_of = [&](int64_t i) {
    // Rows of a fused launch start at any byte offset: load the label unaligned.
    T raw;
    std::memcpy(&raw, labels + i, sizeof raw);
    const int64_t label = static_cast<int64_t>(raw);
    int32_t cls;
    if constexpr (kLut) {
      // Modular: off < size exactly when lo <= label < lo + size.
      const uint64_t off = static_cast<uint64_t>(label) - lut_lo;
      cls = (off < lut_size ? lut_table[off < lut_size ? off : 0] : 0) - 1;
    } else {
      cls = ClassOfLabel(ranges, num_ranges, label);
    }
    if constexpr (kNeedScores) {
      const float score = scores != nullptr ? scores[i] : std::numeric_limits<float>::quiet_NaN();
      const int32_t t = test[cls + 1];
      const bool admit = (t == 0) | ((t == 1) & (score > 0.0f)) | ((t == 2) & (score == score));
      cls = admit ? cls : -1;
    }
    return cls + 1;
  };
  int64_t i = begin;
  for (; i + kCountLanes <= end; i += kCountLanes) {
    for (int q = 0; q < kCountLanes; ++q) {
      const int32_t code = code_of(i + q);
      codes[i + q] = static_cast<Code>(code);
      ++lanes[q][code];
    }
  }
  for (; i < end; ++i) {
    const int32_t code = code_of(i);
    codes[i] = static_cast<Code>(code);
    ++lanes[(i - begin) & (kCountLanes - 1)][code];
  }
}

// ---------------------------------------------------------------------------------------------
// Pass 1 in vector code, for rows of at most kVectorRanges ranges (two-class and few-class
// specs): ranges of different classes are disjoint, so each range is one subtraction and one
// unsigned compare of the widened labels (lo <= v <= hi exactly when v - lo <= hi - lo as
// 64-bit unsigned), and the element's code is the code of the range that matched, without a
// table lookup or a search; the score test is two float compares; the counts are per-range
// vector counters (lane j of a step counts into the candidate pass's lane j % 4), and the
// codes are stored one byte per element. Unrolled over the ranges (a template argument).
// The same codes and counts as CodeLoop, element for element.
constexpr int kVectorRanges = 4;

struct VectorCodeTable {
  int32_t num_ranges = 0;
  bool need_scores = false;
  int64_t lo[kVectorRanges] = {};
  uint64_t span[kVectorRanges] = {};  // hi - lo
  int32_t cls[kVectorRanges] = {};
  int32_t test[kVectorRanges] = {};  // of the range's class, as CodeLoop's: 0 every score,
                                     // 1 a score > 0, 2 a score that is not NaN
};

// Elements of [begin, end) done in whole steps; the caller finishes the rest with CodeLoop.
using CodeVectorFn = int64_t (*)(const VectorCodeTable& t, const void* labels, const float* scores,
                                 int64_t begin, int64_t end, uint8_t* codes,
                                 uint32_t (*lanes)[kMaxCodes]);

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

template <typename T>
__attribute__((target("avx512f"))) inline __m512i LoadWide8(const T* p) {
  if constexpr (sizeof(T) == 8) {
    return _mm512_loadu_si512(p);
  } else if constexpr (sizeof(T) == 4) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return std::is_signed_v<T> ? _mm512_cvtepi32_epi64(w) : _mm512_cvtepu32_epi64(w);
  } else if constexpr (sizeof(T) == 2) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return std::is_signed_v<T> ? _mm512_cvtepi16_epi64(w) : _mm512_cvtepu16_epi64(w);
  } else {
    const __m128i w = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return std::is_signed_v<T> ? _mm512_cvtepi8_epi64(w) : _mm512_cvtepu8_epi64(w);
  }
}

template <typename T, int kRanges, bool kScores>
__attribute__((target("avx512f"))) int64_t CodeVectorAvx512(const VectorCodeTable& t,
                                                            const void* labels_v,
                                                            const float* scores, int64_t begin,
                                                            int64_t end, uint8_t* codes,
                                                            uint32_t (*lanes)[kMaxCodes]) {
  const T* labels = static_cast<const T*>(labels_v);
  __m512i lo[kRanges], span[kRanges], code_of[kRanges], count[kRanges];
  __mmask8 any[kRanges], if_positive[kRanges], if_ordered[kRanges];
  for (int r = 0; r < kRanges; ++r) {
    lo[r] = _mm512_set1_epi64(t.lo[r]);
    span[r] = _mm512_set1_epi64(static_cast<int64_t>(t.span[r]));
    code_of[r] = _mm512_set1_epi64(t.cls[r] + 1);
    count[r] = _mm512_setzero_si512();
    any[r] = t.test[r] == 0 ? 0xff : 0;
    if_positive[r] = t.test[r] == 1 ? 0xff : 0;
    if_ordered[r] = t.test[r] == 2 ? 0xff : 0;
  }
  const __m512i minus_one = _mm512_set1_epi64(-1);
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    const __m512i v = LoadWide8(labels + i);
    __mmask8 positive = 0, ordered = 0;
    if constexpr (kScores) {
      if (scores != nullptr) {
        const __m512 w = _mm512_castps256_ps512(_mm256_loadu_ps(scores + i));
        positive = static_cast<__mmask8>(_mm512_cmp_ps_mask(w, _mm512_setzero_ps(), _CMP_GT_OQ));
        ordered = static_cast<__mmask8>(_mm512_cmp_ps_mask(w, w, _CMP_ORD_Q));
      }
    }
    __m512i code = _mm512_setzero_si512();
    for (int r = 0; r < kRanges; ++r) {
      __mmask8 m = _mm512_cmple_epu64_mask(_mm512_sub_epi64(v, lo[r]), span[r]);
      if constexpr (kScores) {
        m &=
            static_cast<__mmask8>(any[r] | (positive & if_positive[r]) | (ordered & if_ordered[r]));
      }
      code = _mm512_mask_mov_epi64(code, m, code_of[r]);
      count[r] = _mm512_mask_sub_epi64(count[r], m, count[r], minus_one);
    }
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm512_cvtepi64_epi8(code));
  }
  const auto steps = static_cast<uint32_t>((i - begin) / 8);
  for (int q = 0; q < kCountLanes; ++q) lanes[q][0] += 2 * steps;
  for (int r = 0; r < kRanges; ++r) {
    alignas(64) int64_t n[8];
    _mm512_store_si512(n, count[r]);
    for (int q = 0; q < kCountLanes; ++q) {
      const auto in_lane = static_cast<uint32_t>(n[q] + n[q + 4]);
      lanes[q][t.cls[r] + 1] += in_lane;
      lanes[q][0] -= in_lane;
    }
  }
  return i;
}

template <typename T>
__attribute__((target("avx2"))) inline __m256i LoadWide4(const T* p) {
  if constexpr (sizeof(T) == 8) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  } else if constexpr (sizeof(T) == 4) {
    const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return std::is_signed_v<T> ? _mm256_cvtepi32_epi64(w) : _mm256_cvtepu32_epi64(w);
  } else if constexpr (sizeof(T) == 2) {
    const __m128i w = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    return std::is_signed_v<T> ? _mm256_cvtepi16_epi64(w) : _mm256_cvtepu16_epi64(w);
  } else {
    int32_t word;
    std::memcpy(&word, p, sizeof word);
    const __m128i w = _mm_cvtsi32_si128(word);
    return std::is_signed_v<T> ? _mm256_cvtepi8_epi64(w) : _mm256_cvtepu8_epi64(w);
  }
}

// Byte j of kSpread4.word[m] is 0xff where bit j of m is set.
struct Spread4 {
  uint32_t word[16] = {};
  constexpr Spread4() {
    for (int m = 0; m < 16; ++m) {
      for (int j = 0; j < 4; ++j) {
        if (m & (1 << j)) word[m] |= uint32_t{0xff} << (8 * j);
      }
    }
  }
};
inline constexpr Spread4 kSpread4;

// AVX2 has no unsigned compare: a <= b unsigned is !((a ^ 2^63) > (b ^ 2^63)) signed.
template <typename T, int kRanges, bool kScores>
__attribute__((target("avx2"))) int64_t CodeVectorAvx2(const VectorCodeTable& t,
                                                       const void* labels_v, const float* scores,
                                                       int64_t begin, int64_t end, uint8_t* codes,
                                                       uint32_t (*lanes)[kMaxCodes]) {
  const T* labels = static_cast<const T*>(labels_v);
  const __m256i sign = _mm256_set1_epi64x(std::numeric_limits<int64_t>::min());
  __m256i lo[kRanges], span[kRanges], count[kRanges], any[kRanges], if_positive[kRanges],
      if_ordered[kRanges];
  uint32_t code_word[kRanges];
  for (int r = 0; r < kRanges; ++r) {
    lo[r] = _mm256_set1_epi64x(t.lo[r]);
    span[r] = _mm256_xor_si256(_mm256_set1_epi64x(static_cast<int64_t>(t.span[r])), sign);
    count[r] = _mm256_setzero_si256();
    any[r] = _mm256_set1_epi64x(t.test[r] == 0 ? -1 : 0);
    if_positive[r] = _mm256_set1_epi64x(t.test[r] == 1 ? -1 : 0);
    if_ordered[r] = _mm256_set1_epi64x(t.test[r] == 2 ? -1 : 0);
    code_word[r] = 0x01010101u * static_cast<uint32_t>(t.cls[r] + 1);
  }
  int64_t i = begin;
  for (; i + 4 <= end; i += 4) {
    const __m256i v = LoadWide4(labels + i);
    __m256i admit = _mm256_set1_epi64x(-1);
    __m256i positive = _mm256_setzero_si256(), ordered = _mm256_setzero_si256();
    if constexpr (kScores) {
      if (scores != nullptr) {
        const __m256d w = _mm256_cvtps_pd(_mm_loadu_ps(scores + i));  // exact, keeps NaN
        positive = _mm256_castpd_si256(_mm256_cmp_pd(w, _mm256_setzero_pd(), _CMP_GT_OQ));
        ordered = _mm256_castpd_si256(_mm256_cmp_pd(w, w, _CMP_ORD_Q));
      }
    }
    uint32_t word = 0;
    for (int r = 0; r < kRanges; ++r) {
      const __m256i outside =
          _mm256_cmpgt_epi64(_mm256_xor_si256(_mm256_sub_epi64(v, lo[r]), sign), span[r]);
      if constexpr (kScores) {
        admit = _mm256_or_si256(any[r], _mm256_or_si256(_mm256_and_si256(positive, if_positive[r]),
                                                        _mm256_and_si256(ordered, if_ordered[r])));
      }
      const __m256i member = _mm256_andnot_si256(outside, admit);
      word |= kSpread4.word[_mm256_movemask_pd(_mm256_castsi256_pd(member))] & code_word[r];
      count[r] = _mm256_sub_epi64(count[r], member);
    }
    std::memcpy(codes + i, &word, sizeof word);
  }
  const auto steps = static_cast<uint32_t>((i - begin) / 4);
  for (int q = 0; q < kCountLanes; ++q) lanes[q][0] += steps;
  for (int r = 0; r < kRanges; ++r) {
    alignas(32) int64_t n[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(n), count[r]);
    for (int q = 0; q < kCountLanes; ++q) {
      lanes[q][t.cls[r] + 1] += static_cast<uint32_t>(n[q]);
      lanes[q][0] -= static_cast<uint32_t>(n[q]);
    }
  }
  return i;
}
#pragma GCC diagnostic pop

template <typename T, bool kScores>
CodeVectorFn ChooseCodeVectorFor(Isa isa, int num_ranges) {
  const bool avx512 = isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512);
  switch (num_ranges) {
    case 1:
      return avx512 ? CodeVectorAvx512<T, 1, kScores> : CodeVectorAvx2<T, 1, kScores>;
    case 2:
      return avx512 ? CodeVectorAvx512<T, 2, kScores> : CodeVectorAvx2<T, 2, kScores>;
    case 3:
      return avx512 ? CodeVectorAvx512<T, 3, kScores> : CodeVectorAvx2<T, 3, kScores>;
    default:
      return avx512 ? CodeVectorAvx512<T, 4, kScores> : CodeVectorAvx2<T, 4, kScores>;
  }
}
#endif

// The vector pass for `isa` and label word T, or null (portable, or more ranges than it takes).
template <typename T>
CodeVectorFn ChooseCodeVector(Isa isa, const VectorCodeTable& t) {
  if (t.num_ranges == 0 || t.num_ranges > kVectorRanges) return nullptr;
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2)) {
    return t.need_scores ? ChooseCodeVectorFor<T, true>(isa, t.num_ranges)
                         : ChooseCodeVectorFor<T, false>(isa, t.num_ranges);
  }
#endif
  (void)isa;
  return nullptr;
}

VectorCodeTable MakeVectorCodeTable(const RowContext& x) {
  VectorCodeTable t;
  t.num_ranges = x.table.header->num_ranges;
  if (t.num_ranges > kVectorRanges) return t;
  t.need_scores = (x.table.header->flags & kClassesNeedScores) != 0;
  for (int32_t r = 0; r < t.num_ranges; ++r) {
    const ClassRange& range = x.table.ranges[r];
    t.lo[r] = range.lo;
    t.span[r] = static_cast<uint64_t>(range.hi) - static_cast<uint64_t>(range.lo);
    t.cls[r] = range.cls;
    const auto sel = static_cast<Selection>(x.table.classes[range.cls].selection);
    t.test[r] = sel == Selection::kUniform ? 0 : sel == Selection::kWeighted ? 1 : 2;
  }
  return t;
}

// Pass 1 over [begin, end): codes and per-code counts, per lane: counts[q * (C + 1) + code]
// counts the elements i of lane q = (i - begin) % kCountLanes, the candidate pass's lanes.
template <typename T, typename Code>
void CodeRange(const RowContext& x, const T* labels, const LabelLut& lut, CodeVectorFn vector,
               const VectorCodeTable& vector_table, int64_t begin, int64_t end, Code* codes,
               int64_t* counts) {
  const bool need_scores = (x.table.header->flags & kClassesNeedScores) != 0;
  const int64_t width = x.num_classes + 1;
  uint32_t lanes[kCountLanes][kMaxCodes];
  for (auto& lane : lanes) std::memset(lane, 0, static_cast<size_t>(width) * sizeof(uint32_t));
  if constexpr (std::is_same_v<Code, uint8_t>) {
    // Whole steps from `begin` (a multiple of 4 elements, so lanes stay (i - begin) % 4).
    if (vector != nullptr) begin = vector(vector_table, labels, x.scores, begin, end, codes, lanes);
  }
  if (lut.on && !need_scores) {
    CodeLoop<true, false>(x, labels, lut, begin, end, codes, lanes);
  } else if (lut.on) {
    CodeLoop<true, true>(x, labels, lut, begin, end, codes, lanes);
  } else if (!need_scores) {
    CodeLoop<false, false>(x, labels, lut, begin, end, codes, lanes);
  } else {
    CodeLoop<false, true>(x, labels, lut, begin, end, codes, lanes);
  }
  for (int q = 0; q < kCountLanes; ++q) {
    for (int64_t c = 0; c < width; ++c) counts[q * width + c] += lanes[q][c];
  }
}

bool IsPacked(uint8_t mode) { return mode == kAll || mode == kUniform || mode == kHardest; }

// Whether the candidate pass needs u (stream 0) for every element: kAll and kHardest
// candidates are packed without it (kHardest's ties get theirs in SelectHardestPacked).
bool NeedsU(uint8_t mode) { return mode == kUniform || mode == kWeighted || mode == kRanked; }

// The candidate regions are per (class, chunk, lane): element i of a chunk starting at
// `begin` is in lane (i - begin) % kCountLanes, and each lane has its own write cursor per
// class. One cursor per class would be loaded, stored to and advanced once per member, so with
// few classes every element would wait for the previous one's store (a store-to-load chain
// through memory); with a cursor per lane, consecutive elements use different cursors.
// region[RegionAt(x, c, chunk, q)] is the first slot of the (class, chunk, lane) region, and
// found[q * C + c] (found: the chunk's block of s.chunk_found) how many it kept.
int64_t RegionAt(const RowContext& x, int32_t c, int64_t chunk, int q) {
  return (c * x.chunks + chunk) * kCountLanes + q;
}

// Calls step(i, lane) for every i of [tile, tile_end), lane = (i - tile) % kCountLanes (a tile
// starts at a multiple of kTileElements from the chunk's start, so that is the chunk's lane).
template <typename Step>
inline void ForEachInLanes(int64_t tile, int64_t tile_end, Step&& step) {
  int64_t i = tile;
  for (; i + kCountLanes <= tile_end; i += kCountLanes) {
    for (int q = 0; q < kCountLanes; ++q) step(i + q, q);
  }
  for (; i < tile_end; ++i) step(i, static_cast<int>((i - tile) & (kCountLanes - 1)));
}

// The 32-bit key a packed candidate of `code` carries: HardestKey(score) for kHardest classes
// (hard[code] all ones), u for the others; a mask, not a branch on the class.
inline uint32_t PackedKey32(uint32_t key_u, const float* scores, int64_t i, uint32_t hard) {
  return (HardestKey(scores[i]) & hard) | (key_u & ~hard);
}

// The packed candidates' write cursors of one chunk, per (lane, code), with each code's bound
// and HardestKey mask: a member is stored at its cursor, which advances when its key (u, or
// HardestKey for kHardest classes) is below the bound. "No class", skipped classes and
// `to_spare` (a class kept elsewhere, or -1) write to the chunk's spare slot and never advance.
struct PackedCursors {
  uint64_t* at[kCountLanes][kMaxCodes];
  uint64_t bound[kMaxCodes];
  uint32_t hard[kMaxCodes];

  PackedCursors(const RowContext& x, const ClassScratch& s, int64_t chunk, uint64_t* packed,
                uint64_t* spare, int32_t to_spare) {
    bound[0] = 0;
    hard[0] = 0;
    for (int q = 0; q < kCountLanes; ++q) at[q][0] = spare;
    for (int32_t c = 0; c < x.num_classes; ++c) {
      const bool skip = s.mode[c] == kSkip || c == to_spare;
      bound[c + 1] = skip ? 0 : s.bound[c];
      hard[c + 1] = s.mode[c] == kHardest ? ~uint32_t{0} : 0;
      for (int q = 0; q < kCountLanes; ++q) {
        at[q][c + 1] = skip ? spare : packed + s.region[RegionAt(x, c, chunk, q)];
      }
    }
  }

  // Element i of lane q, code `code`, u = key_u; kScored: the row has kHardest classes.
  template <bool kScored>
  void Store(const float* scores, int64_t i, int q, int32_t code, uint32_t key_u) {
    uint32_t key = key_u;
    if constexpr (kScored) key = PackedKey32(key, scores, i, hard[code]);
    uint64_t* p = at[q][code];
    *p = PackKey(key, static_cast<uint64_t>(i));
    at[q][code] = p + (key < bound[code]);
  }

  // found[q * C + c]: what each (lane, class) kept, for the classes that were not skipped and
  // not `to_spare`.
  void Found(const RowContext& x, const ClassScratch& s, int64_t chunk, const uint64_t* packed,
             int32_t to_spare, int64_t* found) const {
    const int32_t nc = x.num_classes;
    for (int32_t c = 0; c < nc; ++c) {
      if (s.mode[c] == kSkip || c == to_spare) continue;
      for (int q = 0; q < kCountLanes; ++q) {
        found[q * nc + c] = at[q][c + 1] - (packed + s.region[RegionAt(x, c, chunk, q)]);
      }
    }
  }
};

// ---------------------------------------------------------------------------------------------
// The packed stores in vector code (AVX-512), for rows of one-byte codes whose packed classes
// are at most kVectorPacked, all keyed by u (UNIFORM or keep-all; HARDEST keys need the scores):
// 16 elements a step, per class a member mask (code and u below the bound), the packed words
// u << 32 | i compressed in a register and written with a masked store of exactly the kept
// words (no slack past a region; a memory-destination compress is slow on AMD, the register
// form is not). Each class's candidates of the chunk go one after another from its lane-0
// region (the chunk's four lane regions are adjacent and together hold its members) and are
// counted in lane 0: the lanes exist against the scalar loop's store-to-load chain, which the
// vector form does not have. The selection reads the same set in another order, and the set
// decides the answer (docs/decisions.md K15).
constexpr int kVectorPacked = 4;

struct VectorPackedClasses {
  int num = 0;
  uint32_t code[kVectorPacked] = {};   // class + 1
  uint32_t limit[kVectorPacked] = {};  // bound - 1: u <= limit keeps it
  uint16_t valid[kVectorPacked] = {};  // 0: a bound of 0 keeps nothing
};

// Stores n (a multiple of 16) elements of a tile starting at element `first`; at[j]: class j's
// cursor, advanced past what it kept.
using PackedTileFn = void (*)(const uint8_t* codes, const uint32_t* u, int n, uint32_t first,
                              const VectorPackedClasses& p, uint64_t** at);

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
template <int kClasses>
__attribute__((target("avx512f"))) void PackedTileAvx512(const uint8_t* codes, const uint32_t* u,
                                                         int n, uint32_t first,
                                                         const VectorPackedClasses& p,
                                                         uint64_t** at) {
  __m512i code_of[kClasses], limit[kClasses];
  uint64_t* cursor[kClasses];
  for (int c = 0; c < kClasses; ++c) {
    code_of[c] = _mm512_set1_epi32(static_cast<int>(p.code[c]));
    limit[c] = _mm512_set1_epi32(static_cast<int>(p.limit[c]));
    cursor[c] = at[c];
  }
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int j = 0; j + 16 <= n; j += 16) {
    const __m512i code =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + j)));
    const __m512i key = _mm512_loadu_si512(u + j);
    const __m512i index = _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int>(first + j)));
    const __m512i low =
        _mm512_or_si512(_mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(key)), 32),
                        _mm512_cvtepu32_epi64(_mm512_castsi512_si256(index)));
    const __m512i high = _mm512_or_si512(
        _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(key, 1)), 32),
        _mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(index, 1)));
    for (int c = 0; c < kClasses; ++c) {
      const __mmask16 keep = _mm512_cmpeq_epi32_mask(code, code_of[c]) &
                             _mm512_cmple_epu32_mask(key, limit[c]) & p.valid[c];
      const auto keep_low = static_cast<__mmask8>(keep),
                 keep_high = static_cast<__mmask8>(keep >> 8);
      const int n_low = __builtin_popcount(keep_low), n_high = __builtin_popcount(keep_high);
      _mm512_mask_storeu_epi64(cursor[c], static_cast<__mmask8>((1u << n_low) - 1),
                               _mm512_maskz_compress_epi64(keep_low, low));
      cursor[c] += n_low;
      _mm512_mask_storeu_epi64(cursor[c], static_cast<__mmask8>((1u << n_high) - 1),
                               _mm512_maskz_compress_epi64(keep_high, high));
      cursor[c] += n_high;
    }
  }
  for (int c = 0; c < kClasses; ++c) at[c] = cursor[c];
}
#pragma GCC diagnostic pop
#endif

PackedTileFn ChoosePackedTile(Isa isa, int num_classes) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512)) {
    switch (num_classes) {
      case 1:
        return PackedTileAvx512<1>;
      case 2:
        return PackedTileAvx512<2>;
      case 3:
        return PackedTileAvx512<3>;
      case 4:
        return PackedTileAvx512<4>;
      default:
        return nullptr;
    }
  }
#endif
  (void)isa;
  (void)num_classes;
  return nullptr;
}

// The vector packed stores of a chunk, when its packed classes (those not skipped and not
// `to_spare`) qualify: every one UNIFORM or keep-all, at most kVectorPacked of them, one-byte
// codes and an ISA with the vector form. Elements past the tile's last whole step of 16 are
// stored by the scalar cursors, in lane 0 as well.
struct VectorPackedStores {
  PackedTileFn fn = nullptr;
  VectorPackedClasses classes;
  int32_t cls[kVectorPacked] = {};

  template <typename Code>
  VectorPackedStores(const RowContext& x, Isa isa, const ClassScratch& s, int32_t to_spare,
                     const Code*) {
    if constexpr (!std::is_same_v<Code, uint8_t>) return;
    for (int32_t c = 0; c < x.num_classes; ++c) {
      const uint8_t mode = s.mode[c];
      if (mode == kSkip || c == to_spare) continue;
      if ((mode != kUniform && mode != kAll) || classes.num == kVectorPacked) return;
      const uint64_t bound = std::min<uint64_t>(s.bound[c], kKeepAll);
      classes.code[classes.num] = static_cast<uint32_t>(c + 1);
      classes.limit[classes.num] = bound == 0 ? 0 : static_cast<uint32_t>(bound - 1);
      classes.valid[classes.num] = bound == 0 ? 0 : 0xffff;
      cls[classes.num++] = c;
    }
    if (classes.num > 0) fn = ChoosePackedTile(isa, classes.num);
  }

  // The tile's elements [tile, tile_end) of the chunk, u of the tile; the cursors' lane 0.
  void Tile(const uint8_t* codes, const uint32_t* u, int64_t tile, int64_t tile_end,
            PackedCursors* cursors) const {
    uint64_t* at[kVectorPacked];
    for (int j = 0; j < classes.num; ++j) at[j] = cursors->at[0][cls[j] + 1];
    const int whole = static_cast<int>((tile_end - tile) & ~int64_t{15});
    fn(codes + tile, u, whole, static_cast<uint32_t>(tile), classes, at);
    for (int j = 0; j < classes.num; ++j) cursors->at[0][cls[j] + 1] = at[j];
    for (int64_t i = tile + whole; i < tile_end; ++i) {
      cursors->Store<false>(nullptr, i, 0, codes[i], u[i - tile]);
    }
  }
};

// Pass 3 over one chunk of a row whose classes are all packed (or skipped): every member is
// stored at its class's cursor for its lane (PackedCursors), or by the vector stores above.
// kScored: the row has kHardest classes, whose keys are HardestKey(score).
template <bool kScored, typename Code>
void PackedRange(const RowContext& x, Isa isa, bool need_u, const Code* codes, int64_t chunk,
                 const ClassScratch& s, uint64_t* packed, uint64_t* spare, int64_t* found) {
  const RowDesc& row = *x.row;
  const int64_t begin = x.begin(chunk), end = x.begin(chunk + 1);
  PackedCursors cursors(x, s, chunk, packed, spare, -1);
  alignas(64) uint32_t u[kTileElements] = {};
  const VectorPackedStores vector(x, isa, s, -1, codes);
  for (int64_t tile = begin; tile < end; tile += kTileElements) {
    const int64_t tile_end = std::min(end, tile + kTileElements);
    if (need_u) KeyTile(isa, row.seed, row.row_in_request, kSelectionStream, tile, u);
    if constexpr (!kScored && std::is_same_v<Code, uint8_t>) {
      if (vector.fn != nullptr) {
        vector.Tile(codes, u, tile, tile_end, &cursors);
        continue;
      }
    }
    ForEachInLanes(tile, tile_end, [&](int64_t i, int q) {
      cursors.Store<kScored>(x.scores, i, q, codes[i], u[i - tile]);
    });
  }
  cursors.Found(x, s, chunk, packed, -1, found);
}

// Pass 3 over one chunk of a row with WEIGHTED or ranked classes, without a branch on the
// class (with two classes of different modes that branch mispredicts about every other
// element): every element is stored twice, packed u << 32 | i at its class's packed cursor,
// which advances when u is below the bound (0: classes that are not packed, none, skipped),
// and as a (key, i) record at its record cursor, which advances for WEIGHTED and ranked classes
// only (the others' cursor is the chunk's spare record). Needs the scores and, with WEIGHTED
// classes, a vector WeightedKeysFn (the portable version computes E per member instead).
template <typename Code>
void RecordRange(const RowContext& x, Isa isa, WeightedKeysFn weighted_keys, bool need_u2,
                 const Code* codes, int64_t chunk, const ClassScratch& s, uint64_t* packed,
                 uint64_t* spare, ClassCandidate* cand, ClassCandidate* spare_cand,
                 int64_t* found) {
  const RowDesc& row = *x.row;
  const int64_t begin = x.begin(chunk), end = x.begin(chunk + 1);
  const int32_t nc = x.num_classes;
  uint64_t* at[kCountLanes][kMaxCodes];
  ClassCandidate* at_rec[kCountLanes][kMaxCodes];
  uint64_t bound[kMaxCodes], weighted[kMaxCodes], rec_max[kMaxCodes];
  uint32_t hard[kMaxCodes];
  uint8_t rec[kMaxCodes];
  bound[0] = 0;
  rec[0] = 0;
  rec_max[0] = 0;
  weighted[0] = 0;
  hard[0] = 0;
  for (int q = 0; q < kCountLanes; ++q) {
    at[q][0] = spare;
    at_rec[q][0] = spare_cand;
  }
  for (int32_t c = 0; c < nc; ++c) {
    const uint8_t mode = s.mode[c];
    const bool is_packed = IsPacked(mode), is_rec = mode == kWeighted || mode == kRanked;
    bound[c + 1] = is_packed ? s.bound[c] : 0;
    rec[c + 1] = is_rec ? 1 : 0;
    weighted[c + 1] = mode == kWeighted ? ~uint64_t{0} : 0;  // a mask: no branch on it
    hard[c + 1] = mode == kHardest ? ~uint32_t{0} : 0;
    rec_max[c + 1] = mode == kWeighted ? s.bound[c] : kAnyKey;
    for (int q = 0; q < kCountLanes; ++q) {
      const int64_t first = s.region[RegionAt(x, c, chunk, q)];
      at[q][c + 1] = is_packed ? packed + first : spare;
      at_rec[q][c + 1] = is_rec ? cand + first : spare_cand;
    }
  }
  const float* scores = x.scores;
  alignas(64) uint32_t u[kTileElements] = {};
  alignas(64) uint32_t u2[kTileElements] = {};
  alignas(64) uint64_t wkeys[kTileElements] = {};
  for (int64_t tile = begin; tile < end; tile += kTileElements) {
    const int64_t tile_end = std::min(end, tile + kTileElements);
    KeyTile(isa, row.seed, row.row_in_request, kSelectionStream, tile, u);
    if (need_u2) {
      KeyTile(isa, row.seed, row.row_in_request, kWeightStream, tile, u2);
      weighted_keys(u, u2, scores + tile, static_cast<int>(tile_end - tile), wkeys);
    }
    ForEachInLanes(tile, tile_end, [&](int64_t i, int q) {
      const int32_t code = codes[i];
      const uint32_t key_u = u[i - tile];
      const uint32_t key = PackedKey32(key_u, scores, i, hard[code]);
      uint64_t* p = at[q][code];
      *p = PackKey(key, static_cast<uint64_t>(i));
      at[q][code] = p + (key < bound[code]);
      const uint64_t ranked = (uint64_t{HardestKey(scores[i])} << 32) | key_u;
      const uint64_t wmask = weighted[code];
      ClassCandidate* r = at_rec[q][code];
      const uint64_t rec_key = (wkeys[i - tile] & wmask) | (ranked & ~wmask);
      *r = {rec_key, static_cast<uint32_t>(i), 0};
      at_rec[q][code] = r + (rec[code] & static_cast<uint8_t>(rec_key <= rec_max[code]));
    });
  }
  for (int32_t c = 0; c < nc; ++c) {
    for (int q = 0; q < kCountLanes; ++q) {
      const int64_t first = s.region[RegionAt(x, c, chunk, q)];
      if (IsPacked(s.mode[c])) found[q * nc + c] = at[q][c + 1] - (packed + first);
      if (rec[c + 1]) found[q * nc + c] = at_rec[q][c + 1] - (cand + first);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// WEIGHTED under a bound B: a member can have key = E / w <= B only if a lower bound of E that
// u alone gives is at most B w. With a = ~u, x = ~(u << 32 | u2) < (a + 1) 2^32, so
// U = y / 2^53 < (a + 1) / 2^32 and E = -ln U > Emin = 32 ln 2 - ln(a + 1). The prefilter
// computes Emin in float (a + 1 rounded, a short atanh series for the log: |error| < 1e-4) and
// passes a member when Emin <= B w (1 + 2^-10) + 2^-8, a margin far above those errors, so
// every member with key <= B passes (a few more do). Only those then get u2 (one Philox call
// each) and their exact key, and are kept when the key is at most B: the same candidates as
// keying every member, without E or u2 for the rest. Float operations, never contracted (the
// kernels build with -ffp-contract=off); the result is only a filter, never a key.
//
// Writes the indices first + j of the members (code == wcode) among the n elements of a tile
// that pass, returns how many. A last partial group runs on copies padded with non-members.
using WeightedPrefilterFn = int (*)(const uint8_t* codes, uint8_t wcode, const uint32_t* u,
                                    const float* w, int n, float bound, uint32_t first,
                                    uint32_t* out);

constexpr float kPrefilterSlope = 1.0f + 0x1p-10f;
constexpr float kPrefilterSlack = 0x1p-8f;
constexpr float k32Ln2 = 22.18070977791825f;

// Calls group(codes, u, w, base, kept) over [0, n) in groups of kGroup elements, the last one
// on copies padded with non-members; `kept` is the sum of what the earlier calls returned, and
// so is the result.
template <int kGroup, typename Group>
int PrefilterGroups(const uint8_t* codes, const uint32_t* u, const float* w, int n, uint32_t first,
                    Group&& group) {
  int kept = 0, j = 0;
  for (; j + kGroup <= n; j += kGroup) {
    kept += group(codes + j, u + j, w + j, first + static_cast<uint32_t>(j), kept);
  }
  if (j < n) {
    alignas(64) uint8_t tc[kGroup] = {};  // 0: no class, never a member
    alignas(64) uint32_t tu[kGroup] = {};
    alignas(64) float tw[kGroup] = {};
    std::memcpy(tc, codes + j, static_cast<size_t>(n - j));
    std::memcpy(tu, u + j, static_cast<size_t>(n - j) * sizeof(uint32_t));
    std::memcpy(tw, w + j, static_cast<size_t>(n - j) * sizeof(float));
    kept += group(tc, tu, tw, first + static_cast<uint32_t>(j), kept);
  }
  return kept;
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// B w (1 + 2^-10) + 2^-8: what both tests compare with.
__attribute__((target("avx512f"))) inline __m512 PrefilterLimitAvx512(__m512 w, float bound) {
  return _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(bound * kPrefilterSlope), w),
                       _mm512_set1_ps(kPrefilterSlack));
}

// The log test of 16 lanes (u, w): Emin(u) <= B w (1 + 2^-10) + 2^-8.
__attribute__((target("avx512f"))) inline __mmask16 LogTestAvx512(__m512i u, __m512 w,
                                                                  float bound) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512i a = _mm512_xor_si512(u, _mm512_set1_epi32(-1));                 // ~u
  const __m512 x = _mm512_add_ps(_mm512_cvtepu32_ps(a), one);                   // a + 1
  const __m512 e = _mm512_getexp_ps(x);                                         // floor(log2 x)
  const __m512 m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);  // [1, 2)
  // t = (m - 1) / (m + 1) by the 14-bit reciprocal (relative error < 2^-14, so ln_m's error
  // < 2 t 2^-14 < 5e-5 for t < 1/3, with the series' < 2e-5: far inside the slack): a
  // division of 16 floats took about as long as the rest of the group (docs/decisions.md K15).
  const __m512 t = _mm512_mul_ps(_mm512_sub_ps(m, one), _mm512_rcp14_ps(_mm512_add_ps(m, one)));
  const __m512 t2 = _mm512_mul_ps(t, t);
  __m512 p = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(1.0f / 7.0f), t2), _mm512_set1_ps(0.2f));
  p = _mm512_add_ps(_mm512_mul_ps(p, t2), _mm512_set1_ps(1.0f / 3.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, t2), one);
  const __m512 ln_m = _mm512_mul_ps(_mm512_add_ps(t, t), p);
  const __m512 ln_x = _mm512_add_ps(_mm512_mul_ps(e, _mm512_set1_ps(0.6931471805599453f)), ln_m);
  const __m512 e_min = _mm512_sub_ps(_mm512_set1_ps(k32Ln2), ln_x);
  return _mm512_cmp_ps_mask(e_min, PrefilterLimitAvx512(w, bound), _CMP_LE_OQ);
}

// The first, linear stage over 16 elements from `base`: E >= -ln(1 - u / 2^32) >= u / 2^32,
// so a member whose t = u / 2^32 exceeds B w cannot have key = E / w <= B. A member passes when
// t (u rounded to a float: relative error 2^-24) is at most B w (1 + 2^-10) + 2^-8, the log
// test's margin, which covers that rounding and the float product's. The passers' index, u and
// w are compressed into idx, su and sw (register compress, masked stores); returns how many.
__attribute__((target("avx512f"))) inline int LinearStageAvx512(const uint8_t* codes, uint8_t wcode,
                                                                const uint32_t* u, const float* w,
                                                                float bound, uint32_t base,
                                                                uint32_t* idx, uint32_t* su,
                                                                float* sw) {
  const __m512i code =
      _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes)));
  const __mmask16 member = _mm512_cmpeq_epi32_mask(code, _mm512_set1_epi32(wcode));
  const __m512i uu = _mm512_loadu_si512(u);
  const __m512 ww = _mm512_loadu_ps(w);
  const __m512 t = _mm512_mul_ps(_mm512_cvtepu32_ps(uu), _mm512_set1_ps(0x1p-32f));
  const __mmask16 pass =
      member & _mm512_cmp_ps_mask(t, PrefilterLimitAvx512(ww, bound), _CMP_LE_OQ);
  const __m512i index =
      _mm512_add_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                       _mm512_set1_epi32(static_cast<int>(base)));
  const int kept = __builtin_popcount(pass);
  const auto first_kept = static_cast<__mmask16>((1u << kept) - 1);
  _mm512_mask_storeu_epi32(idx, first_kept, _mm512_maskz_compress_epi32(pass, index));
  _mm512_mask_storeu_epi32(su, first_kept, _mm512_maskz_compress_epi32(pass, uu));
  _mm512_mask_storeu_ps(sw, first_kept, _mm512_maskz_compress_ps(pass, ww));
  return kept;
}

// 8 elements. a + 1 as a float rounded up (it may only make Emin smaller, so the filter stays
// conservative): ((a >> 8) + 1) * 256 is exact in float and at least a + 1.
__attribute__((target("avx2"))) inline int PrefilterGroupAvx2(const uint8_t* codes, uint8_t wcode,
                                                              const uint32_t* u, const float* w,
                                                              float bound, uint32_t base,
                                                              uint32_t* out) {
  const __m256i code =
      _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes)));
  const int member =
      _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(code, _mm256_set1_epi32(wcode))));
  if (member == 0) return 0;
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256i a = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u)),
                                     _mm256_set1_epi32(-1));
  const __m256i hi = _mm256_add_epi32(_mm256_srli_epi32(a, 8), _mm256_set1_epi32(1));
  const __m256 x = _mm256_mul_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(256.0f));
  const __m256i bits = _mm256_castps_si256(x);
  const __m256 e =
      _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(bits, 23), _mm256_set1_epi32(127)));
  const __m256 m = _mm256_castsi256_ps(_mm256_or_si256(
      _mm256_and_si256(bits, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x3f800000)));
  const __m256 t = _mm256_div_ps(_mm256_sub_ps(m, one), _mm256_add_ps(m, one));
  const __m256 t2 = _mm256_mul_ps(t, t);
  __m256 p = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(1.0f / 7.0f), t2), _mm256_set1_ps(0.2f));
  p = _mm256_add_ps(_mm256_mul_ps(p, t2), _mm256_set1_ps(1.0f / 3.0f));
  p = _mm256_add_ps(_mm256_mul_ps(p, t2), one);
  const __m256 ln_m = _mm256_mul_ps(_mm256_add_ps(t, t), p);
  const __m256 ln_x = _mm256_add_ps(_mm256_mul_ps(e, _mm256_set1_ps(0.6931471805599453f)), ln_m);
  const __m256 e_min = _mm256_sub_ps(_mm256_set1_ps(k32Ln2), ln_x);
  const __m256 limit =
      _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(bound * kPrefilterSlope), _mm256_loadu_ps(w)),
                    _mm256_set1_ps(kPrefilterSlack));
  int pass = member & _mm256_movemask_ps(_mm256_cmp_ps(e_min, limit, _CMP_LE_OQ));
  int kept = 0;
  while (pass != 0) {
    out[kept++] = base + static_cast<uint32_t>(__builtin_ctz(static_cast<unsigned>(pass)));
    pass &= pass - 1;
  }
  return kept;
}

// Two stages: the linear test over every element (a multiply, an add and a compare per 16),
// then the log test only for its passers, about the bound's fraction of the members: the log
// test over every group was a tenth of the WEIGHTED row (docs/decisions.md K15). n <= 256.
__attribute__((target("avx512f"))) int WeightedPrefilterAvx512(const uint8_t* codes, uint8_t wcode,
                                                               const uint32_t* u, const float* w,
                                                               int n, float bound, uint32_t first,
                                                               uint32_t* out) {
  alignas(64) uint32_t idx[kTileElements], su[kTileElements];
  alignas(64) float sw[kTileElements];
  const int c = PrefilterGroups<16>(
      codes, u, w, n, first,
      [&](const uint8_t* gc, const uint32_t* gu, const float* gw, uint32_t base, int at) {
        return LinearStageAvx512(gc, wcode, gu, gw, bound, base, idx + at, su + at, sw + at);
      });
  int kept = 0;
  for (int g = 0; g < c; g += 16) {
    const auto valid = static_cast<__mmask16>(c - g >= 16 ? 0xffff : (1u << (c - g)) - 1);
    const __mmask16 pass = valid & LogTestAvx512(_mm512_maskz_loadu_epi32(valid, su + g),
                                                 _mm512_maskz_loadu_ps(valid, sw + g), bound);
    const int k = __builtin_popcount(pass);
    _mm512_mask_storeu_epi32(
        out + kept, static_cast<__mmask16>((1u << k) - 1),
        _mm512_maskz_compress_epi32(pass, _mm512_maskz_loadu_epi32(valid, idx + g)));
    kept += k;
  }
  return kept;
}

__attribute__((target("avx2"))) int WeightedPrefilterAvx2(const uint8_t* codes, uint8_t wcode,
                                                          const uint32_t* u, const float* w, int n,
                                                          float bound, uint32_t first,
                                                          uint32_t* out) {
  return PrefilterGroups<8>(
      codes, u, w, n, first,
      [&](const uint8_t* gc, const uint32_t* gu, const float* gw, uint32_t base, int at) {
        return PrefilterGroupAvx2(gc, wcode, gu, gw, bound, base, out + at);
      });
}
#pragma GCC diagnostic pop
#endif

WeightedPrefilterFn ChooseWeightedPrefilter(Isa isa) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (isa == Isa::kAvx512 && IsaSupported(Isa::kAvx512)) return WeightedPrefilterAvx512;
  if (isa >= Isa::kAvx2 && IsaSupported(Isa::kAvx2)) return WeightedPrefilterAvx2;
#endif
  (void)isa;
  return nullptr;
}

// Pass 3 over one chunk of a row whose classes are packed or skipped but one, WEIGHTED under a
// bound (code wcode, class wc): the packed classes as PackedRange does (the WEIGHTED class's
// packed cursor is the spare slot), and the WEIGHTED members that pass the prefilter get
// their exact key; those at most the bound are written one after another from the class's
// first region of the chunk (the chunk's four lane regions are adjacent, and together hold
// every member of the chunk), counted in lane 0.
template <bool kScored>
void WeightedPrefilterRange(const RowContext& x, Isa isa, WeightedKeysFn weighted_keys,
                            WeightedPrefilterFn prefilter, const uint8_t* codes, int64_t chunk,
                            int32_t wc, const ClassScratch& s, uint64_t* packed, uint64_t* spare,
                            ClassCandidate* cand, int64_t* found) {
  const RowDesc& row = *x.row;
  const int64_t begin = x.begin(chunk), end = x.begin(chunk + 1);
  const int32_t nc = x.num_classes;
  const uint8_t wcode = static_cast<uint8_t>(wc + 1);
  PackedCursors cursors(x, s, chunk, packed, spare, wc);
  const VectorPackedStores vector(x, isa, s, wc, codes);
  const uint64_t key_bound = s.bound[wc];
  const float bound_f = static_cast<float>(BitsDouble(key_bound));
  ClassCandidate* rec = cand + s.region[RegionAt(x, wc, chunk, 0)];
  ClassCandidate* const rec_first = rec;
  const float* scores = x.scores;
  // The members that passed, gathered over tiles until a whole Philox call group of them
  // (kKeyBatch) is ready: a tile passes about 17 of its 256 elements at 32 x 1e5, K = 1e4, and
  // KeysOfElements makes a whole group of 64 calls for any count, so keying each tile's passers
  // alone cost as much as a key tile (docs/decisions.md K15).
  constexpr int kKeyBatch = 64;
  constexpr int kPending = kKeyBatch + kTileElements;  // at most kKeyBatch - 1 + one tile
  alignas(64) uint32_t u[kTileElements] = {};
  alignas(64) uint32_t pass[kPending];
  alignas(64) uint32_t pu[kPending] = {}, pu2[kPending] = {};
  alignas(64) float pw[kPending];
  alignas(64) uint64_t keys[kPending];
  int pending = 0;
  // Keys the first n pending members (the weighted keys' last group reads u and u2 up to a
  // multiple of its lanes: in bounds, kPending is a multiple of 64) and moves the rest down.
  auto key_pending = [&](int n) {
    KeysOfElements(isa, row.seed, row.row_in_request, kWeightStream, pass, n, pu2);
    weighted_keys(pu, pu2, pw, n, keys);
    for (int j = 0; j < n; ++j) {
      *rec = {keys[j], pass[j], 0};
      rec += keys[j] <= key_bound;
    }
    const int left = pending - n;
    std::memmove(pass, pass + n, static_cast<size_t>(left) * sizeof(uint32_t));
    std::memmove(pu, pu + n, static_cast<size_t>(left) * sizeof(uint32_t));
    std::memmove(pw, pw + n, static_cast<size_t>(left) * sizeof(float));
    pending = left;
  };
  for (int64_t tile = begin; tile < end; tile += kTileElements) {
    const int64_t tile_end = std::min(end, tile + kTileElements);
    KeyTile(isa, row.seed, row.row_in_request, kSelectionStream, tile, u);
    if (!kScored && vector.fn != nullptr) {
      vector.Tile(codes, u, tile, tile_end, &cursors);
    } else {
      ForEachInLanes(tile, tile_end, [&](int64_t i, int q) {
        cursors.Store<kScored>(scores, i, q, codes[i], u[i - tile]);
      });
    }
    const int n =
        prefilter(codes + tile, wcode, u, scores + tile, static_cast<int>(tile_end - tile), bound_f,
                  static_cast<uint32_t>(tile), pass + pending);
    for (int j = pending; j < pending + n; ++j) {
      pu[j] = u[pass[j] - tile];
      pw[j] = scores[pass[j]];
    }
    pending += n;
    if (pending >= kKeyBatch) key_pending(pending & ~(kKeyBatch - 1));
  }
  if (pending > 0) key_pending(pending);
  cursors.Found(x, s, chunk, packed, wc, found);
  for (int q = 0; q < kCountLanes; ++q) found[q * nc + wc] = q == 0 ? rec - rec_first : 0;
}

// Pass 3 over one chunk: each kept member goes to its class's region for the chunk and lane.
template <typename Code>
void CandidateRange(const RowContext& x, Isa isa, const Code* codes, int64_t chunk,
                    const ClassScratch& s, uint64_t* packed, uint64_t* spare, ClassCandidate* cand,
                    ClassCandidate* spare_cand, int64_t* found) {
  const RowDesc& row = *x.row;
  const int64_t begin = x.begin(chunk), end = x.begin(chunk + 1);
  bool need_u = false, need_u2 = false, all_packed = true, hardest = false;
  for (int32_t c = 0; c < x.num_classes; ++c) {
    need_u = need_u || NeedsU(s.mode[c]);
    need_u2 = need_u2 || s.mode[c] == kWeighted;
    hardest = hardest || s.mode[c] == kHardest;
    all_packed = all_packed && (s.mode[c] == kSkip || IsPacked(s.mode[c]));
  }
  // A kHardest class has members only when the row has scores (ScoreAdmits).
  if (all_packed && hardest && x.scores != nullptr) {
    return PackedRange<true>(x, isa, need_u, codes, chunk, s, packed, spare, found);
  }
  if (all_packed) return PackedRange<false>(x, isa, need_u, codes, chunk, s, packed, spare, found);
  const int64_t* region = s.region.data();
  // Without scores no element is a WEIGHTED member (ScoreAdmits), so no keys are needed.
  const WeightedKeysFn weighted_keys =
      need_u2 && x.scores != nullptr ? ChooseWeightedKeys(isa) : nullptr;
  if constexpr (std::is_same_v<Code, uint8_t>) {
    // One WEIGHTED class under a bound, the others packed: the prefilter.
    int32_t wc = -1, bounded = 0, others = 0;
    bool any_hardest = false;
    for (int32_t c = 0; c < x.num_classes; ++c) {
      any_hardest = any_hardest || s.mode[c] == kHardest;
      if (s.mode[c] == kWeighted && s.bound[c] != kAnyKey) {
        wc = c;
        ++bounded;
      } else if (s.mode[c] != kSkip && !IsPacked(s.mode[c])) {
        ++others;
      }
    }
    const WeightedPrefilterFn prefilter = ChooseWeightedPrefilter(isa);
    if (bounded == 1 && others == 0 && weighted_keys != nullptr && prefilter != nullptr) {
      auto range = any_hardest ? WeightedPrefilterRange<true> : WeightedPrefilterRange<false>;
      return range(x, isa, weighted_keys, prefilter, codes, chunk, wc, s, packed, spare, cand,
                   found);
    }
  }
  if (x.scores != nullptr && (!need_u2 || weighted_keys != nullptr)) {
    return RecordRange(x, isa, weighted_keys, need_u2, codes, chunk, s, packed, spare, cand,
                       spare_cand, found);
  }
  alignas(64) uint32_t u[kTileElements] = {};
  alignas(64) uint32_t u2[kTileElements] = {};
  alignas(64) uint64_t wkeys[kTileElements];
  for (int64_t tile = begin; tile < end; tile += kTileElements) {
    const int64_t tile_end = std::min(end, tile + kTileElements);
    if (need_u) KeyTile(isa, row.seed, row.row_in_request, kSelectionStream, tile, u);
    if (need_u2) KeyTile(isa, row.seed, row.row_in_request, kWeightStream, tile, u2);
    if (weighted_keys != nullptr) {
      weighted_keys(u, u2, x.scores + tile, static_cast<int>(tile_end - tile), wkeys);
    }
    for (int64_t i = tile; i < tile_end; ++i) {
      const int32_t code = codes[i];
      if (code == 0) continue;
      const int32_t c = code - 1;
      const int q = static_cast<int>((i - tile) & (kCountLanes - 1));
      const int64_t at = region[RegionAt(x, c, chunk, q)];
      int64_t& kept = found[q * x.num_classes + c];
      const uint32_t key_u = u[i - tile];
      uint64_t key = 0;
      switch (s.mode[c]) {
        case kSkip:
          continue;
        case kAll:
        case kUniform:
          if (key_u >= s.bound[c]) continue;
          packed[at + kept++] = PackKey(key_u, i);
          continue;
        case kHardest: {
          const uint32_t hk = HardestKey(x.scores[i]);
          if (hk >= s.bound[c]) continue;
          packed[at + kept++] = PackKey(hk, i);
          continue;
        }
        case kWeighted:
          key = weighted_keys != nullptr
                    ? wkeys[i - tile]
                    : WeightedKeyBits(WeightedE(key_u, u2[i - tile]), x.scores[i]);
          if (key > s.bound[c]) continue;
          break;
        default:  // kRanked
          key = (uint64_t{HardestKey(x.scores[i])} << 32) | key_u;
          break;
      }
      cand[at + kept++] = {key, static_cast<uint32_t>(i), 0};
    }
  }
}

// Function objects, not functions: nth_element then inlines the comparison (a function
// pointer was an indirect call per comparison).
struct Less {
  bool operator()(const ClassCandidate& a, const ClassCandidate& b) const {
    return a.key < b.key || (a.key == b.key && a.index < b.index);
  }
};

struct LessLow {
  bool operator()(const ClassCandidate& a, const ClassCandidate& b) const {
    const uint32_t ua = static_cast<uint32_t>(a.key), ub = static_cast<uint32_t>(b.key);
    return ua < ub || (ua == ub && a.index < b.index);
  }
};

// Moves the m smallest of the c packed keys at x (m < c; each key's u below `bound`) to the
// front, in any order. The histogram's buckets hold about two keys each (at most 2^11).
void SelectSmallestPacked(uint64_t* x, int64_t c, int64_t m, uint64_t bound) {
  int c_bits = 0;
  while (c_bits < 30 && (int64_t{1} << c_bits) < c) ++c_bits;
  const int bucket_bits = std::clamp(c_bits - 1, 4, 11);
  int key_bits = 0;
  while (key_bits < 32 && (uint64_t{1} << key_bits) < bound) ++key_bits;
  const int shift = 32 + std::max(0, key_bits - bucket_bits);
  uint32_t hist[1 << 11];
  const uint64_t top = (bound - 1) >> (shift - 32);
  std::memset(hist, 0, static_cast<size_t>(top + 1) * sizeof(uint32_t));
  for (int64_t j = 0; j < c; ++j) ++hist[x[j] >> shift];
  // The bound keeps c - m small, so the bucket of the m-th smallest is found from the top.
  int64_t above = 0;
  uint64_t bucket = top;
  while (c - above - hist[bucket] >= m) above += hist[bucket--];
  uint64_t* mid = std::partition(x, x + c, [&](uint64_t v) { return (v >> shift) < bucket; });
  uint64_t* hi = std::partition(mid, x + c, [&](uint64_t v) { return (v >> shift) == bucket; });
  std::nth_element(mid, x + m, hi);
}

// Moves the first `take` of [first, last) in `less` order to the front (any order).
template <typename Less>
void SelectFront(ClassCandidate* first, ClassCandidate* last, int64_t take, Less less) {
  if (take <= 0 || take >= last - first) return;
  std::nth_element(first, first + take, last, less);
}

// Moves the first `take` of [first, last) in (key, index) order to the front, in any order: an
// MSD radix selection on 11-bit digits of the key, taken just below the bits that every key
// left shares. Each pass is a histogram and two partitions: the digits below the bucket of the
// take-th smallest are selected, the bucket is kept for the next pass, the rest dropped. A few
// left, or keys all equal (then the index decides), finish with nth_element. Exact: the
// selected set is the take smallest by (key, index), as SelectFront's.
void RadixSelectFront(ClassCandidate* first, ClassCandidate* last, int64_t take) {
  constexpr int kDigitBits = 11;
  constexpr int64_t kSmall = 64;
  uint32_t hist[1 << kDigitBits];
  while (take > 0 && take < last - first) {
    uint64_t differ = 0;
    for (const ClassCandidate* p = first; p != last; ++p) differ |= p->key ^ first->key;
    if (last - first <= kSmall || differ == 0) {
      std::nth_element(first, first + take, last, Less{});
      return;
    }
    const int shift = std::max(0, BitLength64(differ) - kDigitBits);
    const uint64_t mask = (uint64_t{1} << kDigitBits) - 1;
    std::memset(hist, 0, sizeof hist);
    for (const ClassCandidate* p = first; p != last; ++p) ++hist[(p->key >> shift) & mask];
    int64_t below = 0;
    uint64_t bucket = 0;
    while (below + hist[bucket] < take) below += hist[bucket++];
    auto digit = [&](const ClassCandidate& c) { return (c.key >> shift) & mask; };
    ClassCandidate* keep_end =
        std::partition(first, last, [&](const ClassCandidate& c) { return digit(c) <= bucket; });
    first =
        std::partition(first, keep_end, [&](const ClassCandidate& c) { return digit(c) < bucket; });
    last = keep_end;
    take -= below;
  }
}

// Sorts n items ascending: a radix sort by the high word (v), then each run of equal v (about
// n^2 / 2^33 per row) by the whole item.
void SortItems(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp) {
  SortByHighWord(items, n, tmp);
  for (int64_t j = 1; j < n; ++j) {
    if ((items[j] >> 32) != (items[j - 1] >> 32)) continue;
    int64_t end = j + 1;
    while (end < n && (items[end] >> 32) == (items[j] >> 32)) ++end;
    std::sort(items + (j - 1), items + end);
    j = end - 1;
  }
}

class ClassRowSampler {
 public:
  ClassRowSampler(const Batch& batch, const RowDesc& row, RowStores stores,
                  const ClassPathOptions& options, ClassScratch* s, ThreadPool* pool)
      : batch_(batch), row_(row), stores_(stores), options_(options), s_(*s), pool_(pool) {
    x_.row = &row;
    x_.table = ViewClassTable(batch.class_tables + row.class_table);
    x_.num_classes = x_.table.header->num_classes;
    x_.scores = row.score_offset >= 0 && batch.scores != nullptr ? batch.scores + row.score_offset
                                                                 : nullptr;
    x_.chunks = pool != nullptr ? pool->size() : 1;
    x_.chunk_len = ((row.length + x_.chunks - 1) / x_.chunks + kTileElements - 1) / kTileElements *
                   kTileElements;
    if (x_.chunk_len == 0) x_.chunk_len = kTileElements;
  }

  void Run() {
    if (x_.num_classes > 255) {
      RunWithCodes<uint16_t>();
    } else {
      RunWithCodes<uint8_t>();
    }
  }

 private:
  template <typename Code>
  void RunWithCodes() {
    const int32_t nc = x_.num_classes;
    const size_t need = static_cast<size_t>(row_.length) * sizeof(Code);
    if (s_.codes.size() < need) s_.codes.resize(need);
    Code* codes = reinterpret_cast<Code*>(s_.codes.data());
    ClassCodes(codes);
    Quotas();
    PlanCandidates(codes);
    FindCandidates(codes);
    Split(pool_, nc, [&](int64_t c) { SelectClass(static_cast<int32_t>(c)); });
    OrderSelection();
    FindSingleValues();
    WriteOutputs();
  }

  template <typename Code>
  void ClassCodes(Code* codes) {
    const int64_t width = x_.num_classes + 1;
    s_.chunk_counts.assign(static_cast<size_t>(x_.chunks * kCountLanes * width), 0);
    const uint8_t* label_bytes = batch_.labels + row_.label_offset;
    DispatchLabels(row_.label_dtype, label_bytes, [&](const auto* labels) {
      using T = std::remove_cv_t<std::remove_pointer_t<decltype(labels)>>;
      const LabelLut lut = BuildLut<T>(x_, &s_);
      const VectorCodeTable vector_table = MakeVectorCodeTable(x_);
      const CodeVectorFn vector = ChooseCodeVector<T>(options_.isa, vector_table);
      Split(pool_, x_.chunks, [&](int64_t c) {
        CodeRange(x_, labels, lut, vector, vector_table, x_.begin(c), x_.begin(c + 1), codes,
                  s_.chunk_counts.data() + c * kCountLanes * width);
      });
    });
  }

  void Quotas() {
    const int32_t nc = x_.num_classes;
    s_.n.assign(static_cast<size_t>(nc), 0);
    s_.m.assign(static_cast<size_t>(nc), 0);
    for (int64_t lane = 0; lane < x_.chunks * kCountLanes; ++lane) {
      for (int32_t c = 0; c < nc; ++c) s_.n[c] += s_.chunk_counts[lane * (nc + 1) + c + 1];
    }
    ClassQuotas(x_.table.classes, nc, x_.table.fill, x_.table.header->num_fill, row_.num_samples,
                s_.n.data(), s_.m.data());
    s_.first.assign(static_cast<size_t>(nc) + 1, 0);
    for (int32_t c = 0; c < nc; ++c) s_.first[c + 1] = s_.first[c] + s_.m[c];
    if (s_.selected.size() < static_cast<size_t>(s_.first[nc])) s_.selected.resize(s_.first[nc]);
  }

  // Modes, bounds and each (class, chunk, lane)'s candidate region, sized by its member count, in
  // s_.packed (UNIFORM, keep-all) or s_.cand; one spare packed slot per chunk past them.
  template <typename Code>
  void PlanCandidates(const Code* codes) {
    const int32_t nc = x_.num_classes;
    s_.mode.assign(static_cast<size_t>(nc), kSkip);
    s_.bound.assign(static_cast<size_t>(nc), kKeepAll);
    s_.region.assign(static_cast<size_t>(nc * x_.chunks * kCountLanes), 0);
    int64_t at = 0, at_packed = 0;
    for (int32_t c = 0; c < nc; ++c) {
      const int64_t n = s_.n[c], m = s_.m[c];
      const auto sel = static_cast<Selection>(x_.table.classes[c].selection);
      uint8_t mode = kSkip;
      if (m == 0) {
        mode = kSkip;
      } else if (m == n) {
        mode = kAll;
      } else if (sel == Selection::kUniform) {
        mode = kUniform;
        s_.bound[c] = CandidateBound(n, m, options_.candidate_sigmas, options_.candidate_slack);
      } else if (sel == Selection::kWeighted) {
        mode = kWeighted;
        uint64_t at_most = 0;
        s_.bound[c] = SampledBound(codes, c, n, m, &at_most) ? at_most : kAnyKey;
      } else if (sel == Selection::kHardest) {
        mode = kHardest;
        uint64_t at_most = 0;
        if (SampledBound(codes, c, n, m, &at_most)) s_.bound[c] = at_most + 1;
      } else {
        mode = kRanked;
      }
      s_.mode[c] = mode;
      int64_t& next = IsPacked(mode) ? at_packed : at;
      for (int64_t lane = 0; lane < x_.chunks * kCountLanes; ++lane) {
        s_.region[c * x_.chunks * kCountLanes + lane] = next;
        if (mode != kSkip) next += s_.chunk_counts[lane * (nc + 1) + c + 1];
      }
    }
    const auto cand_need = static_cast<size_t>(at + x_.chunks);
    if (s_.cand.size() < cand_need) s_.cand.resize(cand_need);
    spare_cand_ = at;
    spare_ = at_packed;
    const auto packed_need = static_cast<size_t>(at_packed + x_.chunks);
    if (s_.packed.size() < packed_need) s_.packed.resize(packed_need);
  }

  // The candidate pass; a UNIFORM class whose bound kept fewer than m_c reruns without one.
  template <typename Code>
  void FindCandidates(const Code* codes) {
    const int32_t nc = x_.num_classes;
    for (;;) {
      s_.chunk_found.assign(static_cast<size_t>(x_.chunks * kCountLanes * nc), 0);
      Split(pool_, x_.chunks, [&](int64_t ch) {
        CandidateRange(x_, options_.isa, codes, ch, s_, s_.packed.data(),
                       s_.packed.data() + spare_ + ch, s_.cand.data(),
                       s_.cand.data() + spare_cand_ + ch,
                       s_.chunk_found.data() + ch * kCountLanes * nc);
      });
      s_.found.assign(static_cast<size_t>(nc), 0);
      bool missed = false;
      for (int32_t c = 0; c < nc; ++c) {
        for (int64_t lane = 0; lane < x_.chunks * kCountLanes; ++lane) {
          s_.found[c] += s_.chunk_found[lane * nc + c];
        }
        const uint8_t mode = s_.mode[c];
        const bool bounded = mode == kUniform || mode == kHardest || mode == kWeighted;
        if (bounded && s_.found[c] < s_.m[c]) {
          s_.bound[c] = mode == kWeighted ? kAnyKey : kKeepAll;
          missed = true;
        }
      }
      if (!missed) return;
    }
  }

  // Closes the gaps between the class's chunk regions, then selects its m_c into
  // s_.selected[first_c, first_c + m_c).
  void SelectClass(int32_t c) {
    if (s_.mode[c] == kSkip) return;
    if (IsPacked(s_.mode[c])) return SelectPackedClass(c);
    const int32_t nc = x_.num_classes;
    const int64_t lanes = x_.chunks * kCountLanes;
    ClassCandidate* base = s_.cand.data() + s_.region[c * lanes];
    int64_t f = 0;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int64_t n = s_.chunk_found[lane * nc + c];
      const ClassCandidate* src = s_.cand.data() + s_.region[c * lanes + lane];
      if (src != base + f) std::memmove(base + f, src, static_cast<size_t>(n) * sizeof(*src));
      f += n;
    }
    const int64_t m = s_.m[c];
    ClassCandidate* end = base + f;
    if (s_.mode[c] == kUniform || s_.mode[c] == kWeighted) {
      RadixSelectFront(base, end, m);
    } else if (s_.mode[c] == kRanked) {
      const bool mixed = static_cast<Selection>(x_.table.classes[c].selection) == Selection::kMixed;
      const int64_t h = mixed ? HardQuota(m, x_.table.classes[c].hard_fraction) : m;
      RadixSelectFront(base, end, h);
      SelectFront(base + h, end, m - h, LessLow{});
    }
    uint32_t* out = s_.selected.data() + s_.first[c];
    for (int64_t j = 0; j < m; ++j) out[j] = base[j].index;
  }

  void SelectPackedClass(int32_t c) {
    const int32_t nc = x_.num_classes;
    const int64_t lanes = x_.chunks * kCountLanes;
    uint64_t* base = s_.packed.data() + s_.region[c * lanes];
    int64_t f = 0;
    for (int64_t lane = 0; lane < lanes; ++lane) {
      const int64_t n = s_.chunk_found[lane * nc + c];
      const uint64_t* src = s_.packed.data() + s_.region[c * lanes + lane];
      if (src != base + f) std::memmove(base + f, src, static_cast<size_t>(n) * sizeof(*src));
      f += n;
    }
    const int64_t m = s_.m[c];
    if (s_.mode[c] == kHardest) {
      SelectHardestPacked(base, f, m);
    } else if (m < f) {
      SelectSmallestPacked(base, f, m, s_.bound[c]);
    }
    uint32_t* out = s_.selected.data() + s_.first[c];
    for (int64_t j = 0; j < m; ++j) out[j] = PackedIndex(base[j]);
  }

  // Candidate bounds for HARDEST and WEIGHTED classes of n members and quota m < n, from a
  // sample instead of a count (the keys' law follows the scores, unknown): the members among
  // up to kBoundSample elements at a fixed stride, and the key of rank m / n of them plus
  // candidate_sigmas binomial deviations and a slack. The bound is inclusive, so every key
  // equal to it is a candidate, and FindCandidates reruns without it when it keeps fewer than
  // m: a sample that misleads (a periodic layout, a tied run) costs time, never a wrong answer.
  // False: no bound (a small class, or a quota near n).
  template <typename Code>
  bool SampledBound(const Code* codes, int32_t c, int64_t n, int64_t m, uint64_t* bound) {
    // Up to 4096 elements, and a sixteenth of a shorter row: the sample is a fixed cost per
    // row, so a short row takes fewer (a looser bound costs it less than a longer sample).
    constexpr int64_t kBoundSample = 4096, kMinMembers = 256;
    const int64_t len = row_.length;
    if (n < 4 * kMinMembers || x_.scores == nullptr) return false;
    const int64_t stride = std::max<int64_t>(16, len / kBoundSample);
    std::vector<uint32_t>& index = s_.sample_index;
    index.clear();
    for (int64_t i = stride / 2; i < len; i += stride) {
      if (codes[i] == c + 1) index.push_back(static_cast<uint32_t>(i));
    }
    const auto members = static_cast<int64_t>(index.size());
    if (members < kMinMembers) return false;
    const double p = static_cast<double>(m) / static_cast<double>(n);
    const double sd = std::sqrt(static_cast<double>(members) * p * (1.0 - p));
    const double rank = std::ceil(p * static_cast<double>(members) +
                                  options_.candidate_sigmas * sd + options_.candidate_slack);
    if (rank >= static_cast<double>(members)) return false;
    std::vector<uint64_t>& keys = s_.sample_keys;
    keys.resize(static_cast<size_t>(members));
    if (static_cast<Selection>(x_.table.classes[c].selection) == Selection::kWeighted) {
      // The vector keys where the ISA has them (the same bits as WeightedKeyBits).
      const WeightedKeysFn weighted_keys = ChooseWeightedKeys(options_.isa);
      alignas(64) uint32_t u[kTileElements] = {}, u2[kTileElements] = {};
      alignas(64) float w[kTileElements];
      alignas(64) uint64_t tile_keys[kTileElements];  // whole groups: may write past k
      for (int64_t j = 0; j < members; j += kTileElements) {
        const int64_t k = std::min<int64_t>(kTileElements, members - j);
        const uint32_t* at = index.data() + j;
        KeysOfElements(options_.isa, row_.seed, row_.row_in_request, kSelectionStream, at, k, u);
        KeysOfElements(options_.isa, row_.seed, row_.row_in_request, kWeightStream, at, k, u2);
        for (int64_t q = 0; q < k; ++q) w[q] = x_.scores[at[q]];
        if (weighted_keys != nullptr) {
          weighted_keys(u, u2, w, static_cast<int>(k), tile_keys);
          std::copy(tile_keys, tile_keys + k, keys.begin() + j);
        } else {
          for (int64_t q = 0; q < k; ++q)
            keys[j + q] = WeightedKeyBits(WeightedE(u[q], u2[q]), w[q]);
        }
      }
    } else {
      for (int64_t j = 0; j < members; ++j) keys[j] = HardestKey(x_.scores[index[j]]);
    }
    const auto r = static_cast<int64_t>(std::max(0.0, rank));
    std::nth_element(keys.begin(), keys.begin() + r, keys.end());
    *bound = keys[r];
    return true;
  }

  // Moves the m smallest (HardestKey, u, i) of the f packed HardestKey << 32 | i at x to the
  // front, in any order: the m smallest (HardestKey, i) first, then, when the m-th key T also
  // belongs to one left out, the members keyed T are ranked again by (u, i), with u made for
  // them alone (one Philox call each; real scores rarely tie).
  void SelectHardestPacked(uint64_t* x, int64_t f, int64_t m) {
    if (m >= f) return;
    std::nth_element(x, x + m, x + f);
    uint32_t t = 0;
    for (int64_t j = 0; j < m; ++j) t = std::max(t, static_cast<uint32_t>(x[j] >> 32));
    if (m == 0 || static_cast<uint32_t>(x[m] >> 32) != t) return;
    auto keyed_below = [t](uint64_t v) { return static_cast<uint32_t>(v >> 32) < t; };
    auto keyed_t = [t](uint64_t v) { return static_cast<uint32_t>(v >> 32) == t; };
    const int64_t below = std::partition(x, x + m, keyed_below) - x;
    const int64_t tied_end = std::partition(x + m, x + f, keyed_t) - x;
    // x[below, tied_end): every candidate keyed t; the first m - below by (u, i) are taken.
    const int64_t tied = tied_end - below;
    // Classes select in parallel, so not a ClassScratch buffer.
    std::vector<uint32_t> index(static_cast<size_t>(tied));
    for (int64_t j = 0; j < tied; ++j) index[j] = PackedIndex(x[below + j]);
    alignas(64) uint32_t u[kTileElements];
    for (int64_t j = 0; j < tied; j += kTileElements) {
      const int64_t n = std::min<int64_t>(kTileElements, tied - j);
      KeysOfElements(options_.isa, row_.seed, row_.row_in_request, kSelectionStream,
                     index.data() + j, n, u);
      for (int64_t q = 0; q < n; ++q) x[below + j + q] = PackKey(u[q], index[j + q]);
    }
    std::nth_element(x + below, x + m, x + tied_end);
    for (int64_t j = below; j < tied_end; ++j) x[j] = PackKey(t, PackedIndex(x[j]));
  }

  // Slots [begin, selected) from s_.items, [selected, end) padding.
  void WriteSlots(int64_t begin, int64_t selected, int64_t end) {
    const int64_t pad = Traits(row_.label_dtype).padding_label;
    int64_t* out_idx = batch_.out_indices + row_.out_slot;
    uint8_t* out_lab = batch_.out_labels + row_.out_label_offset;
    const uint8_t* in_lab = batch_.labels + row_.label_offset;
    auto write = [&](auto word, const auto* codes) {
      using W = decltype(word);
      for (int64_t slot = begin; slot < selected; ++slot) {
        const uint32_t i = PackedIndex(s_.items[slot]);
        out_idx[slot] = i;
        const int32_t code = codes[i];
        W value;
        if (single_[code]) {
          value = static_cast<W>(single_value_[code]);
        } else {
          std::memcpy(&value, in_lab + i * sizeof(W), sizeof(W));
        }
        std::memcpy(out_lab + slot * sizeof(W), &value, sizeof(W));
      }
      const W pad_word = static_cast<W>(pad);  // little-endian low bytes
      for (int64_t slot = std::max(begin, selected); slot < end; ++slot) {
        out_idx[slot] = -1;
        std::memcpy(out_lab + slot * sizeof(W), &pad_word, sizeof(W));
      }
    };
    auto with_codes = [&](auto word) {
      if (x_.num_classes > 255) {
        write(word, reinterpret_cast<const uint16_t*>(s_.codes.data()));
      } else {
        write(word, s_.codes.data());
      }
    };
    switch (DTypeSize(row_.label_dtype)) {
      case 1:
        return with_codes(uint8_t{});
      case 2:
        return with_codes(uint16_t{});
      case 4:
        return with_codes(uint32_t{});
      default:
        return with_codes(uint64_t{});
    }
  }

  // single_[code]: whether the class of `code` is one label value (single_value_[code]);
  // code 0 (no class) is never selected.
  void FindSingleValues() {
    const int32_t nc = x_.num_classes;
    std::fill(single_, single_ + nc + 1, uint8_t{1});
    std::fill(single_value_, single_value_ + nc + 1, int64_t{0});
    uint8_t seen[kMaxCodes] = {};
    for (int32_t r = 0; r < x_.table.header->num_ranges; ++r) {
      const ClassRange& range = x_.table.ranges[r];
      const int32_t code = range.cls + 1;
      if (range.lo != range.hi || (seen[range.cls] && single_value_[code] != range.lo)) {
        single_[code] = 0;
      }
      seen[range.cls] = 1;
      single_value_[code] = range.lo;
    }
  }

  // s_.items[0, M): v << 32 | i of every selected element, sorted.
  void OrderSelection() {
    const int64_t total = s_.first.empty() ? 0 : s_.first.back();
    if (static_cast<int64_t>(s_.items.size()) < total) s_.items.resize(total);
    const int64_t per = std::max<int64_t>(kTileElements, (total + x_.chunks - 1) / x_.chunks);
    Split(pool_, (total + per - 1) / per, [&](int64_t t) {
      const int64_t b = t * per, e = std::min(total, b + per);
      alignas(64) uint32_t v[kTileElements];
      for (int64_t j = b; j < e; j += kTileElements) {
        const int64_t n = std::min<int64_t>(kTileElements, e - j);
        KeysOfElements(options_.isa, row_.seed, row_.row_in_request, kOrderStream,
                       s_.selected.data() + j, n, v);
        for (int64_t q = 0; q < n; ++q) s_.items[j + q] = PackKey(v[q], s_.selected[j + q]);
      }
    });
    SortItems(s_.items.data(), total, &s_.tmp);
  }

  // Slots in parallel chunks, as the binary path: indices, labels, feature rows. A class of
  // one label value writes that value, read from the table, so only the codes (1-2 bytes,
  // cache-resident for most rows) are read at the selected positions, not the labels.
  void WriteOutputs() {
    const int64_t k = row_.num_samples;
    const int64_t total = s_.first.back();
    const int64_t fbytes = row_.feature_row_bytes;
    int64_t* out_idx = batch_.out_indices + row_.out_slot;
    const uint8_t* in_feat = batch_.features + row_.feature_offset;
    uint8_t* out_feat = batch_.out_features + row_.out_feature_offset;
    const int64_t per = std::max<int64_t>(kTileElements, (k + x_.chunks - 1) / x_.chunks);
    Split(pool_, (k + per - 1) / per, [&](int64_t t) {
      const int64_t begin = t * per, end = std::min(k, begin + per);
      WriteSlots(begin, std::min(end, total), end);
      if (fbytes > 0) {
        GatherRows(out_idx + begin, nullptr, end - begin, fbytes, in_feat,
                   out_feat + begin * fbytes, stores_);
      }
    });
    const int64_t r = &row_ - batch_.rows;
    const int32_t nc = x_.num_classes;
    for (int32_t c = 0; c < nc; ++c) {
      batch_.out_num_per_class[row_.out_class_offset + c] = static_cast<int32_t>(s_.m[c]);
    }
    batch_.out_num_positive[r] = nc <= 2 ? static_cast<int32_t>(s_.m[0]) : 0;
    batch_.out_num_negative[r] = nc == 2 ? static_cast<int32_t>(s_.m[1]) : 0;
  }

  const Batch& batch_;
  const RowDesc& row_;
  const RowStores stores_;
  const ClassPathOptions options_;
  ClassScratch& s_;
  ThreadPool* const pool_;
  RowContext x_;
  int64_t spare_ = 0;       // s_.packed's first spare slot
  int64_t spare_cand_ = 0;  // s_.cand's first spare record
  uint8_t single_[kMaxCodes];
  int64_t single_value_[kMaxCodes];
};

}  // namespace

int WeightedPrefilter(Isa isa, const uint8_t* codes, uint8_t wcode, const uint32_t* u,
                      const float* w, int n, double bound, uint32_t first, uint32_t* out) {
  const WeightedPrefilterFn prefilter = ChooseWeightedPrefilter(isa);
  if (prefilter == nullptr) return -1;
  return prefilter(codes, wcode, u, w, n, static_cast<float>(bound), first, out);
}

void SampleClassRow(const Batch& batch, const RowDesc& row, RowStores stores,
                    const ClassPathOptions& options, ClassScratch* s, ThreadPool* pool) {
  ClassRowSampler(batch, row, stores, options, s, pool).Run();
}

}  // namespace gpusampler::kernels::cpu
