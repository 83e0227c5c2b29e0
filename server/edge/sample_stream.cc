#include "edge/sample_stream.hpp"

#include <spdlog/spdlog.h>

#include <utility>

#include "edge/repository_work.hpp"
#include "edge/request_bytes.hpp"
#include "edge/sample_call.hpp"

namespace gpusampler::server {

StreamCall::StreamCall(SamplerService* svc, grpc::CallbackServerContext* ctx)
    : svc_(svc), ctx_(ctx), started_(Clock::now()) {
  svc_->AddStream(this);
  // --max-calls and --max-concurrent-streams (issue 31): a stream over them ends at once.
  if (Status admitted; !ticket_.Take(&svc_->calls(), ctx_->peer(), &admitted)) {
    std::lock_guard<std::mutex> lock(mu_);
    Fail(admitted);
  }
  Pump();
}

bool StreamCall::BeginDrain() {
  std::lock_guard<std::mutex> lock(mu_);
  if (refs_ == 0) return false;  // being deleted
  ++refs_;
  // A stopped stream ends with its failure anyway; a finished one is past draining.
  if (state_ == CallState::kOpen) state_ = CallState::kDraining;
  return true;
}

void StreamCall::FinishDrain() {
  Pump();
  Unref();
}

bool StreamCall::BeginStall(Clock::time_point now, Clock::duration limit) {
  std::lock_guard<std::mutex> lock(mu_);
  if (refs_ == 0 || state_ == CallState::kFinished || stalled_ || no_first_message_) return false;
  // --first-message-timeout-ms: a stream that has sent nothing yet (issue 31).
  const auto first = std::chrono::milliseconds(svc_->config().first_message_timeout_ms);
  if (messages_ == 0 && read_ == ReadState::kInFlight && now - started_ >= first) {
    no_first_message_ = true;
  } else if (write_ != WriteState::kInFlight) {
    return false;
  } else {
    // Fair share (issue 31): while other calls wait for the budget, the limit shrinks to
    // --pressure-write-timeout-ms, so never-reading streams lose their bytes first.
    const auto pressed = std::chrono::milliseconds(svc_->config().pressure_write_timeout_ms);
    const bool pressure = held_ > 0 && pressed < limit && svc_->budget().UnderPressure(now);
    if (now - write_started_ < (pressure ? Clock::duration(pressed) : limit)) return false;
    stalled_ = true;
  }
  ++refs_;
  // Not finished, so the call is alive now: hold it until EndStall has cancelled it (the
  // stream may finish on another thread meanwhile).
  stall_call_ = ctx_->c_call();
  grpc_call_ref(stall_call_);
  stall_peer_ = ctx_->peer();
  return true;
}

void StreamCall::EndStall() {
  if (no_first_message_) {
    const std::string message = "no message within " +
                                std::to_string(svc_->config().first_message_timeout_ms) +
                                " ms of the stream's start (--first-message-timeout-ms)";
    spdlog::debug("SampleStream from {}: {}", stall_peer_, message);
    grpc_call_cancel_with_status(stall_call_, GRPC_STATUS_DEADLINE_EXCEEDED, message.c_str(),
                                 nullptr);
    grpc_call_unref(stall_call_);
    Pump();
    Unref();
    return;
  }
  // The answer cannot be written, so the status goes in place of the unread data: a
  // server-side cancel with a status sends it as trailers and resets the stream, which
  // ends the outstanding write (OnWriteDone(false)) and releases the stream's bytes.
  bool pressed;  // ended before --stream-write-timeout-ms: by the pressure timeout
  {
    std::lock_guard<std::mutex> lock(mu_);
    pressed = Clock::now() - write_started_ <
              std::chrono::milliseconds(svc_->config().stream_write_timeout_ms);
  }
  const std::string message =
      pressed ? "the client has not read an answer for " +
                    std::to_string(svc_->config().pressure_write_timeout_ms) +
                    " ms while other calls waited for the byte budget "
                    "(--pressure-write-timeout-ms; --stream-write-timeout-ms otherwise); the "
                    "stream's bytes are released"
              : "the client has not read an answer for " +
                    std::to_string(svc_->config().stream_write_timeout_ms) +
                    " ms (--stream-write-timeout-ms); the stream's bytes are released";
  spdlog::warn("SampleStream from {}: {}", stall_peer_, message);
  grpc_call_cancel_with_status(stall_call_, GRPC_STATUS_RESOURCE_EXHAUSTED, message.c_str(),
                               nullptr);
  grpc_call_unref(stall_call_);
  Pump();
  Unref();
}

void StreamCall::OnReadDone(bool ok) {
  try {
    std::lock_guard<std::mutex> lock(mu_);
    read_ = ok ? ReadState::kIdle : ReadState::kHalfClosed;
    if (ok && state_ != CallState::kFinished) {
      reading_->arrived = Clock::now();
      Accept(std::move(reading_));
    } else if (ok) {
      // The stream already ended (an earlier failure): the request is dropped unrun.
      svc_->metrics()->RecordRequest(Method::kSampleStream, Code::kCancelled, 0);
    }
    reading_.reset();
  } catch (...) {  // gRPC callback: nothing may escape into gRPC
    Fail(FromCallbackException());
  }
  Pump();
}

void StreamCall::OnWriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    write_ = ok ? WriteState::kIdle : WriteState::kBroken;  // broken: the client is gone
    Slot* front = pending_.front().get();
    // Counted once its bytes were handed to the transport, so a failed send is not OK.
    Count(front, ok ? Code::kOk : stalled_ ? Code::kResourceExhausted : Code::kCancelled);
    if (ok) {
      Release(front);
      pending_.pop_front();
    }
  }
  Pump();
}

