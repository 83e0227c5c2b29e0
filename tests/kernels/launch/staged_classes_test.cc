// StagedLaunch with classes and scores (SPEC section 7) on the cuda-sim device: every selection
// rule, small and large rows and a binary request fused into one launch, checked against a
// plain reference written here from the SPEC (sort each class's members by its key); the
// reserved launch is one captured graph; and a row of 2^25 elements.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/quota.hpp"
#include "gpusampler/kernels/staged_launch.hpp"

namespace gpusampler::kernels {
namespace {

using std::chrono::milliseconds;

struct Row {
  std::vector<int32_t> labels;
  std::vector<float> scores;
};

struct Expect {
  std::vector<int64_t> indices;  // K slots
  std::vector<int32_t> per_class;
};

// The SPEC's rules, element by element (no radix select, no tiles).
Expect Reference(const std::vector<ClassSpec>& classes, const std::vector<int32_t>& fill, int64_t k,
                 uint64_t seed, uint32_t r, const Row& row) {
  std::vector<uint8_t> table;
  CompileClassTable(classes, fill, k, &table);
  const ClassTableView view = ViewClassTable(table.data());
  const int c_count = static_cast<int>(classes.size());
  std::vector<std::vector<int64_t>> members(c_count);
  for (int64_t i = 0; i < static_cast<int64_t>(row.labels.size()); ++i) {
    const int32_t c = ClassOfLabel(view.ranges, view.header->num_ranges, row.labels[i]);
    if (c < 0) continue;
    if (!ScoreAdmits(view.classes[c].selection, row.scores[i])) continue;
    members[c].push_back(i);
  }
  std::vector<int64_t> n(c_count), m(c_count);
  for (int c = 0; c < c_count; ++c) n[c] = static_cast<int64_t>(members[c].size());
  ClassQuotas(view.classes, c_count, view.fill, view.header->num_fill, k, n.data(), m.data());
  // Keys computed once per member; each rule's order is (key, i) as a pair.
  using Keyed = std::pair<uint64_t, int64_t>;
  auto u = [&](int64_t i) {
    return ElementKey(seed, r, kSelectionStream, static_cast<uint64_t>(i));
  };
  auto hardest = [&](int64_t i) {
    return Keyed{(uint64_t{HardestKey(row.scores[i])} << 32) | u(i), i};
  };
  auto uniform = [&](int64_t i) { return Keyed{u(i), i}; };
  auto weighted = [&](int64_t i) {
    const uint32_t u2 = ElementKey(seed, r, kWeightStream, static_cast<uint64_t>(i));
    return Keyed{WeightedKeyBits(WeightedE(u(i), u2), row.scores[i]), i};
  };
  auto smallest = [](std::vector<Keyed> x, int64_t count) {
    std::partial_sort(x.begin(), x.begin() + count, x.end());
    x.resize(static_cast<size_t>(count));
    return x;
  };
  std::vector<Keyed> selected;  // (v, i)
  auto take = [&](const std::vector<Keyed>& x) {
    for (const Keyed& e : x) {
      selected.push_back(
          {ElementKey(seed, r, kOrderStream, static_cast<uint64_t>(e.second)), e.second});
    }
  };
  for (int c = 0; c < c_count; ++c) {
    const auto sel = static_cast<Selection>(view.classes[c].selection);
    std::vector<Keyed> x;
    for (int64_t i : members[c]) {
      x.push_back(sel == Selection::kUniform    ? uniform(i)
                  : sel == Selection::kWeighted ? weighted(i)
                                                : hardest(i));
    }
    if (sel != Selection::kMixed) {
      take(smallest(std::move(x), m[c]));
      continue;
    }
    const int64_t h = HardQuota(m[c], view.classes[c].hard_fraction);
    std::sort(x.begin(), x.end());
    std::vector<Keyed> hard(x.begin(), x.begin() + h), rest;
    for (size_t j = static_cast<size_t>(h); j < x.size(); ++j) rest.push_back(uniform(x[j].second));
    take(hard);
    take(smallest(std::move(rest), m[c] - h));
  }
  std::sort(selected.begin(), selected.end());
  Expect e;
  e.indices.assign(static_cast<size_t>(k), -1);
  for (size_t j = 0; j < selected.size(); ++j) e.indices[j] = selected[j].second;
  e.per_class.assign(m.begin(), m.end());
  return e;
}

std::vector<ClassSpec> EveryRule() {
  std::vector<ClassSpec> c(4);
  c[0].labels = {{0, 0}};
  c[0].share = Share::kCount;
  c[0].count = 40;
  c[1].labels = {{1, 2}};
  c[1].share = Share::kFraction;
  c[1].fraction = 0.3;
  c[1].selection = Selection::kWeighted;
  c[2].labels = {{3, 3}};
  c[2].share = Share::kCount;
  c[2].count = 30;
  c[2].selection = Selection::kHardest;
  c[3].labels = {{4, 5}, {7, 9}};
  c[3].share = Share::kRest;
  c[3].selection = Selection::kMixed;
  c[3].has_hard_fraction = true;
  c[3].hard_fraction = 0.25;
  return c;
}

Row MakeRow(int64_t n, int label_values, uint32_t seed) {
  std::mt19937 gen(seed);
  Row row;
  row.labels.resize(static_cast<size_t>(n));
  row.scores.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    row.labels[i] = static_cast<int32_t>(gen() % label_values);
    const uint32_t s = gen() % 16;
    // zeros, NaN and ties (quarters) beside ordinary scores
    row.scores[i] = s == 0   ? 0.0f
                    : s == 1 ? NAN
                    : s < 6  ? static_cast<float>(s) * 0.25f
                             : std::ldexp(static_cast<float>(gen() % 100000 + 1), -10);
  }
  return row;
}

struct Built {
  std::vector<int64_t> offsets;
  std::vector<int32_t> labels;
  std::vector<float> scores;
};

Built Concat(const std::vector<Row>& rows) {
  Built b;
  b.offsets.push_back(0);
  for (const Row& r : rows) {
    b.labels.insert(b.labels.end(), r.labels.begin(), r.labels.end());
    b.scores.insert(b.scores.end(), r.scores.begin(), r.scores.end());
    b.offsets.push_back(static_cast<int64_t>(b.labels.size()));
  }
  return b;
}

LaunchRequest ClassRequest(const Built& b, const SamplingSpec& spec, uint64_t seed) {
  LaunchRequest q;
  q.spec = spec;
  q.seed = seed;
  q.label_dtype = DType::kInt32;
  q.num_rows = static_cast<int64_t>(b.offsets.size()) - 1;
  q.row_offsets = b.offsets.data();
  q.labels = reinterpret_cast<const uint8_t*>(b.labels.data());
  q.scores = b.scores.data();
  return q;
}

void ExpectRows(const LaunchOutput& o, const std::vector<Row>& rows, const SamplingSpec& spec,
                uint64_t seed, const std::string& what) {
  const int64_t k = spec.num_samples;
  const int c_count = static_cast<int>(spec.classes.size());
  ASSERT_EQ(o.num_classes, c_count) << what;
  ASSERT_NE(o.num_per_class, nullptr) << what;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Expect e =
        Reference(spec.classes, spec.fill_order, k, seed, static_cast<uint32_t>(r), rows[r]);
    const std::string where = what + " row " + std::to_string(r);
    for (int64_t s = 0; s < k; ++s) {
      ASSERT_EQ(o.indices[r * k + s], e.indices[s]) << where << " slot " << s;
      int32_t label = 0;
      std::memcpy(&label, o.labels + (r * k + s) * 4, 4);
      ASSERT_EQ(label, e.indices[s] >= 0 ? rows[r].labels[e.indices[s]] : -1) << where;
    }
    for (int c = 0; c < c_count; ++c) {
      EXPECT_EQ(o.num_per_class[r * c_count + c], e.per_class[c]) << where << " class " << c;
    }
    EXPECT_EQ(o.num_positive[r], c_count <= 2 ? e.per_class[0] : 0) << where;
    EXPECT_EQ(o.num_negative[r], c_count == 2 ? e.per_class[1] : 0) << where;
  }
}

