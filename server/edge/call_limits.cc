#include "edge/call_limits.hpp"

#include "edge/request_bytes.hpp"

namespace gpusampler::server {

Status CallLimits::Admit(const std::string& peer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ >= max_calls_) {
      return Status(Code::kResourceExhausted,
                    std::to_string(open_) + " calls are open, the most --max-calls = " +
                        std::to_string(max_calls_) + " allows; retry later",
                    BudgetPushbackMs());
    }
    int64_t& mine = per_peer_[peer];
    if (mine >= max_per_connection_) {
      const int64_t n = mine;
      if (mine == 0) per_peer_.erase(peer);
      return Status(Code::kResourceExhausted,
                    "this connection (" + peer + ") has " + std::to_string(n) +
                        " calls open, the most --max-concurrent-streams = " +
                        std::to_string(max_per_connection_) +
                        " allows; open another connection or wait for one to end",
                    BudgetPushbackMs());
    }
    ++mine;
    ++open_;
  }
  Status charged = Charge(*budget_, kCallOverheadBytes, "the call's fixed overhead");
  if (!charged.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
    if (--per_peer_[peer] == 0) per_peer_.erase(peer);
  }
  return charged;
}

void CallLimits::Leave(const std::string& peer) {
  budget_->Release(kCallOverheadBytes);
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  const auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second <= 0) per_peer_.erase(it);
}

int64_t CallLimits::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

bool CallTicket::Take(CallLimits* limits, std::string peer, Status* status) {
  *status = limits->Admit(peer);
  if (!status->ok()) return false;
  limits_ = limits;
  peer_ = std::move(peer);
  return true;
}

}  // namespace gpusampler::server
