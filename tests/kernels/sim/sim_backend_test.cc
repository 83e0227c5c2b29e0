// The cuda-sim device (the CUDA pipeline run on the host): its counts of launches, bytes and
// Philox calls, the paths only huge rows take on a GPU, and its options. Exactness on the
// golden, keys-derived brute-force and chi-square suites comes from the backend-parameterized
// suites ("cudasim", "cudasimlarge").
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "sim/sim_backend.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

Case BalancedRows(int64_t rows, int64_t n, int64_t k, uint64_t seed) {
  Case c;
  c.spec.num_samples = k;
  c.spec.positive_fraction = 0.5;
  c.seed = seed;
  for (int64_t r = 0; r < rows; ++r) {
    c.rows.push_back(RandomLabels(n, 0.5, 0.5, seed * 131 + static_cast<uint64_t>(r)));
  }
  return c;
}

void ExpectSame(const Result& want, const Result& got) {
  EXPECT_EQ(want.indices, got.indices);
  EXPECT_EQ(want.labels, got.labels);
  EXPECT_EQ(want.features, got.features);
  EXPECT_EQ(want.num_positive, got.num_positive);
  EXPECT_EQ(want.num_negative, got.num_negative);
}

// Small rows: the whole batch is the fused kernel, one launch, and the labels are read once.
TEST(CudaSimTest, BatchOfSmallRowsIsOneLaunch) {
  const Case c = BalancedRows(32, 1000, 100, 7);
  const Result got = RunOne("cudasim", c);
  ExpectSame(RunOne("cpu:2", c), got);
  const LaunchStats stats = LastStats("cudasim");
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(stats.label_elements, 32 * 1000);
  // One Philox call per four elements for u, one per selected element for v.
  EXPECT_EQ(stats.philox_calls, 32 * (1000 / 4 + 100));
  // Labels once (8 B), outputs (index 8 B + label read and write 16 B) per slot.
  EXPECT_GE(stats.bytes_read, 32 * 1000 * 8);
  EXPECT_LT(stats.bytes_per_element(), 8.0 + 0.1 * 24 + 1.0);
}

// Large rows (radix-select): two reads of the labels and a few bytes per selected key.
TEST(CudaSimTest, LargeRowsMoveAtMost24BytesPerElement) {
  const Case c = BalancedRows(2, 1000000, 100000, 11);
  const Result got = RunOne("cudasim", c);
  ExpectSame(Reference(c), got);
  const LaunchStats stats = LastStats("cudasim");
  EXPECT_EQ(stats.launches, 7);  // prepare, pass 1, threshold, pass 2, boundary, scatter, sort
  EXPECT_LE(stats.bytes_per_element(), 24.0);
  EXPECT_GE(stats.bytes_per_element(), 16.0);  // the labels twice: the counts are real
  // u twice (N/4 each), v once per group of four holding a selected element (<= N/4).
  EXPECT_LE(stats.philox_calls, 2 * 3 * 1000000 / 4);
}

// A block that sorts only 64 keys: boundary buckets of ~120 candidates take the histogram
// rounds, and v buckets of ~100 keys the ranking path. Still exact.
TEST(CudaSimTest, SmallBlocksTakeTheBoundaryRoundsAndStayExact) {
  // RunOne's "cudasimlarge" is this configuration (block_capacity 64, small_row_max 0).
  const Case c = BalancedRows(1, 500000, 3000, 3);
  ExpectSame(Reference(c), RunOne("cudasimlarge", c));
}

TEST(CudaSimTest, MixedSmallAndLargeRowsInOneBatch) {
  Case small = BalancedRows(3, 700, 64, 5);
  Case large = BalancedRows(2, 20000, 900, 6);
  large.spec.positive_fraction = 0.25;
  large.spec.fill = FillPolicy::kNone;
  const auto got = RunFused("cudasim", {small, large, small});
  const auto want = RunFused("cpu:2", {small, large, small});
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < got.size(); ++j) ExpectSame(want[j], got[j]);
  EXPECT_EQ(LastStats("cudasim").launches, 8);  // the fused kernel + the seven large stages
}

TEST(CudaSimTest, OptionsOutOfRangeAreRefused) {
  CudaSimOptions options;
  options.block_capacity = 0;
  EXPECT_THROW(MakeCudaSimBackend(options), Error);
  options.block_capacity = 8192;
  EXPECT_THROW(MakeCudaSimBackend(options), Error);
  options = CudaSimOptions{};
  options.small_row_max = 5000;
  EXPECT_THROW(MakeCudaSimBackend(options), Error);
  EXPECT_EQ(MakeCudaSimBackend()->name(), "cuda-sim");
}

}  // namespace
}  // namespace gpusampler::kernels::testing
