// grpc.health.v1 Health, implemented here rather than by gRPC's default service, because
// the default one reports SERVING from the moment the port opens (before warm-up). Starts
// NOT_SERVING. Service "" (the server) and "gpusampler.v1.Sampler" are known; others are
// NOT_FOUND (Check) or SERVICE_UNKNOWN (Watch). Thread-safe.
#pragma once

#include <memory>
#include <mutex>
#include <set>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"

namespace gpusampler::server {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  HealthService();
  ~HealthService() override;

  // Sets every known service's status and tells the watchers.
  void SetServing(bool serving);
  // Ends every Watch call (before the gRPC server shuts down) and refuses new ones.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

  class Watcher;

 private:
  friend class Watcher;
  void Remove(Watcher* watcher);
  bool serving();
  // The watchers, each with a reference the caller drops (Unref) outside mu_.
  std::vector<Watcher*> RefWatchersLocked();

  std::mutex mu_;
  bool serving_ = false;
  bool shut_down_ = false;
  std::set<Watcher*> watchers_;
};

}  // namespace gpusampler::server
