// The class path (SPEC section 7) against the brute-force ReferenceClasses on every backend:
// random specs (1..256 classes, ranges overlapping inside a class and past the dtype, counts,
// fractions and rest, random fill orders, every selection), scores with NaN, zeros, -0.0 and
// ties, row lengths around K and rows long enough to split; and the binary spec written as
// classes through the class path (lower_binary off) answering section 1's bytes exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/golden.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

class ClassesBruteForceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " needs a CUDA device";
  }
};

int64_t Uniform(std::mt19937_64& gen, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(gen);
}

// Disjoint segments of [lo, hi], each class owning at least one; inside its segment a class
// gets extra ranges that overlap its first; the outermost segments may reach past the dtype.
std::vector<ClassSpec> RandomClassLabels(std::mt19937_64& gen, int num_classes, int64_t lo,
                                         int64_t hi) {
  std::vector<ClassSpec> classes(static_cast<size_t>(num_classes));
  const int64_t span = hi - lo + 1;
  const int64_t segments =
      std::max<int64_t>(num_classes, Uniform(gen, num_classes, 2 * num_classes));
  std::vector<int64_t> cuts;  // segment starts
  std::vector<int64_t> pool;
  for (int64_t v = lo + 1; v <= hi; ++v) pool.push_back(v);
  std::shuffle(pool.begin(), pool.end(), gen);
  const int64_t want = std::min<int64_t>(segments - 1, span - 1);
  cuts.assign(pool.begin(), pool.begin() + want);
  cuts.push_back(lo);
  std::sort(cuts.begin(), cuts.end());
  std::vector<int> owner(cuts.size(), -1);
  std::vector<int> order(cuts.size());
  for (size_t j = 0; j < order.size(); ++j) order[j] = static_cast<int>(j);
  std::shuffle(order.begin(), order.end(), gen);
  for (size_t j = 0; j < order.size(); ++j) {
    // The first num_classes shuffled segments give every class one; the others go to a
    // random class or to none (labels of no class).
    owner[order[j]] = j < static_cast<size_t>(num_classes)
                          ? static_cast<int>(j)
                          : (gen() % 3 == 0 ? -1 : static_cast<int>(gen() % num_classes));
  }
  for (size_t j = 0; j < cuts.size(); ++j) {
    if (owner[j] < 0) continue;
    int64_t a = cuts[j], b = j + 1 < cuts.size() ? cuts[j + 1] - 1 : hi;
    if (j == 0 && gen() % 2 == 0) a -= 1000;  // past the dtype's values
    if (j + 1 == cuts.size() && gen() % 2 == 0) b += 1000;
    auto& ranges = classes[owner[j]].labels;
    ranges.push_back({a, b});
    if (gen() % 3 == 0) {
      const int64_t x = Uniform(gen, a, b), y = Uniform(gen, a, b);
      ranges.push_back({std::min(x, y), std::max(x, y)});
    }
  }
  return classes;
}

// Counts, fractions and at most one rest, summing to at most K.
void RandomShares(std::mt19937_64& gen, int64_t k, std::vector<ClassSpec>* classes) {
  int64_t left = k;
  const int rest = gen() % 2 == 0 ? static_cast<int>(gen() % classes->size()) : -1;
  for (size_t j = 0; j < classes->size(); ++j) {
    ClassSpec& c = (*classes)[j];
    if (static_cast<int>(j) == rest) {
      c.share = Share::kRest;
      continue;
    }
    const int64_t cap = gen() % 2 == 0 ? left : left / 2;
    if (gen() % 2 == 0 || k == 0) {
      c.share = Share::kCount;
      c.count = Uniform(gen, 0, std::max<int64_t>(0, cap));
      left -= c.count;
    } else {
      c.share = Share::kFraction;
      c.fraction = std::uniform_real_distribution<double>(0.0, 1.0)(gen) *
                   static_cast<double>(cap) / static_cast<double>(k);
      left -= static_cast<int64_t>(std::floor(static_cast<double>(k) * c.fraction));
    }
  }
}

