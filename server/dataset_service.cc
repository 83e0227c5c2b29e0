// CreateDataset, DeleteDataset and ListDatasets (SPEC section 5); the call metrics count them
// from arrival (call_metrics.cc). An upload is validated
// chunk by chunk as it is read and reserved against --max-dataset-bytes; it becomes visible
// only when the client half-closes a stream whose every chunk was accepted.
#include <memory>
#include <mutex>
#include <thread>

#include "datasets.hpp"
#include "service.hpp"

namespace gpusampler::server {
namespace {

// One CreateDataset call. Reads run one at a time (gRPC allows one outstanding read), so
// the builder needs no lock; Finish is called once, from a reaction.
class CreateCall final : public grpc::ServerReadReactor<v1::DatasetChunk> {
 public:
  CreateCall(SamplerService* svc, grpc::CallbackServerContext* ctx, v1::DatasetInfo* response)
      : svc_(svc), ctx_(ctx), response_(response) {
    Status status = svc_->Authorize(*ctx_);
    if (status.ok() && !svc_->accepting()) {
      status = Unavailable("server is draining; retry another replica");
    }
    if (status.ok() && svc_->datasets() == nullptr) {
      status = Unavailable("this server keeps no datasets");
    }
    if (!status.ok()) {
      Done(status);
      return;
    }
    builder_ = std::make_unique<DatasetBuilder>(svc_->datasets(), svc_->config().limits);
    StartRead(&chunk_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call broke: then Finish is a no-op). Commit.
      if (ctx_->IsCancelled()) {
        Done(Status(Code::kCancelled, "upload cancelled; nothing was stored"));
        return;
      }
      // Hashing the features and copying the dataset to the devices take time and
      // synchronize: off gRPC's thread (a reactor never blocks). Finish may be called from
      // any thread, and `this` lives until OnDone, which only follows Finish.
      std::thread([this] {
        std::shared_ptr<const Dataset> stored;
        const Status status = builder_->Commit(&stored);
        if (status.ok()) *response_ = stored->Info();
        Done(status);
      }).detach();
      return;
    }
    svc_->metrics()->received_bytes().Increment(static_cast<double>(chunk_.ByteSizeLong()));
    const Status status = builder_->Add(chunk_);
    if (!status.ok()) {
      Done(status);  // the builder's reservation goes with it: nothing is kept
      return;
    }
    chunk_.Clear();
    StartRead(&chunk_);
  }

  void OnDone() override { delete this; }

 private:
  void Done(const Status& status) {
    builder_.reset();  // releases an uncommitted reservation before the client hears back
    svc_->metrics()->SetDatasets(svc_->datasets());
    Finish(ToGrpcStatus(status, ctx_));
  }

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;
  v1::DatasetInfo* response_;
  std::unique_ptr<DatasetBuilder> builder_;
  v1::DatasetChunk chunk_;
};

}  // namespace

grpc::ServerReadReactor<v1::DatasetChunk>* SamplerService::CreateDataset(
    grpc::CallbackServerContext* context, v1::DatasetInfo* response) {
  return new CreateCall(this, context, response);
}

grpc::ServerUnaryReactor* SamplerService::DeleteDataset(grpc::CallbackServerContext* context,
                                                        const v1::DeleteDatasetRequest* request,
                                                        v1::DeleteDatasetResponse*) {
  Status status = Authorize(*context);
  if (status.ok()) {
    if (!ValidDatasetName(request->name())) {
      status = InvalidArgument("name '" + request->name().substr(0, 140) +
                               "' must match [A-Za-z0-9._-]{1,128}");
    } else if (datasets_ == nullptr || !datasets_->Delete(request->name())) {
      status = Status(Code::kNotFound, "dataset '" + request->name() + "' not found");
    }
  }
  metrics_->SetDatasets(datasets_);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

grpc::ServerUnaryReactor* SamplerService::ListDatasets(grpc::CallbackServerContext* context,
                                                       const v1::ListDatasetsRequest*,
                                                       v1::ListDatasetsResponse* response) {
  const Status status = Authorize(*context);
  if (status.ok() && datasets_ != nullptr) {
    for (const auto& ds : datasets_->List()) *response->add_datasets() = ds->Info();
  }
  auto* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

}  // namespace gpusampler::server
