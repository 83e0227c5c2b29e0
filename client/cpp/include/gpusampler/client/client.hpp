// gpusampler C++ client: blocking Sample, a streaming session with a bounded window of
// requests in flight, server info and health. Wire types are the generated
// gpusampler::v1 messages (proto/gpusampler/v1/sampler.proto), so no tensor is copied
// on its way to or from the channel.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "gpusampler/v1/sampler.grpc.pb.h"

namespace gpusampler::client {

// Retries through the gRPC service config (gRFC A6): the channel itself re-sends a call
// that failed with one of `codes` before any response arrived, with exponential backoff
// and jitter. Streams are retried only until their first response.
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

// How to reach the service. Immutable once a Client is built.
struct ClientOptions {
  // One or more "host:port" (or any gRPC target URI). Several IP literals of one family
  // become one channel balanced with round_robin; otherwise one channel per target,
  // each round_robin over its resolved addresses, taken in turn per call.
  std::vector<std::string> targets;
  // Deadline of each call when CallOptions does not set one; zero means none.
  std::chrono::milliseconds default_timeout{30000};
  RetryPolicy retry;
  TlsOptions tls;
  std::string bearer_token;                   // sent as "authorization: Bearer <token>"
  int max_send_message_bytes = 256 << 20;     // largest request this client sends
  int max_receive_message_bytes = 256 << 20;  // largest response it accepts
  bool wait_for_ready = false;                // queue calls while the channel connects
};

// Per-call settings.
struct CallOptions {
  std::optional<std::chrono::milliseconds> timeout;  // overrides default_timeout
};

// The service config JSON the channel is built with (round_robin and the retry policy).
// Exposed for tests and for operators who want to see what the client asks of gRPC.
std::string BuildServiceConfigJson(const RetryPolicy& retry);

// Streaming session on one SampleStream call. Responses come in request order.
//
// `Send` blocks while `window` requests are unanswered, where a request counts as
// answered once `Receive` has returned its response; that bounds both the requests the
// server holds and the responses buffered here. Send and Receive may run on two threads
// (one sender, one receiver). On a single thread, call Receive whenever InFlight() ==
// window() before the next Send, or use Run(), which does both.
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
  SampleSession(std::unique_ptr<grpc::ClientContext> context, int window);

  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::SampleRequest, v1::SampleResponse>> stream_;
  const int window_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int in_flight_ = 0;
  bool broken_ = false;
  bool send_closed_ = false;
  bool read_done_ = false;
  bool finished_ = false;
};

// Thread-safe: one Client serves any number of threads.
class Client {
 public:
  explicit Client(ClientOptions options);

  // Samples one request. Blocking; retried per RetryPolicy.
  grpc::Status Sample(const v1::SampleRequest& request, v1::SampleResponse* response,
                      const CallOptions& call = {});
  // Opens a SampleStream with at most `window` (>= 1) requests in flight. The call's
  // deadline, if any, covers the whole stream.
  std::unique_ptr<SampleSession> OpenSession(int window = 8, const CallOptions& call = {});
  grpc::Status GetServerInfo(v1::ServerInfo* info, const CallOptions& call = {});
  // grpc.health.v1.Health/Check for `service` ("" is the whole server). `status` gets the
  // serving status name: "SERVING", "NOT_SERVING", "UNKNOWN" or "SERVICE_UNKNOWN".
  grpc::Status CheckHealth(std::string* status, const std::string& service = "",
                           const CallOptions& call = {});

  const ClientOptions& options() const { return options_; }

 private:
  struct Channel {
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::Sampler::Stub> stub;
  };
  const Channel& Pick();
  std::unique_ptr<grpc::ClientContext> NewContext(const CallOptions& call) const;

  ClientOptions options_;
  std::vector<Channel> channels_;
  std::atomic<uint64_t> next_{0};
};

// Targets for one gRPC channel: several IPv4 (or several IPv6) literals "a:p,b:q" become
// "ipv4:a:p,b:q"; anything else stays one target per channel. Exposed for tests.
std::vector<std::string> ChannelTargets(const std::vector<std::string>& targets);

}  // namespace gpusampler::client
