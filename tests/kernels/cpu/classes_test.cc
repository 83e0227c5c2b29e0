// The class path's building block (cpu/classes) on every instruction set this CPU runs, alone
// and split over a pool: golden_v2.jsonl's cases (the binary ones too, lowering off) give the
// reference indices and counts, so every ISA gives the same bytes. (ctest's kernels_isa_* runs
// the whole backend suites under each ISA as well.)
#include "cpu/classes.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/golden_v2.hpp"
#include "cpu/supported_isas.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels::cpu {
namespace {

// Runs every row of `c` through SampleClassRow; indices [B][K] and num_per_class [B][C].
void RunClassRows(const testing::Case& c, Isa isa, ThreadPool* pool,
                  std::vector<std::vector<int64_t>>* indices,
                  std::vector<std::vector<int32_t>>* per_class) {
  BatchBuilder builder;
  builder.set_lower_binary(false);
  std::vector<int64_t> lengths;
  for (const auto& row : c.rows) lengths.push_back(static_cast<int64_t>(row.size()));
  builder.AddRequest(c.spec, c.seed, DType::kInt64, lengths, 0, !c.scores.empty());
  std::vector<int64_t> labels;
  for (const auto& row : c.rows) labels.insert(labels.end(), row.begin(), row.end());
  std::vector<float> scores(static_cast<size_t>(builder.total_scores()) + 1, 0.0f);
  for (size_t r = 0; r < c.scores.size(); ++r) {
    std::copy(c.scores[r].begin(), c.scores[r].end(),
              scores.begin() + builder.rows()[r].score_offset);
  }
  std::vector<int64_t> out(static_cast<size_t>(builder.total_slots()), -7);
  std::vector<uint8_t> out_labels(static_cast<size_t>(builder.out_label_bytes()) + 8, 0xAB);
  std::vector<int32_t> pos(c.rows.size(), -7), neg(c.rows.size(), -7);
  std::vector<int32_t> num(static_cast<size_t>(builder.total_class_outputs()) + 1, -7);
  Batch batch;
  builder.FillSizes(&batch);
  batch.labels = reinterpret_cast<const uint8_t*>(labels.data());
  batch.out_indices = out.data();
  batch.out_labels = out_labels.data();
  batch.out_num_positive = pos.data();
  batch.out_num_negative = neg.data();
  batch.class_tables = builder.class_tables().data();
  batch.scores = scores.data();
  batch.out_num_per_class = num.data();
  ClassPathOptions options;
  options.isa = isa;
  ClassScratch scratch;
  for (const RowDesc& row : builder.rows()) {
    ASSERT_GE(row.class_table, 0);
    SampleClassRow(batch, row, RowStores::kCached, options, &scratch, pool);
    indices->emplace_back(out.begin() + row.out_slot, out.begin() + row.out_slot + row.num_samples);
    per_class->emplace_back(num.begin() + row.out_class_offset,
                            num.begin() + row.out_class_offset + row.num_classes);
  }
}

TEST(CpuClassesTest, GoldenV2OnEveryIsaAloneAndSplit) {
  ThreadPool pool(3);
  const auto golden = testing::LoadGoldenV2();
  ASSERT_FALSE(golden.empty());
  for (Isa isa : SupportedIsas()) {
    for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
      for (const auto& g : golden) {
        std::vector<std::vector<int64_t>> indices;
        std::vector<std::vector<int32_t>> per_class;
        RunClassRows(g.c, isa, p, &indices, &per_class);
        const std::string where =
            g.name + " on " + IsaName(isa) + (p != nullptr ? " split" : " alone");
        EXPECT_EQ(indices, g.indices) << where;
        EXPECT_EQ(per_class, g.num_per_class) << where;
      }
    }
  }
}

