// kernels::ValidateRow: the one row check every backend applies (the CPU backend on
// Batch::rows, the CUDA backend on Batch::host_rows). Each invalid row must be refused with
// kInvalidArgument by the check and by the CPU backend with the same message.
#include <gtest/gtest.h>

#include <climits>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"

namespace gpusampler::kernels {
namespace {

RowDesc ValidRow() {
  RowDesc row;
  row.length = 10;
  row.num_samples = 4;
  row.target = 2;
  row.positive_label = 1;
  row.negative_label = 0;
  row.label_dtype = DType::kInt64;
  return row;
}

struct BadRow {
  const char* name;
  std::function<void(RowDesc*)> spoil;
  const char* message;  // a part of the expected message
};

std::string ErrorOf(const std::function<void()>& fn, Error::Code* code) {
  try {
    fn();
  } catch (const Error& e) {
    *code = e.code();
    return e.what();
  }
  return "";
}

TEST(ValidateRowTest, EveryBackendRefusesTheSameRows) {
  const std::vector<BadRow> bad = {
      {"pos == neg", [](RowDesc* r) { r->negative_label = r->positive_label; },
       "positive_label equals negative_label (1)"},
      {"negative length", [](RowDesc* r) { r->length = -1; }, "length -1"},
      {"length 2^31", [](RowDesc* r) { r->length = int64_t{INT32_MAX} + 1; }, "length"},
      {"negative K", [](RowDesc* r) { r->num_samples = -1; }, "num_samples -1 < 0"},
      {"target > K", [](RowDesc* r) { r->target = 5; }, "target 5 outside"},
      {"target < 0", [](RowDesc* r) { r->target = -1; }, "target -1 outside"},
      {"float labels", [](RowDesc* r) { r->label_dtype = DType::kFloat32; }, "float32"},
      {"fill 0", [](RowDesc* r) { r->fill = static_cast<FillPolicy>(0); }, "fill policy 0"},
      {"negative feature bytes", [](RowDesc* r) { r->feature_row_bytes = -8; },
       "feature_row_bytes"},
      {"negative label offset", [](RowDesc* r) { r->label_offset = -8; }, "offset"},
  };
  std::vector<int64_t> labels(10, 0);
  std::vector<int64_t> indices(4);
  std::vector<int64_t> out_labels(4);
  std::vector<int32_t> pos(2), neg(2);
  for (const BadRow& b : bad) {
    SCOPED_TRACE(b.name);
    std::vector<RowDesc> rows = {ValidRow(), ValidRow()};
    b.spoil(&rows[1]);
    Error::Code code = Error::Code::kInternal;
    const std::string shared = ErrorOf([&] { ValidateRows(rows.data(), 2); }, &code);
    EXPECT_EQ(code, Error::Code::kInvalidArgument);
    EXPECT_NE(shared.find("row 1: "), std::string::npos) << shared;
    EXPECT_NE(shared.find(b.message), std::string::npos) << shared;

    Batch batch;
    batch.rows = rows.data();
    batch.num_rows = 2;
    batch.labels = reinterpret_cast<const uint8_t*>(labels.data());
    batch.out_indices = indices.data();
    batch.out_labels = reinterpret_cast<uint8_t*>(out_labels.data());
    batch.out_num_positive = pos.data();
    batch.out_num_negative = neg.data();
    batch.total_elements = 10;
    batch.total_slots = 4;
    code = Error::Code::kInternal;
    const std::string cpu = ErrorOf([&] { MakeCpuBackend(1)->Sample(batch); }, &code);
    EXPECT_EQ(code, Error::Code::kInvalidArgument);
    EXPECT_EQ(cpu, shared);
  }
}

TEST(ValidateRowTest, ValidRowsAndEdgesPass) {
  RowDesc row = ValidRow();
  EXPECT_NO_THROW(ValidateRow(row, 0));
  row.length = 0;
  row.num_samples = 0;
  row.target = 0;
  EXPECT_NO_THROW(ValidateRow(row, 0));  // an empty row, K = 0
  row.length = INT32_MAX;
  row.num_samples = 7;
  row.target = 7;  // f = 1
  row.fill = FillPolicy::kNone;
  row.label_dtype = DType::kBool;
  EXPECT_NO_THROW(ValidateRow(row, 0));
  EXPECT_NO_THROW(ValidateRows(nullptr, 0));
}

// BatchBuilder::FillSizes hands the CUDA backend the host rows to validate.
TEST(ValidateRowTest, FillSizesSetsHostRows) {
  BatchBuilder builder;
  SamplingSpec spec;
  spec.num_samples = 3;
  builder.AddRequest(spec, 1, DType::kInt32, {5, 6}, 0);
  Batch batch;
  builder.FillSizes(&batch);
  EXPECT_EQ(batch.host_rows, builder.rows().data());
  EXPECT_EQ(batch.num_rows, 2);
}

}  // namespace
}  // namespace gpusampler::kernels
