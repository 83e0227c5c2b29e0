// cpu/filter_tiles: the class count and the candidate filter under every instruction-set
// version this CPU runs, for each label dtype (at its extremes too), against plain reference code;
// and the CPU backend returning every label dtype's extremes exactly.
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

#include "cpu/filter_tiles.hpp"
#include "cpu/key_tiles.hpp"
#include "cpu/supported_isas.hpp"
#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// One label dtype: raw bytes of `size`, read signed or not, widened to int64 before the
// compare. Values are chosen so that a version that compared fewer bytes, sign-extended an
// unsigned byte or zero-extended a signed one would match the wrong elements.
struct LabelCase {
  int size;
  bool is_signed;
  std::vector<int64_t> values;  // drawn from
  int64_t pos, neg;
};

int64_t Widen(const uint8_t* bytes, int size, bool is_signed) {
  switch (size) {
    case 1:
      return is_signed ? int64_t{static_cast<int8_t>(bytes[0])} : int64_t{bytes[0]};
    case 2: {
      uint16_t v;
      std::memcpy(&v, bytes, 2);
      return is_signed ? int64_t{static_cast<int16_t>(v)} : int64_t{v};
    }
    case 4: {
      uint32_t v;
      std::memcpy(&v, bytes, 4);
      return is_signed ? int64_t{static_cast<int32_t>(v)} : int64_t{v};
    }
    default: {
      int64_t v;
      std::memcpy(&v, bytes, 8);
      return v;
    }
  }
}

std::vector<LabelCase> LabelCases() {
  return {
      {1, true, {-1, 0, 1, 127, -128}, -1, 1},
      {1, false, {255, 0, 1, 128}, 255, 0},
      {1, false, {255, 0, 1}, -1, 1},  // -1 is no uint8 value: never matches
      {2, true, {-1, 1, 257, -32768, 0}, 1, -1},
      {2, false, {65535, 1, 257}, 65535, 1},
      {4, true, {-1, 1, 65537, INT32_MIN, 0}, 1, INT32_MIN},
      {4, false, {0xFFFFFFFFll, 1, 65537}, 0xFFFFFFFFll, 1},
      {8, true, {-1, 1, (int64_t{1} << 32) + 1, INT64_MIN, 0}, 1, -1},
      {8, true, {-1, 1, (int64_t{1} << 32) + 1, INT64_MIN, 0}, (int64_t{1} << 32) + 1, INT64_MIN},
  };
}

// Every label dtype at its extremes, spelled out here apart from the dtype table: a loader
// that widened a dtype by the wrong rule (uint8 255 sign-extended to -1, int16 -32768
// zero-extended to 32768) would count and select other elements.
struct DTypeExtremes {
  DType dtype;
  int64_t min, max;
};

std::vector<DTypeExtremes> LabelDTypeExtremes() {
  const std::vector<DTypeExtremes> all = {
      {DType::kBool, 0, 1},
      {DType::kInt8, -128, 127},
      {DType::kUInt8, 0, 255},
      {DType::kInt16, -32768, 32767},
      {DType::kInt32, INT32_MIN, INT32_MAX},
      {DType::kInt64, INT64_MIN, INT64_MAX},
  };
  // A new label dtype needs its row here.
  for (int d = 0; d < kNumDTypes; ++d) {
    const bool listed = std::any_of(all.begin(), all.end(), [&](const DTypeExtremes& e) {
      return static_cast<int>(e.dtype) == d;
    });
    EXPECT_EQ(listed, IsLabel(static_cast<DType>(d))) << Traits(static_cast<DType>(d)).name;
  }
  return all;
}

// max, min and (but for bool) a value between them, repeating: the expected class of element j.
std::vector<int64_t> ExtremeLabels(const DTypeExtremes& e, int64_t n) {
  const bool two_valued = e.max == e.min + 1;  // (max - min overflows for int64)
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    const int64_t which = two_valued ? j % 2 : j % 3;
    labels[j] = which == 0 ? e.max : which == 1 ? e.min : e.min + 1;
  }
  return labels;
}

TEST(FilterTilesTest, EveryIsaCountsAndFiltersEveryLabelDtypeAtItsExtremes) {
  for (Isa isa : SupportedIsas()) {
    for (const DTypeExtremes& e : LabelDTypeExtremes()) {
      const std::string where = std::string(IsaName(isa)) + " " + Traits(e.dtype).name;
      const int64_t n = kTileElements;
      const std::vector<int64_t> values = ExtremeLabels(e, n);
      const size_t item = DTypeSize(e.dtype);
      alignas(64) uint8_t labels[kTileElements * 8];
      for (int64_t j = 0; j < n; ++j) std::memcpy(labels + j * item, &values[j], item);
      alignas(64) uint32_t keys[kTileElements] = {};
      int64_t want_p = 0, want_q = 0;
      std::vector<uint64_t> want_pos, want_neg;
      for (int64_t j = 0; j < n; ++j) {
        if (values[j] == e.max) want_pos.push_back(PackKey(0, static_cast<uint64_t>(j)));
        if (values[j] == e.min) want_neg.push_back(PackKey(0, static_cast<uint64_t>(j)));
      }
      // The loaders are reached as the backend reaches them: typed by the dtype's widening.
      const bool label = WithLabelWords(e.dtype, labels, [&](const auto* typed) {
        using T = std::remove_cv_t<std::remove_pointer_t<decltype(typed)>>;
        int64_t p = 0, q = 0;
        CountLabels(isa, sizeof(T), std::is_signed_v<T>, typed, n - 1, e.max, e.min, &p, &q);
        EXPECT_EQ(p, static_cast<int64_t>(want_pos.size()) - (values[n - 1] == e.max)) << where;
        EXPECT_EQ(q, static_cast<int64_t>(want_neg.size()) - (values[n - 1] == e.min)) << where;
        std::vector<uint64_t> pos(kTileElements + kFilterSlack), neg(kTileElements + kFilterSlack);
        int64_t np = 0, nq = 0;
        FilterTile(isa, sizeof(T), std::is_signed_v<T>, typed, keys, 0, e.max, e.min,
                   uint64_t{1} << 32, uint64_t{1} << 32, pos.data(), &np, neg.data(), &nq);
        EXPECT_EQ(std::vector<uint64_t>(pos.begin(), pos.begin() + np), want_pos) << where;
        EXPECT_EQ(std::vector<uint64_t>(neg.begin(), neg.begin() + nq), want_neg) << where;
      });
      EXPECT_TRUE(label) << where;
    }
  }
}

// End to end on the CPU backend with the ISA in use (the kernels_isa_* runs of this binary
// set the others): every extreme label is counted and returned exactly.
TEST(FilterTilesTest, CpuBackendReturnsEveryLabelDtypeAtItsExtremesExactly) {
  for (const DTypeExtremes& e : LabelDTypeExtremes()) {
    for (int64_t n : {int64_t{7}, int64_t{kTileElements + 5}, int64_t{3000}}) {
      const std::string where =
          std::string(Traits(e.dtype).name) + " n " + std::to_string(n) + " isa " + KeyIsaName();
      testing::Case c;
      c.dtype = e.dtype;
      c.seed = 99;
      c.spec.num_samples = n / 2;
      c.spec.positive_fraction = 0.5;
      c.spec.positive_label = e.max;
      c.spec.negative_label = e.min;
      c.rows = {ExtremeLabels(e, n)};
      const int64_t positives = std::count(c.rows[0].begin(), c.rows[0].end(), e.max);
      const int64_t negatives = std::count(c.rows[0].begin(), c.rows[0].end(), e.min);
      const testing::Result got = testing::RunOne("cpu:1", c);
      ASSERT_EQ(got.num_positive.size(), 1u) << where;
      EXPECT_EQ(got.num_positive[0] + got.num_negative[0], std::min(n / 2, positives + negatives))
          << where;
      int64_t returned_pos = 0, returned_neg = 0;
      for (size_t s = 0; s < got.labels[0].size(); ++s) {
        if (got.indices[0][s] < 0) continue;
        EXPECT_EQ(got.labels[0][s], c.rows[0][got.indices[0][s]]) << where << " slot " << s;
        returned_pos += got.labels[0][s] == e.max;
        returned_neg += got.labels[0][s] == e.min;
      }
      EXPECT_EQ(returned_pos, got.num_positive[0]) << where;
      EXPECT_EQ(returned_neg, got.num_negative[0]) << where;
      const testing::Result want = testing::Reference(c);
      EXPECT_EQ(got.indices, want.indices) << where;
      EXPECT_EQ(got.labels, want.labels) << where;
      EXPECT_EQ(got.num_positive, want.num_positive) << where;
      EXPECT_EQ(got.num_negative, want.num_negative) << where;
    }
  }
}

