// weighted_keys.jsonl (SPEC section 7's weighted key, from an independent implementation)
// through the pipeline's own derivation (WeightedKeysBody: GroupKeys on streams 0 and 2,
// WeightedE, WeightedKeyBits, as ClassKeysBody computes them) on the cuda-sim executor, and
// on a CUDA device when one is present (the device's __dmul_rn / __dadd_rn / __ddiv_rn).
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda/keys_cuda.hpp"
#include "pipeline/key_probe.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_block.hpp"

namespace gpusampler::kernels {
namespace {

struct Expected {
  WeightedKeyQuery q;
  uint32_t u, u2;
  uint64_t e_bits, key_bits;
};

std::vector<Expected> LoadWeightedKeys() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/weighted_keys.jsonl");
  std::vector<Expected> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    Expected e;
    e.u = j.at("u").get<uint32_t>();
    e.u2 = j.at("u2").get<uint32_t>();
    // Lines without (seed, row, i) pin E and the key of raw (u, u2).
    const bool element = j.contains("seed");
    e.q = WeightedKeyQuery{element ? j.at("seed").get<uint64_t>() : 0,
                           element ? j.at("row").get<uint32_t>() : 0,
                           element ? j.at("i").get<uint64_t>() : 0,
                           j.at("score").get<float>(),
                           !element,
                           e.u,
                           e.u2};
    e.e_bits = j.at("E_bits").get<uint64_t>();
    e.key_bits = j.at("key_bits").get<uint64_t>();
    out.push_back(e);
  }
  return out;
}

std::string Where(const Expected& e) {
  if (e.q.given) return "u " + std::to_string(e.u) + " u2 " + std::to_string(e.u2);
  return "seed " + std::to_string(e.q.seed) + " row " + std::to_string(e.q.row) + " i " +
         std::to_string(e.q.i) + " score " + std::to_string(e.q.score);
}

void ExpectAll(const std::vector<Expected>& want, const std::vector<WeightedKeyResult>& got) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_EQ(got[j].u, want[j].u) << Where(want[j]);
    EXPECT_EQ(got[j].u2, want[j].u2) << Where(want[j]);
    EXPECT_EQ(got[j].e_bits, want[j].e_bits) << Where(want[j]);
    EXPECT_EQ(got[j].key_bits, want[j].key_bits) << Where(want[j]);
  }
}

TEST(WeightedKeyProbeTest, FileHasElementAndRawLines) {
  const auto want = LoadWeightedKeys();
  int raw = 0;
  for (const auto& e : want) raw += e.q.given ? 1 : 0;
  EXPECT_EQ(want.size(), 43u);
  EXPECT_EQ(raw, 8);
}

TEST(WeightedKeyProbeTest, CudaSimPipeline) {
  const auto want = LoadWeightedKeys();
  ASSERT_FALSE(want.empty());
  std::vector<pipeline::WeightedProbe> probes;
  for (const auto& e : want) {
    probes.push_back(pipeline::WeightedProbe{e.q.seed, e.q.i, e.q.row, e.q.score, e.u, e.u2,
                                             e.q.given ? 1 : 0, 0});
  }
  std::vector<pipeline::WeightedProbeOut> out(probes.size());
  LaunchStats stats;
  sim::SimExec exec(&stats);
  const int64_t n = static_cast<int64_t>(probes.size());
  exec.Launch(pipeline::WeightedKeysBody{probes.data(), n, out.data()},
              (n + pipeline::kThreads - 1) / pipeline::kThreads);
  EXPECT_EQ(stats.philox_calls, 2 * n);
  std::vector<WeightedKeyResult> got;
  for (const auto& o : out) got.push_back(WeightedKeyResult{o.u, o.u2, o.e_bits, o.key_bits});
  ExpectAll(want, got);
}

TEST(WeightedKeyProbeTest, CudaKernel) {
  if (!CudaKeysAvailable()) GTEST_SKIP() << "needs a CUDA device";
  const auto want = LoadWeightedKeys();
  std::vector<WeightedKeyQuery> queries;
  for (const auto& e : want) queries.push_back(e.q);
  std::vector<WeightedKeyResult> got;
  CudaWeightedKeys(queries, &got);
  ExpectAll(want, got);
}

}  // namespace
}  // namespace gpusampler::kernels
