#include "edge/sample_call.hpp"

#include "datasets/datasets.hpp"
#include "edge/request_bytes.hpp"
#include "edge/validate.hpp"

namespace gpusampler::server {
namespace {

Clock::time_point SteadyDeadline(const grpc::CallbackServerContext& ctx, Clock::time_point now) {
  const auto deadline = ctx.deadline();
  const auto left = deadline - std::chrono::system_clock::now();
  // gRPC reports "no deadline" as time_point::max(); anything beyond a year is the same.
  if (deadline == std::chrono::system_clock::time_point::max() ||
      left > std::chrono::hours(24 * 365)) {
    return Clock::time_point::max();
  }
  return now + std::chrono::duration_cast<Clock::duration>(left);
}

// Shared memory (SPEC section 9): the region named by `request.output_region`, which must
// hold the answer's layout (RESOURCE_EXHAUSTED naming the bytes, before any launch). An
// ELEMENTS epoch step is answered at the edge, so its layout is checked when written.
Status LeaseRegion(SamplerService* svc, const grpc::CallbackServerContext& ctx,
                   const v1::SampleRequest& request, Job* job, RegionLease* lease) {
  GPUSAMPLER_RETURN_IF_ERROR(
      svc->regions().Lease(svc->RegionScope(ctx), request.output_region(), lease));
  if (request.has_epoch() && request.epoch().mode() == v1::EPOCH_MODE_ELEMENTS) {
    return Status::Ok();
  }
  const int64_t needed = RegionBytesNeeded(*job);
  if (needed > lease->capacity) {
    const std::string name = lease->region->name();
    const int64_t capacity = lease->capacity;
    *lease = RegionLease{};
    return LimitExceeded("output_region: the answer needs " + std::to_string(needed) +
                         " bytes (tensors at multiples of 256), region '" + name + "' has " +
                         std::to_string(capacity) + " from offset " +
                         std::to_string(request.output_region().offset()));
  }
  // The worker writes the tensors straight into the region (no copy through the response).
  lease->writer = std::make_shared<RegionWriter>(*lease, *job);
  job->answer_sink = lease->writer.get();
  return Status::Ok();
}

}  // namespace

bool LoadsOnMiss(SamplerService* svc, const v1::SampleRequest& request) {
  DatasetRegistry* registry = svc->datasets();
  return !request.dataset().empty() && registry != nullptr && registry->repository() != nullptr &&
         registry->Find(request.dataset()) == nullptr;
}

Status FinishInRegion(SamplerService* svc, RegionLease* lease, v1::SampleResponse* response) {
  if (!lease->region) return Status::Ok();
  int64_t written = 0;
  Status status = Status::Ok();
  if (lease->writer && lease->writer->used()) {  // written by the worker
    status = lease->writer->Finish();
    written = lease->writer->written();
  } else {  // answered at the edge (an ELEMENTS step): from the response
    status = WriteToRegion(*lease, response, &written);
  }
  *lease = RegionLease{};  // the last holder of an unregistered region unmaps it
  if (status.ok()) svc->metrics()->shm_written_bytes().Increment(static_cast<double>(written));
  return status;
}

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::shared_ptr<Job> PrepareJob(SamplerService* svc, const grpc::CallbackServerContext& ctx,
                                const v1::SampleRequest& request, v1::SampleResponse* response,
                                Clock::time_point accepted, int64_t* charged, Status* status,
                                RegionLease* lease) {
  if (*status = svc->Authorize(ctx); !status->ok()) return nullptr;
  if (!svc->accepting()) {
    *status = Unavailable("server is draining; retry another replica");
    return nullptr;
  }
  auto job = std::make_shared<Job>();
  *status = ValidateRequest(request, svc->config().limits, job.get(), svc->datasets());
  if (!status->ok()) return nullptr;
  if (request.has_output_region()) {  // shared memory (SPEC section 9)
    if (*status = LeaseRegion(svc, ctx, request, job.get(), lease); !status->ok()) return nullptr;
  }
  int64_t response_bytes = 0;
  ResponseBytes(*job, request.request_id().size(), &response_bytes);  // checked by Validate
  // An answer in a region holds no tensor bytes in the response: only its framing.
  if (job->answer_sink != nullptr) {
    response_bytes = kResponseOverheadBytes + static_cast<int64_t>(request.request_id().size());
  }
  // The response is held twice at its peak: built, then serialized for gRPC.
  const int64_t cost = 2 * response_bytes;
  if (*status = Charge(svc->budget(), cost, "the response"); !status->ok()) return nullptr;
  *charged += cost;
  job->accepted = accepted;
  job->deadline = SteadyDeadline(ctx, accepted);
  job->connection = ctx.peer();  // the client's address and port: one per connection
  job->response = response;
  response->set_request_id(request.request_id());
  // The version this response is computed from (SPEC section 6): the job holds that one.
  if (job->dataset) {
    response->set_dataset_sha256(static_cast<const Dataset&>(*job->dataset).sha256);
  }
  // Epochs (SPEC section 8): ROWS runs as the rows request it resolved to; an ELEMENTS step
  // is answered here, from the dataset's member lists (O(K); docs/decisions.md).
  if (job->epoch_steps >= 0) response->set_epoch_steps(job->epoch_steps);
  if (request.has_epoch() && request.epoch().mode() == v1::EPOCH_MODE_ELEMENTS) {
    Epoch epoch;
    if (*status = ParseEpoch(request.epoch(), &epoch); !status->ok()) return nullptr;
    if (ElementsStepRunsInline(*job)) {
      *status = AnswerElementsStep(svc->datasets(), epoch, *job, response);
      return nullptr;  // answered (OK) or refused
    }
    // The first step of a version builds the member lists (O(N)), and a step on a device
    // waits for its copy back: both off this gRPC thread.
    DatasetRegistry* registry = svc->datasets();
    job->answer_off_scheduler = [registry, epoch](Job& j) {
      return AnswerElementsStep(registry, epoch, j, j.response);
    };
  }
  return job;
}

Status SubmitJob(SamplerService* svc, const std::shared_ptr<Job>& job) {
  if (!job->answer_off_scheduler) return svc->scheduler()->Submit(job);
  RunOffGrpcThread([job] {
    Status status = Status::Ok();
    try {
      status = job->answer_off_scheduler(*job);
    } catch (...) {  // the epoch thread: nothing may escape
      status = FromCallbackException();
    }
    job->done(status);
  });
  return Status::Ok();
}

void SetTotal(v1::SampleResponse* response, Clock::time_point accepted) {
  response->mutable_timing()->set_total_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - accepted).count());
}

Status FromCallbackException() {
  const Status status = FromCurrentException();
  if (status.code() == Code::kResourceExhausted) {
    return Status(status.code(), status.message(), BudgetPushbackMs());
  }
  return Status(status.code(), "internal error: " + status.message());
}

}  // namespace gpusampler::server
