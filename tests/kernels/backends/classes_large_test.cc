// One WEIGHTED row of N = 2^27 int8 labels with float scores on the CPU backend (split over its
// threads): the counts, the (v, i) order, membership of every selected element, and that the
// WEIGHTED selection is exactly the m_0 smallest (E / w, i) of all members (one pass over the
// row with Philox blocks) and the UNIFORM one the m_1 smallest (u, i).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

TEST(ClassesLargeTest, WeightedRowOf2To27Int8Labels) {
  constexpr int64_t kN = int64_t{1} << 27;
  constexpr int64_t kWeighted = 1000, kUniform = 500;
  Case c;
  c.dtype = DType::kInt8;
  c.seed = 0x5eed2027;
  c.lower_binary = false;
  c.spec.num_samples = kWeighted + kUniform + 24;  // 24 slots for the fill, then padding
  ClassSpec weighted, uniform;
  weighted.labels = {{0, 1}};
  weighted.share = Share::kCount;
  weighted.count = kWeighted;
  weighted.selection = Selection::kWeighted;
  uniform.labels = {{2, 2}, {5, 200}};  // past int8's values
  uniform.share = Share::kCount;
  uniform.count = kUniform;
  c.spec.classes = {weighted, uniform};
  c.rows.assign(1, std::vector<int64_t>(static_cast<size_t>(kN)));
  c.scores.assign(1, std::vector<float>(static_cast<size_t>(kN)));
  std::mt19937_64 gen(9);
  auto& labels = c.rows[0];
  auto& scores = c.scores[0];
  int64_t n0 = 0, n1 = 0;
  for (int64_t i = 0; i < kN; ++i) {
    const uint64_t x = gen();
    labels[i] = static_cast<int64_t>(x & 3) - 1;  // -1, 0, 1, 2
    scores[i] = (x >> 8) % 16 == 0 ? 0.0f : static_cast<float>((x >> 12) % 1000) * 0.01f;
    n0 += (labels[i] == 0 || labels[i] == 1) && scores[i] > 0.0f;
    n1 += labels[i] == 2;
  }
  const Result got = RunOne("cpu:2", c);
  ASSERT_EQ(got.num_per_class.size(), 1u);
  EXPECT_EQ(got.num_per_class[0], (std::vector<int32_t>{kWeighted, kUniform}));
  EXPECT_EQ(got.num_positive[0], kWeighted);
  EXPECT_EQ(got.num_negative[0], kUniform);
  ASSERT_GT(n0, kWeighted);
  ASSERT_GT(n1, kUniform);
  // Slots: members of their class, in (v, i) order, then padding.
  const auto& idx = got.indices[0];
  std::vector<uint8_t> selected(static_cast<size_t>(kN), 0);
  uint64_t last = 0;
  for (int64_t s = 0; s < kWeighted + kUniform; ++s) {
    const int64_t i = idx[s];
    ASSERT_GE(i, 0);
    ASSERT_LT(i, kN);
    const bool in0 = (labels[i] == 0 || labels[i] == 1) && scores[i] > 0.0f;
    ASSERT_TRUE(in0 || labels[i] == 2) << "slot " << s;
    EXPECT_EQ(got.labels[0][s], labels[i]);
    selected[i] = in0 ? 1 : 2;
    const uint64_t vi = PackKey(ElementKey(c.seed, 0, kOrderStream, i), i);
    if (s > 0) ASSERT_LT(last, vi) << "slot " << s;
    last = vi;
  }
  for (int64_t s = kWeighted + kUniform; s < c.spec.num_samples; ++s) {
    EXPECT_EQ(idx[s], -1);
    EXPECT_EQ(got.labels[0][s], -1);
  }
  // Exactness: every unselected member's key is above every selected key of its class.
  uint64_t max_w = 0, max_u = 0;
  uint64_t min_unsel_w = UINT64_MAX, min_unsel_u = UINT64_MAX;
  for (int64_t b = 0; b < kN / 4; ++b) {
    const Philox4 u = BlockPhilox(c.seed, 0, kSelectionStream, static_cast<uint64_t>(b));
    const Philox4 u2 = BlockPhilox(c.seed, 0, kWeightStream, static_cast<uint64_t>(b));
    for (int lane = 0; lane < 4; ++lane) {
      const int64_t i = 4 * b + lane;
      const bool in0 = (labels[i] == 0 || labels[i] == 1) && scores[i] > 0.0f;
      if (in0) {
        // (key, i) as one order: keys are distinct with near certainty; ties fall to i.
        const uint64_t key = WeightedKeyBits(WeightedE(u.v[lane], u2.v[lane]), scores[i]);
        if (selected[i] == 1) {
          max_w = std::max(max_w, key);
        } else {
          min_unsel_w = std::min(min_unsel_w, key);
        }
      } else if (labels[i] == 2) {
        const uint64_t key = PackKey(u.v[lane], i);
        if (selected[i] == 2) {
          max_u = std::max(max_u, key);
        } else {
          min_unsel_u = std::min(min_unsel_u, key);
        }
      }
    }
  }
  EXPECT_LT(max_w, min_unsel_w);
  EXPECT_LT(max_u, min_unsel_u);
}

}  // namespace
}  // namespace gpusampler::kernels::testing
