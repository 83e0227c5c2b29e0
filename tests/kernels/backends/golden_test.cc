// golden_samples.jsonl (an independent implementation of SPEC section 1) through every
// backend, alone and all fused into one launch (the brute-force reference:
// golden_reference_test.cc).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/golden.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

class GoldenBackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " needs a CUDA device";
  }
};

TEST_P(GoldenBackendTest, EachCaseAlone) {
  for (const auto& g : LoadGolden()) ExpectMatches(g, RunOne(GetParam(), g.c), GetParam());
}

TEST_P(GoldenBackendTest, AllCasesFusedInOneLaunch) {
  const auto golden = LoadGolden();
  std::vector<Case> cases;
  for (const auto& g : golden) cases.push_back(g.c);
  const auto got = RunFused(GetParam(), cases);
  for (size_t j = 0; j < golden.size(); ++j) ExpectMatches(golden[j], got[j], GetParam());
}

TEST_P(GoldenBackendTest, EveryLabelDtype) {
  // The golden labels fit every signed dtype; values outside {0, 1} stay out of BOOL/UINT8.
  for (DType dtype : {DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64}) {
    for (auto g : LoadGolden()) {
      g.c.dtype = dtype;
      ExpectMatches(g, RunOne(GetParam(), g.c), GetParam() + "/" + Traits(dtype).name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GoldenBackendTest, ::testing::ValuesIn(AllBackends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == ':' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
