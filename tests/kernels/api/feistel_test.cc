// The epoch permutation pi(n, tag, pass) of SPEC section 8: every line of feistel.jsonl (an
// independent implementation), and bijection of [0, n) across sizes that hit the edges of
// the Feistel domain (powers of two and their neighbours) and cycle walking.
#include "gpusampler/kernels/feistel.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace gpusampler::kernels {
namespace {

TEST(FeistelTest, ReferenceFile) {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/feistel.jsonl");
  ASSERT_TRUE(in) << "missing feistel.jsonl";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const FeistelKey key{j.at("shuffle_seed").get<uint64_t>(), j.at("epoch").get<uint32_t>()};
    const uint64_t n = j.at("n").get<uint64_t>();
    const uint64_t got = FeistelPermute(key, n, j.at("tag").get<uint32_t>(),
                                        j.at("pass").get<uint32_t>(), j.at("x").get<uint64_t>());
    EXPECT_EQ(got, j.at("pi").get<uint64_t>()) << line;
    ++checked;
  }
  EXPECT_EQ(checked, 34);
}

TEST(FeistelTest, HalfBits) {
  EXPECT_EQ(FeistelHalfBits(2), 1);  // ceil(log2 2) = 1 -> h = 1
  EXPECT_EQ(FeistelHalfBits(3), 1);
  EXPECT_EQ(FeistelHalfBits(4), 1);
  EXPECT_EQ(FeistelHalfBits(5), 2);  // ceil(log2 5) = 3 -> h = 2
  EXPECT_EQ(FeistelHalfBits(16), 2);
  EXPECT_EQ(FeistelHalfBits(17), 3);
  EXPECT_EQ(FeistelHalfBits(65536), 8);
  EXPECT_EQ(FeistelHalfBits(65537), 9);
  EXPECT_EQ(FeistelHalfBits(uint64_t{1} << 32), 16);
  EXPECT_EQ(FeistelHalfBits((uint64_t{1} << 32) + 1), 17);
}

TEST(FeistelTest, OneElementMapsToZero) {
  EXPECT_EQ(FeistelPermute(FeistelKey{123, 4}, 1, 0, 0, 0), 0u);
}

TEST(FeistelTest, BijectionForManySizes) {
  std::vector<uint64_t> sizes;
  for (uint64_t n = 1; n <= 70; ++n) sizes.push_back(n);
  for (int b = 7; b <= 16; ++b) {
    for (int64_t d : {-1, 0, 1}) sizes.push_back((uint64_t{1} << b) + d);
  }
  sizes.push_back(1000);
  sizes.push_back(100003);
  for (const uint64_t n : sizes) {
    for (const FeistelKey key : {FeistelKey{0, 0}, FeistelKey{0xFFFFFFFFFFFFFFFFull, 7}}) {
      for (const uint32_t tag : {0u, 3u, kRowsTag}) {
        std::vector<char> seen(n, 0);
        for (uint64_t x = 0; x < n; ++x) {
          const uint64_t y = FeistelPermute(key, n, tag, /*pass=*/tag, x);
          ASSERT_LT(y, n) << "n=" << n;
          ASSERT_FALSE(seen[y]) << "n=" << n << " tag=" << tag << " repeats " << y;
          seen[y] = 1;
        }
      }
    }
  }
}

TEST(FeistelTest, PassesAndEpochsGiveDifferentPermutations) {
  const uint64_t n = 1000;
  auto perm = [&](FeistelKey key, uint32_t pass) {
    std::vector<uint64_t> p(n);
    for (uint64_t x = 0; x < n; ++x) p[x] = FeistelPermute(key, n, 0, pass, x);
    return p;
  };
  EXPECT_NE(perm(FeistelKey{5, 0}, 0), perm(FeistelKey{5, 0}, 1));
  EXPECT_NE(perm(FeistelKey{5, 0}, 0), perm(FeistelKey{5, 1}, 0));
  EXPECT_NE(perm(FeistelKey{5, 0}, 0), perm(FeistelKey{6, 0}, 0));
  EXPECT_EQ(perm(FeistelKey{5, 0}, 0), perm(FeistelKey{5, 0}, 0));
}

}  // namespace
}  // namespace gpusampler::kernels
