// gpusampler.v1.Sampler on the gRPC callback API. Reactors never block: they validate,
// convert the request to a Job once, submit it to the scheduler and return; a worker
// thread writes the response and finishes the call. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>
#include <atomic>

#include "config.hpp"
#include "datasets.hpp"
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
  // `datasets` (may be null: no dataset RPCs) must outlive the service too.
  SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                 v1::ServerInfo info, DatasetRegistry* datasets = nullptr);

  grpc::ServerUnaryReactor* Sample(grpc::CallbackServerContext* context,
                                   const v1::SampleRequest* request,
                                   v1::SampleResponse* response) override;
  grpc::ServerBidiReactor<v1::SampleRequest, v1::SampleResponse>* SampleStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

  // Resident datasets (dataset_service.cc).
  grpc::ServerReadReactor<v1::DatasetChunk>* CreateDataset(grpc::CallbackServerContext* context,
                                                           v1::DatasetInfo* response) override;
  grpc::ServerUnaryReactor* DeleteDataset(grpc::CallbackServerContext* context,
                                          const v1::DeleteDatasetRequest* request,
                                          v1::DeleteDatasetResponse* response) override;
  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* context,
                                         const v1::ListDatasetsRequest* request,
                                         v1::ListDatasetsResponse* response) override;

  // New requests get UNAVAILABLE from now on (drain).
  void StopAccepting() { accepting_.store(false); }

  // Used by the reactors.
  const ServerConfig& config() const { return config_; }
  Scheduler* scheduler() { return scheduler_; }
  Metrics* metrics() { return metrics_; }
  DatasetRegistry* datasets() { return datasets_; }
  // UNAUTHENTICATED unless auth is off or the call carries the bearer token.
  Status Authorize(const grpc::CallbackServerContext& context) const;
  bool accepting() const { return accepting_.load(); }

 private:
  const ServerConfig config_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  const v1::ServerInfo info_;
  DatasetRegistry* datasets_;
  std::atomic<bool> accepting_{true};
};

}  // namespace gpusampler::server