std::vector<float> RandomScores(std::mt19937_64& gen, int64_t n, bool negatives) {
  const float ties[] = {0.25f, 1.0f, 3.0f};
  std::vector<float> out(static_cast<size_t>(n));
  for (auto& s : out) {
    const int what = static_cast<int>(gen() % 20);
    if (what == 0) {
      s = 0.0f;
    } else if (what == 1) {
      s = -0.0f;
    } else if (what == 2) {
      s = std::numeric_limits<float>::quiet_NaN();
    } else if (what < 9) {
      s = ties[gen() % 3];
    } else if (what == 9 && negatives) {
      s = -std::uniform_real_distribution<float>(0.0f, 5.0f)(gen);
    } else if (what == 10) {
      s = std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + gen() % 4);
    } else {
      s = std::uniform_real_distribution<float>(1e-3f, 10.0f)(gen);
    }
  }
  return out;
}

Case RandomClassCase(std::mt19937_64& gen, int num_classes, std::vector<int64_t> lengths,
                     int64_t k) {
  const DType dtypes[] = {DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8};
  Case c;
  c.dtype = dtypes[gen() % 5];
  c.seed = gen();
  c.lower_binary = false;
  c.spec.num_samples = k;
  c.feature_row_bytes = gen() % 3 == 0 ? 3 : 0;
  const bool small = DTypeSize(c.dtype) == 1;
  const int64_t lo = c.dtype == DType::kUInt8 ? 0 : -3;
  const int64_t hi = std::max<int64_t>(lo + 2 * num_classes + 2, small ? 120 : 40);
  const int64_t hi_label = c.dtype == DType::kUInt8 ? std::min<int64_t>(hi, 255)
                                                    : (small ? std::min<int64_t>(hi, 127) : hi);
  // Ranges may run past the dtype (a small dtype with many classes needs them to).
  c.spec.classes = RandomClassLabels(gen, num_classes, lo, hi);
  // A far range: the labels' window is then too wide for the class-code pass's lookup table,
  // so the binary search over the ranges runs.
  const bool far = DTypeSize(c.dtype) >= 4 && gen() % 3 == 0;
  if (far) c.spec.classes[0].labels.push_back({1000000, 1000010});
  RandomShares(gen, k, &c.spec.classes);
  bool weighted = false, uniform_only = true;
  for (auto& cls : c.spec.classes) {
    cls.selection = static_cast<Selection>(1 + gen() % 4);
    weighted = weighted || cls.selection == Selection::kWeighted;
    uniform_only = uniform_only && cls.selection == Selection::kUniform;
    if (cls.selection == Selection::kMixed) {
      cls.has_hard_fraction = true;
      const int pick = static_cast<int>(gen() % 4);
      cls.hard_fraction = pick == 0   ? 0.0
                          : pick == 1 ? 1.0
                                      : std::uniform_real_distribution<double>(0, 1)(gen);
    }
  }
  std::vector<int32_t> fill;
  for (int j = 0; j < num_classes; ++j) {
    if (gen() % 2 == 0) fill.push_back(j);
  }
  std::shuffle(fill.begin(), fill.end(), gen);
  c.spec.fill_order = fill;
  const bool scores = !uniform_only || gen() % 2 == 0;
  for (int64_t n : lengths) {
    std::vector<int64_t> row(static_cast<size_t>(n));
    for (auto& x : row) {
      x = gen() % 8 == 0 ? -1 : Uniform(gen, lo, hi_label);
      if (far && gen() % 10 == 0) x = 1000005;
    }
    c.rows.push_back(std::move(row));
    if (scores) c.scores.push_back(RandomScores(gen, n, !weighted));
  }
  return c;
}

void ExpectSame(const Result& got, const Result& want, const std::string& where) {
  EXPECT_EQ(got.indices, want.indices) << where;
  EXPECT_EQ(got.labels, want.labels) << where;
  EXPECT_EQ(got.features, want.features) << where;
  EXPECT_EQ(got.num_positive, want.num_positive) << where;
  EXPECT_EQ(got.num_negative, want.num_negative) << where;
  EXPECT_EQ(got.num_per_class, want.num_per_class) << where;
}

TEST_P(ClassesBruteForceTest, RandomSpecsMatchTheReference) {
  std::mt19937_64 gen(20261202);
  const int class_counts[] = {1, 2, 3, 5, 8, 17, 64, 255, 256};
  for (int trial = 0; trial < 60; ++trial) {
    const int num_classes = class_counts[trial % 9];
    const int64_t k = Uniform(gen, 0, 40);
    std::vector<int64_t> lengths = {0, 1,     std::max<int64_t>(0, k - 1),
                                    k, k + 1, Uniform(gen, 0, 300)};
    if (trial % 4 == 0) lengths.push_back(3000);  // split on cpusplit:3
    const Case c = RandomClassCase(gen, num_classes, lengths, k);
    ExpectSame(RunOne(GetParam(), c), ReferenceClasses(c),
               GetParam() + " trial " + std::to_string(trial));
  }
}

TEST_P(ClassesBruteForceTest, RandomSpecsFusedInOneLaunch) {
  std::mt19937_64 gen(77);
  std::vector<Case> cases;
  for (int j = 0; j < 8; ++j) {
    const int64_t k = Uniform(gen, 1, 30);
    cases.push_back(RandomClassCase(gen, 1 + static_cast<int>(gen() % 6),
                                    {Uniform(gen, 0, 200), Uniform(gen, 0, 200)}, k));
  }
  cases.push_back(BalancedCase(2, 150, 20, 2, 5));  // a binary request in the same launch
  const auto got = RunFused(GetParam(), cases);
  for (size_t j = 0; j + 1 < cases.size(); ++j) {
    ExpectSame(got[j], ReferenceClasses(cases[j]), GetParam() + " case " + std::to_string(j));
  }
  const Result want = Reference(cases.back());
  EXPECT_EQ(got.back().indices, want.indices);
  EXPECT_EQ(got.back().features, want.features);
}

// Rows long enough for the CPU's HARDEST and WEIGHTED candidate bounds (they sample the
// class's keys; short rows keep every member): UNIFORM positives, HARDEST or WEIGHTED
// negatives, K well below the negatives. Score layouts: continuous, heavy ties (most negatives
// on three values: for HARDEST the m-th key is tied and its ties are ranked again by (u, i)),
// ascending, and one that fools the sample (the highest scores exactly at a stride close to
// the sampler's, so the bound keeps too few and the exact rerun answers). Trials 8-11 add a
// third class, label 2, HARDEST beside the WEIGHTED negatives (both bounded in one row).
TEST_P(ClassesBruteForceTest, HardestAndWeightedOnLongRowsMatchTheReference) {
  std::mt19937_64 gen(20261203);
  for (int trial = 0; trial < 12; ++trial) {
    const int layout = trial % 4;
    const Selection selection = trial < 4 ? Selection::kHardest : Selection::kWeighted;
    const bool third = trial >= 8;
    for (const int64_t n : {int64_t{20000}, int64_t{50000}}) {
      Case c;
      c.dtype = DType::kInt64;
      c.seed = gen();
      c.lower_binary = false;
      c.spec.num_samples = n / 20;
      ClassSpec pos, neg;
      pos.labels = {{1, 1}};
      pos.share = Share::kFraction;
      pos.fraction = 0.25;
      neg.labels = {{0, 0}};
      neg.share = Share::kRest;
      neg.selection = selection;
      c.spec.classes = {pos, neg};
      c.spec.fill_order = {1, 0};
      if (third) {
        ClassSpec hard;
        hard.labels = {{2, 2}};
        hard.share = Share::kFraction;
        hard.fraction = 0.2;
        hard.selection = Selection::kHardest;
        c.spec.classes.push_back(hard);
        c.spec.fill_order = {1, 2, 0};
      }
      c.feature_row_bytes = 3;
      for (int r = 0; r < 2; ++r) {
        std::vector<int64_t> row(static_cast<size_t>(n));
        std::vector<float> score(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) {
          row[i] = gen() % 3 == 0 ? 1 : (third && gen() % 3 == 0 ? 2 : 0);
          const float x = std::uniform_real_distribution<float>(0.0f, 1.0f)(gen);
          switch (layout) {
            case 0:
              score[i] = x;
              break;
            case 1: {
              const float ties[] = {0.5f, 0.75f, 1.0f};
              score[i] = gen() % 10 < 7 ? ties[gen() % 3] : x;
              break;
            }
            case 2:
              score[i] = static_cast<float>(i) / static_cast<float>(n);
              break;
            default:
              // The CPU's sampling stride (SampledBound): max(16, n / 4096).
              score[i] = i % std::max<int64_t>(16, n / 4096) == std::max<int64_t>(16, n / 4096) / 2
                             ? 100.0f + x
                             : x;
              if (gen() % 50 == 0) score[i] = std::numeric_limits<float>::quiet_NaN();
              break;
          }
        }
        c.rows.push_back(std::move(row));
        c.scores.push_back(std::move(score));
      }
      ExpectSame(RunOne(GetParam(), c), ReferenceClasses(c),
                 GetParam() + " trial " + std::to_string(trial) + " n " + std::to_string(n));
    }
  }
}

