// Quotas of SPEC section 1 and the candidate bound.
#include <gtest/gtest.h>

#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::kernels {
namespace {

TEST(QuotaTest, FillBothTopsUpEitherClass) {
  // target 5 of K 10.
  EXPECT_EQ(ComputeQuotas(20, 20, 10, 5, FillPolicy::kBoth).pos, 5);
  auto q = ComputeQuotas(3, 37, 10, 5, FillPolicy::kBoth);
  EXPECT_EQ(q.pos, 3);
  EXPECT_EQ(q.neg, 7);
  q = ComputeQuotas(37, 3, 10, 5, FillPolicy::kBoth);
  EXPECT_EQ(q.pos, 7);
  EXPECT_EQ(q.neg, 3);
  q = ComputeQuotas(2, 3, 10, 5, FillPolicy::kBoth);
  EXPECT_EQ(q.pos, 2);
  EXPECT_EQ(q.neg, 3);
}

TEST(QuotaTest, NegativesOnlyNeverAddsPositives) {
  auto q = ComputeQuotas(37, 3, 10, 5, FillPolicy::kNegativesOnly);
  EXPECT_EQ(q.pos, 5);
  EXPECT_EQ(q.neg, 3);
  q = ComputeQuotas(3, 37, 10, 5, FillPolicy::kNegativesOnly);
  EXPECT_EQ(q.pos, 3);
  EXPECT_EQ(q.neg, 7);
}

TEST(QuotaTest, NoneKeepsTheStrictRatio) {
  auto q = ComputeQuotas(3, 37, 10, 5, FillPolicy::kNone);
  EXPECT_EQ(q.pos, 3);
  EXPECT_EQ(q.neg, 5);
}

TEST(QuotaTest, TargetUsesDoubleFloor) {
  EXPECT_EQ(TargetPositives(10, 0.25), 2);
  EXPECT_EQ(TargetPositives(100, 0.29), 28);  // 100 * 0.29 = 28.999999999999996 in double
  EXPECT_EQ(TargetPositives(16, 0.25), 4);
  EXPECT_EQ(TargetPositives(7, 0.0), 0);
  EXPECT_EQ(TargetPositives(7, 1.0), 7);
}

TEST(QuotaTest, CandidateBoundEdges) {
  EXPECT_EQ(CandidateBound(100, 0), 0u);
  EXPECT_EQ(CandidateBound(100, 100), uint64_t{1} << 32);
  EXPECT_EQ(CandidateBound(100, 90), uint64_t{1} << 32);  // margin exceeds the class
  const uint64_t b = CandidateBound(1000000, 50000);
  const double kept = static_cast<double>(b) / 4294967296.0 * 1e6;
  EXPECT_GT(kept, 50000 + 4 * 223);
  EXPECT_LT(kept, 50000 + 4 * 224 + 17);
}

}  // namespace
}  // namespace gpusampler::kernels
