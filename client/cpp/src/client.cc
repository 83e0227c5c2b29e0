#include "gpusampler/client/client.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "gpusampler/client/tensor.hpp"
#include "gpusampler/common/status_codes.hpp"
#include "grpc/health/v1/health.grpc.pb.h"

namespace gpusampler::client {
namespace {

std::string Seconds(double s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.6fs", s < 0 ? 0.0 : s);
  return buf;
}

// "1.2.3.4:5" -> 4, "[::1]:5" -> 6, anything else (host names, URIs) -> 0.
int IpFamily(const std::string& target) {
  if (!target.empty() && target[0] == '[') {
    size_t close = target.find(']');
    if (close == std::string::npos || close + 1 >= target.size() || target[close + 1] != ':') {
      return 0;
    }
    in6_addr addr6;
    return inet_pton(AF_INET6, target.substr(1, close - 1).c_str(), &addr6) == 1 ? 6 : 0;
  }
  size_t colon = target.rfind(':');
  if (colon == std::string::npos) return 0;
  in_addr addr;
  return inet_pton(AF_INET, target.substr(0, colon).c_str(), &addr) == 1 ? 4 : 0;
}

void Require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("gpusampler::client: " + what);
}

std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

void CheckOptions(const ClientOptions& o) {
  for (const std::string& t : o.targets) Require(!t.empty(), "targets holds an empty target");
  Require(o.default_timeout.count() >= 0,
          "default_timeout = " + Ms(o.default_timeout) + ", must be >= 0 (0 = none)");
  Require(o.retry.max_attempts >= 1 && o.retry.max_attempts <= 5,
          "retry.max_attempts = " + std::to_string(o.retry.max_attempts) +
              " is outside [1, 5] (gRPC's cap)");
  Require(o.retry.initial_backoff_s > 0, "retry.initial_backoff_s must be > 0");
  Require(o.retry.max_backoff_s > 0, "retry.max_backoff_s must be > 0");
  Require(o.retry.backoff_multiplier > 0, "retry.backoff_multiplier must be > 0");
  Require(
      o.max_send_message_bytes >= 1,
      "max_send_message_bytes = " + std::to_string(o.max_send_message_bytes) + ", must be >= 1");
  Require(o.max_receive_message_bytes >= 1,
          "max_receive_message_bytes = " + std::to_string(o.max_receive_message_bytes) +
              ", must be >= 1");
  Require(o.keepalive_time.count() >= 0,
          "keepalive_time = " + Ms(o.keepalive_time) + ", must be >= 0 (0 = off)");
  Require(o.keepalive_timeout.count() > 0,
          "keepalive_timeout = " + Ms(o.keepalive_timeout) + ", must be > 0");
}

void CheckCall(const CallOptions& call) {
  Require(!call.timeout || call.timeout->count() >= 0,
          "CallOptions.timeout is negative (0 = none)");
  Require(!call.stream_timeout || call.stream_timeout->count() >= 0,
          "CallOptions.stream_timeout is negative (0 = none)");
}

}  // namespace

std::string StatusCodeName(grpc::StatusCode code) {
  return common::GrpcCodeName(static_cast<int>(code));
}

std::string BuildServiceConfigJson(const RetryPolicy& retry) {
  std::ostringstream json;
  json << R"({"loadBalancingConfig":[{"round_robin":{}}],"methodConfig":[{"name":[)"
       << R"({"service":"gpusampler.v1.Sampler"},{"service":"grpc.health.v1.Health"}])";
  if (retry.enabled && retry.max_attempts >= 2 && !retry.codes.empty()) {
    json << R"(,"retryPolicy":{"maxAttempts":)" << retry.max_attempts << R"(,"initialBackoff":")"
         << Seconds(retry.initial_backoff_s) << R"(","maxBackoff":")"
         << Seconds(retry.max_backoff_s) << R"(","backoffMultiplier":)" << retry.backoff_multiplier
         << R"(,"retryableStatusCodes":[)";
    for (size_t i = 0; i < retry.codes.size(); ++i) {
      json << (i ? "," : "") << '"' << retry.codes[i] << '"';
    }
    json << "]}";
  }
  json << "}]}";
  return json.str();
}

std::vector<std::string> ChannelTargets(const std::vector<std::string>& targets) {
  if (targets.size() < 2) return targets;
  const int family = IpFamily(targets[0]);
  bool same = family != 0;
  for (const std::string& t : targets) same = same && IpFamily(t) == family;
  if (!same) return targets;
  std::string uri = family == 4 ? "ipv4:" : "ipv6:";
  for (size_t i = 0; i < targets.size(); ++i) uri += (i ? "," : "") + targets[i];
  return {uri};
}

// ---------------------------------------------------------------------------- Client

Client::Client(ClientOptions options) : options_(std::move(options)) {
  if (options_.targets.empty()) options_.targets.push_back("127.0.0.1:50051");
  CheckOptions(options_);
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(BuildServiceConfigJson(options_.retry));
  args.SetMaxSendMessageSize(options_.max_send_message_bytes);
  args.SetMaxReceiveMessageSize(options_.max_receive_message_bytes);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, options_.retry.enabled ? 1 : 0);
  // A call can be retried only while its request fits the retry buffer (256 KiB by
  // default); sampling requests are often larger.
  args.SetInt(GRPC_ARG_PER_RPC_RETRY_BUFFER_SIZE, options_.max_send_message_bytes);
  if (!options_.tls.server_name_override.empty()) {
    args.SetSslTargetNameOverride(options_.tls.server_name_override);
  }
  if (options_.keepalive_time.count() > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, static_cast<int>(options_.keepalive_time.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(options_.keepalive_timeout.count()));
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);  // idle connections stay quiet
  }
  for (const auto& [name, value] : options_.channel_args) args.SetInt(name, value);
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  if (options_.tls.enabled) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options_.tls.root_certs_pem;
    ssl.pem_cert_chain = options_.tls.client_cert_pem;
    ssl.pem_private_key = options_.tls.client_key_pem;
    credentials = grpc::SslCredentials(ssl);
  } else {
    credentials = grpc::InsecureChannelCredentials();
  }
  for (const std::string& target : ChannelTargets(options_.targets)) {
    Channel c;
    c.channel = grpc::CreateCustomChannel(target, credentials, args);
    c.stub = v1::Sampler::NewStub(c.channel);
    channels_.push_back(std::move(c));
  }
  if (channels_.size() != options_.targets.size()) {
    for (const std::string& target : options_.targets) {
      Channel c;
      c.channel = grpc::CreateCustomChannel(target, credentials, args);
      c.stub = v1::Sampler::NewStub(c.channel);
      address_channels_.push_back(std::move(c));
    }
  }
}

grpc::Status Client::DatasetTargets(const CallOptions& call,
                                    std::vector<std::pair<std::string, v1::Sampler::Stub*>>* out) {
  out->clear();
  if (options_.targets.size() < 2) return grpc::Status::OK;
  if (repository_.load() < 0) {
    v1::ServerInfo info;
    grpc::Status status = GetServerInfo(&info, call);
    if (!status.ok()) return status;
    repository_.store(info.dataset_repository() ? 1 : 0);
  }
  if (repository_.load() == 1) return grpc::Status::OK;
  const std::vector<Channel>& per = address_channels_.empty() ? channels_ : address_channels_;
  for (size_t i = 0; i < options_.targets.size(); ++i) {
    out->emplace_back(options_.targets[i], per[i].stub.get());
  }
  return grpc::Status::OK;
}

