// The StagedLaunch tests' requests: a request's host data laid out as a dataset (rows anywhere,
// optionally resident on the device), and the CPU backend's answer for it alone, from a
// contiguous copy of its rows, with the check of a launch's outputs against it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/staged_launch.hpp"

namespace gpusampler::kernels::staged_test {

// A request's host data: labels and features laid out as a dataset (rows anywhere).
struct Source {
  LaunchRequest request;
  std::vector<int64_t> row_offsets;
  std::vector<int64_t> row_start;  // empty: back to back
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;
  bool resident = false;  // give the device a copy (device_labels / device_features)
};

inline std::unique_ptr<Source> MakeSource(DType dtype, const std::vector<int64_t>& lengths,
                                          int64_t k, int64_t feature_row_bytes, bool shuffled,
                                          bool resident, uint64_t seed) {
  auto s = std::make_unique<Source>();
  std::mt19937_64 gen(seed);
  const size_t item = DTypeSize(dtype);
  s->row_offsets.push_back(0);
  for (int64_t n : lengths) s->row_offsets.push_back(s->row_offsets.back() + n);
  const int64_t total = s->row_offsets.back();
  // The dataset holds the rows in reverse order after a gap, so that row_start matters.
  const int64_t gap = shuffled ? 37 : 0;
  const int64_t dataset = total + gap;
  if (shuffled) {
    int64_t at = dataset;
    for (size_t r = 0; r < lengths.size(); ++r) {
      at -= lengths[r];
      s->row_start.push_back(at);
    }
  }
  s->labels.resize(static_cast<size_t>(dataset) * item + 1);
  for (int64_t e = 0; e < dataset; ++e) {
    const int64_t v = static_cast<int64_t>(gen() % 3) - (dtype == DType::kUInt8 ? 0 : 1);
    std::memcpy(s->labels.data() + e * item, &v, item);
  }
  s->features.resize(static_cast<size_t>(dataset * feature_row_bytes) + 1);
  for (auto& b : s->features) b = static_cast<uint8_t>(gen());
  LaunchRequest& q = s->request;
  q.spec.num_samples = k;
  q.spec.positive_fraction = 0.25;
  q.spec.positive_label = 1;
  q.spec.negative_label = dtype == DType::kUInt8 ? 2 : -1;
  q.seed = seed;
  q.label_dtype = dtype;
  q.num_rows = static_cast<int64_t>(lengths.size());
  q.row_offsets = s->row_offsets.data();
  q.row_start = shuffled ? s->row_start.data() : nullptr;
  q.labels = s->labels.data();
  q.feature_row_bytes = feature_row_bytes;
  q.features = feature_row_bytes > 0 ? s->features.data() : nullptr;
  s->resident = resident;
  return s;
}

// The CPU backend's answer for one request alone, from a contiguous copy of its rows.
struct Expected {
  std::vector<int64_t> indices;
  std::vector<uint8_t> labels, features;
  std::vector<int32_t> pos, neg;
};

inline Expected Reference(const Source& s) {
  const LaunchRequest& q = s.request;
  const size_t item = DTypeSize(q.label_dtype);
  std::vector<int64_t> lengths;
  std::vector<uint8_t> labels, features;
  for (int64_t r = 0; r < q.num_rows; ++r) {
    const int64_t n = q.row_offsets[r + 1] - q.row_offsets[r];
    const int64_t start = q.row_start != nullptr ? q.row_start[r] : q.row_offsets[r];
    lengths.push_back(n);
    labels.insert(labels.end(), s.labels.begin() + start * item,
                  s.labels.begin() + (start + n) * item);
    if (q.feature_row_bytes > 0) {
      features.insert(features.end(), s.features.begin() + start * q.feature_row_bytes,
                      s.features.begin() + (start + n) * q.feature_row_bytes);
    }
  }
  labels.push_back(0);
  features.push_back(0);
  BatchBuilder builder;
  builder.AddRequest(q.spec, q.seed, q.label_dtype, lengths, q.feature_row_bytes);
  Expected e;
  e.indices.resize(static_cast<size_t>(builder.total_slots()));
  e.labels.resize(static_cast<size_t>(builder.out_label_bytes()));
  e.features.resize(static_cast<size_t>(builder.out_feature_bytes()));
  e.pos.resize(static_cast<size_t>(q.num_rows));
  e.neg.resize(static_cast<size_t>(q.num_rows));
  Batch batch;
  builder.FillSizes(&batch);
  batch.labels = labels.data();
  batch.features = features.data();
  batch.out_indices = e.indices.data();
  batch.out_labels = e.labels.data();
  batch.out_features = e.features.data();
  batch.out_num_positive = e.pos.data();
  batch.out_num_negative = e.neg.data();
  if (q.num_rows > 0) MakeCpuBackend(2)->Sample(batch);
  return e;
}

inline void ExpectOutputs(const LaunchOutput& out, const Source& s, const std::string& what) {
  SCOPED_TRACE(what);
  const Expected e = Reference(s);
  const LaunchRequest& q = s.request;
  ASSERT_EQ(out.num_rows, q.num_rows);
  ASSERT_EQ(out.k, q.spec.num_samples);
  const size_t slots = e.indices.size();
  if (slots > 0) {
    EXPECT_EQ(std::memcmp(out.indices, e.indices.data(), slots * 8), 0);
    EXPECT_EQ(std::memcmp(out.labels, e.labels.data(), e.labels.size()), 0);
  }
  if (q.num_rows > 0) {
    EXPECT_EQ(std::memcmp(out.num_positive, e.pos.data(), e.pos.size() * 4), 0);
    EXPECT_EQ(std::memcmp(out.num_negative, e.neg.data(), e.neg.size() * 4), 0);
  }
  if (q.feature_row_bytes > 0 && !e.features.empty()) {
    ASSERT_NE(out.features, nullptr);
    EXPECT_EQ(std::memcmp(out.features, e.features.data(), e.features.size()), 0);
  } else {
    EXPECT_EQ(out.features, nullptr);
  }
}

}  // namespace gpusampler::kernels::staged_test
