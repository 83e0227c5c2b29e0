// gpusampler.v1.Sampler on the gRPC callback API. Reactors never block: they validate,
// convert the request to a Job once, submit it to the scheduler and return; a worker
// thread writes the response and finishes the call. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <atomic>

#include "config.hpp"
#include "gpusampler/v1/sampler.grpc.pb.h"
#include "metrics.hpp"
#include "scheduler.hpp"
#include "status.hpp"

namespace gpusampler::server {

// The one place a Status becomes a grpc::Status. A retry pushback goes into `context`'s
// trailing metadata as `grpc-retry-pushback-ms` (gRFC A6: -1 = do not retry, N > 0 = retry
// after N ms), which gRPC's client-side retry policy honours.
grpc::Status ToGrpcStatus(const Status& status, grpc::CallbackServerContext* context);

class SamplerService final : public v1::Sampler::CallbackService {
 public:
  // `scheduler` and `metrics` must outlive the service; `info` is answered by GetServerInfo.
  SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                 v1::ServerInfo info);

  grpc::ServerUnaryReactor* Sample(grpc::CallbackServerContext* context,
                                   const v1::SampleRequest* request,
                                   v1::SampleResponse* response) override;
  grpc::ServerBidiReactor<v1::SampleRequest, v1::SampleResponse>* SampleStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

  // New requests get UNAVAILABLE from now on (drain).
  void StopAccepting() { accepting_.store(false); }

  // Used by the reactors.
  const ServerConfig& config() const { return config_; }
  Scheduler* scheduler() { return scheduler_; }
  Metrics* metrics() { return metrics_; }
  bool accepting() const { return accepting_.load(); }

 private:
  const ServerConfig config_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  const v1::ServerInfo info_;
  std::atomic<bool> accepting_{true};
};

}  // namespace gpusampler::server
