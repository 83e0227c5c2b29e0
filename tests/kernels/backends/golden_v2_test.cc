// golden_v2.jsonl (an independent implementation of SPEC section 7: classes, fill orders,
// WEIGHTED / HARDEST / MIXED) through every backend: each case alone, all fused into one launch,
// every signed label dtype, and with the binary lowering off (the class path for the binary
// cases too).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "backends/golden_v2.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

class GoldenV2BackendTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!BackendAvailable(GetParam())) GTEST_SKIP() << GetParam() << " needs a CUDA device";
  }
};

TEST_P(GoldenV2BackendTest, EachCaseAlone) {
  const auto golden = LoadGoldenV2();
  ASSERT_EQ(golden.size(), 20u);
  for (const auto& g : golden) ExpectMatchesV2(g, RunOne(GetParam(), g.c), GetParam());
}

TEST_P(GoldenV2BackendTest, EachCaseOnTheClassPath) {
  for (auto g : LoadGoldenV2()) {
    g.c.lower_binary = false;
    ExpectMatchesV2(g, RunOne(GetParam(), g.c), GetParam() + "/class path");
  }
}

TEST_P(GoldenV2BackendTest, AllCasesFusedInOneLaunch) {
  const auto golden = LoadGoldenV2();
  std::vector<Case> cases;
  for (const auto& g : golden) cases.push_back(g.c);
  const auto got = RunFused(GetParam(), cases);
  for (size_t j = 0; j < golden.size(); ++j) ExpectMatchesV2(golden[j], got[j], GetParam());
}

TEST_P(GoldenV2BackendTest, EverySignedLabelDtype) {
  // Every golden label fits int16; int8 only where the values do.
  for (DType dtype : {DType::kInt8, DType::kInt16, DType::kInt32}) {
    for (auto g : LoadGoldenV2()) {
      bool fits = true;
      for (const auto& row : g.c.rows) {
        for (int64_t v : row) fits = fits && LabelRepresentable(dtype, v);
      }
      if (!fits) continue;
      g.c.dtype = dtype;
      ExpectMatchesV2(g, RunOne(GetParam(), g.c), GetParam() + "/" + Traits(dtype).name);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, GoldenV2BackendTest, ::testing::ValuesIn(AllBackends()),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& ch : n) ch = ch == ':' ? '_' : ch;
                           return n;
                         });

}  // namespace
}  // namespace gpusampler::kernels::testing
