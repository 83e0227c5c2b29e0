// keys.jsonl (SPEC section 1's key layout, from an independent implementation) on every
// code path that generates keys: the scalar ElementKey, the CPU tile generator and the CPU
// element-key generator under the instruction set in use (ctest repeats the suite with
// GPUSAMPLER_PHILOX_ISA=avx2 and portable), and a CUDA kernel when a device is present.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/key_tiles.hpp"
#include "cuda/keys_cuda.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "pipeline/key_probe.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_block.hpp"

namespace gpusampler::kernels {
namespace {

std::vector<KeyQuery> LoadKeys() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/keys.jsonl");
  std::vector<KeyQuery> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    out.push_back(KeyQuery{j.at("seed").get<uint64_t>(), j.at("row").get<uint32_t>(),
                           j.at("i").get<uint64_t>(), j.at("u").get<uint32_t>(),
                           j.at("v").get<uint32_t>()});
  }
  return out;
}

std::string Where(const KeyQuery& k) {
  return "seed " + std::to_string(k.seed) + " row " + std::to_string(k.row) + " i " +
         std::to_string(k.i) + " (isa " + cpu::KeyIsaName() + ")";
}

TEST(KeysTest, FileCoversHighBlockWords) {
  const auto keys = LoadKeys();
  ASSERT_EQ(keys.size(), 13u);
  int high = 0;
  for (const auto& k : keys) high += (k.i >> 2) >= (uint64_t{1} << 32);
  EXPECT_GE(high, 3) << "keys.jsonl should pin block indices above 2^32";
}

TEST(KeysTest, ScalarElementKey) {
  for (const auto& k : LoadKeys()) {
    EXPECT_EQ(ElementKey(k.seed, k.row, kSelectionStream, k.i), k.u) << Where(k);
    EXPECT_EQ(ElementKey(k.seed, k.row, kOrderStream, k.i), k.v) << Where(k);
  }
}

TEST(KeysTest, CpuTileGenerator) {
  // The tile that holds element i, generated whole: every stream, and i's own slot.
  for (const auto& k : LoadKeys()) {
    const uint64_t first = k.i / cpu::kTileElements * cpu::kTileElements;
    uint32_t out[cpu::kTileElements];
    cpu::KeyTile(k.seed, k.row, kSelectionStream, first, out);
    EXPECT_EQ(out[k.i - first], k.u) << Where(k);
    cpu::KeyTile(k.seed, k.row, kOrderStream, first, out);
    EXPECT_EQ(out[k.i - first], k.v) << Where(k);
  }
}

TEST(KeysTest, CpuElementGenerator) {
  // All lines in one call (they share no seed, so one per line), then each alone.
  for (const auto& k : LoadKeys()) {
    uint32_t u = 0, v = 0;
    cpu::KeysOfElements64(k.seed, k.row, kSelectionStream, &k.i, 1, &u);
    cpu::KeysOfElements64(k.seed, k.row, kOrderStream, &k.i, 1, &v);
    EXPECT_EQ(u, k.u) << Where(k);
    EXPECT_EQ(v, k.v) << Where(k);
  }
}

// The pipeline's own derivation (GroupKeys / OrderKeyOf, as every GPU body computes u and v)
// run through the cuda-sim executor.
TEST(KeysTest, CudaSimPipeline) {
  const auto keys = LoadKeys();
  std::vector<pipeline::KeyProbe> probes;
  for (const auto& k : keys) probes.push_back(pipeline::KeyProbe{k.seed, k.row, k.i});
  std::vector<uint32_t> u(keys.size()), v(keys.size());
  LaunchStats stats;
  sim::SimExec exec(&stats);
  exec.Launch(
      pipeline::KeysBody{probes.data(), static_cast<int64_t>(probes.size()), u.data(), v.data()},
      1);
  EXPECT_EQ(stats.launches, 1);
  for (size_t j = 0; j < keys.size(); ++j) {
    EXPECT_EQ(u[j], keys[j].u) << Where(keys[j]);
    EXPECT_EQ(v[j], keys[j].v) << Where(keys[j]);
  }
}

TEST(KeysTest, CudaKernel) {
  if (!CudaKeysAvailable()) GTEST_SKIP() << "needs a CUDA device";
  const auto keys = LoadKeys();
  std::vector<uint32_t> u, v;
  CudaElementKeys(keys, &u, &v);
  ASSERT_EQ(u.size(), keys.size());
  for (size_t j = 0; j < keys.size(); ++j) {
    EXPECT_EQ(u[j], keys[j].u) << Where(keys[j]);
    EXPECT_EQ(v[j], keys[j].v) << Where(keys[j]);
  }
}

}  // namespace
}  // namespace gpusampler::kernels
