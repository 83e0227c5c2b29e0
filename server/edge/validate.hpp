// Validation at the edge (SPEC section 3): checks a SampleRequest against the wire contract
// and the configured limits, and converts it to a Job. Thread-safe (pure, apart from drawing
// a seed from a thread-local generator).
#pragma once

#include "core/config.hpp"
#include "core/job.hpp"
#include "core/status.hpp"
#include "core/tensor_check.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

class DatasetRegistry;

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

// Framing allowance of a response beyond its tensor payloads and request_id (tags, lengths,
// shapes, dtypes, seed, device, timing).
inline constexpr int64_t kResponseOverheadBytes = 1024;

// Sets `*bytes` to the size of the response `job` produces (tensor payloads, the echoed
// request_id of `request_id_bytes`, and kResponseOverheadBytes). False when that overflows
// int64 (the dims come from the client).
bool ResponseBytes(const Job& job, size_t request_id_bytes, int64_t* bytes);

}  // namespace gpusampler::server
