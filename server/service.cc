#include "service.hpp"

#include <deque>
#include <memory>
#include <mutex>

#include "validate.hpp"

namespace gpusampler::server {
namespace {

using Request = v1::SampleRequest;
using Response = v1::SampleResponse;

double SecondsSince(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

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

// UNAUTHENTICATED unless authentication is off or the call carries the bearer token.
Status Authenticate(const SamplerService& svc, const grpc::CallbackServerContext& ctx) {
  const std::string& token = svc.config().auth_token;
  if (token.empty()) return Status::Ok();
  const auto& md = ctx.client_metadata();
  const auto it = md.find("authorization");
  if (it == md.end()) {
    return Status(Code::kUnauthenticated, "missing authorization metadata (Bearer token)");
  }
  const std::string want = "Bearer " + token;
  const grpc::string_ref got = it->second;
  // Compare every byte, so the time taken does not reveal the matching prefix.
  unsigned diff = got.size() != want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    diff |= static_cast<unsigned>(want[i] ^ (i < got.size() ? got.data()[i] : 0));
  }
  if (diff) return Status(Code::kUnauthenticated, "wrong bearer token");
  return Status::Ok();
}

// Validates `request` into a Job answering into `response`; null with `*status` set when
// the request is refused.
std::shared_ptr<Job> PrepareJob(SamplerService* svc, const grpc::CallbackServerContext& ctx,
                                const Request& request, Response* response,
                                Clock::time_point accepted, Status* status) {
  if (*status = Authenticate(*svc, ctx); !status->ok()) return nullptr;
  if (!svc->accepting()) {
    *status = Unavailable("server is draining; retry another replica");
    return nullptr;
  }
  auto job = std::make_shared<Job>();
  *status = ValidateRequest(request, svc->config().limits, job.get(), svc->datasets());
  if (!status->ok()) return nullptr;
  job->accepted = accepted;
  job->deadline = SteadyDeadline(ctx, accepted);
  job->response = response;
  response->set_request_id(request.request_id());
  return job;
}

void SetTotal(Response* response, Clock::time_point accepted) {
  response->mutable_timing()->set_total_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - accepted).count());
}

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(SamplerService* svc, grpc::CallbackServerContext* ctx, const Request* request,
            Response* response)
      : svc_(svc), ctx_(ctx), response_(response), accepted_(Clock::now()) {
    Metrics* m = svc_->metrics();
    m->received_bytes().Increment(static_cast<double>(request->ByteSizeLong()));
    Status status;
    job_ = PrepareJob(svc_, *ctx, *request, response, accepted_, &status);
    if (!job_) {
      Done(status);
      return;
    }
    m->inflight().Increment();
    job_->done = [this](const Status& s) {
      svc_->metrics()->inflight().Decrement();
      Done(s);
    };
    status = svc_->scheduler()->Submit(job_);
    if (!status.ok()) {
      m->inflight().Decrement();
      Done(status);
    }
  }

  void OnCancel() override {
    if (job_) job_->cancelled.store(true);
  }
  void OnDone() override { delete this; }

 private:
  // Finishes the call; `this` may be gone once Finish returns.
  void Done(const Status& status) {
    Metrics* m = svc_->metrics();
    if (status.ok()) {
      SetTotal(response_, accepted_);
      m->sent_bytes().Increment(static_cast<double>(response_->ByteSizeLong()));
    }
    Finish(ToGrpcStatus(status, ctx_));
  }

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;
  Response* response_;
  const Clock::time_point accepted_;
  std::shared_ptr<Job> job_;
};

// One SampleStream call. Requests are validated and submitted as they arrive (up to
// max_stream_inflight at a time); responses are written in request order. All gRPC
// operations are started by Pump, one thread at a time and outside mu_, because gRPC may
// run a reaction inline inside StartWrite/StartRead/Finish.
class StreamCall final : public grpc::ServerBidiReactor<Request, Response> {
 public:
  StreamCall(SamplerService* svc, grpc::CallbackServerContext* ctx)
      : svc_(svc), ctx_(ctx) {
    Pump();
  }

