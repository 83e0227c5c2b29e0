#include "edge/service.hpp"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpc/grpc.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include <algorithm>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <random>

#include <spdlog/spdlog.h>

#include "edge/security.hpp"
#include "edge/validate.hpp"

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

// Retry pushback of a full byte budget: like a full queue, 100 ms plus jitter.
int64_t BudgetPushbackMs() {
  thread_local std::minstd_rand gen(std::random_device{}());
  return 100 + static_cast<int64_t>(gen() % 100);
}

// Charges `bytes` to the server's byte budget, or says why not.
Status Charge(SamplerService* svc, int64_t bytes, const char* what) {
  ByteBudget& budget = svc->budget();
  if (budget.TryCharge(bytes)) return Status::Ok();
  const std::string message = std::string(what) + " needs " + std::to_string(bytes) + " bytes; " +
                              std::to_string(budget.used()) + " of " +
                              std::to_string(budget.limit()) +
                              " are held by other requests (--max-inflight-bytes)";
  // Larger than the whole budget: no retry can succeed.
  return Status(Code::kResourceExhausted, message,
                bytes > budget.limit() ? kDoNotRetry : BudgetPushbackMs());
}

// Refuses a request whose tensor shapes have more than kMaxRank dims, from the wire bytes,
// before parsing: a shape of 8M one-byte dims would take 64 MiB once parsed. Anything
// malformed is left to the parser.
Status CheckRankBeforeParse(const grpc::ByteBuffer& bytes) {
  using google::protobuf::internal::WireFormatLite;
  grpc::ByteBuffer copy(bytes);  // shares the slices
  grpc::ProtoBufferReader reader(&copy);
  google::protobuf::io::CodedInputStream in(&reader);
  in.SetTotalBytesLimit(std::numeric_limits<int>::max());
  static constexpr const char* kNames[] = {"",           "", "", "labels", "features",
                                           "row_splits", "", "", "rows"};
  // A varint is at most 10 bytes: kMaxRank dims fit in this many packed bytes.
  constexpr uint32_t kMaxPackedBytes = 10 * kMaxRank;
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool tensor = field == 3 || field == 4 || field == 5 || field == 8;
    if (!tensor ||
        WireFormatLite::GetTagWireType(tag) != WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
      if (!WireFormatLite::SkipField(&in, tag)) return Status::Ok();
      continue;
    }
    uint32_t length = 0;
    if (!in.ReadVarint32(&length)) return Status::Ok();
    const auto limit = in.PushLimit(static_cast<int>(length));
    int dims = 0;
    while (const uint32_t inner = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(inner) == 2) {
        if (WireFormatLite::GetTagWireType(inner) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED) {
          uint32_t packed = 0;
          if (!in.ReadVarint32(&packed)) return Status::Ok();
          if (packed > kMaxPackedBytes) dims = kMaxRank + 1;
          if (!in.Skip(static_cast<int>(packed))) return Status::Ok();
        } else {
          ++dims;
          if (!WireFormatLite::SkipField(&in, inner)) return Status::Ok();
        }
        if (dims > kMaxRank) {
          return InvalidArgument(std::string(kNames[field]) + ".shape has more than " +
                                 std::to_string(kMaxRank) + " dims");
        }
      } else if (!WireFormatLite::SkipField(&in, inner)) {
        return Status::Ok();
      }
    }
    in.PopLimit(limit);
  }
  return Status::Ok();
}

// Parses a request's bytes. INVALID_ARGUMENT (not gRPC's bare INTERNAL or UNIMPLEMENTED)
// when they are not a SampleRequest, e.g. a truncated message or a non-UTF-8 request_id.
Status ParseRequest(const grpc::ByteBuffer& bytes, Request* request, const std::string& what) {
  if (Status s = CheckRankBeforeParse(bytes); !s.ok()) return s;
  grpc::ByteBuffer copy(bytes);  // shares the slices; Deserialize consumes its argument
  if (!grpc::SerializationTraits<Request>::Deserialize(&copy, request).ok()) {
    return InvalidArgument(what + " (" + std::to_string(bytes.Length()) +
                           " bytes) does not parse as a gpusampler.v1.SampleRequest");
  }
  return Status::Ok();
}

