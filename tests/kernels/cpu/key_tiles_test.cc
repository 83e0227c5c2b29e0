// cpu/key_tiles: the key generators under every instruction-set version this CPU runs,
// against scalar Philox.
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

#include "cpu/key_tiles.hpp"
#include "cpu/supported_isas.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

TEST(KeyTilesTest, KeyTileMatchesScalarPhilox) {
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

TEST(KeyTilesTest, KeysOfElementsMatchesScalarPhilox) {
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

TEST(KeyTilesTest, EveryIsaKeyTileAndElementKeysMatchScalarPhilox) {
  std::mt19937 gen(12);
  for (Isa isa : SupportedIsas()) {
    uint32_t out[kTileElements];
    for (uint64_t first : {uint64_t{0}, uint64_t{1000004}, ((uint64_t{1} << 32) - 16) * 4}) {
      KeyTile(isa, 0x0123456789ABCDEFull, 9, kSelectionStream, first, out);
      for (int j = 0; j < kTileElements; ++j) {
        ASSERT_EQ(out[j], ElementKey(0x0123456789ABCDEFull, 9, kSelectionStream, first + j))
            << IsaName(isa) << " first " << first << " j " << j;
      }
    }
    for (int n : {0, 1, 7, 16, 17, 64, 65, 300}) {
      std::vector<uint32_t> idx(static_cast<size_t>(n));
      for (auto& i : idx) i = gen();
      std::vector<uint32_t> keys(static_cast<size_t>(n) + 1, 0x5A5A5A5Au);
      KeysOfElements(isa, 77, 2, kOrderStream, idx.data(), n, keys.data());
      for (int j = 0; j < n; ++j) {
        ASSERT_EQ(keys[j], ElementKey(77, 2, kOrderStream, idx[j])) << IsaName(isa) << " n " << n;
      }
      EXPECT_EQ(keys[n], 0x5A5A5A5Au) << IsaName(isa) << " wrote past n = " << n;
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
