// gpusampler C++ client: blocking Sample, a streaming session with a bounded window of
// requests in flight, server info and health. Wire types are the generated
// gpusampler::v1 messages (proto/gpusampler/v1/sampler.proto), so no tensor is copied
// on its way to or from the channel.
#pragma once

#include <grpcpp/grpcpp.h>
#include <array>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gpusampler/v1/sampler.grpc.pb.h"

namespace gpusampler::client {

// Retries through the gRPC service config (gRFC A6): the channel itself re-sends a call
// that failed with one of `codes` before any response arrived, with exponential backoff
// and jitter. Streams are retried only until their first response. The server's
// `grpc-retry-pushback-ms` trailer overrides the backoff: -1 (a request over a server limit)
// stops the retries at once, a positive value (queue full) is the delay before the next try.
struct RetryPolicy {
  bool enabled = true;
  int max_attempts = 4;             // first try included; gRPC caps this at 5
  double initial_backoff_s = 0.05;  // first delay (randomised in [0, delay])
  double max_backoff_s = 2.0;       // cap on the delay
  double backoff_multiplier = 2.0;  // growth per attempt
  std::vector<std::string> codes = {"UNAVAILABLE", "RESOURCE_EXHAUSTED"};
};

// TLS for the channel. `enabled` with empty `root_certs_pem` uses the system roots.
struct TlsOptions {
  bool enabled = false;
  std::string root_certs_pem;        // CA bundle that signs the server certificate
  std::string client_cert_pem;       // mutual TLS: this client's certificate chain
  std::string client_key_pem;        // mutual TLS: its private key
  std::string server_name_override;  // expected name in the server certificate (tests)
};

// How to reach the service. Immutable once a Client is built; the constructor throws
// std::invalid_argument naming the field when a value is out of range.
struct ClientOptions {
  // One or more "host:port" (or any gRPC target URI). Several IP literals of one family
  // become one channel balanced with round_robin; otherwise one channel per target,
  // each round_robin over its resolved addresses, taken in turn per call.
  std::vector<std::string> targets;
  // Deadline of each call, and of each message of a session (see OpenSession), when
  // CallOptions does not set one; zero means none.
  std::chrono::milliseconds default_timeout{30000};
  RetryPolicy retry;
  TlsOptions tls;
  std::string bearer_token;                   // sent as "authorization: Bearer <token>"
  int max_send_message_bytes = 256 << 20;     // largest request this client sends
  int max_receive_message_bytes = 256 << 20;  // largest response it accepts
  // false: a call fails at once with UNAVAILABLE while no server can be reached (after the
  // retries). true: it waits for the channel to connect, up to its deadline (start-up).
  bool wait_for_ready = false;
  // HTTP/2 keepalive pings while calls are open; zero disables. A server that does not ack
  // a ping within keepalive_timeout is treated as gone: open calls fail with UNAVAILABLE
  // instead of hanging. The server refuses pings more often than every 10 s.
  std::chrono::milliseconds keepalive_time{30000};
  std::chrono::milliseconds keepalive_timeout{10000};
  // Extra integer channel arguments (GRPC_ARG_* names), applied after everything above.
  std::vector<std::pair<std::string, int>> channel_args;
};

// Per-call settings. Negative durations are refused (std::invalid_argument).
struct CallOptions {
  // Overrides default_timeout: the deadline of a unary call, and the per-message deadline
  // of a session. Zero means none.
  std::optional<std::chrono::milliseconds> timeout;
  // Sessions only: a deadline for the whole stream (default: none).
  std::optional<std::chrono::milliseconds> stream_timeout;
};

// The service config JSON the channel is built with (round_robin and the retry policy).
// Exposed for tests and for operators who want to see what the client asks of gRPC.
std::string BuildServiceConfigJson(const RetryPolicy& retry);

// "OK", "CANCELLED", ..., "UNAUTHENTICATED"; "CODE_<n>" for a value gRPC does not define.
std::string StatusCodeName(grpc::StatusCode code);

// Streaming session on one SampleStream call. Responses come in request order.
//
// `Send` blocks while `window` requests are unanswered, where a request counts as
// answered once `Receive` has returned its response; that bounds both the requests the
// server holds and the responses buffered here. Send and Receive may run on two threads
// (one sender, one receiver). On a single thread, call Receive whenever InFlight() ==
// window() before the next Send, or use Run(), which does both.
//
// Per-message deadline: every response must arrive within the session's message timeout
// of its request's Send; otherwise the call is cancelled and Finish() returns
// DEADLINE_EXCEEDED saying so. Time with no request in flight does not count, so a slow
// producer or consumer is never a deadline.
class SampleSession {
 public:
  ~SampleSession();
  SampleSession(const SampleSession&) = delete;
  SampleSession& operator=(const SampleSession&) = delete;

