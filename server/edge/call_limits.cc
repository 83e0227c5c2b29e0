#include "edge/call_limits.hpp"

#include <algorithm>
#include <functional>

#include "edge/request_bytes.hpp"

namespace gpusampler::server {

Status CallLimits::Admit(const std::string& peer) {
  arrivals_.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (open_ >= max_calls_) {
      return Status(Code::kResourceExhausted,
                    std::to_string(open_) + " calls are open, the most --max-calls = " +
                        std::to_string(max_calls_) + " allows; retry later",
                    BudgetPushbackMs());
    }
    int64_t& mine = per_peer_[peer].calls;
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
    peak_open_ = std::max(peak_open_, open_);
  }
  Status charged = Charge(*budget_, kCallOverheadBytes, "the call's fixed overhead");
  if (!charged.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    --open_;
    if (--per_peer_[peer].calls == 0) per_peer_.erase(peer);
  }
  return charged;
}

void CallLimits::Leave(const std::string& peer) {
  budget_->Release(kCallOverheadBytes);
  std::lock_guard<std::mutex> lock(mu_);
  --open_;
  const auto it = per_peer_.find(peer);
  if (it != per_peer_.end() && --it->second.calls <= 0) per_peer_.erase(it);
}

std::shared_ptr<std::atomic<int64_t>> CallLimits::Share(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = per_peer_.find(peer);
  return it == per_peer_.end() ? nullptr : it->second.bytes;
}

int64_t CallLimits::TakePeakOpen() {
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t peak = peak_open_;
  peak_open_ = open_;
  return peak;
}

int64_t CallLimits::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

CallTicket::~CallTicket() {
  if (owner_) owner_->Close();
  if (limits_) limits_->Leave(peer_);
}

bool CallTicket::Take(CallLimits* limits, std::string peer, Status* status) {
  ByteOwner::SetCurrent(nullptr);  // the fixed overhead below is no connection's share
  *status = limits->Admit(peer);
  if (!status->ok()) return false;  // nothing this thread charges next is another call's
  limits_ = limits;
  peer_ = std::move(peer);
  auto share = limits->Share(peer_);  // there: this call is counted in it
  if (!share) share = std::make_shared<std::atomic<int64_t>>(0);
  const uintptr_t id = std::hash<std::string>()(peer_) | 1;  // 0 is "no connection"
  owner_ = std::make_shared<ByteOwner>(std::move(share), id);
  ByteOwner::SetCurrent(owner_);
  return true;
}

}  // namespace gpusampler::server
