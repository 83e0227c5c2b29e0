// Every connection bounded (issue 31, item 2): at most --max-concurrent-streams live Sample
// and SampleStream calls per connection (gRPC only advertises the HTTP/2 setting, and a client that
// ignores it gets every stream) and --max-calls in all; each call's fixed overhead (the reactor,
// its context and buffers) is charged to the byte budget while it lives. Thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.hpp"

namespace gpusampler::server {

class ByteBudget;
class ByteOwner;

// Bytes of the budget one live call holds on top of its messages: about what gRPC and the
// service keep per call (the C++ reactor, the server context, the call's arena).
constexpr int64_t kCallOverheadBytes = 16 << 10;

class CallLimits {
 public:
  CallLimits(int64_t max_calls, int64_t max_per_connection, ByteBudget* budget)
      : max_calls_(max_calls), max_per_connection_(max_per_connection), budget_(budget) {}

  // Admits one call from `peer` (a connection: gRPC's peer string holds its address and
  // port), or says why not: RESOURCE_EXHAUSTED naming the flag and the numbers, with a
  // retry pushback. Each admitted call is left with Leave(peer) exactly once.
  Status Admit(const std::string& peer);
  void Leave(const std::string& peer);

  int64_t open() const;
  // Calls that asked to be admitted since the start, admitted or not (each was a call gRPC
  // allocated), and the most open at once since the last TakePeakOpen (which starts the
  // next window at the calls open now): what the trimmer watches (issue 31, item 2).
  int64_t arrivals() const { return arrivals_.load(std::memory_order_relaxed); }
  int64_t TakePeakOpen();
  // The byte share of `peer`'s calls (issue 31, item 5: no connection past half the budget
  // while another waits), made while it has calls open. Null when it has none.
  std::shared_ptr<std::atomic<int64_t>> Share(const std::string& peer) const;

 private:
  const int64_t max_calls_;
  const int64_t max_per_connection_;
  ByteBudget* const budget_;
  mutable std::mutex mu_;
  int64_t open_ = 0;
  int64_t peak_open_ = 0;  // under mu_
  std::atomic<int64_t> arrivals_{0};
  struct Connection {
    int64_t calls = 0;
    std::shared_ptr<std::atomic<int64_t>> bytes = std::make_shared<std::atomic<int64_t>>(0);
  };
  std::unordered_map<std::string, Connection> per_peer_;
};

// One admitted call, left when destroyed (or never admitted: then nothing).
class CallTicket {
 public:
  CallTicket() = default;
  CallTicket(const CallTicket&) = delete;
  CallTicket& operator=(const CallTicket&) = delete;
  ~CallTicket();
  // Admits the call; false (with `status`) when it may not run. Once admitted, the call's
  // ByteOwner is the current one of this thread (ByteOwner::Current), so that the charges
  // made on this thread from now on (the unary request and response, service.cc and
  // sample_call.cc) count in its connection's share, until another call is admitted here.
  bool Take(CallLimits* limits, std::string peer, Status* status);
  // The call's bytes in its connection's share (null before Take succeeded).
  const std::shared_ptr<ByteOwner>& owner() const { return owner_; }

 private:
  CallLimits* limits_ = nullptr;
  std::string peer_;
  std::shared_ptr<ByteOwner> owner_;
};

}  // namespace gpusampler::server
