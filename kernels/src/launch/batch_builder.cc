#include <algorithm>

#include "gpusampler/kernels/batch_builder.hpp"

namespace gpusampler::kernels {

int64_t BatchBuilder::AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                                 const std::vector<int64_t>& row_lengths,
                                 int64_t feature_row_bytes) {
  const int64_t first = static_cast<int64_t>(rows_.size());
  const int64_t item = static_cast<int64_t>(DTypeSize(label_dtype));
  const int64_t k = spec.num_samples;
  const int64_t target = TargetPositives(k, spec.positive_fraction);
  for (size_t r = 0; r < row_lengths.size(); ++r) {
    RowDesc row;
    row.length = row_lengths[r];
    row.num_samples = k;
    row.target = target;
    row.positive_label = spec.positive_label;
    row.negative_label = spec.negative_label;
    row.seed = seed;
    row.row_in_request = static_cast<uint32_t>(r);
    row.fill = spec.fill;
    row.label_dtype = label_dtype;
    row.label_offset = label_bytes_;
    row.feature_offset = feature_bytes_;
    row.feature_row_bytes = feature_row_bytes;
    row.out_slot = total_slots_;
    row.out_label_offset = out_label_bytes_;
    row.out_feature_offset = out_feature_bytes_;
    rows_.push_back(row);

    label_bytes_ += row.length * item;
    feature_bytes_ += row.length * feature_row_bytes;
    total_slots_ += k;
    out_label_bytes_ += k * item;
    out_feature_bytes_ += k * feature_row_bytes;
    total_elements_ += row.length;
    max_length_ = std::max(max_length_, row.length);
    max_samples_ = std::max(max_samples_, k);
  }
  return first;
}

void BatchBuilder::FillSizes(Batch* batch) const {
  batch->rows = rows_.data();
  batch->num_rows = static_cast<int64_t>(rows_.size());
  batch->total_elements = total_elements_;
  batch->total_slots = total_slots_;
  batch->max_length = max_length_;
  batch->max_samples = max_samples_;
  batch->host_rows = rows_.data();
}

}  // namespace gpusampler::kernels