void StreamCall::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& slot : pending_) {
    if (slot->job) slot->job->cancelled.store(true);
  }
}

void StreamCall::OnDone() { Unref(); }

// Counts one message of the stream (under mu_).
void StreamCall::Count(Slot* slot, Code code) {
  if (slot->counted) return;
  slot->counted = true;
  svc_->metrics()->RecordRequest(Method::kSampleStream, code, SecondsSince(slot->arrived));
  if (code == Code::kResourceExhausted) {
    svc_->metrics()->RecordResourceExhausted(Method::kSampleStream,
                                             slot->status.retry_pushback_ms());
  }
}

// Returns a slot's bytes to the budget (under mu_).
void StreamCall::Release(Slot* slot) {
  svc_->budget().Release(slot->charged, ticket_.owner().get());
  held_ -= slot->charged;
  slot->charged = 0;
}

// Ends the stream with `status` after what is already answered (under mu_).
void StreamCall::Fail(const Status& status) {
  if (!failure_.ok()) return;
  failure_ = status;
}

// Parses, validates and submits one request read from the stream (under mu_).
void StreamCall::Accept(std::unique_ptr<Slot> slot) {
  Metrics* m = svc_->metrics();
  Slot* raw = slot.get();
  pending_.push_back(std::move(slot));
  const int64_t n = static_cast<int64_t>(raw->bytes.Length());
  m->received_bytes().Increment(static_cast<double>(n));
  ++messages_;
  const std::string what = "SampleStream message " + std::to_string(messages_);
  // This stream's charges (here and PrepareJob's) count in its connection's share.
  const ByteOwner::Scope owner(ticket_.owner());
  Status status = Charge(svc_->budget(), 2 * n, what.c_str());
  if (status.ok()) {
    raw->charged += 2 * n;
    held_ += 2 * n;
    status = ParseRequest(raw->bytes, &raw->request, what);
  }
  raw->bytes.Clear();
  if (status.ok() && LoadsOnMiss(svc_, raw->request)) {
    // A dataset this replica lacks: loading it takes up to seconds, so the request is
    // validated and submitted on a repository thread (issue 31: a load never holds a gRPC
    // callback thread, nor this stream's lock). Its answer keeps its place in the stream.
    ++refs_;
    RunRepositoryWork([this, raw] { PrepareAfterMiss(raw); });
    return;
  }
  std::shared_ptr<Job> job;
  if (status.ok()) {
    int64_t charged = 0;
    job = PrepareJob(svc_, *ctx_, raw->request, &raw->response, raw->arrived, &charged, &status,
                     &raw->lease);
    raw->charged += charged;
    held_ += charged;
  }
  Launch(raw, std::move(job), status);
}