namespace {

// One status for a dataset call that failed on some of the targets it had to reach.
grpc::Status FanoutStatus(const std::string& what,
                          const std::vector<std::pair<std::string, grpc::Status>>& failed,
                          const std::vector<std::string>& succeeded) {
  std::string text = what + " failed on " + std::to_string(failed.size()) + " of " +
                     std::to_string(failed.size() + succeeded.size()) +
                     " targets (no shared dataset repository, so each keeps its own copy): ";
  for (size_t i = 0; i < failed.size(); ++i) {
    text += (i ? "; " : "") + failed[i].first + ": " +
            StatusCodeName(failed[i].second.error_code()) + ": " + failed[i].second.error_message();
  }
  if (!succeeded.empty()) {
    text += "; it succeeded on ";
    for (size_t i = 0; i < succeeded.size(); ++i) text += (i ? ", " : "") + succeeded[i];
  }
  return grpc::Status(failed.front().second.error_code(), text);
}

}  // namespace

bool Client::Connected() const {
  for (const Channel& c : channels_) {
    if (c.channel->GetState(false) == GRPC_CHANNEL_READY) return true;
  }
  return false;
}

const Client::Channel& Client::Pick() {
  return channels_[next_.fetch_add(1, std::memory_order_relaxed) % channels_.size()];
}

std::unique_ptr<grpc::ClientContext> Client::NewContext(
    std::optional<std::chrono::milliseconds> timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (timeout && timeout->count() > 0) {
    context->set_deadline(std::chrono::system_clock::now() + *timeout);
  }
  // Metadata rather than call credentials: gRPC drops call credentials on insecure
  // channels, and a token behind a TLS-terminating proxy is still wanted.
  if (!options_.bearer_token.empty()) {
    context->AddMetadata("authorization", "Bearer " + options_.bearer_token);
  }
  context->set_wait_for_ready(options_.wait_for_ready);
  return context;
}

grpc::Status Client::Explain(grpc::Status status) const {
  const std::string& m = status.error_message();
  if (status.error_code() != grpc::StatusCode::RESOURCE_EXHAUSTED ||
      m.rfind("Received message larger than max", 0) != 0) {
    return status;
  }
  const std::string limit = m.substr(m.rfind(' ') + 1, m.size() - m.rfind(' ') - 2);
  const std::string hint =
      limit == std::to_string(options_.max_receive_message_bytes)
          ? "the response is over this client's max_receive_message_bytes = " + limit
          : "the request is far over the server's --max-message-bytes (GetServerInfo "
            "limits.max_message_bytes); gRPC refused it unread";
  return grpc::Status(status.error_code(), m + ": " + hint);
}

grpc::Status Client::Sample(const v1::SampleRequest& request, v1::SampleResponse* response,
                            const CallOptions& call) {
  CheckCall(call);
  const size_t bytes = request.ByteSizeLong();
  if (bytes > static_cast<size_t>(options_.max_send_message_bytes)) {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "request has " + std::to_string(bytes) +
                            " bytes, over this client's max_send_message_bytes = " +
                            std::to_string(options_.max_send_message_bytes) +
                            " (ClientOptions); the server's own limit is GetServerInfo "
                            "limits.max_message_bytes (--max-message-bytes)");
  }
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  return Explain(Pick().stub->Sample(context.get(), request, response));
}

grpc::Status Client::GetServerInfo(v1::ServerInfo* info, const CallOptions& call) {
  CheckCall(call);
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  return Pick().stub->GetServerInfo(context.get(), v1::GetServerInfoRequest(), info);
}

