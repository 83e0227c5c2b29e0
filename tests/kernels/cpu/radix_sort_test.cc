// cpu/radix_sort: the ordering sort, stable on (forced) ties.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "cpu/radix_sort.hpp"

namespace gpusampler::kernels::cpu {
namespace {

TEST(RadixSortTest, SortByHighWordIsStableOnTies) {
  std::mt19937_64 gen(5);
  std::vector<uint64_t> tmp;
  // Up to 16384 the two-digit small sort; to 2^20 the bucket pass + small sorts; beyond, the
  // three-pass radix sort.
  for (int64_t n :
       {1, 2, 5, 31, 32, 33, 100, 1000, 4096, 4097, 16384, 16385, 100000, 1048576, 1048577}) {
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

TEST(RadixSortTest, SortByHighWordInsideABucketOfSharedTopBits) {
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

}  // namespace
}  // namespace gpusampler::kernels::cpu
