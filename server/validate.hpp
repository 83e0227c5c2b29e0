// Validation at the edge (SPEC section 3): checks a SampleRequest against the wire contract
// and the configured limits, and converts it to a Job. Thread-safe (pure, apart from drawing
// a seed from a thread-local generator).
#pragma once

#include "config.hpp"
#include "datasets.hpp"
#include "gpusampler/v1/sampler.pb.h"
#include "job.hpp"
#include "status.hpp"

namespace gpusampler::server {

// Fills the plain-value fields of `job` (spec, seed, labels, rows, features) from `request`,
// or returns INVALID_ARGUMENT / RESOURCE_EXHAUSTED with a message naming the field and the
// numbers. `job`'s pointers address `request`'s bytes. Draws a seed when none is given.
// A request naming a resident dataset is resolved against `datasets` (null: none exist).
Status ValidateRequest(const v1::SampleRequest& request, const Limits& limits, Job* job,
                       const DatasetRegistry* datasets = nullptr);

// What the gRPC transport accepts for a `max_message_bytes` limit: a quarter more (at least
// 1 MiB more, at most INT_MAX), so that a request somewhat over the limit still reaches
// ValidateRequest and is refused with a message naming --max-message-bytes and a
// do-not-retry pushback. Beyond that, gRPC refuses the message itself.
int TransportMessageLimit(int64_t max_message_bytes);

// The most dims a tensor may have (labels need 1 or 2; features a few more).
inline constexpr int kMaxRank = 8;

// Framing allowance of a response beyond its tensor payloads and request_id (tags, lengths,
// shapes, dtypes, seed, device, timing).
inline constexpr int64_t kResponseOverheadBytes = 1024;

// Sets `*bytes` to the size of the response `job` produces (tensor payloads, the echoed
// request_id of `request_id_bytes`, and kResponseOverheadBytes). False when that overflows
// int64 (the dims come from the client).
bool ResponseBytes(const Job& job, size_t request_id_bytes, int64_t* bytes);

// Checks tensor `name`: a known dtype, non-negative dims, and exactly prod(shape) *
// itemsize data bytes. On success `*elements` is prod(shape).
Status CheckTensorData(const v1::Tensor& tensor, const std::string& name, const Limits& limits,
                       int64_t* elements);

// row_splits (not empty) starts at 0 and never decreases; else INVALID_ARGUMENT naming the
// first offending entry.
Status CheckRowSplitsOrder(const std::vector<int64_t>& row_splits);
// Every byte of BOOL labels is 0 or 1; else INVALID_ARGUMENT naming the first other one.
Status CheckBoolLabels(const uint8_t* bytes, int64_t n);

}  // namespace gpusampler::server