// The vector class-code pass (AVX2, AVX-512: rows of at most four ranges) against the portable
// lookup and search, on random specs of one to four ranges, ranges that reach the int64 ends
// (the unsigned-compare form's edge), labels at and next to every bound, every selection with
// scores that are NaN, zero, -0.0, negative or tied, and rows of every length mod 8.
TEST(CpuClassesTest, VectorClassCodesOnEveryIsaMatchThePortablePass) {
  ThreadPool pool(3);
  std::mt19937_64 gen(8086);
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  for (int trial = 0; trial < 40; ++trial) {
    testing::Case c;
    c.seed = gen();
    c.spec.num_samples = 1 + static_cast<int64_t>(gen() % 300);
    const int num_ranges = 1 + trial % 4;
    // Disjoint ranges in order: cut points spread over small values, with the first range
    // open to kMin and the last to kMax on some trials.
    std::vector<int64_t> cuts;
    for (int j = 0; j < 2 * num_ranges; ++j) cuts.push_back(static_cast<int64_t>(gen() % 40) - 20);
    std::sort(cuts.begin(), cuts.end());
    cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
    while (static_cast<int>(cuts.size()) < 2 * num_ranges) cuts.push_back(cuts.back() + 3);
    if (trial % 3 == 0) cuts.front() = kMin;
    if (trial % 5 == 0) cuts.back() = kMax;
    const int num_classes = 1 + static_cast<int>(gen() % num_ranges);
    c.spec.classes.resize(static_cast<size_t>(num_classes));
    for (int r = 0; r < num_ranges; ++r) {
      // Range r goes to class r % num_classes (so every class has one).
      c.spec.classes[r % num_classes].labels.push_back({cuts[2 * r], cuts[2 * r + 1]});
    }
    for (int k = 0; k < num_classes; ++k) {
      ClassSpec& cls = c.spec.classes[k];
      cls.selection = static_cast<Selection>(1 + gen() % 4);
      if (cls.selection == Selection::kMixed) {
        cls.has_hard_fraction = true;
        cls.hard_fraction = 0.5;
      }
      cls.share = k == 0 ? Share::kRest : Share::kCount;
      cls.count = k == 0 ? 0 : c.spec.num_samples / (2 * num_classes);
    }
    c.spec.fill_order = {0};
    bool weighted = false;
    for (const auto& cls : c.spec.classes) weighted |= cls.selection == Selection::kWeighted;
    std::vector<int64_t> values = {kMin, kMin + 1, kMax, kMax - 1, 0, -1, 1};
    for (int64_t cut : cuts) {
      for (int64_t d : {-1, 0, 1}) {
        if ((d < 0 && cut == kMin) || (d > 0 && cut == kMax)) continue;
        values.push_back(cut + d);
      }
    }
    for (const int64_t n : {int64_t{0}, int64_t{5}, int64_t{8}, int64_t{13}, int64_t{1003},
                            static_cast<int64_t>(4096 + gen() % 8)}) {
      std::vector<int64_t> row(static_cast<size_t>(n));
      std::vector<float> scores(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        row[i] =
            gen() % 2 == 0 ? values[gen() % values.size()] : static_cast<int64_t>(gen() % 50) - 25;
        const uint64_t pick = gen() % 10;
        scores[i] = pick == 0                ? std::numeric_limits<float>::quiet_NaN()
                    : pick == 1              ? 0.0f
                    : pick == 2              ? -0.0f
                    : pick == 3 && !weighted ? -1.5f
                                             : static_cast<float>(1 + gen() % 4) * 0.5f;
      }
      c.rows.push_back(std::move(row));
      c.scores.push_back(std::move(scores));
    }
    std::vector<std::vector<int64_t>> want;
    std::vector<std::vector<int32_t>> want_per_class;
    RunClassRows(c, Isa::kPortable, nullptr, &want, &want_per_class);
    for (Isa isa : SupportedIsas()) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<std::vector<int64_t>> got;
        std::vector<std::vector<int32_t>> got_per_class;
        RunClassRows(c, isa, p, &got, &got_per_class);
        const std::string where = "trial " + std::to_string(trial) + " on " + IsaName(isa) +
                                  (p != nullptr ? " split" : " alone");
        EXPECT_EQ(got, want) << where;
        EXPECT_EQ(got_per_class, want_per_class) << where;
      }
    }
  }
}

