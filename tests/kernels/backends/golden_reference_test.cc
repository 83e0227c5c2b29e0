// golden_samples.jsonl holds every case, and the brute-force reference (test_util) reproduces it.
#include <gtest/gtest.h>

#include "backends/golden.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

TEST(GoldenTest, FileHasEveryCase) { EXPECT_EQ(LoadGolden().size(), 13u); }

TEST(GoldenTest, BruteForceReferenceReproducesGolden) {
  for (const auto& g : LoadGolden()) ExpectMatches(g, Reference(g.c), "reference");
}

}  // namespace
}  // namespace gpusampler::kernels::testing
