// Every backend against the brute-force reference (full sorts, scalar Philox) on randomized
// cases: edge sizes, every label dtype, fill policy and fraction, ragged fused rows; plus
// the invariants (no repeated index, class counts equal the quotas, padding).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

class BruteForceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " needs a CUDA device";
  }
};

void ExpectSame(const Result& got, const Result& want, const std::string& what) {
  ASSERT_EQ(got.indices, want.indices) << what;
  ASSERT_EQ(got.labels, want.labels) << what;
  ASSERT_EQ(got.features, want.features) << what;
  ASSERT_EQ(got.num_positive, want.num_positive) << what;
  ASSERT_EQ(got.num_negative, want.num_negative) << what;
}

// Properties that hold whatever the keys: distinct in-range indices, one class per quota,
// padding after the selection.
void ExpectInvariants(const Case& c, const Result& got, const std::string& what) {
  for (size_t r = 0; r < c.rows.size(); ++r) {
    std::set<int64_t> seen;
    int64_t pos = 0, neg = 0, selected = 0;
    for (size_t s = 0; s < got.indices[r].size(); ++s) {
      const int64_t i = got.indices[r][s];
      if (i < 0) {
        ASSERT_EQ(i, -1) << what;
        continue;
      }
      ASSERT_EQ(static_cast<int64_t>(s), selected) << what << ": padding before a selection";
      ++selected;
      ASSERT_LT(i, static_cast<int64_t>(c.rows[r].size())) << what;
      ASSERT_TRUE(seen.insert(i).second) << what << ": index " << i << " repeated";
      pos += got.labels[r][s] == c.spec.positive_label;
      neg += got.labels[r][s] == c.spec.negative_label;
    }
    ASSERT_EQ(pos, got.num_positive[r]) << what;
    ASSERT_EQ(neg, got.num_negative[r]) << what;
  }
}

TEST_P(BruteForceTest, EdgeSizesAroundKAndLaneBoundaries) {
  std::mt19937_64 gen(1234);
  const int64_t k = 12;
  std::vector<int64_t> sizes = {0,  1,  2,  3,  4,  5,     7, 8,     9,     15,  16,  17,  31,
                                32, 33, 63, 64, 65, k - 1, k, k + 1, 2 * k, 127, 128, 129, 1000};
  for (int64_t n : sizes) {
    for (double p_pos : {0.0, 0.1, 0.5, 0.9, 1.0}) {
      Case c;
      c.spec.num_samples = k;
      c.seed = gen();
      c.rows = {RandomLabels(n, p_pos, (1.0 - p_pos) * 0.8, gen())};
      // Every specialized feature-row width and a few odd ones.
      static const int64_t kWidths[] = {3, 4, 8, 16, 32, 64, 128, 1, 12, 0};
      c.feature_row_bytes = kWidths[gen() % 10];
      const std::string what = "n=" + std::to_string(n) + " p_pos=" + std::to_string(p_pos) +
                               " feature_row_bytes=" + std::to_string(c.feature_row_bytes);
      const Result got = RunOne(GetParam(), c);
      ExpectSame(got, Reference(c), what);
      ExpectInvariants(c, got, what);
    }
  }
}

TEST_P(BruteForceTest, EveryDtypeFillPolicyAndFraction) {
  std::mt19937_64 gen(99);
  for (DType dtype :
       {DType::kBool, DType::kInt8, DType::kUInt8, DType::kInt16, DType::kInt32, DType::kInt64}) {
    for (FillPolicy fill : {FillPolicy::kBoth, FillPolicy::kNegativesOnly, FillPolicy::kNone}) {
      for (double f : {0.0, 0.25, 0.5, 0.7, 1.0}) {
        Case c;
        c.dtype = dtype;
        c.spec.num_samples = 1 + static_cast<int64_t>(gen() % 60);
        c.spec.positive_fraction = f;
        c.spec.fill = fill;
        const bool binary = dtype == DType::kBool;
        // Custom labels where the dtype allows it (UINT8 labels 200 / 7).
        if (dtype == DType::kUInt8) {
          c.spec.positive_label = 200;
          c.spec.negative_label = 7;
        } else if (!binary) {
          c.spec.positive_label = -3;
          c.spec.negative_label = 5;
        }
        c.seed = gen();
        const int64_t n = static_cast<int64_t>(gen() % 300);
        const double p_pos = static_cast<double>(gen() % 100) / 100.0;
        auto labels = RandomLabels(n, p_pos, binary ? 1.0 - p_pos : (1.0 - p_pos) / 2, gen(),
                                   c.spec.positive_label, c.spec.negative_label);
        if (dtype == DType::kUInt8) {
          for (auto& x : labels) x = x < 0 ? 9 : x;  // ignored value representable in UINT8
        }
        c.rows = {labels};
        c.feature_row_bytes = static_cast<int64_t>(gen() % 3) * 4;
        const std::string what = std::string(Traits(dtype).name) +
                                 " fill=" + std::to_string(static_cast<int>(fill)) +
                                 " f=" + std::to_string(f);
        const Result got = RunOne(GetParam(), c);
        ExpectSame(got, Reference(c), what);
        ExpectInvariants(c, got, what);
      }
    }
  }
}

