// gpusampler.v1.Sampler on the gRPC callback API. Reactors never block: they validate,
// convert the request to a Job once, submit it to the scheduler and return; a worker
// thread writes the response and finishes the call. Thread-safe. Sample and GetServerInfo
// are service.cc, SampleStream sample_stream.cc, the dataset RPCs dataset_service.cc; the
// request bytes' budget and parsing are request_bytes.hpp.
#pragma once

#include <grpcpp/grpcpp.h>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "core/config.hpp"
#include "core/status.hpp"
#include "datasets/datasets.hpp"
#include "edge/call_limits.hpp"
#include "edge/regions.hpp"
#include "edge/request_bytes.hpp"
#include "edge/security.hpp"
#include "edge/single_flight.hpp"
#include "gpusampler/v1/sampler.grpc.pb.h"
#include "observability/metrics.hpp"
#include "scheduling/scheduler.hpp"

namespace gpusampler::server {

// A call the drain must end itself (an open SampleStream). BeginDrain is called under the
// service's lock and keeps the call alive until FinishDrain, called outside it.
class DrainableCall {
 public:
  virtual ~DrainableCall() = default;
  virtual bool BeginDrain() = 0;  // false: the call is already ending
  virtual void FinishDrain() = 0;
  // The write-stall check (--stream-write-timeout-ms), same protocol: BeginStall is called
  // under the service's lock and true (with the call kept alive) when a write has been
  // outstanding for `limit` at `now`; EndStall, outside it, ends the call.
  virtual bool BeginStall(Clock::time_point /*now*/, Clock::duration /*limit*/) { return false; }
  virtual void EndStall() {}
};

// Sample and SampleStream are raw (bytes in, bytes out): the service charges a request's
// bytes to the budget before parsing it, and answers one that does not parse with
// INVALID_ARGUMENT, counted like any other.
using SamplerBase = v1::Sampler::WithRawCallbackMethod_Sample<
    v1::Sampler::WithRawCallbackMethod_SampleStream<v1::Sampler::WithCallbackMethod_GetServerInfo<
        v1::Sampler::WithRawCallbackMethod_CreateDataset<
            v1::Sampler::WithCallbackMethod_DeleteDataset<
                v1::Sampler::WithCallbackMethod_ListDatasets<
                    // Shared memory (SPEC section 9; regions.cc).
                    v1::Sampler::WithCallbackMethod_RegisterRegion<
                        v1::Sampler::WithCallbackMethod_UnregisterRegion<
                            v1::Sampler::WithCallbackMethod_ListRegions<
                                v1::Sampler::Service>>>>>>>>>;

class SamplerService final : public SamplerBase {
 public:
  // `scheduler` and `metrics` must outlive the service; `info` is answered by GetServerInfo.
  // `datasets` (may be null: no dataset RPCs) must outlive the service too.
  SamplerService(const ServerConfig& config, Scheduler* scheduler, Metrics* metrics,
                 v1::ServerInfo info, DatasetRegistry* datasets = nullptr);
  ~SamplerService() override;

  grpc::ServerUnaryReactor* Sample(grpc::CallbackServerContext* context,
                                   const grpc::ByteBuffer* request,
                                   grpc::ByteBuffer* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* SampleStream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* context,
                                          const v1::GetServerInfoRequest* request,
                                          v1::ServerInfo* response) override;

  // Resident datasets (dataset_service.cc).
  // Raw, so that a chunk that does not parse is INVALID_ARGUMENT (a typed reader cannot tell
  // it from the end of the stream).
  grpc::ServerReadReactor<grpc::ByteBuffer>* CreateDataset(grpc::CallbackServerContext* context,
                                                           grpc::ByteBuffer* response) override;
  grpc::ServerUnaryReactor* DeleteDataset(grpc::CallbackServerContext* context,
                                          const v1::DeleteDatasetRequest* request,
                                          v1::DeleteDatasetResponse* response) override;
  grpc::ServerUnaryReactor* ListDatasets(grpc::CallbackServerContext* context,
                                         const v1::ListDatasetsRequest* request,
                                         v1::ListDatasetsResponse* response) override;