TEST(StagedClassesTest, EveryRuleSmallAndLargeRowsFusedWithABinaryRequest) {
  StagedLaunch launch(kSimDevice, milliseconds(120000));
  SamplingSpec spec;
  spec.num_samples = 200;
  spec.classes = EveryRule();
  spec.fill_order = {3, 0};
  const std::vector<Row> rows = {MakeRow(5000, 10, 1), MakeRow(70000, 10, 2), MakeRow(300, 10, 3),
                                 MakeRow(0, 10, 4), MakeRow(20, 6, 5)};
  const Built b = Concat(rows);
  const LaunchRequest q = ClassRequest(b, spec, 77);
  // A binary request (section 1) in the same launch.
  LaunchRequest binary;
  std::vector<int64_t> boffsets = {0, 9000};
  std::vector<int32_t> blabels(9000);
  for (size_t i = 0; i < blabels.size(); ++i) blabels[i] = static_cast<int32_t>(i % 3);
  binary.spec.num_samples = 100;
  binary.seed = 5;
  binary.label_dtype = DType::kInt32;
  binary.num_rows = 1;
  binary.row_offsets = boffsets.data();
  binary.labels = reinterpret_cast<const uint8_t*>(blabels.data());
  const auto& out = launch.Run({binary, q});
  ASSERT_EQ(out.size(), 2u);
  ExpectRows(out[1], rows, spec, 77, "fused");
  EXPECT_EQ(out[0].num_classes, 0);
  EXPECT_EQ(out[0].num_positive[0], 50);
  EXPECT_EQ(out[0].num_negative[0], 50);
  // Alone, the same bytes.
  ExpectRows(launch.Run({q})[0], rows, spec, 77, "alone");
}

