// The statistics tests' own checks: the chi-square critical values match the tables, and the
// position test has power (it rejects the article's ordering by selection keys).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "backends/chi_square.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

TEST(StatisticsSelfTest, CriticalValuesMatchTables) {
  // Table values at p = 0.001: chi2(9) = 27.877, chi2(29) = 58.301.
  EXPECT_NEAR(ChiSquareCritical(9, 3.0902), 27.877, 0.5);
  EXPECT_NEAR(ChiSquareCritical(29, 3.0902), 58.301, 0.5);
}

TEST(StatisticsSelfTest, PositionTestRejectsOrderingBySelectionKeys) {
  // Negative control: the article's ordering (selected elements sorted by their selection
  // keys u) must fail the scarce-positives position test, so that test has power.
  Case c;
  c.spec.num_samples = 10;
  c.rows = {std::vector<int64_t>(200, 0)};
  c.rows[0][17] = 1;
  c.rows[0][150] = 1;
  std::vector<double> pos_at(10, 0.0);
  for (int t = 0; t < kTrials; ++t) {
    c.seed = 0x5EED0000ull + static_cast<uint64_t>(t) * 7919;
    std::vector<std::pair<uint32_t, int64_t>> by_u;
    const Result ref = Reference(c);
    for (int64_t i : ref.indices[0]) {
      by_u.emplace_back(ElementKey(c.seed, 0, kSelectionStream, static_cast<uint64_t>(i)), i);
    }
    std::sort(by_u.begin(), by_u.end());
    for (int s = 0; s < 10; ++s) pos_at[s] += c.rows[0][by_u[s].second] == 1;
  }
  EXPECT_GT(ChiSquare(pos_at, std::vector<double>(10, kTrials * 2.0 / 10)), ChiSquareCritical(9));
}

}  // namespace
}  // namespace gpusampler::kernels::testing