// Accept's validation for a request that loads its dataset: on a repository thread, outside
// mu_ (until the job exists, only this thread touches the slot's request, response and lease).
void StreamCall::PrepareAfterMiss(Slot* raw) {
  try {
    bool finished;
    {
      std::lock_guard<std::mutex> lock(mu_);
      finished = state_ == CallState::kFinished;
    }
    const Status ended(Code::kCancelled, "the stream ended before the request ran");
    Status status = ended;
    std::shared_ptr<Job> job;
    int64_t charged = 0;
    if (!finished) {
      const ByteOwner::Scope owner(ticket_.owner());
      job = PrepareJob(svc_, *ctx_, raw->request, &raw->response, raw->arrived, &charged, &status,
                       &raw->lease);
    }
    std::lock_guard<std::mutex> lock(mu_);
    raw->charged += charged;
    held_ += charged;
    if (state_ == CallState::kFinished && job) {
      job.reset();  // ended meanwhile: not run
      status = ended;
    }
    Launch(raw, std::move(job), status);
  } catch (...) {  // a repository thread: nothing may escape
    std::lock_guard<std::mutex> lock(mu_);
    raw->done = true;
    raw->status = FromCallbackException();
    if (state_ != CallState::kFinished) state_ = CallState::kStopped;
  }
  Pump();
  Unref();
}

// Submits a validated request's job, or records its answer or failure (under mu_).
void StreamCall::Launch(Slot* raw, std::shared_ptr<Job> job, Status status) {
  Metrics* m = svc_->metrics();
  if (job) {
    job->done = [this, raw](const Status& s) { JobDone(raw, s); };
    raw->job = job;
    ++refs_;
    m->inflight().Increment();
    status = SubmitJob(svc_, job);
    if (!status.ok()) {
      --refs_;
      m->inflight().Decrement();
      raw->job.reset();
    }
  }
  if (!job && status.ok()) AnsweredAtEdge(raw);  // an ELEMENTS epoch step (PrepareJob)
  if (!status.ok()) {
    raw->done = true;
    raw->status = status;
    // The first failure ends the stream (one that ended already stays ended).
    if (state_ != CallState::kFinished) state_ = CallState::kStopped;
  }
}

// A slot whose response PrepareJob completed: serialized now, like JobDone's (under mu_).
void StreamCall::AnsweredAtEdge(Slot* slot) {
  slot->done = true;
  slot->status = FinishInRegion(svc_, &slot->lease, &slot->response);  // shared memory
  SetTotal(&slot->response, slot->arrived);
  bool own = false;
  if (slot->status.ok() &&
      !grpc::SerializationTraits<v1::SampleResponse>::Serialize(slot->response, &slot->bytes, &own)
           .ok()) {
    slot->status = Status(Code::kInternal, "cannot serialize the response");
  }
  slot->response = v1::SampleResponse();
  slot->request = v1::SampleRequest();
}

void StreamCall::JobDone(Slot* slot, const Status& status) {
  svc_->metrics()->inflight().Decrement();
  try {
    std::lock_guard<std::mutex> lock(mu_);
    slot->done = true;
    slot->status = status;
    if (status.ok()) slot->status = FinishInRegion(svc_, &slot->lease, &slot->response);
    slot->lease = RegionLease{};  // shared memory (SPEC section 9)
    if (slot->status.ok()) {
      SetTotal(&slot->response, slot->job->accepted);
      bool own = false;
      if (!grpc::SerializationTraits<v1::SampleResponse>::Serialize(slot->response, &slot->bytes,
                                                                    &own)
               .ok()) {
        slot->status = Status(Code::kInternal, "cannot serialize the response");
      }
    }
    // The request's bytes and the built response are no longer needed.
    slot->response = v1::SampleResponse();
    slot->request = v1::SampleRequest();
    slot->job.reset();
  } catch (...) {  // a worker's callback: nothing may escape into the worker
    std::lock_guard<std::mutex> lock(mu_);
    slot->done = true;
    slot->status = FromCallbackException();
  }
  Pump();
  Unref();
}

