// gpusampler::kernels public API, the plain types: what a request asks for (SamplingSpec), the
// rows and buffers of a (possibly fused, ragged) launch (RowDesc, Batch), where its memory
// lives, what a launch moved (LaunchStats), and the one exception backends throw (Error).
// Compiles with a plain C++17 compiler; nothing here needs CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::kernels {

// Sampling parameters of one request (SPEC section 1; with `classes`, section 7, and then the
// binary fields are unused).
struct SamplingSpec {
  int64_t num_samples = 0;  // K
  double positive_fraction = 0.5;
  int64_t positive_label = 1;
  int64_t negative_label = 0;
  FillPolicy fill = FillPolicy::kBoth;
  std::vector<ClassSpec> classes;  // empty: section 1's two classes
  std::vector<int32_t> fill_order;
};

// One row of a launch. Rows of different requests (any N, K, spec, dtype, feature width)
// may share a launch; every offset below is relative to the launch's buffers (Batch).
struct RowDesc {
  int64_t length = 0;       // N_r, elements in the row (< 2^31)
  int64_t num_samples = 0;  // K
  int64_t target = 0;       // floor(K * positive_fraction)
  int64_t positive_label = 1;
  int64_t negative_label = 0;
  uint64_t seed = 0;            // request seed S
  uint32_t row_in_request = 0;  // r: index of the row inside its own request
  FillPolicy fill = FillPolicy::kBoth;
  DType label_dtype = DType::kInt64;
  int64_t label_offset = 0;        // byte offset of the row's first label in Batch::labels
  int64_t feature_offset = 0;      // byte offset of the row's first feature row
  int64_t feature_row_bytes = 0;   // bytes of one element's feature row; 0 = labels only
  int64_t out_slot = 0;            // first of the row's K slots in Batch::out_indices
  int64_t out_label_offset = 0;    // byte offset into Batch::out_labels
  int64_t out_feature_offset = 0;  // byte offset into Batch::out_features
  // Classes (SPEC section 7). class_table < 0: section 1's two classes, the fields above.
  // Otherwise the byte offset of the row's compiled table (classes.hpp) in Batch::class_tables
  // (8-byte aligned; rows of one request share it), and positive_label, negative_label, target
  // and fill are unused.
  int64_t class_table = -1;
  int32_t num_classes = 0;       // C of the table (0 without one)
  int32_t row_flags = 0;         // reserved, 0
  int64_t score_offset = -1;     // element offset of the row's scores in Batch::scores; -1: none
  int64_t out_class_offset = 0;  // first of the row's C entries in Batch::out_num_per_class
};

// A launch. Every pointer addresses memory the backend works on: host memory for the CPU
// backend, device memory for the CUDA backend (rows included).
struct Batch {
  const RowDesc* rows = nullptr;
  int64_t num_rows = 0;
  const uint8_t* labels = nullptr;
  const uint8_t* features = nullptr;  // may be null when no row has features
  int64_t* out_indices = nullptr;     // total_slots entries; -1 marks padding
  uint8_t* out_labels = nullptr;
  uint8_t* out_features = nullptr;
  int32_t* out_num_positive = nullptr;  // num_rows entries
  int32_t* out_num_negative = nullptr;
  // Classes (rows with class_table >= 0): the compiled tables, FLOAT32 scores (null when no
  // row has any), and m_c per class and row. num_positive / num_negative of such a row are m_0 /
  // m_1 with two classes, m_0 / 0 with one, 0 / 0 with more.
  const uint8_t* class_tables = nullptr;
  const float* scores = nullptr;
  int32_t* out_num_per_class = nullptr;
  // Host-known sizes (sums over rows), used to size scratch space without reading the
  // device; they are not data-dependent.
  int64_t total_elements = 0;       // sum of length
  int64_t total_slots = 0;          // sum of num_samples
  int64_t max_length = 0;           // largest length
  int64_t max_samples = 0;          // largest num_samples
  int64_t class_table_bytes = 0;    // bytes of class_tables
  int64_t total_class_outputs = 0;  // entries of out_num_per_class (sum of num_classes)
  int64_t total_scores = 0;         // floats in scores
  // A host copy of `rows`, when `rows` is device memory and the caller has one (FillSizes
  // sets it): the CUDA backend validates it with ValidateRows. Null: not validated there.
  const RowDesc* host_rows = nullptr;
};

// Errors thrown by backends. The server converts them to a status in one place.
class Error : public std::runtime_error {
 public:
  enum class Code { kInvalidArgument, kOutOfMemory, kDeviceFault, kUnavailable, kInternal };
  Error(Code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

enum class MemorySpace { kHost, kDevice };

// What one Sample() call moved, as counted by the cuda-sim device (the CUDA pipeline run on
// the host): kernel launches, global-memory bytes that the kernels read and wrote for the
// sampling (labels, keys, counters, indices, output labels), feature-row bytes copied to the
// output apart from those (the payload: K rows per row, whatever N is), and Philox calls.
// A model of the GPU's work, not a timing.
struct LaunchStats {
  int64_t launches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t feature_bytes = 0;   // feature rows read + written
  int64_t label_elements = 0;  // Batch::total_elements
  int64_t philox_calls = 0;
  // Shared-memory bytes (cuda-sim): every shared load and store of a thread, atomics as a
  // load and a store, block sorts by cub's traffic; a uniform read outside a phase counts
  // once per thread.
  int64_t smem_bytes = 0;
  double smem_bytes_per_element() const {
    return label_elements > 0
               ? static_cast<double>(smem_bytes) / static_cast<double>(label_elements)
               : 0.0;
  }
  // (bytes_read + bytes_written) / label_elements, features excluded; 0 for an empty launch.
  double bytes_per_element() const {
    return label_elements > 0 ? static_cast<double>(bytes_read + bytes_written) /
                                    static_cast<double>(label_elements)
                              : 0.0;
  }
};

}  // namespace gpusampler::kernels
