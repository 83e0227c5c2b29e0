// The two inputs of the GPU round 4 review that reach cub's block sort in the large-row
// stages (where its storage sat at 8 mod 16 in shared memory): a balanced row of 2^25 int8
// labels (Boundary's narrowing rounds), and a crafted 4 MiB int8 request whose positives all
// share the top 16 bits of their order key v (one BucketSort bin over kInsertMax keys). Each
// runs on cuda-sim (which now faults on a misaligned shared access, cub's storage included),
// on a CUDA device where there is one, and on the CPU backend, and must equal the brute-force
// reference exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/types.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

constexpr uint64_t kSeed = 0x5eed2025u;

// 4 Mi int8 labels: every element whose v has the most common top 16 bits is a positive, the
// rest negatives. K = 256 takes every positive (there are about 64-100 of them, below the
// target of 128) into one v bucket, and within it into one bin of the small sort.
Case CraftedBucketSortCase() {
  constexpr int64_t kN = int64_t{1} << 22;
  std::vector<uint32_t> top(kN);
  std::vector<int> count(1 << 16, 0);
  for (int64_t i = 0; i < kN; ++i) {
    top[i] = ElementKey(kSeed, 0, kOrderStream, static_cast<uint64_t>(i)) >> 16;
    ++count[top[i]];
  }
  const uint32_t mode =
      static_cast<uint32_t>(std::max_element(count.begin(), count.end()) - count.begin());
  Case c;
  c.seed = kSeed;
  c.dtype = DType::kInt8;
  c.spec.num_samples = 256;
  c.rows.assign(1, std::vector<int64_t>(kN, 0));
  for (int64_t i = 0; i < kN; ++i) {
    if (top[i] == mode) c.rows[0][i] = 1;
  }
  EXPECT_GT(count[mode], 32) << "the crafted positives must overflow one insertion bin";
  EXPECT_LT(count[mode], 128) << "every crafted positive must be selected";
  return c;
}

Case BalancedRowCase(uint64_t seed) {
  Case c;
  c.seed = seed;
  c.dtype = DType::kInt8;
  c.spec.num_samples = 512;
  c.rows.push_back(RandomLabels(int64_t{1} << 25, 0.5, 0.5, seed ^ 0xba1a4ceu));
  return c;
}

void ExpectExact(const Case& c, const std::string& backend) {
  const Result want = Reference(c);
  const Result got = RunOne(backend, c);
  EXPECT_EQ(got.indices, want.indices) << backend;
  EXPECT_EQ(got.labels, want.labels) << backend;
  EXPECT_EQ(got.num_positive, want.num_positive) << backend;
  EXPECT_EQ(got.num_negative, want.num_negative) << backend;
}

class PipelineInputsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " is not available here";
  }
};

TEST_P(PipelineInputsTest, CraftedRequestOnOneBucketSortBin) {
  ExpectExact(CraftedBucketSortCase(), GetParam());
}

TEST_P(PipelineInputsTest, BalancedInt8RowOfTwoToThe25) {
  ExpectExact(BalancedRowCase(2), GetParam());
}

INSTANTIATE_TEST_SUITE_P(Backends, PipelineInputsTest,
                         ::testing::Values("cpu:2", "cudasim", "cudasimdevice", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           name.erase(std::remove(name.begin(), name.end(), ':'), name.end());
                           return name;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
