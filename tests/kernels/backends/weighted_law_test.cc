// The WEIGHTED selection's law (SPEC section 7): successive sampling in proportion to the
// score, not K * w / W. One request of 2e5 rows (each row draws independent keys) of n <= 6
// elements in one WEIGHTED class with count k <= 3; the selected sets are counted and compared
// with the exactly enumerated successive-sampling probabilities by a G-test at p = 1e-6 (fixed
// seed: deterministic). The same test rejects two wrong laws, so it can fail.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/chi_square.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

constexpr int64_t kDraws = 200000;

// P(the unordered set `mask`) under successive sampling: the sum over its orderings of
// prod_j w_sj / (W - weights drawn before).
double SuccessiveSetProbability(const std::vector<double>& w, uint32_t mask) {
  std::vector<int> members;
  for (int i = 0; i < static_cast<int>(w.size()); ++i) {
    if (mask & (1u << i)) members.push_back(i);
  }
  double total_w = 0;
  for (double x : w) total_w += x;
  double p = 0;
  std::sort(members.begin(), members.end());
  do {
    double q = 1, left = total_w;
    for (int i : members) {
      q *= w[i] / left;
      left -= w[i];
    }
    p += q;
  } while (std::next_permutation(members.begin(), members.end()));
  return p;
}

// The set law proportional to the product of the weights (conditional Poisson sampling): a
// wrong law for WEIGHTED, close to it, for the test's power.
double ProductSetProbability(const std::vector<double>& w, uint32_t mask, int k) {
  double norm = 0, mine = 0;
  for (uint32_t s = 0; s < (1u << w.size()); ++s) {
    if (__builtin_popcount(s) != k) continue;
    double q = 1;
    for (size_t i = 0; i < w.size(); ++i) {
      if (s & (1u << i)) q *= w[i];
    }
    norm += q;
    if (s == mask) mine = q;
  }
  return mine / norm;
}

// G = 2 sum O ln(O / E), cells with E < 5 pooled into one.
bool GTestPasses(const std::map<uint32_t, double>& observed, const std::map<uint32_t, double>& p,
                 double* g_out, int* df_out) {
  double g = 0, pooled_o = 0, pooled_e = 0;
  int cells = 0;
  for (const auto& [mask, prob] : p) {
    const double e = prob * kDraws;
    const auto it = observed.find(mask);
    const double o = it == observed.end() ? 0.0 : it->second;
    if (e < 5) {
      pooled_o += o;
      pooled_e += e;
      continue;
    }
    if (o > 0) g += 2 * o * std::log(o / e);
    ++cells;
  }
  if (pooled_e > 0) {
    if (pooled_o > 0) g += 2 * pooled_o * std::log(pooled_o / pooled_e);
    ++cells;
  }
  for (const auto& [mask, o] : observed) {
    if (p.find(mask) == p.end()) return false;  // a set the law cannot give
  }
  *g_out = g;
  *df_out = cells - 1;
  return g <= ChiSquareCritical(cells - 1);
}

struct Draws {
  std::map<uint32_t, double> sets;
  std::vector<double> inclusions;
};

Draws DrawSets(const std::string& backend, const std::vector<float>& w, int k, uint64_t seed) {
  Case c;
  c.seed = seed;
  c.lower_binary = false;
  c.spec.num_samples = k;
  ClassSpec cls;
  cls.labels = {{0, 0}};
  cls.share = Share::kCount;
  cls.count = k;
  cls.selection = Selection::kWeighted;
  c.spec.classes = {cls};
  const int n = static_cast<int>(w.size());
  c.rows.assign(kDraws, std::vector<int64_t>(static_cast<size_t>(n), 0));
  c.scores.assign(kDraws, w);
  const Result got = RunOne(backend, c);
  Draws d;
  d.inclusions.assign(static_cast<size_t>(n), 0.0);
  for (const auto& row : got.indices) {
    uint32_t mask = 0;
    for (int64_t i : row) {
      EXPECT_GE(i, 0);
      mask |= 1u << i;
      d.inclusions[i] += 1;
    }
    EXPECT_EQ(__builtin_popcount(mask), k);
    d.sets[mask] += 1;
  }
  return d;
}

struct LawCase {
  std::vector<float> w;
  int k;
};

std::vector<LawCase> LawCases() {
  return {{{1, 2, 3, 4, 5, 6}, 2}, {{1, 2, 3, 4, 5, 6}, 3}, {{1, 1, 1, 1, 1, 10}, 2},
          {{0.5f, 8, 1, 3}, 1},    {{0.5f, 8, 1, 3}, 3},    {{2, 7, 0.25f, 1, 4}, 2}};
}

TEST(WeightedLawTest, SelectedSetsFollowSuccessiveSampling) {
  for (const std::string backend : {"cpu:1", "cpu:3"}) {
    uint64_t seed = 1000;
    for (const LawCase& lc : LawCases()) {
      const std::vector<double> w(lc.w.begin(), lc.w.end());
      const Draws d = DrawSets(backend, lc.w, lc.k, ++seed);
      std::map<uint32_t, double> p;
      for (uint32_t s = 0; s < (1u << w.size()); ++s) {
        if (__builtin_popcount(s) == lc.k) p[s] = SuccessiveSetProbability(w, s);
      }
      double g = 0;
      int df = 0;
      EXPECT_TRUE(GTestPasses(d.sets, p, &g, &df))
          << backend << " n " << w.size() << " k " << lc.k << ": G " << g << ", df " << df
          << ", critical " << ChiSquareCritical(df);
    }
  }
}

// The same draws against wrong laws: the product-of-weights set law (G-test) and K * w / W as
// inclusion probabilities (each element's count a binomial, |z| > 5 rejects). At least one
// case must reject each, so the test above has the power to fail.
TEST(WeightedLawTest, WrongLawsAreRejected) {
  int product_rejected = 0, proportional_rejected = 0;
  uint64_t seed = 1000;
  for (const LawCase& lc : LawCases()) {
    const std::vector<double> w(lc.w.begin(), lc.w.end());
    const Draws d = DrawSets("cpu:3", lc.w, lc.k, ++seed);
    std::map<uint32_t, double> p;
    for (uint32_t s = 0; s < (1u << w.size()); ++s) {
      if (__builtin_popcount(s) == lc.k) p[s] = ProductSetProbability(w, s, lc.k);
    }
    double g = 0;
    int df = 0;
    if (lc.k > 1 && !GTestPasses(d.sets, p, &g, &df)) ++product_rejected;
    double total_w = 0;
    for (double x : w) total_w += x;
    bool valid = true, rejected = false;
    for (size_t i = 0; i < w.size(); ++i) {
      const double pi = lc.k * w[i] / total_w;
      valid = valid && pi < 1.0;
      const double z = (d.inclusions[i] - kDraws * pi) / std::sqrt(kDraws * pi * (1 - pi));
      rejected = rejected || std::fabs(z) > 5.0;
    }
    if (lc.k > 1 && valid && rejected) ++proportional_rejected;
  }
  EXPECT_GE(product_rejected, 1);
  EXPECT_GE(proportional_rejected, 1);
}

}  // namespace
}  // namespace gpusampler::kernels::testing
