#include "health.hpp"

namespace gpusampler::server {
namespace {

using grpc::health::v1::HealthCheckResponse;

bool Known(const std::string& service) {
  return service.empty() || service == "gpusampler.v1.Sampler";
}

}  // namespace

// One Watch call: writes the current status, then each change, until cancelled or shut
// down. At most one write in flight; a change during a write is written after it.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* owner, bool known) : owner_(owner), known_(known) {}

  // Under owner_->mu_ (lock order: owner, then this).
  void Update(bool serving) {
    std::lock_guard<std::mutex> lock(mu_);
    want_ = !known_   ? HealthCheckResponse::SERVICE_UNKNOWN
            : serving ? HealthCheckResponse::SERVING
                      : HealthCheckResponse::NOT_SERVING;
    MaybeWriteLocked();
  }
  // Under owner_->mu_.
  void End(const grpc::Status& status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (!ok) {
      if (!finished_) {
        finished_ = true;
        Finish(grpc::Status(grpc::StatusCode::CANCELLED, "watch ended"));
      }
      return;
    }
    MaybeWriteLocked();
  }
  void OnCancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    Finish(grpc::Status::CANCELLED);
  }
  void OnDone() override {
    owner_->Remove(this);
    delete this;
  }

 private:
  void MaybeWriteLocked() {
    if (finished_ || writing_ || (sent_ && want_ == last_)) return;
    writing_ = true;
    sent_ = true;
    last_ = want_;
    response_.set_status(want_);
    StartWrite(&response_);
  }

  HealthService* owner_;
  const bool known_;
  std::mutex mu_;
  HealthCheckResponse response_;
  HealthCheckResponse::ServingStatus want_ = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse::ServingStatus last_ = HealthCheckResponse::UNKNOWN;
  bool sent_ = false;
  bool writing_ = false;
  bool finished_ = false;
};

HealthService::HealthService() = default;
HealthService::~HealthService() = default;

void HealthService::SetServing(bool serving) {
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = serving;
  for (Watcher* w : watchers_) w->Update(serving);
}

void HealthService::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  serving_ = false;
  shut_down_ = true;
  for (Watcher* w : watchers_) w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
}

void HealthService::Remove(Watcher* watcher) {
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.erase(watcher);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const grpc::health::v1::HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  auto* reactor = context->DefaultReactor();
  if (!Known(request->service())) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + request->service() + "'"));
    return reactor;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    response->set_status(serving_ ? HealthCheckResponse::SERVING
                                  : HealthCheckResponse::NOT_SERVING);
  }
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext*, const grpc::health::v1::HealthCheckRequest* request) {
  auto* w = new Watcher(this, Known(request->service()));
  std::lock_guard<std::mutex> lock(mu_);
  watchers_.insert(w);
  if (shut_down_) {
    w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  } else {
    w->Update(serving_);
  }
  return w;
}

}  // namespace gpusampler::server