  void OnReadDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      read_in_flight_ = false;
      if (!ok) {
        reads_done_ = true;
      } else if (!finished_) {
        reading_->arrived = Clock::now();
        Accept(std::move(reading_));
      } else {
        // The stream already ended (an earlier failure): the request is dropped unrun.
        svc_->metrics()->RecordRequest(Method::kSampleStream, Code::kCancelled, 0);
      }
      reading_.reset();
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      write_in_flight_ = false;
      if (ok) {
        pending_.pop_front();
      } else {
        broken_ = true;  // the client is gone
      }
    }
    Pump();
  }

  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& slot : pending_) {
      if (slot->job) slot->job->cancelled.store(true);
    }
  }

  void OnDone() override { Unref(); }

 private:
  struct Slot {
    Request request;
    Response response;
    std::shared_ptr<Job> job;
    bool done = false;
    Status status;
    Clock::time_point arrived{};  // when its read completed
    bool counted = false;         // in gpusampler_requests_total (each message once)
  };
  enum class Op { kNone, kRead, kWrite, kFinish };

  // Counts one message of the stream (under mu_).
  void Count(Slot* slot, Code code) {
    slot->counted = true;
    svc_->metrics()->RecordRequest(Method::kSampleStream, code, SecondsSince(slot->arrived));
  }

  // Validates and submits one request read from the stream (under mu_).
  void Accept(std::unique_ptr<Slot> slot) {
    Metrics* m = svc_->metrics();
    m->received_bytes().Increment(static_cast<double>(slot->request.ByteSizeLong()));
    Slot* raw = slot.get();
    pending_.push_back(std::move(slot));
    Status status;
    auto job = PrepareJob(svc_, *ctx_, raw->request, &raw->response, raw->arrived, &status);
    if (job) {
      job->done = [this, raw](const Status& s) { JobDone(raw, s); };
      raw->job = job;
      ++refs_;
      m->inflight().Increment();
      status = svc_->scheduler()->Submit(job);
      if (!status.ok()) {
        --refs_;
        m->inflight().Decrement();
        raw->job.reset();
      }
    }
    if (!status.ok()) {
      raw->done = true;
      raw->status = status;
      stop_reading_ = true;  // the first failure ends the stream
    }
  }

  void JobDone(Slot* slot, const Status& status) {
    svc_->metrics()->inflight().Decrement();
    {
      std::lock_guard<std::mutex> lock(mu_);
      slot->done = true;
      slot->status = status;
      if (status.ok()) SetTotal(&slot->response, slot->job->accepted);
    }
    Pump();
    Unref();
  }

  // Decides the next gRPC operation (under mu_).
  Op NextLocked(Slot** slot, Status* status) {
    if (finished_) return Op::kNone;
    if (broken_) {
      *status = Status(Code::kCancelled, "client stopped reading responses");
    } else if (!write_in_flight_ && !pending_.empty() && pending_.front()->done) {
      Slot* front = pending_.front().get();
      if (front->status.ok()) {
        write_in_flight_ = true;
        Count(front, Code::kOk);
        *slot = front;
        return Op::kWrite;
      }
      *status = front->status;
    } else if (reads_done_ && pending_.empty() && !write_in_flight_) {
      *status = Status::Ok();
    } else {
      if (!read_in_flight_ && !reads_done_ && !stop_reading_ &&
          static_cast<int64_t>(pending_.size()) < svc_->config().max_stream_inflight) {
        read_in_flight_ = true;
        reading_ = std::make_unique<Slot>();
        *slot = reading_.get();
        return Op::kRead;
      }
      return Op::kNone;
    }
    finished_ = true;
    // Later requests of a failed stream need not run. Every message not answered is counted
    // now: a failed one with its own code, the others (dropped) as CANCELLED.
    for (auto& p : pending_) {
      if (p->job && !p->done) p->job->cancelled.store(true);
      if (!p->counted) Count(p.get(), p->done && !p->status.ok() ? p->status.code() : Code::kCancelled);
    }
    return Op::kFinish;
  }

  void Pump() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (pumping_) {
        repump_ = true;
        return;
      }
      pumping_ = true;
      ++refs_;  // keeps `this` alive across an inline OnDone
    }
    while (true) {
      Slot* slot = nullptr;
      Status status;
      Op op;
      {
        std::lock_guard<std::mutex> lock(mu_);
        op = NextLocked(&slot, &status);
        if (op == Op::kNone) {
          if (!repump_) {
            pumping_ = false;
            break;
          }
          repump_ = false;
          continue;
        }
      }
      switch (op) {
        case Op::kRead:
          StartRead(&slot->request);
          break;
        case Op::kWrite:
          svc_->metrics()->sent_bytes().Increment(
              static_cast<double>(slot->response.ByteSizeLong()));
          StartWrite(&slot->response);
          break;
        case Op::kFinish:
          Finish(ToGrpcStatus(status, ctx_));
          break;
        case Op::kNone:
          break;
      }
    }
    Unref();
  }

  void Unref() {
    bool last;
    {
      std::lock_guard<std::mutex> lock(mu_);
      last = --refs_ == 0;
    }
    if (last) delete this;
  }

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;

  std::mutex mu_;
  std::deque<std::unique_ptr<Slot>> pending_;  // request order
  std::unique_ptr<Slot> reading_;
  int refs_ = 1;  // gRPC's (released in OnDone) + one per submitted job + a running Pump
  bool read_in_flight_ = false;
  bool write_in_flight_ = false;
  bool reads_done_ = false;
  bool stop_reading_ = false;
  bool broken_ = false;
  bool finished_ = false;
  bool pumping_ = false;
  bool repump_ = false;
};

}  // namespace

grpc::Status ToGrpcStatus(const Status& status, grpc::CallbackServerContext* context) {
  if (status.ok()) return grpc::Status::OK;
  if (status.retry_pushback_ms() != kNoPushback) {
    context->AddTrailingMetadata("grpc-retry-pushback-ms",
                                 std::to_string(status.retry_pushback_ms()));
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), status.message());
}

SamplerService::SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                               v1::ServerInfo info, DatasetRegistry* datasets)
    : config_(config),
      scheduler_(scheduler),
      metrics_(metrics),
      info_(std::move(info)),
      datasets_(datasets) {}

grpc::ServerUnaryReactor* SamplerService::Sample(grpc::CallbackServerContext* context,
                                                 const v1::SampleRequest* request,
                                                 v1::SampleResponse* response) {
  return new UnaryCall(this, context, request, response);
}

grpc::ServerBidiReactor<v1::SampleRequest, v1::SampleResponse>* SamplerService::SampleStream(
    grpc::CallbackServerContext* context) {
  return new StreamCall(this, context);
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