TEST(FilterTilesTest, EveryIsaCountAndFilterMatchScalarPerLabelDtype) {
  std::mt19937_64 gen(11);
  for (Isa isa : SupportedIsas()) {
    for (const LabelCase& lc : LabelCases()) {
      const std::string where = std::string(IsaName(isa)) + " size " + std::to_string(lc.size) +
                                (lc.is_signed ? " signed" : " unsigned") + " pos " +
                                std::to_string(lc.pos) + " neg " + std::to_string(lc.neg);
      for (int trial = 0; trial < 40; ++trial) {
        alignas(64) uint8_t labels[kTileElements * 8 + 8];
        alignas(64) uint32_t keys[kTileElements];
        for (int j = 0; j < kTileElements; ++j) {
          const int64_t v = lc.values[gen() % lc.values.size()];
          std::memcpy(labels + j * lc.size, &v, static_cast<size_t>(lc.size));
          keys[j] = static_cast<uint32_t>(gen());
        }
        // Bounds from none to all, 2^32 (keep every key) included.
        const uint64_t bounds[] = {0, gen() >> 32, gen() >> 33, uint64_t{1} << 32};
        const uint64_t pos_bound = bounds[trial % 4], neg_bound = bounds[(trial / 4) % 4];
        const uint32_t first = 256u * static_cast<uint32_t>(trial) + 0x7FFFF000u;
        constexpr uint64_t kCanary = 0xC0FFEE0000C0FFEEull;
        std::vector<uint64_t> pos_out(kTileElements + 2 * kFilterSlack, kCanary);
        std::vector<uint64_t> neg_out(kTileElements + 2 * kFilterSlack, kCanary);
        // Start part-way in, as a later tile of a row does.
        int64_t np = 3, nq = 5;
        FilterTile(isa, lc.size, lc.is_signed, labels, keys, first, lc.pos, lc.neg, pos_bound,
                   neg_bound, pos_out.data(), &np, neg_out.data(), &nq);
        std::vector<uint64_t> want_pos, want_neg;
        int64_t count_pos = 0, count_neg = 0;
        for (int j = 0; j < kTileElements; ++j) {
          const int64_t x = Widen(labels + j * lc.size, lc.size, lc.is_signed);
          const uint64_t packed = PackKey(keys[j], uint64_t{first} + j);
          if (x == lc.pos && keys[j] < pos_bound) want_pos.push_back(packed);
          if (x == lc.neg && keys[j] < neg_bound) want_neg.push_back(packed);
          count_pos += x == lc.pos;
          count_neg += x == lc.neg;
        }
        ASSERT_EQ(std::vector<uint64_t>(pos_out.begin() + 3, pos_out.begin() + np), want_pos)
            << where;
        ASSERT_EQ(std::vector<uint64_t>(neg_out.begin() + 5, neg_out.begin() + nq), want_neg)
            << where;
        // Nothing before the start position, nothing past the slack.
        for (int j = 0; j < 3; ++j) ASSERT_EQ(pos_out[j], kCanary) << where;
        for (int j = 0; j < 5; ++j) ASSERT_EQ(neg_out[j], kCanary) << where;
        for (size_t j = static_cast<size_t>(np + kFilterSlack); j < pos_out.size(); ++j) {
          ASSERT_EQ(pos_out[j], kCanary) << where << " wrote past the slack";
        }
        for (size_t j = static_cast<size_t>(nq + kFilterSlack); j < neg_out.size(); ++j) {
          ASSERT_EQ(neg_out[j], kCanary) << where << " wrote past the slack";
        }
        // Counts over every length (vector bodies and scalar tails).
        const int64_t n = 1 + static_cast<int64_t>(gen() % kTileElements);
        int64_t p = 10, q = 20, want_p = 10, want_q = 20;
        CountLabels(isa, lc.size, lc.is_signed, labels, n, lc.pos, lc.neg, &p, &q);
        for (int64_t j = 0; j < n; ++j) {
          const int64_t x = Widen(labels + j * lc.size, lc.size, lc.is_signed);
          want_p += x == lc.pos;
          want_q += x == lc.neg;
        }
        ASSERT_EQ(p, want_p) << where << " n " << n;
        ASSERT_EQ(q, want_q) << where << " n " << n;
        if (n == kTileElements) {
          EXPECT_EQ(p - 10, count_pos);
          EXPECT_EQ(q - 20, count_neg);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
