// tests/data/weighted_keys.jsonl (an independent implementation): the weighted key E and E / w of
// SPEC section 7, bit for bit. Lines with (seed, row, i) take u and u2 from Philox (ElementKey, and
// the CPU backend's key tiles on every ISA this CPU runs); lines with only (u, u2) use them.
#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu/key_tiles.hpp"
#include "cpu/supported_isas.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels {
namespace {

std::vector<nlohmann::json> LoadWeightedKeys() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/weighted_keys.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  }
  return out;
}

TEST(WeightedKeysTest, EveryLineGivesTheReferenceEAndKeyBits) {
  const auto lines = LoadWeightedKeys();
  ASSERT_EQ(lines.size(), 43u);
  int with_counter = 0;
  for (const auto& j : lines) {
    uint32_t u = j.at("u").get<uint32_t>(), u2 = j.at("u2").get<uint32_t>();
    if (j.contains("seed")) {
      ++with_counter;
      const uint64_t seed = j.at("seed").get<uint64_t>();
      const uint32_t row = j.at("row").get<uint32_t>();
      const uint64_t i = j.at("i").get<uint64_t>();
      EXPECT_EQ(ElementKey(seed, row, kSelectionStream, i), u) << j.dump();
      EXPECT_EQ(ElementKey(seed, row, kWeightStream, i), u2) << j.dump();
      u = ElementKey(seed, row, kSelectionStream, i);
      u2 = ElementKey(seed, row, kWeightStream, i);
    }
    const double e = WeightedE(u, u2);
    EXPECT_EQ(DoubleBits(e), j.at("E_bits").get<uint64_t>()) << j.dump();
    EXPECT_EQ(WeightedKeyBits(e, j.at("score").get<float>()), j.at("key_bits").get<uint64_t>())
        << j.dump();
  }
  EXPECT_EQ(with_counter, 35);
}

// The CPU backend draws u and u2 with its key tiles: every ISA gives the reference bits.
TEST(WeightedKeysTest, KeyTilesOfEveryIsaGiveTheReferenceKeys) {
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    for (const auto& j : LoadWeightedKeys()) {
      if (!j.contains("seed")) continue;
      const uint64_t seed = j.at("seed").get<uint64_t>();
      const uint32_t row = j.at("row").get<uint32_t>();
      const uint64_t i = j.at("i").get<uint64_t>();
      const uint64_t first = i / cpu::kTileElements * cpu::kTileElements;
      alignas(64) uint32_t u[cpu::kTileElements], u2[cpu::kTileElements];
      cpu::KeyTile(isa, seed, row, kSelectionStream, first, u);
      cpu::KeyTile(isa, seed, row, kWeightStream, first, u2);
      const double e = WeightedE(u[i - first], u2[i - first]);
      EXPECT_EQ(DoubleBits(e), j.at("E_bits").get<uint64_t>()) << cpu::IsaName(isa) << j.dump();
      EXPECT_EQ(WeightedKeyBits(e, j.at("score").get<float>()), j.at("key_bits").get<uint64_t>())
          << cpu::IsaName(isa) << j.dump();
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels
