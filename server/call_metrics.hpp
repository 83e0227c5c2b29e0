// Per-call accounting from the moment gRPC hands a call to the C++ server, before the request
// is parsed or a reactor runs: a server interceptor (one per call) that records, for the unary
// Sampler methods, gpusampler_requests_total{method,code} and
// gpusampler_request_duration_seconds{method} from that arrival to the final status, and
// for SampleStream the stream's lifetime (gpusampler_stream_duration_seconds). A SampleStream's
// messages are counted one by one by its reactor (service.cc). Calls that fail before the
// handler runs (a request that does not parse) are counted too.
//
// Calls that gRPC refuses before any of this (a message over the transport limit, which is
// above --max-message-bytes) never reach the C++ layer. TransportRejections counts them:
// calls the server's channelz node saw start, less the calls handed to the interceptor
// factory. Thread-safe.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

namespace gpusampler::server {

class Metrics;

class CallMetricsFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `metrics` must outlive every call of the server the factory is installed on.
  explicit CallMetricsFactory(Metrics* metrics) : metrics_(metrics), seen_(new Seen) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Calls handed to the C++ server so far (every method). Stays valid after the factory
  // moved into the server builder.
  std::function<int64_t()> CallsSeen() const;

 private:
  struct Seen {
    std::atomic<int64_t> calls{0};
  };
  Metrics* const metrics_;
  std::shared_ptr<Seen> seen_;
};

// The ids of the gRPC servers of this process known to channelz.
std::vector<intptr_t> ChannelzServerIds();

// Calls gRPC accepted but never handed to the service, from channelz. Sample() is called by
// the metrics updater; a call counts only once it has been missing from the C++ layer for
// `window` consecutive samples, so requests still arriving are not counted. Thread-compatible.
class TransportRejections {
 public:
  // `channelz_id`: this server's (ChannelzServerIds after BuildAndStart, less those before).
  TransportRejections(intptr_t channelz_id, std::function<int64_t()> calls_seen, int window = 3)
      : id_(channelz_id), calls_seen_(std::move(calls_seen)), window_(window) {}
  // The rejections counted so far (never decreases).
  int64_t Sample();

 private:
  const intptr_t id_;
  const std::function<int64_t()> calls_seen_;
  const size_t window_;
  std::deque<int64_t> recent_;
  int64_t counted_ = 0;
};

}  // namespace gpusampler::server