// The WEIGHTED prefilter keeps every member whose exact key is at most the bound (it may keep a
// few more, never fewer), and filters: on trials of uniform random bits it keeps at most 1% of
// the members more than the exact test does. Odd trials put u and u2 at and next to their
// ends (u = 0 or 1 passes whatever the bound: its E is near 0, inside the filter's margin);
// weights from 1e-30 to 1e30; bounds from the keys' own quantiles and extremes.
TEST(CpuClassesTest, WeightedPrefilterKeepsEveryKeyAtMostTheBound) {
  std::mt19937_64 gen(4099);
  int64_t members = 0, exact = 0, kept = 0;
  for (Isa isa : SupportedIsas()) {
    uint32_t out[256];
    const uint8_t probe_codes[1] = {1};
    const uint32_t probe_u[1] = {0};
    const float probe_w[1] = {1.0f};
    if (WeightedPrefilter(isa, probe_codes, 1, probe_u, probe_w, 1, 1.0, 0, out) < 0) continue;
    for (int trial = 0; trial < 3000; ++trial) {
      const int n = 1 + static_cast<int>(gen() % 256);
      uint8_t codes[256];
      alignas(64) uint32_t u[256], u2[256];
      alignas(64) float w[256];
      std::vector<double> keys;
      const int spread = trial % 3;  // weights: near 1, wide, extreme
      for (int j = 0; j < 256; ++j) {
        codes[j] = gen() % 4 == 0 ? 2 : 1;
        const uint64_t pick = trial % 2 == 1 ? gen() % 16 : 15;
        u[j] = pick == 0 ? 0u : pick == 1 ? ~0u : pick == 2 ? 1u : static_cast<uint32_t>(gen());
        u2[j] = pick < 4 && gen() % 2 ? (gen() % 2 ? 0u : ~0u) : static_cast<uint32_t>(gen());
        const float x = std::uniform_real_distribution<float>(0.0f, 1.0f)(gen);
        w[j] = spread == 0   ? 0.5f + x
               : spread == 1 ? std::pow(10.0f, 6.0f * x - 3.0f)
                             : (gen() % 2 ? 1e-30f : 1e30f) * (1.0f + x);
        if (j < n && codes[j] == 1)
          keys.push_back(BitsDouble(WeightedKeyBits(WeightedE(u[j], u2[j]), w[j])));
      }
      if (keys.empty()) continue;
      std::sort(keys.begin(), keys.end());
      const uint64_t which = gen() % 5;
      const double bound = which == 0   ? keys.front()
                           : which == 1 ? keys.back()
                           : which == 2 ? keys[keys.size() / 10]
                                        : keys[gen() % keys.size()];
      const uint32_t first = static_cast<uint32_t>(gen() % 1000000) * 256;
      const int got = WeightedPrefilter(isa, codes, 1, u, w, n, bound, first, out);
      ASSERT_GE(got, 0);
      std::vector<uint32_t> passed(out, out + got);
      for (uint32_t i : passed) {
        ASSERT_GE(i, first);
        ASSERT_LT(i - first, static_cast<uint32_t>(n));
        ASSERT_EQ(codes[i - first], 1) << "a non-member passed";
      }
      const bool measured = trial % 2 == 0;
      for (int j = 0; j < n; ++j) {
        if (codes[j] != 1) continue;
        members += measured;
        const double key = BitsDouble(WeightedKeyBits(WeightedE(u[j], u2[j]), w[j]));
        if (key > bound) continue;
        exact += measured;
        ASSERT_NE(std::find(passed.begin(), passed.end(), first + j), passed.end())
            << IsaName(isa) << " trial " << trial << ": u " << u[j] << " w " << w[j] << " key "
            << key << " <= bound " << bound << " was filtered out";
      }
      if (measured) kept += got;
    }
  }
  if (members == 0) GTEST_SKIP() << "no ISA with a prefilter on this CPU";
  EXPECT_LE(kept - exact, members / 100)
      << "kept " << kept << ", exact " << exact << " of " << members << " members";
}

