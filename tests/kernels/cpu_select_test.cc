// The CPU backend's building blocks against plain reference code: the vectorized key
// generator, the vector count and filter, and the ordering sort (with forced ties).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "cpu_select.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

TEST(CpuSelectTest, KeyTileMatchesScalarPhilox) {
  uint32_t out[kTileElements];
  // Tile starts are multiples of 4; the last one's blocks cross 2^32 (carry into the
  // counter's high word inside the tile).
  for (uint64_t first : {uint64_t{0}, uint64_t{256}, uint64_t{1000004}, uint64_t{0x7FFFFF00},
                         ((uint64_t{1} << 32) - 16) * 4}) {
    for (uint32_t stream : {kSelectionStream, kOrderStream}) {
      KeyTile(0xDEADBEEF12345678ull, 7, stream, first, out);
      for (int j = 0; j < kTileElements; ++j) {
        ASSERT_EQ(out[j], ElementKey(0xDEADBEEF12345678ull, 7, stream, first + j))
            << "first " << first << " j " << j;
      }
    }
  }
}

TEST(CpuSelectTest, KeysOfElementsMatchesScalarPhilox) {
  // Counts around the vector widths and the group of 64 calls; every lane value.
  std::mt19937 gen(11);
  for (int n : {0, 1, 5, 8, 15, 16, 17, 63, 64, 65, 200, 1000}) {
    std::vector<uint32_t> idx(static_cast<size_t>(n));
    for (auto& i : idx) i = gen() & 0x7FFFFFFF;
    std::vector<uint32_t> out(static_cast<size_t>(n) + 1, 0xABCDEF01u);
    KeysOfElements(42, 3, kOrderStream, idx.data(), n, out.data());
    for (int j = 0; j < n; ++j) {
      ASSERT_EQ(out[j], ElementKey(42, 3, kOrderStream, idx[j])) << "n " << n << " j " << j;
    }
    EXPECT_EQ(out[n], 0xABCDEF01u) << "wrote past n = " << n;
  }
}

TEST(CpuSelectTest, SortByHighWordIsStableOnTies) {
  std::mt19937_64 gen(5);
  std::vector<uint64_t> tmp;
  for (int64_t n : {1, 2, 5, 31, 32, 33, 100, 1000, 4096, 4097, 16384, 16385, 100000}) {
    for (uint32_t distinct : {2u, 1000u, 0xFFFFFFFFu}) {
      std::vector<uint64_t> items(static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        const uint32_t high = static_cast<uint32_t>(gen() % distinct) * (0xFFFFFFFFu / distinct);
        items[j] = (uint64_t{high} << 32) | static_cast<uint32_t>(j);  // low word ascending
      }
      std::vector<uint64_t> want = items;
      std::stable_sort(want.begin(), want.end(),
                       [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
      SortByHighWord(items.data(), n, &tmp);
      ASSERT_EQ(items, want) << "n " << n << " distinct " << distinct;
    }
  }
}

TEST(CpuSelectTest, SortByHighWordInsideABucketOfSharedTopBits) {
  // The parallel sort's second pass: every item shares its top 8 bits.
  std::mt19937_64 gen(6);
  std::vector<uint64_t> tmp;
  for (int64_t n : {1, 31, 32, 390, 4000, 16384, 16385, 40000}) {
    std::vector<uint64_t> items(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) {
      const uint64_t high = (uint64_t{0xA7} << 24) | (gen() & 0xFFFFFF);
      items[j] = (high << 32) | static_cast<uint32_t>(j);
    }
    std::vector<uint64_t> want = items;
    std::stable_sort(want.begin(), want.end(),
                     [](uint64_t a, uint64_t b) { return (a >> 32) < (b >> 32); });
    SortByHighWord(items.data(), n, &tmp, 8);
    ASSERT_EQ(items, want) << "n " << n;
  }
}

TEST(CpuSelectTest, VectorCountAndFilterMatchScalar) {
  if (!HasVectorFilter()) GTEST_SKIP() << "no AVX-512 on this CPU (or a lower ISA was forced)";
  std::mt19937_64 gen(11);
  alignas(64) int16_t labels[kTileElements];
  alignas(64) uint32_t keys[kTileElements];
  for (int trial = 0; trial < 200; ++trial) {
    for (int j = 0; j < kTileElements; ++j) {
      labels[j] = static_cast<int16_t>(static_cast<int>(gen() % 4) - 1);  // -1, 0, 1, 2
      keys[j] = static_cast<uint32_t>(gen());
    }
    const uint64_t pos_bound = gen() % (uint64_t{1} << 33), neg_bound = gen() >> 31;
    uint64_t pos_out[kTileElements], neg_out[kTileElements];
    int64_t np = 0, nq = 0;
    FilterTile(2, true, labels, keys, 640, 1, -1, pos_bound, neg_bound, pos_out, &np, neg_out, &nq);
    std::vector<uint64_t> want_pos, want_neg;
    int64_t count_pos = 0, count_neg = 0;
    for (int j = 0; j < kTileElements; ++j) {
      const uint64_t packed = PackKey(keys[j], 640 + j);
      if (labels[j] == 1 && keys[j] < pos_bound) want_pos.push_back(packed);
      if (labels[j] == -1 && keys[j] < neg_bound) want_neg.push_back(packed);
      count_pos += labels[j] == 1;
      count_neg += labels[j] == -1;
    }
    ASSERT_EQ(std::vector<uint64_t>(pos_out, pos_out + np), want_pos);
    ASSERT_EQ(std::vector<uint64_t>(neg_out, neg_out + nq), want_neg);
    int64_t p = 0, q = 0;
    CountLabels(2, true, labels, kTileElements, 1, -1, &p, &q);
    ASSERT_EQ(p, count_pos);
    ASSERT_EQ(q, count_neg);
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
