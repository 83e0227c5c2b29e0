// GatherRows (kernels/include/gpusampler/kernels/gather.hpp) against a plain row-by-row copy:
// every compile-time width and one run-time width, sources that start on a cache line and
// that do not (a request's bytes need not), slot targets or none, padding rows, cached and
// non-temporal stores (whose 16-byte path the widths that are multiples of 16 take, the
// others falling back); and the CPU backend with non-temporal stores against the reference.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/host_buffer.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels {
namespace {

template <typename Index>
void CheckGather(int64_t width, size_t offset, bool slots, bool padding, RowStores stores) {
  SCOPED_TRACE(::testing::Message()
               << "width " << width << " offset " << offset << " slots " << slots << " padding "
               << padding << " streaming " << (stores == RowStores::kStreaming));
  constexpr int64_t kRows = 1000, kPicks = 300;
  std::mt19937_64 gen(width * 131 + offset * 7 + slots);
  HostBytes in_buf(kRows * width + offset);
  for (auto& b : in_buf) b = static_cast<uint8_t>(gen());
  const uint8_t* in = in_buf.data() + offset;
  std::vector<Index> src(kPicks);
  for (auto& s : src) s = static_cast<Index>(gen() % kRows);
  if (padding) {
    for (int64_t j = 0; j < kPicks; j += 7) src[j] = static_cast<Index>(-1);
  }
  std::vector<uint32_t> dst(kPicks);
  for (int64_t j = 0; j < kPicks; ++j) dst[j] = static_cast<uint32_t>(j);
  std::shuffle(dst.begin(), dst.end(), gen);
  std::vector<uint8_t> out(kPicks * width, 0xAB), want(kPicks * width, 0xAB);
  for (int64_t j = 0; j < kPicks; ++j) {
    uint8_t* to = want.data() + (slots ? dst[j] : j) * width;
    if (static_cast<int64_t>(src[j]) < 0) {
      std::memset(to, 0, width);
    } else {
      std::memcpy(to, in + static_cast<int64_t>(src[j]) * width, width);
    }
  }
  GatherRows(src.data(), slots ? dst.data() : nullptr, kPicks, width, in, out.data(), stores);
  EXPECT_EQ(out, want);
}

TEST(GatherRowsTest, EqualsARowByRowCopyForEveryWidthAndAlignment) {
  for (const int64_t width : {4, 8, 12, 16, 32, 64, 100, 128, 1000}) {
    for (const size_t offset : {size_t{0}, size_t{1}, size_t{16}, size_t{60}}) {
      for (const bool slots : {false, true}) {
        for (const RowStores stores : {RowStores::kCached, RowStores::kStreaming}) {
          CheckGather<uint32_t>(width, offset, slots, false, stores);
          CheckGather<int64_t>(width, offset, slots, true, stores);
        }
      }
    }
  }
}

TEST(GatherRowsTest, TheCpuBackendWithNonTemporalStoresMatchesTheReference) {
  for (const int64_t width : {int64_t{12}, int64_t{64}, int64_t{128}}) {
    testing::Case c;
    c.spec.num_samples = 700;
    c.seed = 99;
    c.rows = {testing::RandomLabels(5000, 0.3, 0.5, 1), testing::RandomLabels(40000, 0.5, 0.4, 2),
              testing::RandomLabels(300, 0.5, 0.5, 3)};
    c.feature_row_bytes = width;
    const testing::Result want = testing::Reference(c);
    for (const char* backend : {"cpustream:1", "cpustream:2"}) {
      const testing::Result got = testing::RunOne(backend, c);
      EXPECT_EQ(got.indices, want.indices) << backend << " width " << width;
      EXPECT_EQ(got.features, want.features) << backend << " width " << width;
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels
