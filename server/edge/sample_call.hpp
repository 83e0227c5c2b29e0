// The steps that Sample (service.cc) and SampleStream (sample_stream.cc) share once a
// request's bytes are parsed: authenticate, validate into a Job, charge the response's bytes,
// and the response's timing.
#pragma once

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <memory>

#include "core/job.hpp"
#include "core/status.hpp"
#include "edge/regions.hpp"
#include "edge/service.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

double SecondsSince(Clock::time_point t);

// Validates `request` into a Job answering into `response`, and charges the response's
// bytes (the estimate covers every byte it echoes) to the budget; null with `*status` set
// when the request is refused (unauthenticated, draining, invalid, over the budget).
// Null with an OK `*status`: the response is complete already (an ELEMENTS epoch step whose
// member lists are built, answered without the scheduler); the caller only sends it. The
// first step of a version comes back as a job with answer_off_scheduler (SubmitJob).
// `*charged` grows by what was charged.
// With `request.output_region` (SPEC section 9), `*lease` gets the region, checked to hold the
// answer before any launch; the caller writes the answer there with FinishInRegion.
std::shared_ptr<Job> PrepareJob(SamplerService* svc, const grpc::CallbackServerContext& ctx,
                                const v1::SampleRequest& request, v1::SampleResponse* response,
                                Clock::time_point accepted, int64_t* charged, Status* status,
                                RegionLease* lease);

// Whether validating `request` would load a dataset from the repository (it names one that
// this replica does not hold, and there is a repository): the caller then runs PrepareJob
// off gRPC's callback thread (RunRepositoryWork).
bool LoadsOnMiss(SamplerService* svc, const v1::SampleRequest& request);

// Shared memory (SPEC section 9): when `lease` holds a region, writes `response`'s tensor
// bytes there (their data then empty), counts them, and releases the lease. OK without one.
Status FinishInRegion(SamplerService* svc, RegionLease* lease, v1::SampleResponse* response);

// Sets the response's timing.total_us: from `accepted` to now.
void SetTotal(v1::SampleResponse* response, Clock::time_point accepted);

// The status an exception escaping into a gRPC or worker callback becomes (call inside a
// catch (...)): FromCurrentException, and out of host memory passes like a full byte
// budget, with a retry pushback.
Status FromCallbackException();

// Submits a job PrepareJob returned: to the scheduler, or (answer_off_scheduler) to the
// epoch thread, which calls `done` when the answer is written.
Status SubmitJob(SamplerService* svc, const std::shared_ptr<Job>& job);

}  // namespace gpusampler::server
