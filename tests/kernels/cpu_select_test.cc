// The CPU backend's building blocks against plain reference code: the key generators, the
// class count and the candidate filter under every instruction-set version this CPU runs
// (each label dtype), the version choice, and the ordering sort (with forced ties).
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

#include "cpu_select.hpp"
#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"
#include "thread_pool.hpp"

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

// The instruction-set versions this CPU runs (portable always).
std::vector<Isa> SupportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas) {
    if (IsaSupported(isa)) out.push_back(isa);
  }
  return out;
}

TEST(CpuSelectTest, EveryIsaKeyTileAndElementKeysMatchScalarPhilox) {
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
    EXPECT_EQ(listed, IsLabel(static_cast<DType>(d))) << DTypeName(static_cast<DType>(d));
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

TEST(CpuSelectTest, EveryIsaCountsAndFiltersEveryLabelDtypeAtItsExtremes) {
  for (Isa isa : SupportedIsas()) {
    for (const DTypeExtremes& e : LabelDTypeExtremes()) {
      const std::string where = std::string(IsaName(isa)) + " " + DTypeName(e.dtype);
      const int64_t n = kTileElements;
      const std::vector<int64_t> values = ExtremeLabels(e, n);
      const size_t item = ItemSize(e.dtype);
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
TEST(CpuSelectTest, CpuBackendReturnsEveryLabelDtypeAtItsExtremesExactly) {
  for (const DTypeExtremes& e : LabelDTypeExtremes()) {
    for (int64_t n : {int64_t{7}, int64_t{kTileElements + 5}, int64_t{3000}}) {
      const std::string where =
          std::string(DTypeName(e.dtype)) + " n " + std::to_string(n) + " isa " + KeyIsaName();
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

TEST(CpuSelectTest, EveryIsaCountAndFilterMatchScalarPerLabelDtype) {
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

TEST(CpuSelectTest, IsaNamesParseAndTheActiveOneIsSupported) {
  for (Isa isa : kAllIsas) {
    Isa parsed;
    ASSERT_TRUE(ParseIsa(IsaName(isa), &parsed));
    EXPECT_EQ(parsed, isa);
  }
  Isa parsed;
  EXPECT_FALSE(ParseIsa("sse2", &parsed));
  EXPECT_TRUE(IsaSupported(Isa::kPortable));
  EXPECT_TRUE(IsaSupported(ActiveIsa()));
  EXPECT_STREQ(KeyIsaName(), IsaName(ActiveIsa()));
  // GPUSAMPLER_PHILOX_ISA (ctest's kernels_isa_* entries) wins when this CPU supports it.
  const char* env = std::getenv("GPUSAMPLER_PHILOX_ISA");
  Isa wanted;
  if (env != nullptr && ParseIsa(env, &wanted) && IsaSupported(wanted)) {
    EXPECT_EQ(ActiveIsa(), wanted) << IsaChoice();
  } else {
    const CpuId cpu = DetectCpu();
    EXPECT_EQ(ActiveIsa(), DefaultIsa(cpu, IsaSupported(Isa::kAvx2), IsaSupported(Isa::kAvx512)))
        << IsaChoice();
  }
}

TEST(CpuSelectTest, DefaultIsaIsTheWidestOnBothFamilies) {
  const CpuId intel{"GenuineIntel", 6, 0x8F};   // Sapphire Rapids
  const CpuId amd{"AuthenticAMD", 0x19, 0x11};  // Zen 4 (Genoa)
  for (const CpuId& cpu : {intel, amd}) {
    EXPECT_EQ(DefaultIsa(cpu, true, true), Isa::kAvx512) << cpu.vendor;
    EXPECT_EQ(DefaultIsa(cpu, true, false), Isa::kAvx2) << cpu.vendor;
    EXPECT_EQ(DefaultIsa(cpu, false, false), Isa::kPortable) << cpu.vendor;
  }
}

// The backend's pool: every task of every job runs exactly once, on a valid worker id,
// also when jobs follow each other faster than the workers wake up (late workers must not
// run a task of a later job), and a task's exception reaches the caller.
TEST(ThreadPoolTest, EveryTaskOnceAcrossManyJobs) {
  for (int threads : {2, 4}) {
    for (int spin_us : {0, 200}) {
      ThreadPool pool(threads, spin_us);
      std::mt19937 gen(static_cast<unsigned>(threads * 1000 + spin_us));
      for (int job = 0; job < 1000; ++job) {
        const int64_t n = 1 + static_cast<int64_t>(gen() % 40);
        std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
        for (auto& r : runs) r.store(0);
        std::atomic<int> bad_worker{0};
        pool.ParallelFor(n, [&](int64_t i, int worker) {
          if (worker < 0 || worker >= threads) bad_worker.fetch_add(1);
          runs[static_cast<size_t>(i)].fetch_add(1);
          if ((i & 7) == 3) std::this_thread::yield();
        });
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(runs[static_cast<size_t>(i)].load(), 1)
              << "threads " << threads << " spin " << spin_us << " job " << job << " task " << i;
        }
        ASSERT_EQ(bad_worker.load(), 0);
      }
    }
  }
}

TEST(ThreadPoolTest, ExceptionReachesTheCallerAndThePoolKeepsWorking) {
  ThreadPool pool(3);
  for (int round = 0; round < 50; ++round) {
    EXPECT_THROW(pool.ParallelFor(20,
                                  [&](int64_t i, int) {
                                    if (i == round % 20) throw std::runtime_error("task failed");
                                  }),
                 std::runtime_error);
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(100, [&](int64_t i, int) { sum.fetch_add(i); });
    ASSERT_EQ(sum.load(), 4950) << "round " << round;
  }
}

TEST(SerialBackoffTest, AnIsolatedStallIsShortAndStallsThatKeepComingReachTheMaximum) {
  using std::chrono::milliseconds;
  SerialBackoff backoff(milliseconds(16));
  auto t = SerialBackoff::Clock::time_point{} + std::chrono::seconds(100);
  // An isolated stall: max / 16.
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(1));
  // Stalls right after each window ends: 2, 4, 8, 16, then 16 again.
  for (const int want : {2, 4, 8, 16, 16}) {
    t += backoff.window() + milliseconds(1);  // within four windows of the last one's end
    EXPECT_EQ(backoff.OnStall(t), t + milliseconds(want)) << want;
  }
  // A stall long after the last window (more than four windows past its end): back to 1 ms.
  t += backoff.window() + milliseconds(65);
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(1));
  t += milliseconds(1) + milliseconds(4);  // exactly four windows after: still "again"
  EXPECT_EQ(backoff.OnStall(t), t + milliseconds(2));
}

TEST(ThreadPoolTest, AStalledJobSendsTheNextJobsToTheCallerAlone) {
  // A worker that sleeps inside its task is what a preempted worker looks like to the
  // caller. Until one job shows such a stall (the caller may take every task itself, so
  // retry), jobs may use every thread; after it, and within the (long) serial period, every
  // task runs on the caller (worker 0), and all of them still run once.
  ThreadPool pool(2, 200, 600000);
  bool stalled = false;
  for (int attempt = 0; attempt < 200 && !stalled; ++attempt) {
    std::atomic<bool> worker_slept{false}, worker_started{false};
    pool.ParallelFor(2, [&](int64_t, int worker) {
      if (worker != 0) {
        worker_started.store(true);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        worker_slept.store(true);
      } else {
        // Hold the caller's task until the worker has taken the other one (or 1 s).
        const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(1);
        while (!worker_started.load() && std::chrono::steady_clock::now() < give_up) {
          std::this_thread::yield();
        }
      }
    });
    stalled = worker_slept.load();
  }
  ASSERT_TRUE(stalled) << "the worker never took a task in 200 jobs";
  for (int job = 0; job < 20; ++job) {
    std::vector<int> runs(64, 0), workers(64, -1);
    pool.ParallelFor(64, [&](int64_t i, int worker) {
      ++runs[static_cast<size_t>(i)];
      workers[static_cast<size_t>(i)] = worker;
    });
    for (int i = 0; i < 64; ++i) {
      ASSERT_EQ(runs[static_cast<size_t>(i)], 1);
      ASSERT_EQ(workers[static_cast<size_t>(i)], 0) << "job " << job << " task " << i;
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