// Validates `request` into a Job answering into `response`, and charges the response's
// bytes (the estimate covers every byte it echoes) to the budget; null with `*status` set
// when the request is refused. `*charged` grows by what was charged.
std::shared_ptr<Job> PrepareJob(SamplerService* svc, const grpc::CallbackServerContext& ctx,
                                const Request& request, Response* response,
                                Clock::time_point accepted, int64_t* charged, Status* status) {
  if (*status = Authenticate(*svc, ctx); !status->ok()) return nullptr;
  if (!svc->accepting()) {
    *status = Unavailable("server is draining; retry another replica");
    return nullptr;
  }
  auto job = std::make_shared<Job>();
  *status = ValidateRequest(request, svc->config().limits, job.get(), svc->datasets());
  if (!status->ok()) return nullptr;
  int64_t response_bytes = 0;
  ResponseBytes(*job, request.request_id().size(), &response_bytes);  // checked by Validate
  // The response is held twice at its peak: built, then serialized for gRPC.
  const int64_t cost = 2 * response_bytes;
  if (*status = Charge(svc, cost, "the response"); !status->ok()) return nullptr;
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
  return job;
}

void SetTotal(Response* response, Clock::time_point accepted) {
  response->mutable_timing()->set_total_us(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - accepted).count());
}

// The status an exception escaping into a gRPC or worker callback becomes.
Status FromException(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::bad_alloc&) {
    return Status(Code::kResourceExhausted, "server out of memory", BudgetPushbackMs());
  } catch (const std::exception& ex) {
    return Status(Code::kInternal, std::string("internal error: ") + ex.what());
  } catch (...) {
    return Status(Code::kInternal, "internal error (unknown exception)");
  }
}

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  UnaryCall(SamplerService* svc, grpc::CallbackServerContext* ctx, const grpc::ByteBuffer* request,
            grpc::ByteBuffer* response)
      : svc_(svc), ctx_(ctx), out_(response), accepted_(Clock::now()) {
    try {
      Start(*request);
    } catch (...) {
      Done(FromException(std::current_exception()));
    }
  }

  void OnCancel() override {
    client_gone_.store(true);
    if (job_) job_->cancelled.store(true);
  }
  void OnDone() override {
    svc_->budget().Release(charged_);
    delete this;
  }

 private:
  void Start(const grpc::ByteBuffer& bytes) {
    Metrics* m = svc_->metrics();
    const int64_t n = static_cast<int64_t>(bytes.Length());
    m->received_bytes().Increment(static_cast<double>(n));
    // The request is held twice: as received and parsed.
    Status status = Charge(svc_, 2 * n, "the request");
    if (!status.ok()) return Done(status);
    charged_ += 2 * n;
    if (status = ParseRequest(bytes, &request_, "the request"); !status.ok()) return Done(status);
    job_ = PrepareJob(svc_, *ctx_, request_, &response_, accepted_, &charged_, &status);
    if (!job_) return Done(status);
    m->inflight().Increment();
    job_->done = [this](const Status& s) {
      svc_->metrics()->inflight().Decrement();
      try {
        Done(s);
      } catch (...) {
        Done(FromException(std::current_exception()));
      }
    };
    status = svc_->scheduler()->Submit(job_);
    if (!status.ok()) {
      m->inflight().Decrement();
      Done(status);
    }
  }

  // Finishes the call; `this` may be gone once Finish returns.
  void Done(Status status) {
    if (finished_) return;
    if (status.ok() && client_gone_.load()) {
      // Computed for a client that is gone (cancelled, or its deadline passed): nothing can
      // be written, so it is not OK.
      status =
          job_ && Clock::now() >= job_->deadline
              ? Status(Code::kDeadlineExceeded, "deadline passed before the answer was written")
              : Status(Code::kCancelled, "the client went away before the answer was written");
    }
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
  std::shared_ptr<Job> job_;
  int64_t charged_ = 0;  // bytes of the budget this call holds
  bool finished_ = false;
  std::atomic<bool> client_gone_{false};  // OnCancel ran
};

// One SampleStream call. Requests are parsed, validated and submitted as they arrive (up to
// max_stream_inflight at a time, and while the stream holds under max_stream_inflight_bytes);
// responses are written in request order. The first failure, a message that does not
// parse included, ends the stream with its status after the responses before it. All gRPC
// operations are started by Pump, one thread at a time and outside mu_, because gRPC may
// run a reaction inline inside StartWrite/StartRead/Finish.
class StreamCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                         public DrainableCall {
 public:
  StreamCall(SamplerService* svc, grpc::CallbackServerContext* ctx) : svc_(svc), ctx_(ctx) {
    svc_->AddStream(this);
    Pump();
  }

