// HostBytes (kernels/include/gpusampler/kernels/host_buffer.hpp): cache-line aligned at every
// size, also after a reallocation.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "gpusampler/kernels/host_buffer.hpp"

namespace gpusampler::kernels {
namespace {

TEST(HostBytesTest, EverySizeStartsOnACacheLine) {
  for (const size_t n : {size_t{1}, size_t{63}, size_t{4096}, size_t{3} << 20, size_t{300} << 20}) {
    HostBytes b(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kCacheLineBytes, 0u) << n;
    b.resize(n + 1);  // a reallocation keeps the alignment
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kCacheLineBytes, 0u) << n;
  }
}

}  // namespace
}  // namespace gpusampler::kernels
