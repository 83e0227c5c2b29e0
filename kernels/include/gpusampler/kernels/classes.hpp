// Classes and selection rules (sampling contract v2): what a request with `classes` asks for
// (ClassSpec, host), the compiled class table every backend reads (ClassTable: a flat, 8-byte
// aligned block of plain structs, copied to the device as it is), and the arithmetic every
// backend shares, once, in __host__ __device__ functions: membership, quotas, the weighted
// key (the project-owned logarithm) and the hardest-first key.
//
// Exactness: WeightedE and WeightedKeyBits are IEEE-754 double operations rounded to nearest
// even, in the order written, with no fused multiply-add. Device code spells every operation
// as an intrinsic (__dmul_rn, __dadd_rn, __ddiv_rn), which nvcc never contracts; host code goes
// through the same helpers as plain operators, and every target that compiles them is built
// with -ffp-contract=off (kernels/CMakeLists.txt, GPUSAMPLER_NO_FP_CONTRACT), which the build
// checks with a static test (tests/kernels/api/weighted_keys_test.cc runs the KAT on every
// backend and ISA).
//
// Compiles with a plain C++17 compiler; thread-safe (pure functions and plain data).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "gpusampler/kernels/macros.hpp"
#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::kernels {

inline constexpr int kMaxClasses = 256;
inline constexpr int kMaxClassRanges = 1024;

// Values match the wire enum gpusampler.v1.Selection (UNSPECIFIED is mapped to kUniform at
// the edge).
enum class Selection : int32_t { kUniform = 1, kWeighted = 2, kHardest = 3, kMixed = 4 };

// How a class's target is given (the wire oneof `share`).
enum class Share : int32_t { kNone = 0, kCount = 1, kFraction = 2, kRest = 3 };

struct LabelRange {
  int64_t lo = 0;  // inclusive
  int64_t hi = 0;  // inclusive; lo <= hi
};

// One class of a request, as the wire message says it (host only).
struct ClassSpec {
  std::vector<LabelRange> labels;
  Share share = Share::kNone;
  int64_t count = 0;      // Share::kCount
  double fraction = 0.0;  // Share::kFraction, in [0, 1]
  Selection selection = Selection::kUniform;
  bool has_hard_fraction = false;
  double hard_fraction = 0.0;  // MIXED, in [0, 1]
};

// ---------------------------------------------------------------------------------------------
// The compiled table (CompileClassTable). Layout, every part 8-byte aligned:
//   ClassTableHeader | ClassRange[num_ranges] | ClassEntry[num_classes] | int32 fill[num_fill]
// Ranges are merged per class (overlapping or adjacent ranges of one class become one), sorted
// by lo, and pairwise disjoint, so an element's class is one binary search.

struct ClassTableHeader {
  int32_t num_classes;
  int32_t num_ranges;
  int32_t num_fill;
  uint32_t flags;  // kClassesNeedScores | kClassesWeighted | kClassesRanked
};
inline constexpr uint32_t kClassesNeedScores = 1u;  // some class is not UNIFORM
inline constexpr uint32_t kClassesWeighted = 2u;    // some class is WEIGHTED
inline constexpr uint32_t kClassesRanked = 4u;      // some class is HARDEST or MIXED

struct ClassRange {
  int64_t lo;
  int64_t hi;
  int32_t cls;
  int32_t pad;
};

struct ClassEntry {
  int64_t target;        // t_c for this request's K
  double hard_fraction;  // MIXED
  int32_t selection;     // Selection
  int32_t pad;
};

GPUSAMPLER_HD constexpr int64_t AlignUp8(int64_t n) { return (n + 7) & ~int64_t{7}; }

GPUSAMPLER_HD int64_t ClassTableBytes(int32_t num_classes, int32_t num_ranges, int32_t num_fill) {
  return static_cast<int64_t>(sizeof(ClassTableHeader)) +
         static_cast<int64_t>(sizeof(ClassRange)) * num_ranges +
         static_cast<int64_t>(sizeof(ClassEntry)) * num_classes + AlignUp8(4 * int64_t{num_fill});
}

// Pointers into a compiled table at `base` (8-byte aligned).
struct ClassTableView {
  const ClassTableHeader* header;
  const ClassRange* ranges;
  const ClassEntry* classes;
  const int32_t* fill;
};

