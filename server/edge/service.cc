#include "edge/service.hpp"

#include <algorithm>
#include <memory>
#include <mutex>

#include "edge/repository_work.hpp"
#include "edge/request_bytes.hpp"
#include "edge/sample_call.hpp"
#include "edge/sample_stream.hpp"
#include "edge/security.hpp"

namespace gpusampler::server {
namespace {

using Request = v1::SampleRequest;
using Response = v1::SampleResponse;

// UNAUTHENTICATED unless authentication is off or the call carries exactly one bearer
// header with a configured token. (With TLS the same check already ran in the metadata path,
// before the body was read; plaintext gRPC has no such hook, so it runs here too.)
Status Authenticate(const SamplerService& svc, const grpc::CallbackServerContext& ctx) {
  std::shared_ptr<const std::vector<std::string>> held;
  if (svc.tokens()) held = svc.tokens()->Get();
  const std::vector<std::string>& tokens = held ? *held : svc.config().auth_tokens;
  if (tokens.empty()) return Status::Ok();
  std::vector<std::string> values;
  const auto range = ctx.client_metadata().equal_range("authorization");
  for (auto it = range.first; it != range.second; ++it) {
    values.emplace_back(it->second.data(), std::min<size_t>(it->second.size(), 4096));
  }
  return CheckBearer(tokens, values);
}

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(SamplerService* svc, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
            grpc::ByteBuffer* response)
      : svc_(svc), ctx_(ctx), out_(response), accepted_(Clock::now()) {
    try {
      Start(*request);
    } catch (...) {  // gRPC callback (the reactor's start): nothing may escape into gRPC
      Done(FromCallbackException());
    }
  }

  void OnCancel() override {
    client_gone_.store(true);
    svc_->CountClientCancel();
    std::lock_guard<std::mutex> lock(job_mu_);  // job_ may be set on a repository thread
    if (job_) job_->cancelled.store(true);
  }
  void OnDone() override {
    svc_->budget().Release(charged_);
    delete this;
  }

 private:
  void Start(const grpc::ByteBuffer& bytes) {
    Metrics* m = svc_->metrics();
    if (!bytes.Valid()) {
      // No message at all (an empty one is a valid, empty buffer): the body never arrived,
      // because the client closed, reset or cancelled the call first (issue 31). Not the
      // client's bad input.
      return Done(Status(Code::kCancelled,
                         "the request never arrived (the client closed, reset or cancelled "
                         "the call before sending it)"));
    }
    Status admitted;
    if (!ticket_.Take(&svc_->calls(), ctx_->peer(), &admitted)) return Done(admitted);
    const int64_t n = static_cast<int64_t>(bytes.Length());
    m->received_bytes().Increment(static_cast<double>(n));
    // The request is held twice: as received and parsed.
    Status status = Charge(svc_->budget(), 2 * n, "the request");
    if (!status.ok()) return Done(status);
    charged_ += 2 * n;
    if (status = ParseRequest(bytes, &request_, "the request"); !status.ok()) return Done(status);
    if (LoadsOnMiss(svc_, request_)) {
      // A dataset this replica lacks: loading it from the repository takes up to seconds,
      // so validation and submission run on a repository thread (issue 31: a load never
      // holds a gRPC callback thread). Finish may be called from any thread.
      RunRepositoryWork([this] {
        try {
          const ByteOwner::Scope owner(ticket_.owner());  // its charges: its connection's share
          Prepare();
        } catch (...) {  // a repository thread: nothing may escape
          Done(FromCallbackException());
        }
      });
      return;
    }
    Prepare();
  }

  // Validates (loading a missed dataset), then submits: on the gRPC thread, or on a
  // repository thread after a miss.
  void Prepare() {
    Metrics* m = svc_->metrics();
    Status status = Status::Ok();
    std::shared_ptr<Job> job =
        PrepareJob(svc_, *ctx_, request_, &response_, accepted_, &charged_, &status, &lease_);
    if (!job) return Done(status);
    {
      std::lock_guard<std::mutex> lock(job_mu_);
      job_ = job;
    }
    m->inflight().Increment();
    job_->done = [this](const Status& s) {
      svc_->metrics()->inflight().Decrement();
      try {
        Done(s);
      } catch (...) {  // a worker's callback: nothing may escape into the worker
        Done(FromCallbackException());
      }
    };
    if (ClientGone()) {
      // Gone before the launch: dropped, not computed (issue 31).
      m->inflight().Decrement();
      m->dropped_cancelled().Increment();
      return Done(Status(Code::kCancelled, "the client went away before the request ran"));
    }
    status = SubmitJob(svc_, job_);
    if (!status.ok()) {
      m->inflight().Decrement();
      Done(status);
    }
  }

  // OnCancel ran, or gRPC already knows that the call failed (IsCancelled is thread-safe in
  // the callback API; OnCancel may come after the worker's answer).
  bool ClientGone() const { return client_gone_.load() || ctx_->IsCancelled(); }

  // Finishes the call; `this` may be gone once Finish returns.
  void Done(Status status) {
    if (finished_) return;
    if (status.ok() && ClientGone()) {
      // Computed for a client that is gone (cancelled, or its deadline passed): nothing can
      // be written, so it is not OK.
      status =
          job_ && Clock::now() >= job_->deadline
              ? Status(Code::kDeadlineExceeded, "deadline passed before the answer was written")
              : Status(Code::kCancelled, "the client went away before the answer was written");
    }
    if (status.ok()) status = FinishInRegion(svc_, &lease_, &response_);  // shared memory
    lease_ = RegionLease{};
    if (status.ok()) {
      SetTotal(&response_, accepted_);
      bool own = false;
      if (!grpc::SerializationTraits<Response>::Serialize(response_, out_, &own).ok()) {
        status = Status(Code::kInternal, "cannot serialize the response");
      } else {
        svc_->metrics()->sent_bytes().Increment(static_cast<double>(out_->Length()));
      }
    }
    response_.Clear();
    finished_ = true;
    Finish(ToGrpcStatus(status, ctx_));
  }

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* out_;
  Request request_;
  Response response_;
  const Clock::time_point accepted_;
  std::mutex job_mu_;  // job_ against OnCancel (Prepare may run on a repository thread)
  std::shared_ptr<Job> job_;
  CallTicket ticket_;    // --max-calls, per connection; left when the reactor is deleted
  RegionLease lease_;    // shared memory: where the answer goes (SPEC section 9)
  int64_t charged_ = 0;  // bytes of the budget this call holds
  bool finished_ = false;
  std::atomic<bool> client_gone_{false};  // OnCancel ran
};

}  // namespace

SamplerService::SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                               v1::ServerInfo info, DatasetRegistry* datasets)
    : config_(config),
      scheduler_(scheduler),
      metrics_(metrics),
      info_(std::move(info)),
      datasets_(datasets),
      budget_(config.max_inflight_bytes),
      calls_(config.max_calls, config.max_concurrent_streams, &budget_),
      regions_(config.allow_shared_memory, config.shm_key_prefix, &metrics->shm_regions()) {
  budget_.SetGauge(&metrics_->inflight_bytes());
  stall_thread_ = std::thread([this] { StallLoop(); });
}

SamplerService::~SamplerService() {
  {
    std::lock_guard<std::mutex> lock(streams_mu_);
    stop_ = true;
  }
  stall_cv_.notify_all();
  if (stall_thread_.joinable()) stall_thread_.join();
}

void SamplerService::StallLoop() {
  const auto limit = std::chrono::duration_cast<Clock::duration>(
      std::chrono::milliseconds(config_.stream_write_timeout_ms));
  const auto first = std::chrono::duration_cast<Clock::duration>(
      std::chrono::milliseconds(config_.first_message_timeout_ms));
  // A tenth of the shorter limit (at most 250 ms): a stream ends between 1 and 1.1 limits.
  const auto period = std::clamp<Clock::duration>(
      std::min(limit, first) / 10, std::chrono::milliseconds(10), std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(streams_mu_);
  while (!stall_cv_.wait_for(lock, period, [this] { return stop_; })) {
    // Shared memory: the regions of revoked tokens are dropped within one period.
    if (tokens_) regions_.Revoke(*tokens_->Get());
    std::vector<DrainableCall*> stalled;
    const auto now = Clock::now();
    for (DrainableCall* s : streams_) {
      if (s->BeginStall(now, limit)) stalled.push_back(s);
    }
    if (stalled.empty()) continue;
    lock.unlock();
    for (DrainableCall* s : stalled) s->EndStall();
    lock.lock();
  }
}

grpc::ServerUnaryReactor* SamplerService::Sample(grpc::CallbackServerContext* context,
                                                 const grpc::ByteBuffer* request,
                                                 grpc::ByteBuffer* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SamplerService::SampleStream(
    grpc::CallbackServerContext* context) {
  return new StreamCall(this, context);
}

void SamplerService::StopAccepting() {
  accepting_.store(false);
  std::vector<DrainableCall*> streams;
  {
    // BeginDrain takes a reference under streams_mu_, so none is deleted before FinishDrain
    // (which may finish the call inline, and so must run outside streams_mu_).
    std::lock_guard<std::mutex> lock(streams_mu_);
    for (DrainableCall* s : streams_) {
      if (s->BeginDrain()) streams.push_back(s);
    }
  }
  for (DrainableCall* s : streams) s->FinishDrain();
}

void SamplerService::AddStream(DrainableCall* stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.insert(stream);
}

void SamplerService::RemoveStream(DrainableCall* stream) {
  std::lock_guard<std::mutex> lock(streams_mu_);
  streams_.erase(stream);
}

grpc::ServerUnaryReactor* SamplerService::GetServerInfo(grpc::CallbackServerContext* context,
                                                        const v1::GetServerInfoRequest*,
                                                        v1::ServerInfo* response) {
  const Status status = Authenticate(*this, *context);
  if (status.ok()) *response = info_;
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

Status SamplerService::Authorize(const grpc::CallbackServerContext& context) const {
  return Authenticate(*this, context);
}

}  // namespace gpusampler::server