grpc::Status Client::CreateDataset(const std::string& name, const v1::Tensor& labels,
                                   const v1::Tensor* features, const v1::Tensor* row_splits,
                                   bool replace, v1::DatasetInfo* info, const CallOptions& call,
                                   int64_t chunk_bytes, const v1::Tensor* scores) {
  CheckCall(call);
  const int64_t total = labels.shape_size() == 1 ? labels.shape(0) : -1;
  if (total < 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "labels must be 1-D [total] for a dataset");
  }
  const size_t label_item = total > 0 ? labels.data().size() / static_cast<size_t>(total) : 1;
  size_t feature_row = 0;
  if (features != nullptr) {
    if (features->shape_size() < 1 || features->shape(0) != total) {
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                          "features must be [total, ...] with total = " + std::to_string(total));
    }
    feature_row = total > 0 ? features->data().size() / static_cast<size_t>(total) : 0;
  }
  if (scores != nullptr && (scores->shape_size() != 1 || scores->shape(0) != total)) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "scores must be [total] with total = " + std::to_string(total));
  }
  const size_t score_item = scores != nullptr ? 4 : 0;
  if (chunk_bytes <= 0) {
    chunk_bytes = std::min<int64_t>(16 << 20, options_.max_send_message_bytes / 4);
  }
  const int64_t per = std::max<int64_t>(
      1, chunk_bytes / static_cast<int64_t>(label_item + feature_row + score_item));
  std::vector<std::pair<std::string, v1::Sampler::Stub*>> targets;
  grpc::Status status = DatasetTargets(call, &targets);
  if (!status.ok()) return status;
  if (targets.empty()) {  // any one replica: one target, or a shared repository
    return UploadDataset(*Pick().stub, name, labels, features, row_splits, replace, info, call, per,
                         label_item, feature_row, scores);
  }
  // No repository: every target keeps its own copy, so that a request sent to any finds it.
  std::vector<std::pair<std::string, grpc::Status>> failed;
  std::vector<std::string> succeeded;
  v1::DatasetInfo first;
  for (const auto& [target, stub] : targets) {
    v1::DatasetInfo one;
    status = UploadDataset(*stub, name, labels, features, row_splits, replace, &one, call, per,
                           label_item, feature_row, scores);
    if (status.ok()) {
      if (succeeded.empty()) first = one;
      succeeded.push_back(target);
    } else {
      failed.emplace_back(target, status);
    }
  }
  if (!failed.empty()) return FanoutStatus("CreateDataset " + name, failed, succeeded);
  *info = first;
  return grpc::Status::OK;
}

grpc::Status Client::UploadDataset(v1::Sampler::Stub& stub, const std::string& name,
                                   const v1::Tensor& labels, const v1::Tensor* features,
                                   const v1::Tensor* row_splits, bool replace,
                                   v1::DatasetInfo* info, const CallOptions& call, int64_t per,
                                   size_t label_item, size_t feature_row,
                                   const v1::Tensor* scores) {
  const int64_t total = labels.shape(0);
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  auto writer = stub.CreateDataset(context.get(), info);
  for (int64_t at = 0; at < total || at == 0; at += per) {
    const int64_t end = std::min(total, at + per);
    v1::DatasetChunk chunk;
    if (at == 0) {
      chunk.set_name(name);
      chunk.set_replace(replace);
      if (row_splits != nullptr) *chunk.mutable_row_splits() = *row_splits;
    }
    v1::Tensor* l = chunk.mutable_labels();
    l->set_dtype(labels.dtype());
    l->add_shape(end - at);
    l->set_data(labels.data().substr(static_cast<size_t>(at) * label_item,
                                     static_cast<size_t>(end - at) * label_item));
    if (features != nullptr) {
      v1::Tensor* f = chunk.mutable_features();
      f->set_dtype(features->dtype());
      f->add_shape(end - at);
      for (int d = 1; d < features->shape_size(); ++d) f->add_shape(features->shape(d));
      f->set_data(features->data().substr(static_cast<size_t>(at) * feature_row,
                                          static_cast<size_t>(end - at) * feature_row));
    }
    if (scores != nullptr) {
      v1::Tensor* sc = chunk.mutable_scores();
      sc->set_dtype(scores->dtype());
      sc->add_shape(end - at);
      sc->set_data(
          scores->data().substr(static_cast<size_t>(at) * 4, static_cast<size_t>(end - at) * 4));
    }
    if (!writer->Write(chunk)) break;  // the server ended the call; Finish says why
    if (end >= total) break;
  }
  writer->WritesDone();
  return Explain(writer->Finish());
}

