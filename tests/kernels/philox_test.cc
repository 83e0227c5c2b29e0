// Philox4x32 known-answer vectors (Random123), read from tests/data.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels {
namespace {

TEST(PhiloxTest, KnownAnswerVectors) {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/philox4x32_10_kat.txt");
  ASSERT_TRUE(in) << "missing philox4x32_10_kat.txt";
  std::string line;
  int checked = 0, ten_rounds = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    int rounds;
    uint32_t ctr[4], key[2], want[4];
    f >> std::dec >> rounds >> std::hex;
    for (auto& c : ctr) f >> c;
    for (auto& k : key) f >> k;
    for (auto& w : want) f >> w;
    ASSERT_FALSE(f.fail()) << line;
    const Philox4 got =
        Philox4x32(Philox4{{ctr[0], ctr[1], ctr[2], ctr[3]}}, key[0], key[1], rounds);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(got.v[j], want[j]) << line << " word " << j;
    ++checked;
    ten_rounds += rounds == 10;
  }
  EXPECT_EQ(checked, 6);
  EXPECT_EQ(ten_rounds, 3);
}

TEST(PhiloxTest, ElementKeyLayout) {
  // One call per element: counter [lo32(i), hi32(i), r, 0], key [lo32(S), hi32(S)];
  // u = word 0, v = word 1 (the layout of the golden samples).
  const uint64_t seed = 0x0123456789ABCDEFull;
  const uint64_t i = (uint64_t{5} << 32) + 6;  // an index with a non-zero high word
  const Philox4 x = Philox4x32(Philox4{{6u, 5u, 3u, 0u}}, 0x89ABCDEFu, 0x01234567u);
  EXPECT_EQ(ElementKey(seed, 3, kSelectionStream, i), x.v[0]);
  EXPECT_EQ(ElementKey(seed, 3, kOrderStream, i), x.v[1]);
  EXPECT_NE(ElementKey(seed, 3, kSelectionStream, i), ElementKey(seed, 3, kOrderStream, i));
}

TEST(PhiloxTest, PackKeyOrdersLexicographically) {
  EXPECT_LT(PackKey(1, 100), PackKey(2, 0));
  EXPECT_LT(PackKey(7, 3), PackKey(7, 4));
  EXPECT_EQ(PackedIndex(PackKey(0xFFFFFFFFu, 0x7FFFFFFF)), 0x7FFFFFFFu);
}

}  // namespace
}  // namespace gpusampler::kernels
