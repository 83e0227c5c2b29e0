// One SampleStream call (the gRPC callback API's bidi reactor). Requests are parsed,
// validated and submitted as they arrive (up to max_stream_inflight at a time, and while the
// stream holds under max_stream_inflight_bytes); responses are written in request order. The
// first failure, a message that does not parse included, ends the stream with its status
// after the responses before it. All gRPC operations are started by Pump, one thread at a
// time and outside mu_, because gRPC may run a reaction inline inside StartWrite, StartRead
// or Finish. Deletes itself once gRPC, every submitted job and every Pump are done with it.
#pragma once

#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "core/job.hpp"
#include "core/status.hpp"
#include "edge/call_limits.hpp"
#include "edge/service.hpp"
#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::server {

class StreamCall final : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                         public DrainableCall {
 public:
  StreamCall(SamplerService* svc, grpc::CallbackServerContext* ctx);

  // Drain: no more reads; the stream ends with UNAVAILABLE once its accepted requests are
  // answered.
  bool BeginDrain() override;
  void FinishDrain() override;
  // --stream-write-timeout-ms: a write outstanding for `limit` ends the stream with
  // RESOURCE_EXHAUSTED and releases its bytes.
  bool BeginStall(Clock::time_point now, Clock::duration limit) override;
  void EndStall() override;

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // One message of the stream, from its read to its answer.
  struct Slot {
    grpc::ByteBuffer bytes;  // as read; then the serialized response
    v1::SampleRequest request;
    v1::SampleResponse response;
    std::shared_ptr<Job> job;
    RegionLease lease;  // shared memory (SPEC section 9): where the answer goes
    bool done = false;
    Status status;
    Clock::time_point arrived{};  // when its read completed
    bool counted = false;         // in gpusampler_requests_total (each message once)
    int64_t charged = 0;          // bytes of the budget it holds
  };
  // The call as a whole. kDraining and kStopped take no more reads: kDraining ends with
  // UNAVAILABLE once every accepted request is answered; kStopped (the first failure) ends
  // with that failure's status once the answers before it are written. kFinished: Finish ran.
  enum class CallState { kOpen, kDraining, kStopped, kFinished };
  // The read side: a read in flight, or the client's half-close (no more messages).
  enum class ReadState { kIdle, kInFlight, kHalfClosed };
  // The write side: a write in flight, or a failed write (the client is gone).
  enum class WriteState { kIdle, kInFlight, kBroken };
  // Pump: running on some thread, and asked to run again by another meanwhile.
  enum class PumpState { kIdle, kRunning, kRerun };
  // The next gRPC operation Pump starts.
  enum class Op { kNone, kRead, kWrite, kFinish };

  void Count(Slot* slot, Code code);
  void Release(Slot* slot);
  void Fail(const Status& status);
  void Accept(std::unique_ptr<Slot> slot);
  void PrepareAfterMiss(Slot* slot);  // on a repository thread
  void Launch(Slot* slot, std::shared_ptr<Job> job, Status status);
  void JobDone(Slot* slot, const Status& status);
  void AnsweredAtEdge(Slot* slot);
  Op NextLocked(Slot** slot, Status* status);
  Op StartReadLocked(Slot** slot);
  void CountUnansweredLocked();
  void Pump();
  void RunOp(Op op, Slot* slot, const Status& status);
  void Unref();

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;

  std::mutex mu_;
  std::deque<std::unique_ptr<Slot>> pending_;  // request order
  std::unique_ptr<Slot> reading_;
  int refs_ = 1;          // gRPC's (released in OnDone) + one per submitted job + a running Pump
  int64_t held_ = 0;      // budget bytes held by pending_
  int64_t messages_ = 0;  // messages read so far
  Status failure_;        // set by an exception in a reaction: ends the stream
  CallState state_ = CallState::kOpen;
  ReadState read_ = ReadState::kIdle;
  WriteState write_ = WriteState::kIdle;
  PumpState pump_ = PumpState::kIdle;
  // Sticky from BeginStall on: the stream is being ended by --stream-write-timeout-ms, so
  // what fails from now on is RESOURCE_EXHAUSTED rather than CANCELLED.
  bool stalled_ = false;
  Clock::time_point write_started_{};  // of the write in flight
  grpc_call* stall_call_ = nullptr;    // referenced from BeginStall to EndStall
  std::string stall_peer_;
  // Issue 31: the call's admission (--max-calls, per connection) and the first-message
  // timeout (set by BeginStall when no message came within --first-message-timeout-ms).
  const Clock::time_point started_;
  CallTicket ticket_;
  bool no_first_message_ = false;
};

}  // namespace gpusampler::server