// Decides the next gRPC operation (under mu_): a write of the next answer, a read, the
// stream's end (with `*status`), or nothing for now.
StreamCall::Op StreamCall::NextLocked(Slot** slot, Status* status) {
  if (state_ == CallState::kFinished) return Op::kNone;
  const bool writing = write_ == WriteState::kInFlight;
  if (write_ == WriteState::kBroken && stalled_) {
    *status = Status(Code::kResourceExhausted,
                     "the client stopped reading answers (--stream-write-timeout-ms)");
  } else if (write_ == WriteState::kBroken) {
    *status = Status(Code::kCancelled, "client stopped reading responses");
  } else if (!failure_.ok() && !writing) {
    *status = failure_;
  } else if (!writing && !pending_.empty() && pending_.front()->done) {
    Slot* front = pending_.front().get();
    if (front->status.ok()) {
      write_ = WriteState::kInFlight;
      write_started_ = Clock::now();
      *slot = front;
      return Op::kWrite;
    }
    *status = front->status;
  } else if (state_ == CallState::kDraining && pending_.empty() && !writing &&
             read_ != ReadState::kHalfClosed) {
    *status = Unavailable("server is draining; retry another replica");
  } else if (read_ == ReadState::kHalfClosed && pending_.empty() && !writing) {
    *status = Status::Ok();
  } else {
    return StartReadLocked(slot);
  }
  state_ = CallState::kFinished;
  CountUnansweredLocked();
  return Op::kFinish;
}

// A read of the next message when one may start now (under mu_); else kNone.
StreamCall::Op StreamCall::StartReadLocked(Slot** slot) {
  // Under budget pressure a stream whose client is not taking its answers reads no more:
  // it would only pin more of the budget that other calls wait for (issue 31).
  const bool unread = write_ == WriteState::kInFlight && svc_->budget().UnderPressure();
  const bool room = pending_.empty() ||
                    (static_cast<int64_t>(pending_.size()) < svc_->config().max_stream_inflight &&
                     held_ < StreamInflightBytes(svc_->config()) && !unread);
  if (read_ != ReadState::kIdle || state_ != CallState::kOpen || !room) return Op::kNone;
  read_ = ReadState::kInFlight;
  reading_ = std::make_unique<Slot>();
  *slot = reading_.get();
  return Op::kRead;
}

// At the stream's end (under mu_): later requests of a failed stream need not run, and every
// message not answered is counted now: a failed one with its own code, the others (dropped)
// as CANCELLED (RESOURCE_EXHAUSTED when the stall check ends the stream).
void StreamCall::CountUnansweredLocked() {
  for (auto& p : pending_) {
    if (p->job && !p->done) p->job->cancelled.store(true);
    Count(p.get(), p->done && !p->status.ok() ? p->status.code()
                   : stalled_                 ? Code::kResourceExhausted
                                              : Code::kCancelled);
  }
}

void StreamCall::Pump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pump_ != PumpState::kIdle) {
      pump_ = PumpState::kRerun;
      return;
    }
    pump_ = PumpState::kRunning;
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
        if (pump_ == PumpState::kRunning) {
          pump_ = PumpState::kIdle;
          break;
        }
        pump_ = PumpState::kRunning;  // asked to run again meanwhile
        continue;
      }
    }
    RunOp(op, slot, status);
  }
  Unref();
}

// Starts `op` (outside mu_: gRPC may run a reaction inline).
void StreamCall::RunOp(Op op, Slot* slot, const Status& status) {
  switch (op) {
    case Op::kRead:
      StartRead(&slot->bytes);
      break;
    case Op::kWrite:
      svc_->metrics()->sent_bytes().Increment(static_cast<double>(slot->bytes.Length()));
      StartWrite(&slot->bytes);
      break;
    case Op::kFinish:
      Finish(ToGrpcStatus(status, ctx_));
      break;
    case Op::kNone:
      break;
  }
}

void StreamCall::Unref() {
  bool last;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = --refs_ == 0;
  }
  if (last) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& p : pending_) Release(p.get());
    }
    svc_->RemoveStream(this);
    delete this;
  }
}

}  // namespace gpusampler::server
