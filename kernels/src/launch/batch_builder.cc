#include "gpusampler/kernels/batch_builder.hpp"

#include <algorithm>

namespace gpusampler::kernels {

int64_t BatchBuilder::AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                                 const std::vector<int64_t>& row_lengths,
                                 int64_t feature_row_bytes) {
  return AddRequest(spec, seed, label_dtype, row_lengths, feature_row_bytes, false);
}

int64_t BatchBuilder::AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                                 const std::vector<int64_t>& row_lengths, int64_t feature_row_bytes,
                                 bool with_scores) {
  const int64_t first = static_cast<int64_t>(rows_.size());
  const int64_t item = static_cast<int64_t>(DTypeSize(label_dtype));
  const int64_t k = spec.num_samples;

  // The binary fields of the rows: the request's own, or those of its lowered class spec.
  SamplingSpec binary = spec;
  RequestClasses info;
  int64_t table = -1;
  if (!spec.classes.empty()) {
    std::vector<uint8_t> compiled;
    CompileClassTable(spec.classes, spec.fill_order, k, &compiled);  // validates either way
    info.num_classes = static_cast<int32_t>(spec.classes.size());
    info.out_class_offset = total_class_outputs_;
    // Lowered only where both label values occur in the dtype: the binary path compares
    // labels in their own dtype.
    if (lower_binary_ &&
        LowerToBinary(spec.classes, spec.fill_order, &binary, &info.positive_class) &&
        LabelRepresentable(label_dtype, binary.positive_label) &&
        LabelRepresentable(label_dtype, binary.negative_label)) {
      info.lowered = true;
    } else {
      binary = spec;
      info.positive_class = 0;
      table = static_cast<int64_t>(class_tables_.size());
      class_tables_.insert(class_tables_.end(), compiled.begin(), compiled.end());
    }
    total_class_outputs_ += info.num_classes * static_cast<int64_t>(row_lengths.size());
  }
  requests_.push_back(info);

  const int64_t target = TargetPositives(k, binary.positive_fraction);
  for (size_t r = 0; r < row_lengths.size(); ++r) {
    RowDesc row;
    row.length = row_lengths[r];
    row.num_samples = k;
    row.target = target;
    row.positive_label = binary.positive_label;
    row.negative_label = binary.negative_label;
    row.seed = seed;
    row.row_in_request = static_cast<uint32_t>(r);
    row.fill = binary.fill;
    row.label_dtype = label_dtype;
    row.label_offset = label_bytes_;
    row.feature_offset = feature_bytes_;
    row.feature_row_bytes = feature_row_bytes;
    row.out_slot = total_slots_;
    row.out_label_offset = out_label_bytes_;
    row.out_feature_offset = out_feature_bytes_;
    if (table >= 0) {
      row.class_table = table;
      row.num_classes = info.num_classes;
      row.out_class_offset = info.out_class_offset + static_cast<int64_t>(r) * info.num_classes;
    }
    if (with_scores) {
      row.score_offset = total_scores_;
      total_scores_ += row.length;
    }
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

void BatchBuilder::LoweredCounts(const RequestClasses& request, int32_t num_positive,
                                 int32_t num_negative, int32_t* num_per_class) {
  num_per_class[request.positive_class] = num_positive;
  num_per_class[1 - request.positive_class] = num_negative;
}

void BatchBuilder::FillSizes(Batch* batch) const {
  batch->rows = rows_.data();
  batch->num_rows = static_cast<int64_t>(rows_.size());
  batch->total_elements = total_elements_;
  batch->total_slots = total_slots_;
  batch->max_length = max_length_;
  batch->max_samples = max_samples_;
  batch->host_rows = rows_.data();
  batch->class_table_bytes = static_cast<int64_t>(class_tables_.size());
  batch->total_class_outputs = total_class_outputs_;
  batch->total_scores = total_scores_;
}

}  // namespace gpusampler::kernels
