#include "launch/plan.hpp"

#include <algorithm>
#include <string>

namespace gpusampler::kernels {

void PlanRequest(size_t j, const LaunchRequest& q, bool device, LaunchPlan* plan) {
  LaunchPlan::Request& pr = plan->requests[j];
  if (q.num_rows < 0) Invalid(j, "num_rows " + std::to_string(q.num_rows) + " < 0");
  if (q.num_rows > 0 && q.row_offsets == nullptr) Invalid(j, "null row_offsets");
  const size_t item = DTypeSize(q.label_dtype);
  if (!IsLabel(q.label_dtype)) {
    Invalid(j,
            std::string("label dtype ") + Traits(q.label_dtype).name + " is not an integer type");
  }
  if (q.spec.num_samples < 0) {
    Invalid(j, "num_samples " + std::to_string(q.spec.num_samples) + " < 0");
  }
  if (q.feature_row_bytes < 0) {
    Invalid(j, "feature_row_bytes " + std::to_string(q.feature_row_bytes) + " < 0");
  }
  const int64_t elements = q.num_rows > 0 ? q.row_offsets[q.num_rows] - q.row_offsets[0] : 0;
  pr.first_row = plan->num_rows;
  pr.first_slot = plan->total_slots;
  plan->num_rows += q.num_rows;
  plan->total_elements += elements;
  plan->total_slots += q.num_rows * q.spec.num_samples;
  if (q.num_rows > 0) plan->max_samples = std::max(plan->max_samples, q.spec.num_samples);
  for (int64_t r = 0; r < q.num_rows; ++r) {
    plan->max_length = std::max(plan->max_length, q.row_offsets[r + 1] - q.row_offsets[r]);
  }
  if (elements > 0) {
    const uint8_t* in_place = device ? q.device_labels : q.labels;
    if (in_place != nullptr) {
      pr.in_place_labels = in_place;
    } else if (q.labels != nullptr) {
      pr.stage_at = Part(plan->staged_label_bytes);
      plan->staged_label_bytes = pr.stage_at + elements * static_cast<int64_t>(item);
    } else {
      Invalid(j, "no labels for " + std::to_string(elements) + " elements");
    }
  }
  pr.out_label_at = Part(plan->out_label_bytes);
  plan->out_label_bytes =
      pr.out_label_at + q.num_rows * q.spec.num_samples * static_cast<int64_t>(item);
  const int64_t feature_out = q.num_rows * q.spec.num_samples * q.feature_row_bytes;
  if (q.feature_row_bytes > 0 && q.num_rows > 0) {
    const uint8_t* in_place = device ? q.device_features : q.features;
    if (in_place != nullptr) {
      pr.in_place_features = in_place;
      if (!device && q.features_out != nullptr) {  // the host kernels write the caller's buffer
        pr.features_out = q.features_out;
      } else {
        pr.out_feature_at = Part(plan->out_feature_bytes);
        plan->out_feature_bytes = pr.out_feature_at + feature_out;
      }
    } else if (q.features != nullptr) {
      if (q.features_out != nullptr) {  // the host gather writes the caller's buffer
        pr.features_out = q.features_out;
      } else {
        pr.host_feature_at = Part(plan->host_feature_bytes);
        plan->host_feature_bytes = pr.host_feature_at + feature_out;
      }
    } else if (elements > 0) {
      Invalid(j, "feature_row_bytes " + std::to_string(q.feature_row_bytes) + " but no features");
    }
  }
}

// The sections of the launch's two regions for the planned totals.
void SizeRegions(LaunchPlan* plan) {
  Regions& reg = plan->regions;
  reg.rows = Section(plan->num_rows * static_cast<int64_t>(sizeof(RowDesc)) + kSizesBytes);
  reg.labels = Section(plan->staged_label_bytes);
  reg.idx = Section(plan->total_slots * 8);
  reg.olab = Section(plan->out_label_bytes);
  reg.counts = Section(plan->num_rows * 4);
  reg.feat = Section(plan->out_feature_bytes);
  reg.tables = Section(plan->class_table_bytes);
  reg.scores = Section(plan->total_scores * 4);
  reg.classes = Section(plan->total_class_outputs * 4);
}

Regions RegionsFor(const StagedSizes& sizes) {
  // Every request's part of a section may add up to kPart bytes of alignment; a launch has
  // at most one request per row.
  const int64_t slack = std::max<int64_t>(sizes.rows, 1) * kPart;
  Regions r;
  r.rows = Section(sizes.rows * static_cast<int64_t>(sizeof(RowDesc)) + kSizesBytes);
  r.labels = Section(sizes.elements * 8 + slack);
  r.idx = Section(sizes.slots * 8);
  r.olab = Section(sizes.slots * 8 + slack);
  r.counts = Section(sizes.rows * 4);
  r.feat = Section(sizes.feature_bytes + (sizes.feature_bytes > 0 ? slack : 0));
  r.tables = Section(sizes.class_table_bytes);
  r.scores = Section(sizes.scores * 4);
  r.classes = Section(sizes.class_outputs * 4);
  return r;
}

LaunchSizes SizesOf(const Regions& r, int64_t rows, int64_t elements, int64_t slots,
                    int64_t class_pairs) {
  LaunchSizes sizes;
  sizes.class_pairs = class_pairs;
  sizes.rows = rows;
  sizes.elements = elements;
  sizes.slots = slots;
  sizes.in_bytes = r.in();
  sizes.out_bytes = r.out() + kSection;  // + the launch's error word
  return sizes;
}

}  // namespace gpusampler::kernels
