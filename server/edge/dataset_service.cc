// CreateDataset, DeleteDataset and ListDatasets (SPEC sections 5 and 6); the call metrics
// count them from arrival (call_metrics.cc). An upload is validated chunk by chunk as it is
// read and reserved against --max-dataset-bytes; it becomes visible only when the client
// half-closes a stream whose every chunk parsed and was accepted. With a repository
// (--dataset-dir) the commit and the deletion go through it (repository.hpp).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "datasets/datasets.hpp"
#include "datasets/repository.hpp"
#include "edge/repository_work.hpp"
#include "edge/service.hpp"

namespace gpusampler::server {
namespace {

using SteadyClock = std::chrono::steady_clock;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

class CreateCall;

// Ends uploads that sent nothing for --upload-idle-timeout-ms (SPEC section 3): one thread
// for the process, started by the first upload. A call is registered from its start to
// OnDone; the watchdog finishes one only after claiming it (CreateCall::Expire), and a call
// lives until it is finished, so the pointers it holds under mu_ stay valid.
class UploadWatchdog {
 public:
  static UploadWatchdog& Get() {
    static UploadWatchdog* w = new UploadWatchdog();  // lives with the process
    return *w;
  }
  void Add(CreateCall* call);
  void Remove(CreateCall* call);

 private:
  UploadWatchdog() {
    std::thread([this] { Run(); }).detach();
  }
  void Run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<CreateCall*> calls_;
};

// One CreateDataset call. Reads run one at a time (gRPC allows one outstanding read);
// mu_ guards the builder against the watchdog. Finish is called once, by whoever claims the
// call: a reaction (error), the commit thread, or the watchdog.
class CreateCall final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  enum State { kReading, kCommitting, kFinished };

  CreateCall(SamplerService* svc, grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response)
      : svc_(svc),
        ctx_(ctx),
        response_(response),
        idle_ns_(svc->config().upload_idle_timeout_ms * 1000000) {
    Status status = svc_->Authorize(*ctx_);
    if (status.ok() && !svc_->accepting()) {
      status = Unavailable("server is draining; retry another replica");
    }
    if (status.ok() && svc_->datasets() == nullptr) {
      status = Unavailable("this server keeps no datasets");
    }
    if (status.ok() && svc_->datasets()->repository()) {
      status = svc_->datasets()->repository()->CheckWritable();
    }
    if (!status.ok()) {
      state_ = kFinished;
      Finish(ToGrpcStatus(status, ctx_));
      return;
    }
    builder_ = std::make_unique<DatasetBuilder>(svc_->datasets(), svc_->config().limits);
    last_ns_ = NowNs();
    UploadWatchdog::Get().Add(this);
    registered_ = true;
    StartRead(&chunk_bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed (or the call broke: then Finish is a no-op). Commit.
      if (ctx_->IsCancelled()) {
        Fail(Status(Code::kCancelled, "upload cancelled; nothing was stored"));
        return;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        int expected = kReading;
        if (!state_.compare_exchange_strong(expected, kCommitting)) return;
      }
      // Hashing the features, writing the repository and copying the dataset to the devices
      // take time and synchronize: off gRPC's thread (a reactor never blocks). Finish may be
      // called from any thread, and `this` lives until OnDone, which only follows Finish.
      svc_->CommitStarted();
      std::thread([this] {
        std::shared_ptr<const Dataset> stored;
        Status status = builder_->Commit(&stored);
        if (status.ok()) {
          bool own = false;
          if (!grpc::SerializationTraits<v1::DatasetInfo>::Serialize(stored->Info(), response_,
                                                                     &own)
                   .ok()) {
            status = Status(Code::kInternal, "cannot serialize the DatasetInfo");
          }
        }
        {
          std::lock_guard<std::mutex> lock(mu_);
          state_ = kFinished;
          builder_.reset();  // releases an uncommitted reservation before the client hears
        }
        SamplerService* svc = svc_;  // `this` may be gone once End returns
        End(status);
        svc->CommitEnded();
      }).detach();
      return;
    }
    svc_->metrics()->received_bytes().Increment(static_cast<double>(chunk_bytes_.Length()));
    ++chunks_;
    v1::DatasetChunk chunk;
    Status status = Status::Ok();
    bool progress = false;
    if (!grpc::SerializationTraits<v1::DatasetChunk>::Deserialize(&chunk_bytes_, &chunk).ok()) {
      // Never the end of the stream: the whole upload fails and nothing is kept.
      status = InvalidArgument("chunk " + std::to_string(chunks_ - 1) +
                               " does not parse as a gpusampler.v1.DatasetChunk; nothing of "
                               "the upload was kept");
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (state_ != kReading) return;  // the watchdog ended it
      const int64_t before = builder_->reserved();
      status = builder_->Add(chunk);
      progress = builder_->reserved() > before;
    }
    chunk_bytes_.Clear();
    if (!status.ok()) {
      Fail(status);  // the builder's reservation goes with it: nothing is kept
      return;
    }
    // gpusampler_dataset_bytes counts the upload's reserved bytes as they arrive.
    svc_->UpdateDatasetGauges();
    // Only data is progress: an upload trickling empty chunks does not hold the budget.
    if (progress) last_ns_ = NowNs();
    StartRead(&chunk_bytes_);
  }

  void OnDone() override {
    if (registered_) UploadWatchdog::Get().Remove(this);
    delete this;
  }