  // Drain: no more reads; the stream ends with UNAVAILABLE once its accepted requests are
  // answered.
  bool BeginDrain() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refs_ == 0) return false;  // being deleted
    ++refs_;
    draining_ = true;
    return true;
  }
  void FinishDrain() override {
    Pump();
    Unref();
  }

  bool BeginStall(Clock::time_point now, Clock::duration limit) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (refs_ == 0 || finished_ || stalled_ || !write_in_flight_) return false;
    if (now - write_started_ < limit) return false;
    stalled_ = true;
    ++refs_;
    // Not finished, so the call is alive now: hold it until EndStall has cancelled it (the
    // stream may finish on another thread meanwhile).
    stall_call_ = ctx_->c_call();
    grpc_call_ref(stall_call_);
    stall_peer_ = ctx_->peer();
    return true;
  }
  void EndStall() override {
    // The answer cannot be written, so the status goes in place of the unread data: a
    // server-side cancel with a status sends it as trailers and resets the stream, which
    // ends the outstanding write (OnWriteDone(false)) and releases the stream's bytes.
    const std::string message = "the client has not read an answer for " +
                                std::to_string(svc_->config().stream_write_timeout_ms) +
                                " ms (--stream-write-timeout-ms); the stream's bytes are released";
    spdlog::warn("SampleStream from {}: {}", stall_peer_, message);
    grpc_call_cancel_with_status(stall_call_, GRPC_STATUS_RESOURCE_EXHAUSTED, message.c_str(),
                                 nullptr);
    grpc_call_unref(stall_call_);
    Pump();
    Unref();
  }

  void OnReadDone(bool ok) override {
    try {
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
    } catch (...) {
      Fail(FromException(std::current_exception()));
    }
    Pump();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      write_in_flight_ = false;
      Slot* front = pending_.front().get();
      // Counted once its bytes were handed to the transport, so a failed send is not OK.
      Count(front, ok ? Code::kOk : stalled_ ? Code::kResourceExhausted : Code::kCancelled);
      if (ok) {
        Release(front);
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
    grpc::ByteBuffer bytes;  // as read; then the serialized response
    Request request;
    Response response;
    std::shared_ptr<Job> job;
    bool done = false;
    Status status;
    Clock::time_point arrived{};  // when its read completed
    bool counted = false;         // in gpusampler_requests_total (each message once)
    int64_t charged = 0;          // bytes of the budget it holds
  };
  enum class Op { kNone, kRead, kWrite, kFinish };

  // Counts one message of the stream (under mu_).
  void Count(Slot* slot, Code code) {
    if (slot->counted) return;
    slot->counted = true;
    svc_->metrics()->RecordRequest(Method::kSampleStream, code, SecondsSince(slot->arrived));
    if (code == Code::kResourceExhausted) {
      svc_->metrics()->RecordResourceExhausted(Method::kSampleStream,
                                               slot->status.retry_pushback_ms());
    }
  }

  // Returns a slot's bytes to the budget (under mu_).
  void Release(Slot* slot) {
    svc_->budget().Release(slot->charged);
    held_ -= slot->charged;
    slot->charged = 0;
  }

  // Ends the stream with `status` after what is already answered (under mu_).
  void Fail(const Status& status) {
    if (!failure_.ok()) return;
    failure_ = status;
  }

  // Parses, validates and submits one request read from the stream (under mu_).
  void Accept(std::unique_ptr<Slot> slot) {
    Metrics* m = svc_->metrics();
    Slot* raw = slot.get();
    pending_.push_back(std::move(slot));
    const int64_t n = static_cast<int64_t>(raw->bytes.Length());
    m->received_bytes().Increment(static_cast<double>(n));
    ++messages_;
    const std::string what = "SampleStream message " + std::to_string(messages_);
    Status status = Charge(svc_, 2 * n, what.c_str());
    if (status.ok()) {
      raw->charged += 2 * n;
      held_ += 2 * n;
      status = ParseRequest(raw->bytes, &raw->request, what);
    }
    raw->bytes.Clear();
    std::shared_ptr<Job> job;
    if (status.ok()) {
      int64_t charged = 0;
      job = PrepareJob(svc_, *ctx_, raw->request, &raw->response, raw->arrived, &charged, &status);
      raw->charged += charged;
      held_ += charged;
    }
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
    try {
      std::lock_guard<std::mutex> lock(mu_);
      slot->done = true;
      slot->status = status;
      if (status.ok()) {
        SetTotal(&slot->response, slot->job->accepted);
        bool own = false;
        if (!grpc::SerializationTraits<Response>::Serialize(slot->response, &slot->bytes, &own)
                 .ok()) {
          slot->status = Status(Code::kInternal, "cannot serialize the response");
        }
      }
      // The request's bytes and the built response are no longer needed.
      slot->response = Response();
      slot->request = Request();
      slot->job.reset();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      slot->done = true;
      slot->status = FromException(std::current_exception());
    }
    Pump();
    Unref();
  }

  // Decides the next gRPC operation (under mu_).
  Op NextLocked(Slot** slot, Status* status) {
    if (finished_) return Op::kNone;
    if (broken_ && stalled_) {
      *status = Status(Code::kResourceExhausted,
                       "the client stopped reading answers (--stream-write-timeout-ms)");
    } else if (broken_) {
      *status = Status(Code::kCancelled, "client stopped reading responses");
    } else if (!failure_.ok() && !write_in_flight_) {
      *status = failure_;
    } else if (!write_in_flight_ && !pending_.empty() && pending_.front()->done) {
      Slot* front = pending_.front().get();
      if (front->status.ok()) {
        write_in_flight_ = true;
        write_started_ = Clock::now();
        *slot = front;
        return Op::kWrite;
      }
      *status = front->status;
    } else if (draining_ && pending_.empty() && !write_in_flight_ && !reads_done_) {
      *status = Unavailable("server is draining; retry another replica");
    } else if (reads_done_ && pending_.empty() && !write_in_flight_) {
      *status = Status::Ok();
    } else {
      const bool room = pending_.empty() || (static_cast<int64_t>(pending_.size()) <
                                                 svc_->config().max_stream_inflight &&
                                             held_ < svc_->config().max_stream_inflight_bytes);
      if (!read_in_flight_ && !reads_done_ && !stop_reading_ && !draining_ && room) {
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
      Count(p.get(), p->done && !p->status.ok() ? p->status.code()
                     : stalled_                 ? Code::kResourceExhausted
                                                : Code::kCancelled);
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
    Unref();
  }

  void Unref() {
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

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;

  std::mutex mu_;
  std::deque<std::unique_ptr<Slot>> pending_;  // request order
  std::unique_ptr<Slot> reading_;
  int refs_ = 1;          // gRPC's (released in OnDone) + one per submitted job + a running Pump
  int64_t held_ = 0;      // budget bytes held by pending_
  int64_t messages_ = 0;  // messages read so far
  Status failure_;        // set by an exception in a reaction: ends the stream
  bool read_in_flight_ = false;
  bool write_in_flight_ = false;
  bool reads_done_ = false;
  bool stop_reading_ = false;
  bool draining_ = false;
  bool broken_ = false;
  bool stalled_ = false;  // ended by --stream-write-timeout-ms
  bool finished_ = false;
  Clock::time_point write_started_{};  // of the write in flight
  grpc_call* stall_call_ = nullptr;    // referenced from BeginStall to EndStall
  std::string stall_peer_;
  bool pumping_ = false;
  bool repump_ = false;
};

}  // namespace

bool ByteBudget::TryCharge(int64_t bytes) {
  int64_t used = used_.load(std::memory_order_relaxed);
  do {
    if (bytes > limit_ - used) return false;
  } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
  if (gauge_) gauge_->Increment(static_cast<double>(bytes));
  int64_t peak = peak_.load(std::memory_order_relaxed);
  while (used + bytes > peak &&
         !peak_.compare_exchange_weak(peak, used + bytes, std::memory_order_relaxed)) {
  }
  return true;
}

void ByteBudget::Release(int64_t bytes) {
  if (bytes == 0) return;
  used_.fetch_sub(bytes, std::memory_order_relaxed);
  if (gauge_) gauge_->Decrement(static_cast<double>(bytes));
}

int64_t ByteBudget::TakePeak() {
  return peak_.exchange(used_.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

SamplerService::SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                               v1::ServerInfo info, DatasetRegistry* datasets)
    : config_(config),
      scheduler_(scheduler),
      metrics_(metrics),
      info_(std::move(info)),
      datasets_(datasets),
      budget_(config.max_inflight_bytes) {
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
  // A tenth of the limit (at most 250 ms): a stream ends between 1 and 1.1 limits.
  const auto period = std::clamp<Clock::duration>(limit / 10, std::chrono::milliseconds(10),
                                                  std::chrono::milliseconds(250));
  std::unique_lock<std::mutex> lock(streams_mu_);
  while (!stall_cv_.wait_for(lock, period, [this] { return stop_; })) {
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
