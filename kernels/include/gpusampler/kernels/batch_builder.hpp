// BatchBuilder: row descriptors and buffer sizes of a batch assembled from requests on the host.
// Compiles with a plain C++17 compiler.
#pragma once

#include <cstdint>
#include <vector>

#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels {

// Builds row descriptors and buffer sizes for a batch made of requests. A helper for
// callers (server, tests, benchmarks) that assemble launches on the host.
class BatchBuilder {
 public:
  // Appends the `num_rows` rows of one request. `row_lengths[r]` are the rows' element
  // counts; labels of the rows are laid out back to back in `label_dtype`, features (if
  // `feature_row_bytes` > 0) likewise. Returns the index of the request's first row.
  int64_t AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                     const std::vector<int64_t>& row_lengths, int64_t feature_row_bytes);
  // The same, for a request that may carry classes (SPEC section 7) and FLOAT32 scores (laid
  // out back to back like the labels, one per element, when `with_scores`). A class spec is
  // compiled once (CompileClassTable: throws Error(kInvalidArgument) naming the field) into
  // class_tables(); a spec that is section 1's binary spec written as classes is lowered to the
  // binary rows (LowerToBinary) unless set_lower_binary(false).
  int64_t AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                     const std::vector<int64_t>& row_lengths, int64_t feature_row_bytes,
                     bool with_scores);

  // How each request's classes were laid out, in AddRequest order.
  struct RequestClasses {
    int32_t num_classes = 0;       // C; 0 for a binary request
    bool lowered = false;          // sampled as binary rows: num_per_class comes from
                                   // num_positive / num_negative (below)
    int32_t positive_class = 0;    // lowered: the class whose count is num_positive
    int64_t out_class_offset = 0;  // first entry of the request's rows in out_num_per_class
  };
  const std::vector<RequestClasses>& requests() const { return requests_; }
  // num_per_class of a lowered request's row from its binary counts.
  static void LoweredCounts(const RequestClasses& request, int32_t num_positive,
                            int32_t num_negative, int32_t* num_per_class);
  // Applies to the requests added after the call.
  void set_lower_binary(bool on) { lower_binary_ = on; }

  const std::vector<uint8_t>& class_tables() const { return class_tables_; }
  int64_t total_scores() const { return total_scores_; }
  int64_t total_class_outputs() const { return total_class_outputs_; }

  const std::vector<RowDesc>& rows() const { return rows_; }
  int64_t label_bytes() const { return label_bytes_; }
  int64_t feature_bytes() const { return feature_bytes_; }
  int64_t total_slots() const { return total_slots_; }
  int64_t out_label_bytes() const { return out_label_bytes_; }
  int64_t out_feature_bytes() const { return out_feature_bytes_; }
  int64_t total_elements() const { return total_elements_; }
  int64_t max_length() const { return max_length_; }
  int64_t max_samples() const { return max_samples_; }

  // Fills the size fields and `rows`/`num_rows` of `batch` (rows point at this builder's
  // host vector; a device backend needs them copied first). Class tables, scores and
  // out_num_per_class are the caller's to point at (class_tables() is host memory).
  void FillSizes(Batch* batch) const;

 private:
  std::vector<RowDesc> rows_;
  std::vector<RequestClasses> requests_;
  std::vector<uint8_t> class_tables_;
  bool lower_binary_ = true;
  int64_t total_scores_ = 0;
  int64_t total_class_outputs_ = 0;
  int64_t label_bytes_ = 0;
  int64_t feature_bytes_ = 0;
  int64_t total_slots_ = 0;
  int64_t out_label_bytes_ = 0;
  int64_t out_feature_bytes_ = 0;
  int64_t total_elements_ = 0;
  int64_t max_length_ = 0;
  int64_t max_samples_ = 0;
};

}  // namespace gpusampler::kernels