  // Called by the watchdog under its lock: claims the call when it has been idle too long.
  // True: the caller must call ExpireFinish() (outside its lock).
  bool Expire(int64_t now_ns) {
    if (now_ns - last_ns_.load() < idle_ns_) return false;
    std::lock_guard<std::mutex> lock(mu_);
    int expected = kReading;
    if (!state_.compare_exchange_strong(expected, kFinished)) return false;
    builder_.reset();  // the reservation is free before the client hears
    return true;
  }
  void ExpireFinish() {
    End(Status(Code::kDeadlineExceeded,
               "upload sent no data for " + std::to_string(idle_ns_ / 1000000) +
                   " ms (--upload-idle-timeout-ms; empty chunks do not count); nothing was "
                   "stored"));
  }

 private:
  // Fails the upload from a reaction, unless another path finished it.
  void Fail(const Status& status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      int expected = kReading;
      if (!state_.compare_exchange_strong(expected, kFinished)) return;
      builder_.reset();
    }
    End(status);
  }
  void End(const Status& status) {
    svc_->UpdateDatasetGauges();
    Finish(ToGrpcStatus(status, ctx_));
  }

  SamplerService* svc_;
  grpc::CallbackServerContext* ctx_;
  grpc::ByteBuffer* response_;
  const int64_t idle_ns_;
  std::mutex mu_;
  std::atomic<int> state_{kReading};
  std::atomic<int64_t> last_ns_{0};
  bool registered_ = false;
  int64_t chunks_ = 0;
  std::unique_ptr<DatasetBuilder> builder_;
  grpc::ByteBuffer chunk_bytes_;
};

void UploadWatchdog::Add(CreateCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.insert(call);
  cv_.notify_all();
}

void UploadWatchdog::Remove(CreateCall* call) {
  std::lock_guard<std::mutex> lock(mu_);
  calls_.erase(call);
}

void UploadWatchdog::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    if (calls_.empty()) {
      cv_.wait(lock);
      continue;
    }
    cv_.wait_for(lock, std::chrono::milliseconds(50));
    std::vector<CreateCall*> expired;
    const int64_t now = NowNs();
    for (CreateCall* call : calls_) {
      if (call->Expire(now)) expired.push_back(call);
    }
    lock.unlock();
    // Claimed calls are not finished yet, so they are alive; Finish may run OnDone inline,
    // which takes mu_.
    for (CreateCall* call : expired) call->ExpireFinish();
    lock.lock();
  }
}

}  // namespace

grpc::ServerReadReactor<grpc::ByteBuffer>* SamplerService::CreateDataset(
    grpc::CallbackServerContext* context, grpc::ByteBuffer* response) {
  return new CreateCall(this, context, response);
}

grpc::ServerUnaryReactor* SamplerService::DeleteDataset(grpc::CallbackServerContext* context,
                                                        const v1::DeleteDatasetRequest* request,
                                                        v1::DeleteDatasetResponse*) {
  auto* reactor = context->DefaultReactor();
  Status status = Authorize(*context);
  if (status.ok() && !ValidDatasetName(request->name())) {
    status = InvalidArgument("name '" + request->name().substr(0, 140) +
                             "' must match [A-Za-z0-9._-]{1,128}");
  }
  if (!status.ok() || datasets_ == nullptr) {
    if (status.ok())
      status = Status(Code::kNotFound, "dataset '" + request->name() + "' not found");
    reactor->Finish(ToGrpcStatus(status, context));
    return reactor;
  }
  // The unlinks, the directory's fsync and the device frees: off this thread.
  RunRepositoryWork([this, context, request, reactor] {
    Status s = Status::Ok();
    if (Repository* repo = datasets_->repository()) {
      s = repo->Delete(request->name());
    } else if (!datasets_->Delete(request->name())) {
      s = Status(Code::kNotFound, "dataset '" + request->name() + "' not found");
    }
    UpdateDatasetGauges();
    reactor->Finish(ToGrpcStatus(s, context));
  });
  return reactor;
}

void SamplerService::UpdateDatasetGauges() {
  if (datasets_) metrics_->SetDatasets(datasets_->count(), datasets_->bytes());
}

grpc::ServerUnaryReactor* SamplerService::ListDatasets(grpc::CallbackServerContext* context,
                                                       const v1::ListDatasetsRequest*,
                                                       v1::ListDatasetsResponse* response) {
  auto* reactor = context->DefaultReactor();
  const Status status = Authorize(*context);
  if (!status.ok() || datasets_ == nullptr) {
    reactor->Finish(ToGrpcStatus(status, context));
    return reactor;
  }
  // Listing the repository stats every file and reads the headers of the datasets not
  // resident: off this thread, and shared by the calls that arrive while one is built (8
  // clients listing 100k datasets in a loop hold one repository thread, not all of them,
  // and run one scan at a time: issue 31).
  RunRepositoryWork([this, context, response, reactor] {
    listings_.Run([context, response, reactor](std::shared_ptr<const DatasetListing> listing) {
      if (listing->status.ok()) *response = listing->response;
      reactor->Finish(ToGrpcStatus(listing->status, context));
    });
  });
  return reactor;
}

SamplerService::DatasetListing SamplerService::ListAllDatasets() const {
  DatasetListing listing;
  v1::ListDatasetsResponse& response = listing.response;
  for (const auto& ds : datasets_->List()) *response.add_datasets() = ds->Info();
  // With a repository, its datasets that this replica has not loaded are listed too
  // (devices empty): any replica lists what every replica serves.
  if (Repository* repo = datasets_->repository()) {
    std::vector<v1::DatasetInfo> more;
    listing.status = repo->ListNotResident(&more);
    for (auto& info : more) *response.add_datasets() = std::move(info);
    std::sort(
        response.mutable_datasets()->begin(), response.mutable_datasets()->end(),
        [](const v1::DatasetInfo& a, const v1::DatasetInfo& b) { return a.name() < b.name(); });
  }
  if (!listing.status.ok()) response.Clear();
  return listing;
}

}  // namespace gpusampler::server
