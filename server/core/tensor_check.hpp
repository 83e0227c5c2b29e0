// Checks of the wire's v1::Tensor shared by request validation (validate.hpp) and dataset
// uploads (datasets.hpp), so that both refuse a malformed tensor with the same words.
// Thread-safe (pure).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "core/status.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

// The most dims a tensor may have (labels need 1 or 2; features a few more).
inline constexpr int kMaxRank = 8;

// "[d0, d1, ...]", at most kMaxRank dims printed, so that an error about a huge shape stays
// small.
std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape);
// A dtype's name as the errors print it: "INT64".
std::string UpperDTypeName(kernels::DType dtype);

// Checks tensor `name`: a known dtype, non-negative dims, and exactly prod(shape) *
// itemsize data bytes. On success `*elements` is prod(shape).
Status CheckTensorData(const v1::Tensor& tensor, const std::string& name, const Limits& limits,
                       int64_t* elements);

// Parses a row_splits tensor into `*out`: INT64 [B+1] with B >= 0, starting at 0 and never
// decreasing. With `check_max_rows`, B over limits.max_rows is RESOURCE_EXHAUSTED (a
// request's rows; a dataset's row_splits are not bounded by it). Else INVALID_ARGUMENT
// naming the field.
Status ParseRowSplits(const v1::Tensor& splits, const Limits& limits, bool check_max_rows,
                      std::vector<int64_t>* out);

// row_splits (not empty) starts at 0 and never decreases; else INVALID_ARGUMENT naming the
// first offending entry.
Status CheckRowSplitsOrder(const std::vector<int64_t>& row_splits);
// Every byte of BOOL labels is 0 or 1; else INVALID_ARGUMENT naming the first other one.
Status CheckBoolLabels(const uint8_t* bytes, int64_t n);

}  // namespace gpusampler::server
