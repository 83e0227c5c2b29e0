// The class path's building block (cpu/classes) on every instruction set this CPU runs, alone
// and split over a pool: golden_v2.jsonl's cases (the binary ones too, lowering off) give the
// reference indices and counts, so every ISA gives the same bytes. (ctest's kernels_isa_* runs
// the whole backend suites under each ISA as well.)
#include "cpu/classes.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backends/golden_v2.hpp"
#include "cpu/supported_isas.hpp"
#include "gpusampler/kernels/batch_builder.hpp"

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

}  // namespace
}  // namespace gpusampler::kernels::cpu