GPUSAMPLER_HD ClassTableView ViewClassTable(const uint8_t* base) {
  ClassTableView v;
  v.header = reinterpret_cast<const ClassTableHeader*>(base);
  v.ranges = reinterpret_cast<const ClassRange*>(base + sizeof(ClassTableHeader));
  v.classes = reinterpret_cast<const ClassEntry*>(v.ranges + v.header->num_ranges);
  v.fill = reinterpret_cast<const int32_t*>(v.classes + v.header->num_classes);
  return v;
}

// The class of `label` (-1: none) by binary search over `num_ranges` sorted disjoint ranges.
GPUSAMPLER_HD int32_t ClassOfLabel(const ClassRange* ranges, int32_t num_ranges, int64_t label) {
  int32_t lo = 0;
  int32_t hi = num_ranges;  // first range with ranges[i].lo > label
  while (lo < hi) {
    const int32_t mid = (lo + hi) >> 1;
    if (ranges[mid].lo <= label) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return -1;
  const ClassRange& r = ranges[lo - 1];
  return label <= r.hi ? r.cls : -1;
}

// Whether an element of a class with this selection and score is a member: WEIGHTED needs a
// score > 0 (so -0.0 and NaN are not), HARDEST and MIXED a score that is not NaN, UNIFORM
// nothing (its score is unused).
GPUSAMPLER_HD bool ScoreAdmits(int32_t selection, float score) {
  switch (static_cast<Selection>(selection)) {
    case Selection::kWeighted:
      return score > 0.0f;
    case Selection::kHardest:
    case Selection::kMixed:
      return score == score;
    case Selection::kUniform:
    default:
      return true;
  }
}

// The quotas of SPEC section 7 for one row: m[c] from the member counts n[c], the targets and
// the fill order. Integer only.
GPUSAMPLER_HD void ClassQuotas(const ClassEntry* classes, int32_t num_classes, const int32_t* fill,
                               int32_t num_fill, int64_t k, const int64_t* n, int64_t* m) {
  int64_t left = k;
  for (int32_t c = 0; c < num_classes; ++c) {
    m[c] = Min64(n[c], classes[c].target);
    left -= m[c];
  }
  for (int32_t j = 0; j < num_fill; ++j) {
    const int32_t c = fill[j];
    const int64_t e = Min64(n[c] - m[c], left);
    m[c] += e;
    left -= e;
  }
}

// h = floor(m * hard_fraction) in IEEE double: the hardest part of a MIXED class's quota.
GPUSAMPLER_HD int64_t HardQuota(int64_t m, double hard_fraction) {
  return static_cast<int64_t>(floor(static_cast<double>(m) * hard_fraction));
}

// ---------------------------------------------------------------------------------------------
// The weighted key. The double operations, rounded to nearest even, never contracted.

#if defined(__CUDA_ARCH__)
GPUSAMPLER_HD double DMul(double a, double b) { return __dmul_rn(a, b); }
GPUSAMPLER_HD double DAdd(double a, double b) { return __dadd_rn(a, b); }
GPUSAMPLER_HD double DSub(double a, double b) { return __dsub_rn(a, b); }
GPUSAMPLER_HD double DDiv(double a, double b) { return __ddiv_rn(a, b); }
#else
GPUSAMPLER_HD double DMul(double a, double b) { return a * b; }
GPUSAMPLER_HD double DAdd(double a, double b) { return a + b; }
GPUSAMPLER_HD double DSub(double a, double b) { return a - b; }
GPUSAMPLER_HD double DDiv(double a, double b) { return a / b; }
#endif

GPUSAMPLER_HD uint64_t DoubleBits(double d) {
  uint64_t b;
  memcpy(&b, &d, sizeof b);
  return b;
}
GPUSAMPLER_HD double BitsDouble(uint64_t b) {
  double d;
  memcpy(&d, &b, sizeof d);
  return d;
}

GPUSAMPLER_HD int BitLength64(uint64_t x) {
#if defined(__CUDA_ARCH__)
  return 64 - __clzll(static_cast<long long>(x));
#else
  return x == 0 ? 0 : 64 - __builtin_clzll(x);
#endif
}

// E = -ln(U), U = y / 2^53, from the element's u (stream 0) and u2 (stream 2), exactly as SPEC
// section 7 writes it: a reduction to m in (0.7071, 1.4142], then atanh's series in s.
GPUSAMPLER_HD double WeightedE(uint32_t u, uint32_t u2) {
  const uint64_t x = ~((static_cast<uint64_t>(u) << 32) | u2);
  const uint64_t t = 2 * (x >> 12) + 1;  // odd, < 2^53
  const double y = static_cast<double>(t);
  int e = BitLength64(t) - 1;
  double m = DMul(y, BitsDouble(static_cast<uint64_t>(1023 - e) << 52));  // y * 2^-e, exact
  if (m > 0x1.6a09e667f3bcdp+0) {
    m = DMul(m, 0.5);
    e += 1;
  }
  const double s = DDiv(DSub(m, 1.0), DAdd(m, 1.0));
  const double z = DMul(s, s);
  // Ck = the double nearest 1 / (2k + 1) (IEEE division is correctly rounded).
  double p = 1.0 / 21.0;
  p = DAdd(DMul(p, z), 1.0 / 19.0);
  p = DAdd(DMul(p, z), 1.0 / 17.0);
  p = DAdd(DMul(p, z), 1.0 / 15.0);
  p = DAdd(DMul(p, z), 1.0 / 13.0);
  p = DAdd(DMul(p, z), 1.0 / 11.0);
  p = DAdd(DMul(p, z), 1.0 / 9.0);
  p = DAdd(DMul(p, z), 1.0 / 7.0);
  p = DAdd(DMul(p, z), 1.0 / 5.0);
  p = DAdd(DMul(p, z), 1.0 / 3.0);
  const double two_s = DMul(2.0, s);
  const double ln_m = DAdd(two_s, DMul(two_s, DMul(z, p)));
  return -DAdd(DMul(static_cast<double>(e - 53), 0x1.62e42fefa39efp-1), ln_m);
}

// key = E / w as its bit pattern: a positive double, so unsigned order is numeric order.
GPUSAMPLER_HD uint64_t WeightedKeyBits(double e, float weight) {
  return DoubleBits(DDiv(e, static_cast<double>(weight)));
}

// The stream of u2 (counter word 3), the weighted key's second 32 random bits.
inline constexpr uint32_t kWeightStream = 2;

// A float score as an unsigned key that sorts largest score first: -0.0 is +0.0 first, then
// the usual order-preserving flip, complemented. NaN scores are never ranked (ScoreAdmits).
GPUSAMPLER_HD uint32_t HardestKey(float score) {
  uint32_t b;
  memcpy(&b, &score, sizeof b);
  if (b == 0x80000000u) b = 0;
  const uint32_t ascending = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return ~ascending;
}

// ---------------------------------------------------------------------------------------------
// Host side (kernels/src/launch/classes.cc).

// Compiles `classes` and `fill_order` for a request with K = `k` into `out` (replacing its
// contents): targets, merged sorted ranges, fill order. Validates everything SPEC section 7
// says of a spec (counts, shares, fractions, overlaps between classes, the range and class
// limits, fill indices, MIXED's hard_fraction, targets summing to at most K) and throws
// Error(kInvalidArgument) with a message naming the field ("classes[2].labels[0]: ...").
void CompileClassTable(const std::vector<ClassSpec>& classes,
                       const std::vector<int32_t>& fill_order, int64_t k,
                       std::vector<uint8_t>* out);

// Section 1's binary spec that answers exactly what `classes` + `fill_order` answers, when there
// is one: two UNIFORM classes of one label value each, one a `fraction`, the other `rest`, and
// a fill order of [rest, fraction] (BOTH), [rest] (NEGATIVES_ONLY) or [] (NONE). Sets `*binary`
// (positive_fraction, labels, fill; num_samples untouched) and `*positive_class` (0 or 1).
struct SamplingSpec;
bool LowerToBinary(const std::vector<ClassSpec>& classes, const std::vector<int32_t>& fill_order,
                   SamplingSpec* binary, int32_t* positive_class);

}  // namespace gpusampler::kernels