// ---- Shared memory (docs/shared-memory.md) ----

SharedRegion::SharedRegion(int64_t size, const std::string& key_prefix) : size_(size) {
  static std::atomic<int> count{0};
  key_ = key_prefix + "-" + std::to_string(getpid()) + "-" + std::to_string(++count);
  const int fd = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw std::system_error(errno, std::generic_category(), "shm_open");
  if (ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const int e = errno;
    close(fd);
    shm_unlink(key_.c_str());
    throw std::system_error(e, std::generic_category(), "ftruncate");
  }
  void* map = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  close(fd);  // the mapping keeps the object
  if (map == MAP_FAILED) {
    shm_unlink(key_.c_str());
    throw std::system_error(e, std::generic_category(), "mmap");
  }
  data_ = static_cast<uint8_t*>(map);
}

SharedRegion::~SharedRegion() {
  munmap(data_, static_cast<size_t>(size_));
  shm_unlink(key_.c_str());
}

std::array<const uint8_t*, 6> SharedRegion::Tensors(const v1::SampleResponse& r,
                                                    int64_t offset) const {
  const v1::Tensor* tensors[] = {r.has_indices() ? &r.indices() : nullptr,
                                 r.has_labels() ? &r.labels() : nullptr,
                                 r.has_features() ? &r.features() : nullptr,
                                 r.has_num_positive() ? &r.num_positive() : nullptr,
                                 r.has_num_negative() ? &r.num_negative() : nullptr,
                                 r.has_num_per_class() ? &r.num_per_class() : nullptr};
  std::array<const uint8_t*, 6> out{};
  int64_t end = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (tensors[i] == nullptr) continue;
    int64_t bytes = static_cast<int64_t>(common::DTypeSize(tensors[i]->dtype()));
    for (int64_t d : tensors[i]->shape()) bytes *= d;
    const int64_t start = (end + 255) / 256 * 256;
    end = start + bytes;
    if (offset >= 0 && offset + end <= size_) out[i] = data_ + offset + start;
  }
  return out;
}

grpc::Status Client::RegisterRegion(const std::string& name, const SharedRegion& region,
                                    const CallOptions& call) {
  CheckCall(call);
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  v1::RegisterRegionRequest request;
  request.set_name(name);
  request.set_shm_key(region.key());
  request.set_byte_size(region.size());
  v1::RegionInfo info;
  return channels_.front().stub->RegisterRegion(context.get(), request, &info);
}

grpc::Status Client::UnregisterRegion(const std::string& name, const CallOptions& call) {
  CheckCall(call);
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  v1::UnregisterRegionRequest request;
  request.set_name(name);
  v1::UnregisterRegionResponse response;
  return channels_.front().stub->UnregisterRegion(context.get(), request, &response);
}

grpc::Status Client::DeleteDataset(const std::string& name, const CallOptions& call) {
  CheckCall(call);
  std::vector<std::pair<std::string, v1::Sampler::Stub*>> targets;
  grpc::Status status = DatasetTargets(call, &targets);
  if (!status.ok()) return status;
  const bool one = targets.empty();
  if (one) targets.emplace_back("", Pick().stub.get());
  std::vector<std::pair<std::string, grpc::Status>> failed, missing;
  std::vector<std::string> done;
  for (const auto& [target, stub] : targets) {
    auto context = NewContext(call.timeout.value_or(options_.default_timeout));
    v1::DeleteDatasetRequest request;
    request.set_name(name);
    v1::DeleteDatasetResponse response;
    status = stub->DeleteDataset(context.get(), request, &response);
    if (status.ok()) {
      done.push_back(target);
    } else if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      missing.emplace_back(target, status);
    } else {
      failed.emplace_back(target, status);
    }
  }
  if (one) return status;
  // A target that does not hold the dataset is done; NOT_FOUND only when none held it.
  if (!failed.empty()) {
    for (const auto& m : missing) done.push_back(m.first);
    return FanoutStatus("DeleteDataset " + name, failed, done);
  }
  if (done.empty()) return FanoutStatus("DeleteDataset " + name, missing, done);
  return grpc::Status::OK;
}

