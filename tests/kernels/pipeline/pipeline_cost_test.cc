// What the GPU pipeline costs, as cuda-sim counts it (global bytes, shared-memory bytes,
// launches), on the cases docs/decisions.md estimates; and the crafted request: labels
// chosen with the oracle's keys so that every selected element falls in one v bucket
// (several blocks' worth). It must stay exact and cost a small multiple of a random
// request of the same shape (counts, not wall-clock).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_block.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

// (a) B=32 x N=1e3, K=100, D=16 f32: one launch, at most 256 shared bytes per element.
TEST(PipelineCostTest, SmallRowsOneLaunchAndFewSharedBytes) {
  const Case c = BalancedCase(32, 1000, 100, 64, 21);
  const Result got = RunOne("cudasim", c);
  const Result want = RunOne("cpu:2", c);
  EXPECT_EQ(want.indices, got.indices);
  EXPECT_EQ(want.features, got.features);
  const LaunchStats s = LastStats("cudasim");
  PrintStats("(a) 32 x 1e3, K=100, D=16", s);
  EXPECT_EQ(s.launches, 1);
  EXPECT_LE(s.smem_bytes_per_element(), 256.0);
  EXPECT_GT(s.smem_bytes_per_element(), 8.0);  // the class counts and the select are real
}

// Large rows ((b) and (c) at a size the suite affords; DISABLED_FullSizes runs them whole):
// at most 24 global and 40 shared bytes per int64 label element.
TEST(PipelineCostTest, LargeRowsAtMost24GlobalAnd40SharedBytesPerElement) {
  const Case c = BalancedCase(2, 1000000, 100000, 0, 23);
  const Result got = RunOne("cudasim", c);
  EXPECT_EQ(Reference(c).indices, got.indices);
  const LaunchStats s = LastStats("cudasim");
  PrintStats("2 x 1e6, K=1e5", s);
  EXPECT_LE(s.bytes_per_element(), 24.0);
  EXPECT_LE(s.smem_bytes_per_element(), 40.0);
}

// A size class of small-row batches: the fused kernel over the class's blocks, the batch's
// row count read from device memory; a smaller batch gives what its own launch gives, and
// the spare blocks read nothing.
TEST(PipelineCostTest, SmallRowSizeClassServesASmallerBatch) {
  HostBatch direct(20, 900, 80, 5);
  {
    const pipeline::Shape shape = pipeline::MakeShape(direct.batch.rows, 20);
    const pipeline::Layout layout = pipeline::MakeLayout(shape);
    std::unique_ptr<uint64_t[]> arena(new uint64_t[layout.bytes / 8 + 1]);
    LaunchStats stats;
    sim::SimExec exec(&stats);
    pipeline::Enqueue(exec, shape, layout, reinterpret_cast<uint8_t*>(arena.get()),
                      pipeline::ParamsOf(direct.batch));
  }
  HostBatch classed(20, 900, 80, 5);
  pipeline::LaunchSizes sizes;
  sizes.num_rows = 20;
  pipeline::Params p = pipeline::ParamsOf(classed.batch);
  p.sizes = &sizes;
  LaunchStats stats;
  sim::SimExec exec(&stats);
  pipeline::EnqueueSmallClass(exec, 64, p);
  EXPECT_EQ(stats.launches, 1);
  EXPECT_EQ(direct.out, classed.out);
  EXPECT_EQ(direct.out_labels, classed.out_labels);
  EXPECT_EQ(direct.pos, classed.pos);
  EXPECT_EQ(direct.neg, classed.neg);
  EXPECT_EQ(std::count(classed.out.begin(), classed.out.end(), -7), 0);
  // The 44 spare blocks read one word each (the row count), nothing else.
  LaunchStats one;
  sim::SimExec(&one).Launch(pipeline::FusedBody{p}, 20);
  EXPECT_EQ(stats.bytes_read, one.bytes_read + 44 * 4);
}

// N = 2^21 labels, K = 20000 (32 v buckets); only elements whose v (the oracle's key)
// lies in bucket 0 are labelled positive, the rest ignored: ~65k positives, of which the
// 20000 selected all share one v bucket, five blocks' worth.
Case Crafted(bool piled) {
  Case c;
  c.spec.num_samples = 20000;
  c.spec.positive_fraction = 1.0;
  c.seed = 0x5eed;
  const int64_t n = int64_t{1} << 21;
  const int bits = pipeline::OrderBucketBits(c.spec.num_samples);
  EXPECT_EQ(bits, 5);
  if (piled) {
    std::vector<int64_t> labels(static_cast<size_t>(n), -1);
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t v = ElementKey(c.seed, 0, kOrderStream, static_cast<uint64_t>(i));
      if (pipeline::BucketOf(v, bits) == 0) labels[static_cast<size_t>(i)] = 1;
    }
    c.rows.push_back(std::move(labels));
  } else {
    c.rows.push_back(RandomLabels(n, 1.0 / 32, 0.0, 77));
  }
  return c;
}

TEST(PipelineCostTest, CraftedRequestPilingOneVBucketStaysExactAndCheap) {
  const Case piled = Crafted(true);
  const Result got = RunOne("cudasim", piled);
  const Result want = Reference(piled);
  EXPECT_EQ(want.indices, got.indices);
  ASSERT_EQ(got.indices.size(), 1u);
  // The plant worked: every selected element is in v bucket 0.
  for (int64_t i : got.indices[0]) {
    ASSERT_GE(i, 0);
    EXPECT_EQ(
        pipeline::BucketOf(ElementKey(piled.seed, 0, kOrderStream, static_cast<uint64_t>(i)), 5),
        0);
  }
  const LaunchStats crafted = LastStats("cudasim");
  const Case random = Crafted(false);
  EXPECT_EQ(Reference(random).indices, RunOne("cudasim", random).indices);
  const LaunchStats plain = LastStats("cudasim");
  PrintStats("crafted (one v bucket)", crafted);
  PrintStats("random, same shape", plain);
  const double crafted_bytes = static_cast<double>(crafted.bytes_read + crafted.bytes_written);
  const double plain_bytes = static_cast<double>(plain.bytes_read + plain.bytes_written);
  EXPECT_LE(crafted_bytes, 2.0 * plain_bytes);
  EXPECT_LE(static_cast<double>(crafted.smem_bytes), 3.0 * static_cast<double>(plain.smem_bytes));
}

}  // namespace
}  // namespace gpusampler::kernels::testing
