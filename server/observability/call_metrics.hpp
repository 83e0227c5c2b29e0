// Per-call accounting from the moment gRPC hands a call to the C++ server, before the request
// is parsed or a reactor runs: a server interceptor (one per call) that records, for the unary
// Sampler methods, gpusampler_requests_total{method,code} and
// gpusampler_request_duration_seconds{method} from that arrival to the final status, and
// for SampleStream the stream's lifetime (gpusampler_stream_duration_seconds). A SampleStream's
// messages are counted one by one by its reactor (service.cc). Calls that fail before the
// handler runs (a request that does not parse) are counted too.
//
// Calls that gRPC refuses before any of this (a message over the transport limit, which is
// above --max-message-bytes; a client gone before its request arrived) never reach the C++
// layer. TransportRejections counts them: calls the server's channelz node saw start, less
// the calls handed to the C++ layer, those the TLS metadata check refused (counted in
// requests_total by RecordRefused) and those still arriving (their HTTP/2 streams are open:
// channelz's per-connection stream counts, less the calls the C++ layer is serving), so that
// a large request still on its way is not counted. Thread-safe.
#pragma once

#include <grpcpp/support/server_interceptor.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gpusampler::server {

class Metrics;
class Status;

// What one server's calls did, shared by the interceptor factory, the TLS metadata check and
// the transport accounting. `metrics` is set before the server starts.
struct CallLedger {
  Metrics* metrics = nullptr;
  std::atomic<int64_t> handed{0};    // calls handed to the C++ server
  std::atomic<int64_t> finished{0};  // of those, the ones that sent their status
  std::atomic<int64_t> refused{0};   // calls the TLS metadata check refused
  // A call refused by the metadata check: counted in requests_total (method from `path`).
  void RecordRefused(const std::string& path, const Status& status);
};

class CallMetricsFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  // `ledger->metrics` must outlive every call of the server the factory is installed on.
  explicit CallMetricsFactory(std::shared_ptr<CallLedger> ledger) : ledger_(std::move(ledger)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override;

  // Calls handed to the C++ server so far (every method). Stays valid after the factory
  // moved into the server builder.
  std::function<int64_t()> CallsSeen() const;

 private:
  std::shared_ptr<CallLedger> ledger_;
};

// The ids of the gRPC servers of this process known to channelz.
std::vector<intptr_t> ChannelzServerIds();

// Calls gRPC ended without handing them to the service, from channelz. Sample() is called by
// the metrics updater; a call counts only once it has been missing from the C++ layer for
// `window` consecutive samples. Thread-compatible.
class TransportRejections {
 public:
  // `channelz_id`: this server's (ChannelzServerIds after BuildAndStart, less those before).
  TransportRejections(intptr_t channelz_id, std::shared_ptr<CallLedger> ledger, int window = 3)
      : id_(channelz_id), ledger_(std::move(ledger)), window_(window) {}
  // The rejections counted so far (never decreases).
  int64_t Sample();

 private:
  const intptr_t id_;
  const std::shared_ptr<CallLedger> ledger_;
  const size_t window_;
  std::deque<int64_t> recent_;
  int64_t counted_ = 0;
};

}  // namespace gpusampler::server
