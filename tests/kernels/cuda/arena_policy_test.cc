// ArenaPolicy: when the CUDA backend's arena may grow. A captured graph refers to the arena's
// addresses, so once a capture has used it, growth (which frees the old block) is refused
// until ReleaseGraphs(); growth during capture is always refused.
#include <gtest/gtest.h>

#include <string>

#include "cuda/arena_policy.hpp"

namespace gpusampler::kernels::detail {
namespace {

Capacity Cap(int64_t rows, int64_t elements, int64_t slots, int64_t temp) {
  Capacity c;
  c.rows = rows;
  c.elements = elements;
  c.slots = slots;
  c.temp_bytes = temp;
  return c;
}

using D = ArenaPolicy::Decision;

TEST(ArenaPolicyTest, FitsAndGrowsWithoutCapture) {
  ArenaPolicy policy;
  std::string why;
  const Capacity have = Cap(9, 1000, 100, 4096);
  EXPECT_EQ(policy.Check(have, have, false, &why), D::kFits);
  EXPECT_EQ(policy.Check(have, Cap(1, 0, 0, 0), false, &why), D::kFits);
  // Any one dimension over the capacity needs growth.
  EXPECT_EQ(policy.Check(have, Cap(10, 1000, 100, 4096), false, &why), D::kGrow);
  EXPECT_EQ(policy.Check(have, Cap(9, 1001, 100, 4096), false, &why), D::kGrow);
  EXPECT_EQ(policy.Check(have, Cap(9, 1000, 101, 4096), false, &why), D::kGrow);
  EXPECT_EQ(policy.Check(have, Cap(9, 1000, 100, 4097), false, &why), D::kGrow);
  EXPECT_FALSE(policy.captured());
}

TEST(ArenaPolicyTest, NoGrowthDuringCapture) {
  ArenaPolicy policy;
  std::string why;
  EXPECT_EQ(policy.Check(Cap(1, 1, 1, 1), Cap(2, 1, 1, 1), true, &why), D::kRefused);
  EXPECT_NE(why.find("capture"), std::string::npos) << why;
}

TEST(ArenaPolicyTest, CapturedGraphPinsTheArenaUntilReleased) {
  ArenaPolicy policy;
  std::string why;
  const Capacity have = Cap(9, 1000, 100, 4096);
  const Capacity bigger = Cap(9, 2000, 100, 4096);
  EXPECT_EQ(policy.Check(have, have, true, &why), D::kFits);  // a capture used the arena
  EXPECT_TRUE(policy.captured());
  // Uncaptured launches that fit still run; growth is refused: it would free memory the
  // graph reads and writes on its next replay.
  EXPECT_EQ(policy.Check(have, have, false, &why), D::kFits);
  EXPECT_EQ(policy.Check(have, bigger, false, &why), D::kRefused);
  EXPECT_NE(why.find("ReleaseGraphs"), std::string::npos) << why;
  policy.ReleaseGraphs();
  EXPECT_FALSE(policy.captured());
  EXPECT_EQ(policy.Check(have, bigger, false, &why), D::kGrow);
}

}  // namespace
}  // namespace gpusampler::kernels::detail