// Section 1's spec as classes [positives: fraction f, negatives: rest] with fill order [1, 0],
// [1] or [], through the class path.
Case AsClasses(const Case& binary) {
  Case c = binary;
  ClassSpec pos, neg;
  pos.labels = {{binary.spec.positive_label, binary.spec.positive_label}};
  pos.share = Share::kFraction;
  pos.fraction = binary.spec.positive_fraction;
  neg.labels = {{binary.spec.negative_label, binary.spec.negative_label}};
  neg.share = Share::kRest;
  c.spec.classes = {pos, neg};
  if (binary.spec.fill == FillPolicy::kBoth) c.spec.fill_order = {1, 0};
  if (binary.spec.fill == FillPolicy::kNegativesOnly) c.spec.fill_order = {1};
  c.lower_binary = false;
  return c;
}

void ExpectBinaryBytes(const std::string& backend, const Case& binary, const std::string& name) {
  const Result want = RunOne(backend, binary);
  const Result got = RunOne(backend, AsClasses(binary));
  EXPECT_EQ(got.indices, want.indices) << name;
  EXPECT_EQ(got.labels, want.labels) << name;
  EXPECT_EQ(got.features, want.features) << name;
  EXPECT_EQ(got.num_positive, want.num_positive) << name;
  EXPECT_EQ(got.num_negative, want.num_negative) << name;
  for (size_t r = 0; r < got.num_per_class.size(); ++r) {
    EXPECT_EQ(got.num_per_class[r],
              (std::vector<int32_t>{want.num_positive[r], want.num_negative[r]}))
        << name;
  }
}

TEST_P(ClassesBruteForceTest, BinaryAsClassesIsSectionOneOnGoldenSamples) {
  const auto golden = LoadGolden();
  ASSERT_FALSE(golden.empty());
  for (const auto& g : golden) {
    if (g.c.spec.positive_label == g.c.spec.negative_label) continue;
    ExpectBinaryBytes(GetParam(), g.c, g.name);
    EXPECT_EQ(RunOne(GetParam(), AsClasses(g.c)).indices, g.indices) << g.name;
  }
}

TEST_P(ClassesBruteForceTest, BinaryAsClassesIsSectionOneOnRandomCases) {
  std::mt19937_64 gen(4242);
  const FillPolicy fills[] = {FillPolicy::kBoth, FillPolicy::kNegativesOnly, FillPolicy::kNone};
  const DType dtypes[] = {DType::kInt64, DType::kInt8, DType::kUInt8, DType::kInt16};
  for (int trial = 0; trial < 24; ++trial) {
    Case c;
    c.dtype = dtypes[trial % 4];
    c.seed = gen();
    c.spec.num_samples = Uniform(gen, 0, 64);
    c.spec.positive_fraction = std::uniform_real_distribution<double>(0, 1)(gen);
    c.spec.fill = fills[trial % 3];
    c.feature_row_bytes = trial % 2 == 0 ? 4 : 0;
    const double p_pos = std::uniform_real_distribution<double>(0.01, 0.9)(gen);
    const int64_t k = c.spec.num_samples;
    for (int64_t n : {int64_t{0}, int64_t{1}, k, k + 1, Uniform(gen, 0, 500), int64_t{2500}}) {
      c.rows.push_back(RandomLabels(n, p_pos, (1.0 - p_pos) * 0.7, gen()));
    }
    ExpectBinaryBytes(GetParam(), c, GetParam() + " trial " + std::to_string(trial));
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, ClassesBruteForceTest, ::testing::ValuesIn(AllBackends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == ':' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