grpc::Status Client::ListDatasets(std::vector<v1::DatasetInfo>* datasets, const CallOptions& call) {
  CheckCall(call);
  std::vector<std::pair<std::string, v1::Sampler::Stub*>> targets;
  grpc::Status status = DatasetTargets(call, &targets);
  if (!status.ok()) return status;
  if (targets.empty()) targets.emplace_back("", Pick().stub.get());
  std::vector<std::pair<std::string, grpc::Status>> failed;
  std::vector<std::string> succeeded;
  datasets->clear();
  for (const auto& [target, stub] : targets) {
    auto context = NewContext(call.timeout.value_or(options_.default_timeout));
    v1::ListDatasetsResponse response;
    status = stub->ListDatasets(context.get(), v1::ListDatasetsRequest(), &response);
    if (!status.ok()) {
      failed.emplace_back(target, status);
      continue;
    }
    succeeded.push_back(target);
    // Each version (name and sha256) once, in the order first seen.
    for (const v1::DatasetInfo& d : response.datasets()) {
      bool seen = false;
      for (const v1::DatasetInfo& have : *datasets) {
        seen = seen || (have.name() == d.name() && have.sha256() == d.sha256());
      }
      if (!seen) datasets->push_back(d);
    }
  }
  if (failed.empty()) return grpc::Status::OK;
  datasets->clear();
  if (targets.size() == 1) return failed.front().second;
  return FanoutStatus("ListDatasets", failed, succeeded);
}

grpc::Status Client::CheckHealth(std::string* status, const std::string& service,
                                 const CallOptions& call) {
  CheckCall(call);
  auto context = NewContext(call.timeout.value_or(options_.default_timeout));
  auto stub = grpc::health::v1::Health::NewStub(Pick().channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status result = stub->Check(context.get(), request, &response);
  if (!result.ok()) return result;
  static const char* const kNames[] = {"UNKNOWN", "SERVING", "NOT_SERVING", "SERVICE_UNKNOWN"};
  const int code = response.status();
  *status = code >= 0 && code < 4 ? kNames[code] : "UNKNOWN";
  return result;
}

std::unique_ptr<SampleSession> Client::OpenSession(int window, const CallOptions& call) {
  CheckCall(call);
  Require(window >= 1, "OpenSession window = " + std::to_string(window) + ", must be >= 1");
  std::unique_ptr<SampleSession> session(new SampleSession(
      NewContext(call.stream_timeout), window, call.timeout.value_or(options_.default_timeout)));
  // Corked: the call starts with the first Send, so opening a session never blocks (a sync
  // stream otherwise waits here for a connection, out of the per-message deadline's reach).
  session->context_->set_initial_metadata_corked(true);
  session->stream_ = Pick().stub->SampleStream(session->context_.get());
  if (session->message_timeout_.count() > 0) {
    session->watchdog_ = std::thread([s = session.get()] { s->Watch(); });
  }
  return session;
}

// ---------------------------------------------------------------------- SampleSession

SampleSession::SampleSession(std::unique_ptr<grpc::ClientContext> context, int window,
                             std::chrono::milliseconds message_timeout)
    : context_(std::move(context)), window_(window), message_timeout_(message_timeout) {}

SampleSession::~SampleSession() {
  if (!finished_) Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_watch_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
}

void SampleSession::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_watch_ && !deadline_hit_) {
    if (sent_.empty()) {
      cv_.wait(lock);
      continue;
    }
    const auto due = sent_.front() + message_timeout_;
    if (std::chrono::steady_clock::now() < due) {
      cv_.wait_until(lock, due);
      continue;
    }
    // The oldest unanswered request is overdue: the server (or the path to it) is stuck.
    deadline_hit_ = true;
    broken_ = true;
    cv_.notify_all();
    lock.unlock();
    context_->TryCancel();
    return;
  }
}

