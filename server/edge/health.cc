#include "edge/health.hpp"

#include <atomic>
#include <vector>

namespace gpusampler::server {
namespace {

using grpc::health::v1::HealthCheckResponse;

bool Known(const std::string& service) {
  return service.empty() || service == "gpusampler.v1.Sampler";
}

}  // namespace

// One Watch call: writes the current status, then each change, until cancelled or shut
// down. At most one write in flight; a change during a write is written after it. gRPC
// operations (StartWrite, Finish) are started outside every lock: gRPC may run OnDone inline,
// and OnDone takes the owner's lock. References (gRPC's, plus one per caller holding it
// outside the owner's lock) keep it alive.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* owner, bool known) : owner_(owner), known_(known) {}

  // Under owner_->mu_, for a watcher still in owner_->watchers_.
  void Ref() { refs_.fetch_add(1); }
  void Unref() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  // Writes the owner's current status (read now, so that concurrent changes cannot be
  // applied out of order). Outside owner_->mu_.
  void Update() {
    const bool serving = owner_->serving();
    {
      std::lock_guard<std::mutex> lock(mu_);
      want_ = !known_   ? HealthCheckResponse::SERVICE_UNKNOWN
              : serving ? HealthCheckResponse::SERVING
                        : HealthCheckResponse::NOT_SERVING;
    }
    Next();
  }
  void End(const grpc::Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (ending_) return;
      ending_ = true;
      end_status_ = status;
    }
    Next();
  }

  void OnWriteDone(bool ok) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      writing_ = false;
      if (!ok && !ending_) {
        ending_ = true;
        end_status_ = grpc::Status(grpc::StatusCode::CANCELLED, "watch ended");
      }
    }
    Next();
  }
  void OnCancel() override { End(grpc::Status::CANCELLED); }
  void OnDone() override {
    owner_->Remove(this);
    Unref();
  }

 private:
  // Starts the next write or the finish, outside mu_.
  void Next() {
    enum { kNothing, kWrite, kFinish } op = kNothing;
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (finished_ || writing_) return;
      if (ending_) {
        finished_ = true;
        status = end_status_;
        op = kFinish;
      } else if (!sent_ || want_ != last_) {
        writing_ = true;
        sent_ = true;
        last_ = want_;
        response_.set_status(want_);
        op = kWrite;
      }
    }
    if (op == kWrite) StartWrite(&response_);
    if (op == kFinish) Finish(status);
  }

  HealthService* owner_;
  const bool known_;
  std::atomic<int> refs_{1};  // gRPC's, released in OnDone
  std::mutex mu_;
  HealthCheckResponse response_;
  HealthCheckResponse::ServingStatus want_ = HealthCheckResponse::UNKNOWN;
  HealthCheckResponse::ServingStatus last_ = HealthCheckResponse::UNKNOWN;
  grpc::Status end_status_;
  bool sent_ = false;
  bool writing_ = false;
  bool ending_ = false;
  bool finished_ = false;
};

HealthService::HealthService() = default;
HealthService::~HealthService() = default;

std::vector<HealthService::Watcher*> HealthService::RefWatchersLocked() {
  std::vector<Watcher*> out(watchers_.begin(), watchers_.end());
  for (Watcher* w : out) w->Ref();
  return out;
}

void HealthService::SetServing(bool serving) {
  std::vector<Watcher*> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = serving;
    watchers = RefWatchersLocked();
  }
  for (Watcher* w : watchers) {
    w->Update();
    w->Unref();
  }
}

void HealthService::Shutdown() {
  std::vector<Watcher*> watchers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    serving_ = false;
    shut_down_ = true;
    watchers = RefWatchersLocked();
  }
  for (Watcher* w : watchers) {
    w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
    w->Unref();
  }
}

bool HealthService::serving() {
  std::lock_guard<std::mutex> lock(mu_);
  return serving_;
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
  bool shut_down;
  {
    std::lock_guard<std::mutex> lock(mu_);
    watchers_.insert(w);
    w->Ref();
    shut_down = shut_down_;
  }
  if (shut_down) {
    w->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "shutting down"));
  } else {
    w->Update();
  }
  w->Unref();
  return w;
}

}  // namespace gpusampler::server