  // Sends one request; false once the stream is broken (Finish() tells why).
  bool Send(const v1::SampleRequest& request);
  // No more requests. Idempotent.
  void CloseSend();
  // Next response in request order; false when the stream has ended.
  bool Receive(v1::SampleResponse* response);
  // Waits for the end of the stream and returns its status. Call once, after Receive
  // has returned false (responses not yet received are dropped).
  grpc::Status Finish();

  int window() const { return window_; }
  int InFlight() const;

  // Sends every request `next` produces (it returns false when done) with at most
  // `window` in flight, hands each response to `on_response` in order on the calling
  // thread, and returns the stream's status.
  grpc::Status Run(const std::function<bool(v1::SampleRequest*)>& next,
                   const std::function<void(v1::SampleResponse&&)>& on_response);

 private:
  friend class Client;
  SampleSession(std::unique_ptr<grpc::ClientContext> context, int window,
                std::chrono::milliseconds message_timeout);
  void Watch();  // the watchdog thread of the per-message deadline

  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SampleRequest, v1::SampleResponse>> stream_;
  const int window_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  bool broken_ = false;
  bool send_closed_ = false;
  bool started_ = false;  // a request was written: the (corked) call has started
  bool empty_ = false;    // closed before any request: the call never started
  bool read_done_ = false;
  bool finished_ = false;
  const std::chrono::milliseconds message_timeout_;         // zero: none
  std::deque<std::chrono::steady_clock::time_point> sent_;  // unanswered requests' Send times
  bool deadline_hit_ = false;
  bool stop_watch_ = false;
  std::thread watchdog_;
};

// Shared memory (docs/shared-memory.md): a POSIX shm object this process
// created and mapped, for a server on the same host to write answers into. Removed
// (shm_unlink) and unmapped by the destructor; unregister it first (Client::UnregisterRegion).
// Not copyable; thread-compatible.
class SharedRegion {
 public:
  // Creates "<key_prefix>-<pid>-<n>" of `size` bytes; throws std::system_error on failure.
  explicit SharedRegion(int64_t size, const std::string& key_prefix = "/gpusampler");
  ~SharedRegion();
  SharedRegion(const SharedRegion&) = delete;
  SharedRegion& operator=(const SharedRegion&) = delete;

  const std::string& key() const { return key_; }
  int64_t size() const { return size_; }
  uint8_t* data() const { return data_; }
  // Where each tensor of `response` (answered with output_region at `offset`) lies in the
  // region, in SPEC's layout; null for an absent tensor or one outside the region.
  // `fields`: indices, labels, features, num_positive, num_negative, num_per_class.
  std::array<const uint8_t*, 6> Tensors(const v1::SampleResponse& response,
                                        int64_t offset = 0) const;

 private:
  std::string key_;
  int64_t size_ = 0;
  uint8_t* data_ = nullptr;
};

// Thread-safe: one Client serves any number of threads.
class Client {
 public:
  explicit Client(ClientOptions options);

  // Samples one request. Blocking; retried per RetryPolicy. A request over
  // max_send_message_bytes fails at once with RESOURCE_EXHAUSTED naming that option.
  grpc::Status Sample(const v1::SampleRequest& request, v1::SampleResponse* response,
                      const CallOptions& call = {});
  // Opens a SampleStream with at most `window` (>= 1; else std::invalid_argument) requests
  // in flight. `call.timeout` (default: default_timeout) is the per-message deadline;
  // `call.stream_timeout` (default: none) bounds the whole stream.
  std::unique_ptr<SampleSession> OpenSession(int window = 8, const CallOptions& call = {});
  grpc::Status GetServerInfo(v1::ServerInfo* info, const CallOptions& call = {});
  // grpc.health.v1.Health/Check for `service` ("" is the whole server). `status` gets the
  // serving status name: "SERVING", "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN".
  grpc::Status CheckHealth(std::string* status, const std::string& service = "",
                           const CallOptions& call = {});

