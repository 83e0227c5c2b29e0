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
  // SPEC section 1: element i is word i & 3 of the call with counter
  // [lo32(i >> 2), hi32(i >> 2), r, stream] and key [lo32(S), hi32(S)].
  const uint64_t seed = 0x0123456789ABCDEFull;
  const uint64_t block = (uint64_t{5} << 32) + 6;  // a block with a non-zero high word
  for (uint32_t stream : {kSelectionStream, kOrderStream}) {
    const Philox4 x = Philox4x32(Philox4{{6u, 5u, 3u, stream}}, 0x89ABCDEFu, 0x01234567u);
    for (uint64_t lane = 0; lane < 4; ++lane) {
      EXPECT_EQ(ElementKey(seed, 3, stream, 4 * block + lane), x.v[lane]) << lane;
    }
  }
  // u and v of one element come from different calls.
  EXPECT_NE(ElementKey(seed, 3, kSelectionStream, 4 * block),
            ElementKey(seed, 3, kOrderStream, 4 * block));
}

TEST(PhiloxTest, PackKeyOrdersLexicographically) {
  EXPECT_LT(PackKey(1, 100), PackKey(2, 0));
  EXPECT_LT(PackKey(7, 3), PackKey(7, 4));
  EXPECT_EQ(PackedIndex(PackKey(0xFFFFFFFFu, 0x7FFFFFFF)), 0x7FFFFFFFu);
}

}  // namespace
}  // namespace gpusampler::kernels