int SampleSession::InFlight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

bool SampleSession::Send(const v1::SampleRequest& request) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return in_flight_ < window_ || broken_; });
    if (broken_ || send_closed_) return false;
    ++in_flight_;
    sent_.push_back(std::chrono::steady_clock::now());
    started_ = true;
  }
  cv_.notify_all();  // the watchdog
  if (stream_->Write(request)) return true;
  std::lock_guard<std::mutex> lock(mu_);
  broken_ = true;
  cv_.notify_all();
  return false;
}

void SampleSession::CloseSend() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (send_closed_) return;
    send_closed_ = true;
    empty_ = !started_;
  }
  if (empty_) {
    // No request was written, so the corked call never started and WritesDone would not
    // start it either (it sends no initial metadata): a Read would wait forever. An empty
    // stream has no responses; end the call here.
    context_->TryCancel();
    return;
  }
  stream_->WritesDone();
}

bool SampleSession::Receive(v1::SampleResponse* response) {
  const bool ok = stream_->Read(response);
  std::lock_guard<std::mutex> lock(mu_);
  if (ok) {
    --in_flight_;
    if (!sent_.empty()) sent_.pop_front();
  } else {
    broken_ = true;
    read_done_ = true;
    sent_.clear();  // the stream is over: nothing is awaited any more
  }
  cv_.notify_all();
  return ok;
}

grpc::Status SampleSession::Finish() {
  if (finished_) return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "already finished");
  finished_ = true;
  CloseSend();
  bool drained;
  {
    std::lock_guard<std::mutex> lock(mu_);
    drained = read_done_;
  }
  if (!drained) {
    // gRPC's Finish needs every message read; unread responses are dropped by cancelling.
    context_->TryCancel();
    v1::SampleResponse discard;
    while (stream_->Read(&discard)) {
    }
  }
  grpc::Status status = stream_->Finish();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (empty_) status = grpc::Status::OK;  // nothing was asked, nothing failed
    stop_watch_ = true;
    if (deadline_hit_) {
      status = grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED,
                            "no response within the per-message deadline of " +
                                std::to_string(message_timeout_.count()) +
                                " ms after sending a request (CallOptions.timeout); the "
                                "stream was cancelled");
    }
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  return status;
}

grpc::Status SampleSession::Run(const std::function<bool(v1::SampleRequest*)>& next,
                                const std::function<void(v1::SampleResponse&&)>& on_response) {
  // Exceptions from either callback cancel the call, join the writer and are rethrown here,
  // so neither thread ends the process with std::terminate.
  std::exception_ptr error;
  std::mutex error_mu;
  auto fail = [&] {
    {
      std::lock_guard<std::mutex> lock(error_mu);
      if (!error) error = std::current_exception();
    }
    context_->TryCancel();
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  };
  std::thread writer([&] {
    try {
      v1::SampleRequest request;
      while (next(&request)) {
        if (!Send(request)) break;
        request.Clear();
      }
    } catch (...) {
      fail();
    }
    CloseSend();
  });
  v1::SampleResponse response;
  while (Receive(&response)) {
    try {
      on_response(std::move(response));
    } catch (...) {
      fail();
    }
    response.Clear();
  }
  writer.join();
  const grpc::Status status = Finish();
  if (error) std::rethrow_exception(error);
  return status;
}

// ---- Classes as flags ----

namespace {

std::vector<std::string> Split(const std::string& text, char sep) {
  if (text.empty()) return {""};
  std::vector<std::string> out;
  std::string item;
  std::istringstream in(text);
  while (std::getline(in, item, sep)) out.push_back(item);
  if (!text.empty() && text.back() == sep) out.push_back("");
  return out;
}

// The whole of `text` as an int64 / a double; false when it is not one.
bool ParseInt64(const std::string& text, int64_t* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}
bool ParseDouble(const std::string& text, double* out) {
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || *end != '\0') return false;
  *out = v;
  return true;
}

