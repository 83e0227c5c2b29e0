// Shared helpers of the kernels tests: cases, a brute-force reference, and running a set of
// requests fused into one launch on any backend.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"

namespace gpusampler::kernels::testing {

// One request: rows of labels (held as int64, encoded to `dtype` when run).
struct Case {
  SamplingSpec spec;
  uint64_t seed = 0;
  DType dtype = DType::kInt64;
  std::vector<std::vector<int64_t>> rows;
  int64_t feature_row_bytes = 0;  // features are a deterministic byte pattern of (row, i)
  // FLOAT32 scores, one per label (SPEC section 7); empty: none sent.
  std::vector<std::vector<float>> scores;
  // With spec.classes: lower a binary spec written as classes to the binary rows (the
  // BatchBuilder default); false sends it through the class path.
  bool lower_binary = true;
};

struct Result {
  std::vector<std::vector<int64_t>> indices;   // [B][K]
  std::vector<std::vector<int64_t>> labels;    // [B][K], decoded from the output dtype
  std::vector<std::vector<uint8_t>> features;  // [B][K * feature_row_bytes]
  std::vector<int32_t> num_positive;
  std::vector<int32_t> num_negative;
  std::vector<std::vector<int32_t>> num_per_class;  // [B][C] with spec.classes; empty without
};

// The feature byte pattern of element i of row r, byte b.
uint8_t FeatureByte(uint32_t r, int64_t i, int64_t b);

// Backends the suites run on: "cpu:1", "cpu:3" (threads) and "cuda".
std::vector<std::string> AllBackends();
// True when `backend` can run here (CUDA needs a device).
bool BackendAvailable(const std::string& backend);

// Runs every case fused into one launch; results in case order.
std::vector<Result> RunFused(const std::string& backend, const std::vector<Case>& cases);
Result RunOne(const std::string& backend, const Case& c);
// The LaunchStats of the backend's last RunFused/RunOne (cuda-sim backends only).
LaunchStats LastStats(const std::string& backend);

// Brute force from SPEC section 1: full sorts of (u, i) per class and of (v, i), scalar
// Philox, quotas re-derived here from the spec text.
Result Reference(const Case& c);

// Brute force from SPEC section 7 for a case with spec.classes: membership by the spec's own
// (unmerged) ranges and the scores, targets and quotas re-derived from the text, full sorts
// per class (UNIFORM (u, i), WEIGHTED (E / w, i), HARDEST by score then (u, i), MIXED both),
// then (v, i). Shares only Philox and WeightedE / WeightedKeyBits with the backends.
Result ReferenceClasses(const Case& c);

// Labels with P(positive) = p_pos, P(negative) = p_neg, the rest -1.
std::vector<int64_t> RandomLabels(int64_t n, double p_pos, double p_neg, uint64_t seed,
                                  int64_t pos_label = 1, int64_t neg_label = 0);

// One request of `rows` rows of n int64 labels in host buffers, as a Batch.
struct HostBatch {
  BatchBuilder builder;
  Batch batch;
  std::vector<int64_t> labels, out;
  std::vector<uint8_t> out_labels;
  std::vector<int32_t> pos, neg;
  HostBatch(int64_t rows, int64_t n, int64_t k, uint64_t seed) {
    SamplingSpec spec;
    spec.num_samples = k;
    spec.positive_fraction = 0.5;
    builder.AddRequest(spec, seed, DType::kInt64,
                       std::vector<int64_t>(static_cast<size_t>(rows), n), 0);
    builder.FillSizes(&batch);
    for (int64_t r = 0; r < rows; ++r) {
      const auto row = RandomLabels(n, 0.5, 0.5, seed + 1000 + static_cast<uint64_t>(r));
      labels.insert(labels.end(), row.begin(), row.end());
    }
    out.assign(static_cast<size_t>(builder.total_slots()), -7);
    out_labels.assign(static_cast<size_t>(builder.out_label_bytes()) + 8, 0);
    pos.assign(static_cast<size_t>(rows), -1);
    neg.assign(static_cast<size_t>(rows), -1);
    batch.labels = reinterpret_cast<const uint8_t*>(labels.data());
    batch.out_indices = out.data();
    batch.out_labels = out_labels.data();
    batch.out_num_positive = pos.data();
    batch.out_num_negative = neg.data();
  }
};

// `rows` rows of n labels, half positive and half negative on average (row r seeded from
// seed and r), K = k, positive_fraction 0.5.
Case BalancedCase(int64_t rows, int64_t n, int64_t k, int64_t feature_bytes, uint64_t seed);
// One line of a launch's counts on stdout: "name: launches ..., bytes_per_element ...".
void PrintStats(const std::string& name, const LaunchStats& s);

}  // namespace gpusampler::kernels::testing
