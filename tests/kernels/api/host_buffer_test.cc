// HostBytes (kernels/include/gpusampler/kernels/host_buffer.hpp): cache-line aligned at every
// size, also after a reallocation; a large one's memory goes back to the system when it is
// freed. ScratchVector: growing it writes none of the new elements, so pages nobody writes are
// never faulted in.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

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

// Resident pages of this process (/proc/self/statm's second field).
int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long size = 0, resident = 0;
  if (f == nullptr || std::fscanf(f, "%ld %ld", &size, &resident) != 2) resident = -1;
  if (f) std::fclose(f);
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

void* volatile g_block = nullptr;  // volatile: the compiler cannot elide the malloc / free

TEST(HostBytesTest, ALargeBufferGoesBackToTheSystemWhenFreed) {
  if (!kMapLargeBlocks) GTEST_SKIP() << "AddressSanitizer build: every block is on the heap";
  // Freeing a block glibc mapped raises its mmap threshold past that block's size, so from
  // then on blocks of up to that size come from the heap and stay in the process once freed
  // (the eviction churn of issue 31 held 4x the dataset budget that way).
  g_block = std::malloc(size_t{24} << 20);
  std::free(g_block);
  constexpr size_t kBytes = size_t{8} << 20;
  const int64_t before = ResidentBytes();
  {
    HostBytes b(kBytes);
    std::memset(b.data(), 1, kBytes);
    EXPECT_GE(ResidentBytes() - before, static_cast<int64_t>(kBytes) / 2);
  }
  const int64_t after = ResidentBytes() - before;
  EXPECT_LT(after, int64_t{1} << 20) << after << " bytes still resident after the free";
}

TEST(ScratchVectorTest, GrowingLeavesTheNewElementsUnwrittenAndTheirPagesUntouched) {
  constexpr size_t kElements = size_t{64} << 20;  // 512 MiB of uint64_t, as for a 64M row
  const int64_t before = ResidentBytes();
  ASSERT_GT(before, 0);
  ScratchVector<uint64_t> v;
  v.resize(kElements);
  // A plain std::vector writes 512 MiB of zeros here; unwritten pages stay unmapped.
  const int64_t grown = ResidentBytes() - before;
  EXPECT_LT(grown, int64_t{128} << 20) << grown << " bytes resident after the resize";
  v[kElements - 1] = 7;  // written before read, as scratch is
  EXPECT_EQ(v[kElements - 1], 7u);
  // Elements constructed with a value still get it.
  ScratchVector<uint64_t> w(4, 9);
  w.resize(6);
  w.push_back(5);
  EXPECT_EQ(w[0], 9u);
  EXPECT_EQ(w[3], 9u);
  EXPECT_EQ(w[6], 5u);
  EXPECT_EQ(w.size(), 7u);
}

}  // namespace
}  // namespace gpusampler::kernels