// Rows long enough for the vector WEIGHTED keys' groups and tails, the radix selection's
// passes and the split: label 1 is a UNIFORM class (30% of K), label 0 the rest with `sel`.
testing::Case LongRowsCase(Selection sel, uint64_t seed) {
  testing::Case c;
  c.seed = seed;
  c.spec.num_samples = 700;
  ClassSpec pos, neg;
  pos.labels = {{1, 1}};
  pos.share = Share::kFraction;
  pos.fraction = 0.3;
  neg.labels = {{0, 0}};
  neg.share = Share::kRest;
  neg.selection = sel;
  if (sel == Selection::kMixed) {
    neg.has_hard_fraction = true;
    neg.hard_fraction = 0.4;
  }
  c.spec.classes = {pos, neg};
  std::mt19937_64 gen(seed);
  for (int64_t n : {0, 1, 7, 9, 255, 257, 701, 5003, 20011}) {
    std::vector<int64_t> row(static_cast<size_t>(n));
    std::vector<float> scores(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      row[i] = gen() % 5 == 0 ? 1 : (gen() % 17 == 0 ? 7 : 0);
      const uint64_t pick = gen() % 20;
      // Ties (a few values), zeros, NaN, tiny and large scores.
      scores[i] = pick == 0   ? 0.0f
                  : pick == 1 ? std::numeric_limits<float>::quiet_NaN()
                  : pick == 2 ? static_cast<float>(gen() % 4) * 0.25f
                  : pick == 3 ? 1e-30f * static_cast<float>(1 + gen() % 1000)
                  : pick == 4 ? 1e30f
                              : std::uniform_real_distribution<float>(0.0f, 1.0f)(gen);
    }
    c.rows.push_back(std::move(row));
    c.scores.push_back(std::move(scores));
  }
  return c;
}

// The rest class's reference selection, written plainly: its members ordered by (key, index)
// with the SPEC's keys, the first m (MIXED: the h hardest, then the smallest (u, i) of the
// others), as a sorted index list.
std::vector<int64_t> ReferenceRest(const testing::Case& c, uint32_t r, Selection sel, int64_t m) {
  struct Item {
    uint64_t key;
    uint32_t low;
    int64_t i;
  };
  std::vector<Item> items;
  for (int64_t i = 0; i < static_cast<int64_t>(c.rows[r].size()); ++i) {
    const float w = c.scores[r][i];
    if (c.rows[r][i] != 0 || !ScoreAdmits(static_cast<int32_t>(sel), w)) continue;
    const uint32_t u = ElementKey(c.seed, r, kSelectionStream, static_cast<uint64_t>(i));
    const uint64_t key =
        sel == Selection::kWeighted
            ? WeightedKeyBits(
                  WeightedE(u, ElementKey(c.seed, r, kWeightStream, static_cast<uint64_t>(i))), w)
            : (uint64_t{HardestKey(w)} << 32) | u;
    items.push_back({key, u, i});
  }
  std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) {
    return a.key < b.key || (a.key == b.key && a.i < b.i);
  });
  const int64_t h = sel == Selection::kMixed ? HardQuota(m, 0.4) : m;
  std::sort(items.begin() + h, items.end(), [](const Item& a, const Item& b) {
    return a.low < b.low || (a.low == b.low && a.i < b.i);
  });
  std::vector<int64_t> out;
  for (int64_t j = 0; j < m; ++j) out.push_back(items[j].i);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(CpuClassesTest, LongWeightedAndRankedRowsOnEveryIsaMatchAPlainReference) {
  ThreadPool pool(3);
  for (Selection sel : {Selection::kWeighted, Selection::kHardest, Selection::kMixed}) {
    const testing::Case c = LongRowsCase(sel, 77 + static_cast<uint64_t>(sel));
    std::vector<std::vector<int64_t>> want;
    std::vector<std::vector<int32_t>> want_per_class;
    RunClassRows(c, Isa::kPortable, nullptr, &want, &want_per_class);
    for (uint32_t r = 0; r < c.rows.size(); ++r) {
      std::vector<int64_t> rest;
      for (int64_t i : want[r]) {
        if (i >= 0 && c.rows[r][i] == 0) rest.push_back(i);
      }
      std::sort(rest.begin(), rest.end());
      EXPECT_EQ(static_cast<int64_t>(rest.size()), want_per_class[r][1]);
      EXPECT_EQ(rest, ReferenceRest(c, r, sel, want_per_class[r][1]))
          << "selection " << static_cast<int>(sel) << " row " << r;
    }
    for (Isa isa : SupportedIsas()) {
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<std::vector<int64_t>> got;
        std::vector<std::vector<int32_t>> got_per_class;
        RunClassRows(c, isa, p, &got, &got_per_class);
        const std::string where = std::string(IsaName(isa)) + (p != nullptr ? " split" : " alone") +
                                  " selection " + std::to_string(static_cast<int>(sel));
        EXPECT_EQ(got, want) << where;
        EXPECT_EQ(got_per_class, want_per_class) << where;
      }
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::cpu
