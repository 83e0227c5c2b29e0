// Class quotas of SPEC section 1 and the candidate thresholds used by the fast paths.
// Pure functions usable from host and device code; thread-safe.
#pragma once

#include <cmath>
#include <cstdint>

#include "gpusampler/kernels/macros.hpp"

namespace gpusampler::kernels {

// Values match the wire enum gpusampler.v1.FillPolicy (UNSPECIFIED is mapped to kBoth
// at the edge).
enum class FillPolicy : int32_t { kBoth = 1, kNegativesOnly = 2, kNone = 3 };

struct Quotas {
  int64_t pos;
  int64_t neg;
};

GPUSAMPLER_HD int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }

// target = floor(K * f), computed once in IEEE-754 double (SPEC section 1).
GPUSAMPLER_HD int64_t TargetPositives(int64_t k, double positive_fraction) {
  return static_cast<int64_t>(floor(static_cast<double>(k) * positive_fraction));
}

GPUSAMPLER_HD Quotas ComputeQuotas(int64_t num_pos, int64_t num_neg, int64_t k, int64_t target,
                                   FillPolicy fill) {
  Quotas q{};
  q.pos = Min64(num_pos, target);
  switch (fill) {
    case FillPolicy::kBoth:
      q.neg = Min64(num_neg, k - q.pos);
      q.pos = Min64(num_pos, k - q.neg);
      break;
    case FillPolicy::kNegativesOnly:
      q.neg = Min64(num_neg, k - q.pos);
      break;
    case FillPolicy::kNone:
    default:
      q.neg = Min64(num_neg, k - target);
      break;
  }
  return q;
}

// Keys below the returned bound (exclusive, in [0, 2^32]) are candidates for a class with
// `count` members of which `quota` are kept. The bound keeps quota + sigmas * sqrt(quota) +
// slack candidates on average; with the defaults the exact selection misses (and reruns
// without a bound) with probability about 3e-5. Returns 2^32 (keep all) when the quota is
// the whole class, 0 when it is empty. Tests pass a negative margin to force the rerun.
GPUSAMPLER_HD uint64_t CandidateBound(int64_t count, int64_t quota, double sigmas = 4.0,
                                      double slack = 16.0) {
  if (quota <= 0) return 0;
  if (quota >= count) return uint64_t{1} << 32;
  double want = static_cast<double>(quota) + sigmas * sqrt(static_cast<double>(quota)) + slack;
  if (want < 0.0) want = 0.0;
  const double frac = want / static_cast<double>(count);
  if (frac >= 1.0) return uint64_t{1} << 32;
  return static_cast<uint64_t>(ceil(frac * 4294967296.0));
}

}  // namespace gpusampler::kernels
