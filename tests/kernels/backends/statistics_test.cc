// Chi-square tests over many seeds: every eligible element is equally likely to be picked,
// and output positions are uniform, also when positives are scarce (the article's sampler,
// which ordered by the selection keys, pushed a scarce class to the end of the batch). The
// helpers' own checks: statistics_self_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backends/chi_square.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

// Runs `trials` seeds of one case as one fused launch per 500 seeds.
std::vector<Result> RunSeeds(const std::string& backend, Case c, int trials) {
  std::vector<Result> out;
  for (int start = 0; start < trials; start += 500) {
    std::vector<Case> cases;
    for (int t = start; t < std::min(trials, start + 500); ++t) {
      c.seed = 0x5EED0000ull + static_cast<uint64_t>(t) * 7919;
      cases.push_back(c);
    }
    for (auto& r : RunFused(backend, cases)) out.push_back(std::move(r));
  }
  return out;
}

class StatisticsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " needs a CUDA device";
  }
};

TEST_P(StatisticsTest, EveryEligibleElementEquallyLikely) {
  // 30 positives, 50 negatives, 20 ignored, interleaved; K = 16 -> 8 of each class.
  Case c;
  c.spec.num_samples = 16;
  c.rows.resize(1);
  for (int i = 0; i < 100; ++i) c.rows[0].push_back(i % 5 == 0 ? -1 : (i % 8 < 3 ? 1 : 0));
  int64_t p = 0, q = 0;
  for (int64_t x : c.rows[0]) {
    p += x == 1;
    q += x == 0;
  }
  std::vector<double> hits(100, 0.0);
  for (const auto& r : RunSeeds(GetParam(), c, kTrials)) {
    for (int64_t i : r.indices[0]) {
      ASSERT_GE(i, 0);
      hits[i] += 1;
    }
  }
  for (int64_t cls : {1, 0}) {
    std::vector<double> obs, exp;
    const double want = kTrials * 8.0 / static_cast<double>(cls == 1 ? p : q);
    for (int i = 0; i < 100; ++i) {
      if (c.rows[0][i] == -1) {
        EXPECT_EQ(hits[i], 0.0) << "ignored element " << i << " was sampled";
      } else if (c.rows[0][i] == cls) {
        obs.push_back(hits[i]);
        exp.push_back(want);
      }
    }
    const int df = static_cast<int>(obs.size()) - 1;
    EXPECT_LT(ChiSquare(obs, exp), ChiSquareCritical(df)) << "class " << cls;
  }
}

TEST_P(StatisticsTest, OutputPositionsUniformWhenPositivesAreScarce) {
  // 2 positives among 200, K = 10: every sample holds both positives; each of the 10 slots
  // should hold a positive with probability 2/10.
  Case c;
  c.spec.num_samples = 10;
  c.rows = {std::vector<int64_t>(200, 0)};
  c.rows[0][17] = 1;
  c.rows[0][150] = 1;
  std::vector<double> pos_at(10, 0.0), first_at(10, 0.0);
  for (const auto& r : RunSeeds(GetParam(), c, kTrials)) {
    ASSERT_EQ(r.num_positive[0], 2);
    for (int s = 0; s < 10; ++s) {
      if (r.labels[0][s] == 1) pos_at[s] += 1;
      if (r.indices[0][s] == 17) first_at[s] += 1;
    }
  }
  EXPECT_LT(ChiSquare(pos_at, std::vector<double>(10, kTrials * 2.0 / 10)), ChiSquareCritical(9));
  EXPECT_LT(ChiSquare(first_at, std::vector<double>(10, kTrials / 10.0)), ChiSquareCritical(9));
}

TEST_P(StatisticsTest, OutputPositionsUniformInABalancedSample) {
  // Slot s holds element i: over seeds, a fixed element's slot is uniform over the K slots
  // given it is selected, and positives are spread evenly over slots.
  Case c;
  c.spec.num_samples = 8;
  c.rows = {std::vector<int64_t>(64)};
  for (int i = 0; i < 64; ++i) c.rows[0][i] = i % 2;
  std::vector<double> pos_at(8, 0.0);
  for (const auto& r : RunSeeds(GetParam(), c, kTrials)) {
    for (int s = 0; s < 8; ++s) pos_at[s] += r.labels[0][s] == 1;
  }
  EXPECT_LT(ChiSquare(pos_at, std::vector<double>(8, kTrials * 4.0 / 8)), ChiSquareCritical(7));
}

INSTANTIATE_TEST_SUITE_P(Backends, StatisticsTest, ::testing::Values("cpu:3", "cudasim", "cuda"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == ':' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
