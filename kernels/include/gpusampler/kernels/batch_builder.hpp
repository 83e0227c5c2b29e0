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
  // host vector; a device backend needs them copied first).
  void FillSizes(Batch* batch) const;

 private:
  std::vector<RowDesc> rows_;
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
