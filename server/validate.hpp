// Validation at the edge (SPEC section 3): checks a SampleRequest against the wire contract
// and the configured limits, and converts it to a Job. Thread-safe (pure, apart from drawing
// a seed from a thread-local generator).
#pragma once

#include "config.hpp"
#include "gpusampler/v1/sampler.pb.h"
#include "job.hpp"
#include "status.hpp"

namespace gpusampler::server {

// Fills the plain-value fields of `job` (spec, seed, labels, rows, features) from `request`,
// or returns INVALID_ARGUMENT / RESOURCE_EXHAUSTED with a message naming the field and the
// numbers. `job`'s pointers address `request`'s bytes. Draws a seed when none is given.
Status ValidateRequest(const v1::SampleRequest& request, const Limits& limits, Job* job);

// Bytes of the response `job` produces (tensor payloads plus a small allowance for framing).
int64_t ResponseBytes(const Job& job);

}  // namespace gpusampler::server
