// The row checks shared by every backend (sampler.hpp, ValidateRow). The CPU backend calls
// them on Batch::rows, the CUDA backend on Batch::host_rows before it enqueues anything; the
// CUDA kernels keep their clamps only as a guard against out-of-bounds accesses.
#include <climits>
#include <string>

#include "gpusampler/kernels/backend.hpp"

namespace gpusampler::kernels {

void ValidateRow(const RowDesc& row, int64_t index) {
  auto fail = [&](const std::string& what) {
    throw Error(Error::Code::kInvalidArgument, "row " + std::to_string(index) + ": " + what);
  };
  if (row.length < 0 || row.length > INT32_MAX) {
    fail("length " + std::to_string(row.length) + " outside [0, 2^31)");
  }
  if (row.num_samples < 0) fail("num_samples " + std::to_string(row.num_samples) + " < 0");
  if (row.target < 0 || row.target > row.num_samples) {
    fail("target " + std::to_string(row.target) + " outside [0, num_samples]");
  }
  if (!IsLabel(row.label_dtype)) {
    fail(std::string("label dtype ") + Traits(row.label_dtype).name + " is not an integer type");
  }
  if (row.positive_label == row.negative_label) {
    fail("positive_label equals negative_label (" + std::to_string(row.positive_label) + ")");
  }
  if (row.fill != FillPolicy::kBoth && row.fill != FillPolicy::kNegativesOnly &&
      row.fill != FillPolicy::kNone) {
    fail("fill policy " + std::to_string(static_cast<int>(row.fill)) + " is not 1, 2 or 3");
  }
  if (row.feature_row_bytes < 0) fail("feature_row_bytes < 0");
  if (row.class_table >= 0) {
    if (row.num_classes < 1 || row.num_classes > kMaxClasses) {
      fail("num_classes " + std::to_string(row.num_classes) + " outside [1, " +
           std::to_string(kMaxClasses) + "]");
    }
    if (row.class_table % 8 != 0)
      fail("class table offset " + std::to_string(row.class_table) + " is not 8-byte aligned");
    if (row.out_class_offset < 0) fail("negative class output offset");
  }
  if (row.label_offset < 0 || row.out_slot < 0 || row.out_label_offset < 0 ||
      row.feature_offset < 0 || row.out_feature_offset < 0) {
    fail("negative buffer offset");
  }
}

void ValidateRows(const RowDesc* rows, int64_t num_rows) {
  for (int64_t r = 0; r < num_rows; ++r) ValidateRow(rows[r], r);
}

bool AllSmallBinaryRows(const RowDesc* rows, int64_t num_rows, int64_t small_max) {
  for (int64_t j = 0; j < num_rows; ++j) {
    if (rows[j].length > small_max || rows[j].class_table >= 0) return false;
  }
  return true;
}

}  // namespace gpusampler::kernels
