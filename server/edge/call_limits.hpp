// Every connection bounded (issue 31, item 2): at most --max-concurrent-streams live Sample
// and SampleStream calls per connection (gRPC only advertises the HTTP/2 setting, and a client that
// ignores it gets every stream) and --max-calls in all; each call's fixed overhead (the reactor,
// its context and buffers) is charged to the byte budget while it lives. Thread-safe.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>

#include "core/status.hpp"

namespace gpusampler::server {

class ByteBudget;

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

 private:
  const int64_t max_calls_;
  const int64_t max_per_connection_;
  ByteBudget* const budget_;
  mutable std::mutex mu_;
  int64_t open_ = 0;
  std::unordered_map<std::string, int64_t> per_peer_;
};

// One admitted call, left when destroyed (or never admitted: then nothing).
class CallTicket {
 public:
  CallTicket() = default;
  CallTicket(const CallTicket&) = delete;
  CallTicket& operator=(const CallTicket&) = delete;
  ~CallTicket() {
    if (limits_) limits_->Leave(peer_);
  }
  // Admits the call; false (with `status`) when it may not run.
  bool Take(CallLimits* limits, std::string peer, Status* status);

 private:
  CallLimits* limits_ = nullptr;
  std::string peer_;
};

}  // namespace gpusampler::server
