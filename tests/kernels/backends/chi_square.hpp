// The chi-square helpers of the statistics tests: the number of trials, the critical value
// (Wilson-Hilferty) and the statistic.
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace gpusampler::kernels::testing {

inline constexpr int kTrials = 4000;

// Upper quantile of chi-square with `df` degrees of freedom at standard-normal z
// (Wilson-Hilferty). z = 4.75 is a one-sided p of about 1e-6, so with fixed seeds a
// correct sampler passes and a biased one (the tests' effect sizes are large) fails.
inline double ChiSquareCritical(int df, double z = 4.75) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + z * std::sqrt(a), 3.0);
}

inline double ChiSquare(const std::vector<double>& observed, const std::vector<double>& expected) {
  double x = 0;
  for (size_t j = 0; j < observed.size(); ++j) {
    x += (observed[j] - expected[j]) * (observed[j] - expected[j]) / expected[j];
  }
  return x;
}

}  // namespace gpusampler::kernels::testing