  // Shared memory (SPEC section 9; regions.cc): regions scoped to the caller's token.
  grpc::ServerUnaryReactor* RegisterRegion(grpc::CallbackServerContext* context,
                                           const v1::RegisterRegionRequest* request,
                                           v1::RegionInfo* response) override;
  grpc::ServerUnaryReactor* UnregisterRegion(grpc::CallbackServerContext* context,
                                             const v1::UnregisterRegionRequest* request,
                                             v1::UnregisterRegionResponse* response) override;
  grpc::ServerUnaryReactor* ListRegions(grpc::CallbackServerContext* context,
                                        const v1::ListRegionsRequest* request,
                                        v1::ListRegionsResponse* response) override;
  RegionTable& regions() { return regions_; }
  // The region scope of an authorized call: its bearer token, or "" with auth off.
  std::string RegionScope(const grpc::CallbackServerContext& context) const;

  // New requests get UNAVAILABLE from now on (drain); open streams stop reading and end
  // with UNAVAILABLE once their accepted requests are answered.
  void StopAccepting();

  // Used by the reactors.
  const ServerConfig& config() const { return config_; }
  Scheduler* scheduler() { return scheduler_; }
  Metrics* metrics() { return metrics_; }
  DatasetRegistry* datasets() { return datasets_; }
  // gpusampler_datasets and gpusampler_dataset_bytes from the registry (if any) now.
  void UpdateDatasetGauges();
  // UNAUTHENTICATED unless auth is off or the call carries the bearer token.
  Status Authorize(const grpc::CallbackServerContext& context) const;
  bool accepting() const { return accepting_.load(); }
  ByteBudget& budget() { return budget_; }
  CallLimits& calls() { return calls_; }
  void AddStream(DrainableCall* stream);
  void RemoveStream(DrainableCall* stream);
  // The bearer tokens now accepted (re-read with the TLS files; empty: auth off). May be
  // null: then config().auth_tokens.
  void SetTokens(std::shared_ptr<TokenSet> tokens) {
    std::lock_guard<std::mutex> lock(streams_mu_);  // StallLoop reads it (region revocation)
    tokens_ = std::move(tokens);
  }
  const TokenSet* tokens() const { return tokens_.get(); }
  // Sample calls whose client cancelled them (OnCancel ran) since the start: what a test
  // waits for before it lets the queue move (issue 31: a call gone before launch is dropped).
  int64_t client_cancels() const { return client_cancels_.load(); }
  void CountClientCancel() { client_cancels_.fetch_add(1); }
  // CreateDataset commits running now (dataset_service.cc): the drain waits for them only
  // until the grace ends (issue 31: exit within --shutdown-grace-seconds).
  void CommitStarted() { commits_.fetch_add(1); }
  void CommitEnded() { commits_.fetch_sub(1); }
  int64_t commits_running() const { return commits_.load(); }
  // One ListDatasets answer, shared by the calls that arrived while it was being built.
  struct DatasetListing {
    Status status = Status::Ok();
    v1::ListDatasetsResponse response;
  };

 private:
  // Ends SampleStreams whose client stopped reading (--stream-write-timeout-ms).
  void StallLoop();
  // The registry's datasets and the repository's others, sorted by name (ListDatasets).
  DatasetListing ListAllDatasets() const;

  const ServerConfig config_;
  Scheduler* scheduler_;
  Metrics* metrics_;
  const v1::ServerInfo info_;
  DatasetRegistry* datasets_;
  std::atomic<bool> accepting_{true};
  std::atomic<int64_t> client_cancels_{0};
  std::atomic<int64_t> commits_{0};
  ByteBudget budget_;
  // ListDatasets calls share listings (a listing of 100k datasets stats 100k files).
  SingleFlight<DatasetListing> listings_{[this] { return ListAllDatasets(); }};
  CallLimits calls_;  // --max-calls, --max-concurrent-streams (after budget_)
  std::shared_ptr<TokenSet> tokens_;
  RegionTable regions_;  // shared memory; revoked tokens' regions dropped by StallLoop
  std::mutex streams_mu_;
  std::set<DrainableCall*> streams_;
  bool stop_ = false;  // under streams_mu_
  std::condition_variable stall_cv_;
  std::thread stall_thread_;
};

}  // namespace gpusampler::server