  // Resident datasets. CreateDataset uploads labels [total] (1-D, integer or BOOL) with
  // optional features [total, ...], row_splits INT64 [B+1] and scores FLOAT32 [total]
  // (docs/semantics.md, "Classes"), in chunks of at most
  // `chunk_bytes` (0: a quarter of max_send_message_bytes, at most 16 MiB); the server keeps
  // nothing unless the whole upload succeeds. `call.timeout` bounds the whole upload.
  // Sample a dataset with Sample() and a request whose `dataset` field names it.
  //
  // Several targets: when the servers share a dataset repository
  // (ServerInfo.dataset_repository, asked once per Client), one replica is enough and these
  // calls go to any one. Without a repository every server keeps its own datasets, so
  // CreateDataset and DeleteDataset go to every target given, and ListDatasets lists every
  // target (each version of a dataset once). When some targets fail, the status is the
  // first failure's code, and its message names every failed target and why (and the ones
  // that succeeded, which keep their copy). DeleteDataset counts a target that does not
  // hold the dataset as done; NOT_FOUND only when none held it.
  grpc::Status CreateDataset(const std::string& name, const v1::Tensor& labels,
                             const v1::Tensor* features, const v1::Tensor* row_splits, bool replace,
                             v1::DatasetInfo* info, const CallOptions& call = {},
                             int64_t chunk_bytes = 0, const v1::Tensor* scores = nullptr);
  grpc::Status DeleteDataset(const std::string& name, const CallOptions& call = {});
  grpc::Status ListDatasets(std::vector<v1::DatasetInfo>* datasets, const CallOptions& call = {});

  // Shared memory: registers `region` under `name` with the (first) target, which must run
  // on this host with --allow-shared-memory; then set SampleRequest.output_region.name to
  // `name`. UnregisterRegion releases the server's mapping.
  grpc::Status RegisterRegion(const std::string& name, const SharedRegion& region,
                              const CallOptions& call = {});
  grpc::Status UnregisterRegion(const std::string& name, const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }
  // True when some channel holds a connection (GRPC_CHANNEL_READY). After a failed call,
  // false means the server could not be reached at all (tools: "connection failure").
  bool Connected() const;

 private:
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Sampler::Stub> stub;
  };
  const Channel& Pick();
  std::unique_ptr<grpc::ClientContext> NewContext(
      std::optional<std::chrono::milliseconds> timeout) const;
  grpc::Status UploadDataset(v1::Sampler::Stub& stub, const std::string& name,
                             const v1::Tensor& labels, const v1::Tensor* features,
                             const v1::Tensor* row_splits, bool replace, v1::DatasetInfo* info,
                             const CallOptions& call, int64_t per, size_t label_item,
                             size_t feature_row, const v1::Tensor* scores);
  // gRPC's own size-limit message, with the limit that produced it named.
  grpc::Status Explain(grpc::Status status) const;

  // The targets that dataset calls must reach one by one (see CreateDataset): empty when
  // any one replica is enough, else each target with its stub; or a failed GetServerInfo.
  grpc::Status DatasetTargets(const CallOptions& call,
                              std::vector<std::pair<std::string, v1::Sampler::Stub*>>* out);

  ClientOptions options_;
  std::vector<Channel> channels_;
  // One channel per target given, for dataset calls without a repository: channels_ itself
  // when each target has its own, else channels made here (gRPC connects them on first use).
  std::vector<Channel> address_channels_;
  std::atomic<uint64_t> next_{0};
  std::atomic<int> repository_{-1};  // -1 not asked yet, else ServerInfo.dataset_repository
};

// Targets for one gRPC channel: several IPv4 (or several IPv6) literals "a:p,b:q" become
// "ipv4:a:p,b:q"; anything else stays one target per channel. Exposed for tests.
std::vector<std::string> ChannelTargets(const std::vector<std::string>& targets);

// Classes (docs/semantics.md, "Classes") as gpusampler-cli's flags write them
// (client/README.md). A class is comma-separated items: `labels=LO:HI[/LO:HI...]` (a single
// value V means V:V; required), exactly one share of `count=N`, `fraction=F` and `rest`,
// then optionally `selection=uniform|weighted|hardest|mixed` and `hard_fraction=F`; e.g.
// "labels=1:80,fraction=0.25" or "labels=0,rest,selection=mixed,hard_fraction=0.5".
// Returns "" and fills `out`, or says what is wrong with `text`. Thread-safe (pure).
std::string ParseClassFlag(const std::string& text, v1::ClassSpec* out);

// "1,0" as fill_order class indices ("" is an empty fill order). "" or what is wrong.
std::string ParseFillOrderFlag(const std::string& text, v1::SamplingSpec* spec);

}  // namespace gpusampler::client