TEST_P(BruteForceTest, RaggedRequestsFusedInOneLaunch) {
  std::mt19937_64 gen(7);
  for (int trial = 0; trial < 5; ++trial) {
    std::vector<Case> cases;
    const int requests = 1 + static_cast<int>(gen() % 8);
    for (int q = 0; q < requests; ++q) {
      Case c;
      c.spec.num_samples = 1 + static_cast<int64_t>(gen() % 40);
      c.spec.positive_fraction = static_cast<double>(gen() % 11) / 10.0;
      c.spec.fill = static_cast<FillPolicy>(1 + gen() % 3);
      c.dtype = (gen() % 2) ? DType::kInt32 : DType::kInt64;
      c.seed = gen();
      c.feature_row_bytes = static_cast<int64_t>(gen() % 2) * 16;
      const int rows = 1 + static_cast<int>(gen() % 5);
      for (int r = 0; r < rows; ++r) {
        c.rows.push_back(RandomLabels(static_cast<int64_t>(gen() % 500), 0.3, 0.5, gen()));
      }
      cases.push_back(std::move(c));
    }
    const auto got = RunFused(GetParam(), cases);
    for (size_t q = 0; q < cases.size(); ++q) {
      const std::string what = "trial " + std::to_string(trial) + " request " + std::to_string(q);
      ExpectSame(got[q], Reference(cases[q]), what);
      ExpectInvariants(cases[q], got[q], what);
    }
  }
}

TEST_P(BruteForceTest, MillionElementRow) {
  for (double p_pos : {0.5, 0.01}) {
    Case c;
    c.spec.num_samples = 100000;
    c.seed = 2026;
    c.rows = {RandomLabels(1000000, p_pos, 0.9 - p_pos, 31)};
    c.feature_row_bytes = 2;
    const Result got = RunOne(GetParam(), c);
    ExpectSame(got, Reference(c), "n=1e6 p_pos=" + std::to_string(p_pos));
    ExpectInvariants(c, got, "n=1e6");
  }
}

TEST_P(BruteForceTest, LongStructuredRows) {
  // Rows long enough to be split over threads, with structured labels (sorted, periodic,
  // one class in a small block) as well as random ones, every fill policy and K from 1 to
  // most of the row.
  std::mt19937_64 gen(4242);
  const int64_t n = 70001;
  std::vector<std::pair<std::string, std::vector<int64_t>>> rows;
  rows.emplace_back("uniform", RandomLabels(n, 0.5, 0.5, gen()));
  rows.emplace_back("scarce positives", RandomLabels(n, 0.002, 0.9, gen()));
  rows.emplace_back("scarce negatives", RandomLabels(n, 0.95, 0.001, gen()));
  std::vector<int64_t> sorted(n, 0);
  std::fill(sorted.begin(), sorted.begin() + n / 3, 1);
  rows.emplace_back("sorted", sorted);
  std::vector<int64_t> periodic(n);
  for (int64_t i = 0; i < n; ++i) periodic[i] = (i / 64) % 2;  // tile-periodic classes
  rows.emplace_back("periodic", periodic);
  std::vector<int64_t> hidden(n, 0);
  for (int64_t i = 100; i < 1000; ++i) hidden[i] = 1;  // positives between sampled tiles
  rows.emplace_back("hidden", hidden);
  for (const auto& [name, labels] : rows) {
    for (FillPolicy fill : {FillPolicy::kBoth, FillPolicy::kNegativesOnly, FillPolicy::kNone}) {
      for (int64_t k : {int64_t{1}, int64_t{500}, int64_t{7000}, int64_t{60000}}) {
        Case c;
        c.spec.num_samples = k;
        c.spec.fill = fill;
        c.seed = gen();
        c.rows = {labels};
        c.feature_row_bytes = 4;
        const std::string what =
            name + " fill=" + std::to_string(static_cast<int>(fill)) + " k=" + std::to_string(k);
        const Result got = RunOne(GetParam(), c);
        ExpectSame(got, Reference(c), what);
        ExpectInvariants(c, got, what);
      }
    }
  }
}

TEST_P(BruteForceTest, SeedAndRowChangeTheSample) {
  Case a;
  a.spec.num_samples = 20;
  a.seed = 1;
  a.rows = {RandomLabels(500, 0.5, 0.5, 3), RandomLabels(500, 0.5, 0.5, 3)};
  Case b = a;
  b.seed = 2;
  const Result ra = RunOne(GetParam(), a), rb = RunOne(GetParam(), b);
  EXPECT_NE(ra.indices[0], rb.indices[0]);
  // Same labels in rows 0 and 1 of one request: the row index keys them apart.
  EXPECT_NE(ra.indices[0], ra.indices[1]);
}

INSTANTIATE_TEST_SUITE_P(Backends, BruteForceTest, ::testing::ValuesIn(AllBackends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == ':' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