std::string ParseLabelRanges(const std::string& value, v1::ClassSpec* out) {
  for (const std::string& range : Split(value, '/')) {
    // The separator is the first ':' after the first character (a leading '-' is a sign).
    const size_t colon = range.find(':', 1);
    int64_t lo = 0, hi = 0;
    const bool ok = colon == std::string::npos ? ParseInt64(range, &lo) && (hi = lo, true)
                                               : ParseInt64(range.substr(0, colon), &lo) &&
                                                     ParseInt64(range.substr(colon + 1), &hi);
    if (!ok) return "labels: '" + range + "' is not LO:HI or a single integer label";
    v1::LabelRange* r = out->add_labels();
    r->set_lo(lo);
    r->set_hi(hi);
  }
  return "";
}

std::string ParseSelection(const std::string& value, v1::ClassSpec* out) {
  static const std::pair<const char*, v1::Selection> kSelections[] = {
      {"uniform", v1::SELECTION_UNIFORM},
      {"weighted", v1::SELECTION_WEIGHTED},
      {"hardest", v1::SELECTION_HARDEST},
      {"mixed", v1::SELECTION_MIXED}};
  for (const auto& [name, selection] : kSelections) {
    if (value == name) {
      out->set_selection(selection);
      return "";
    }
  }
  return "selection: '" + value + "' is not uniform, weighted, hardest or mixed";
}

// One KEY[=VALUE] item of a class; `shares` counts the shares seen.
std::string ParseClassItem(const std::string& item, v1::ClassSpec* out, int* shares) {
  const size_t eq = item.find('=');
  const std::string key = item.substr(0, eq);
  const std::string value = eq == std::string::npos ? "" : item.substr(eq + 1);
  if (key == "rest" && (eq == std::string::npos || value == "true")) {
    ++*shares;
    out->set_rest(true);
    return "";
  }
  if (eq == std::string::npos) return "'" + item + "' is not KEY=VALUE (or rest)";
  if (key == "labels") return ParseLabelRanges(value, out);
  if (key == "selection") return ParseSelection(value, out);
  int64_t n = 0;
  double x = 0;
  if (key == "count") {
    if (!ParseInt64(value, &n)) return "count: '" + value + "' is not an integer";
    ++*shares;
    out->set_count(n);
    return "";
  }
  if (key == "fraction" || key == "hard_fraction") {
    if (!ParseDouble(value, &x)) return key + ": '" + value + "' is not a number";
    if (key == "fraction") {
      ++*shares;
      out->set_fraction(x);
    } else {
      out->set_hard_fraction(x);
    }
    return "";
  }
  return "unknown key '" + key + "' (labels, count, fraction, rest, selection, hard_fraction)";
}

}  // namespace

std::string ParseClassFlag(const std::string& text, v1::ClassSpec* out) {
  out->Clear();
  int shares = 0;
  for (const std::string& item : Split(text, ',')) {
    std::string error = ParseClassItem(item, out, &shares);
    if (!error.empty()) return "--class '" + text + "': " + error;
  }
  if (out->labels_size() == 0) return "--class '" + text + "': labels=... is required";
  if (shares != 1) {
    return "--class '" + text + "': give exactly one of count=N, fraction=F and rest (got " +
           std::to_string(shares) + ")";
  }
  return "";
}

std::string ParseFillOrderFlag(const std::string& text, v1::SamplingSpec* spec) {
  spec->clear_fill_order();
  if (text.empty()) return "";
  for (const std::string& item : Split(text, ',')) {
    int64_t c = 0;
    if (!ParseInt64(item, &c) || c < INT32_MIN || c > INT32_MAX) {
      return "--fill-order '" + text + "': '" + item + "' is not a class index";
    }
    spec->add_fill_order(static_cast<int32_t>(c));
  }
  return "";
}

}  // namespace gpusampler::client