TEST(StagedClassesTest, TwoClassesGiveNumPositiveAndNegativeAndLoweringIsPerRequest) {
  StagedLaunch launch(kSimDevice, milliseconds(120000));
  SamplingSpec spec;
  spec.num_samples = 64;
  spec.classes.resize(2);
  spec.classes[0].labels = {{1, 1}};
  spec.classes[0].share = Share::kFraction;
  spec.classes[0].fraction = 0.25;
  spec.classes[1].labels = {{0, 0}};
  spec.classes[1].share = Share::kRest;
  spec.fill_order = {1, 0};
  const std::vector<Row> rows = {MakeRow(6000, 3, 8), MakeRow(100, 3, 9)};
  const Built b = Concat(rows);
  LaunchRequest lowered = ClassRequest(b, spec, 3);
  LaunchRequest class_path = lowered;
  class_path.lower_binary = false;
  const auto& out = launch.Run({lowered, class_path});
  ExpectRows(out[0], rows, spec, 3, "lowered");
  ExpectRows(out[1], rows, spec, 3, "class path");
}

TEST(StagedClassesTest, TwelveClassesSomeCountedInGlobalAtomics) {
  // Classes from kSharedClasses (8) on are histogrammed with global atomics.
  StagedLaunch launch(kSimDevice, milliseconds(120000));
  SamplingSpec spec;
  spec.num_samples = 150;
  const Selection rules[] = {Selection::kUniform, Selection::kWeighted, Selection::kHardest,
                             Selection::kMixed};
  for (int c = 0; c < 12; ++c) {
    ClassSpec x;
    x.labels = {{c, c}};
    x.share = c == 11 ? Share::kRest : Share::kCount;
    x.count = 4 + c;
    x.selection = rules[c % 4];
    x.has_hard_fraction = x.selection == Selection::kMixed;
    x.hard_fraction = 0.5;
    spec.classes.push_back(x);
  }
  spec.fill_order = {10, 2, 9};
  const std::vector<Row> rows = {MakeRow(9000, 13, 41), MakeRow(200, 13, 42),
                                 MakeRow(30000, 12, 43)};
  const Built b = Concat(rows);
  ExpectRows(launch.Run({ClassRequest(b, spec, 8)})[0], rows, spec, 8, "twelve");
}

TEST(StagedClassesTest, ReservedLaunchIsOneCapturedGraph) {
  StagedLaunch launch(kSimDevice, milliseconds(120000));
  SamplingSpec spec;
  spec.num_samples = 150;
  spec.classes = EveryRule();
  const std::vector<Row> rows = {MakeRow(40000, 10, 11), MakeRow(3000, 10, 12)};
  const Built b = Concat(rows);
  StagedSizes sizes;
  sizes.rows = 4;
  sizes.elements = 100000;
  sizes.slots = 1000;
  sizes.scores = 100000;
  sizes.class_table_bytes = 4096;
  sizes.class_outputs = 4 * kMaxClasses;
  launch.Reserve(sizes);
  for (int round = 0; round < 2; ++round) {
    ExpectRows(launch.Run({ClassRequest(b, spec, 21)})[0], rows, spec, 21, "reserved");
    EXPECT_TRUE(launch.last_stats().graph);
    EXPECT_EQ(launch.last_stats().stream_ops, 2);
  }
}

TEST(StagedClassesTest, RowOfTwoToThe25) {
  StagedLaunch launch(kSimDevice, milliseconds(600000));
  SamplingSpec spec;
  spec.num_samples = 2000;
  spec.classes = EveryRule();
  spec.fill_order = {3};
  const std::vector<Row> rows = {MakeRow(int64_t{1} << 25, 12, 31)};
  const Built b = Concat(rows);
  ExpectRows(launch.Run({ClassRequest(b, spec, 99)})[0], rows, spec, 99, "2^25");
}

}  // namespace
}  // namespace gpusampler::kernels
