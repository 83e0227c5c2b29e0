#include "observability/call_metrics.hpp"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/job.hpp"
#include "core/status.hpp"
#include "observability/metrics.hpp"

namespace gpusampler::server {
namespace {

using grpc::experimental::InterceptionHookPoints;

enum class Kind { kUnary, kStream };

struct Route {
  const char* path;
  Method method;
  Kind kind;
};

// The methods accounted here, from the call's arrival. CreateDataset is a client stream
// with one final status, so it counts like a unary call.
constexpr Route kRoutes[] = {
    {"/gpusampler.v1.Sampler/Sample", Method::kSample, Kind::kUnary},
    {"/gpusampler.v1.Sampler/GetServerInfo", Method::kGetServerInfo, Kind::kUnary},
    {"/gpusampler.v1.Sampler/SampleStream", Method::kSampleStream, Kind::kStream},
    {"/gpusampler.v1.Sampler/CreateDataset", Method::kCreateDataset, Kind::kUnary},
    {"/gpusampler.v1.Sampler/DeleteDataset", Method::kDeleteDataset, Kind::kUnary},
    {"/gpusampler.v1.Sampler/ListDatasets", Method::kListDatasets, Kind::kUnary},
    {"/gpusampler.v1.Sampler/RegisterRegion", Method::kRegisterRegion, Kind::kUnary},
    {"/gpusampler.v1.Sampler/UnregisterRegion", Method::kUnregisterRegion, Kind::kUnary},
    {"/gpusampler.v1.Sampler/ListRegions", Method::kListRegions, Kind::kUnary},
};

const Route* FindRoute(const char* path) {
  for (const Route& r : kRoutes) {
    if (std::strcmp(path, r.path) == 0) return &r;
  }
  return nullptr;
}

// `route` null: a call not accounted here (health, reflection), only counted as finished.
class CallMetrics final : public grpc::experimental::Interceptor {
 public:
  CallMetrics(CallLedger* ledger, const Route* route)
      : ledger_(ledger), route_(route), arrival_(Clock::now()) {}
  ~CallMetrics() override {
    if (!finished_) ledger_->finished.fetch_add(1, std::memory_order_relaxed);
  }

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double seconds = std::chrono::duration<double>(Clock::now() - arrival_).count();
      if (route_ == nullptr) {
      } else if (route_->kind == Kind::kUnary) {
        const auto code = static_cast<Code>(methods->GetSendStatus().error_code());
        ledger_->metrics->RecordRequest(route_->method, code, seconds);
        if (code == Code::kResourceExhausted) {
          // Shedding or a limit: the retry pushback the service put in the trailers says.
          int64_t pushback = 0;
          if (const auto* trailers = methods->GetSendTrailingMetadata()) {
            const auto it = trailers->find("grpc-retry-pushback-ms");
            if (it != trailers->end()) pushback = std::atoll(it->second.c_str());
          }
          ledger_->metrics->RecordResourceExhausted(route_->method, pushback);
        }
      } else {
        ledger_->metrics->RecordStream(seconds);
      }
      if (!finished_) ledger_->finished.fetch_add(1, std::memory_order_relaxed);
      finished_ = true;
    }
    methods->Proceed();
  }

 private:
  CallLedger* const ledger_;
  const Route* const route_;
  const Clock::time_point arrival_;
  bool finished_ = false;
};

// The number after `"key":"` in channelz JSON (int64 values are strings there); 0 if absent.
int64_t JsonInt(const std::string& json, const std::string& key) {
  const std::string k = "\"" + key + "\":\"";
  const size_t at = json.find(k);
  return at == std::string::npos ? 0 : std::strtoll(json.c_str() + at + k.size(), nullptr, 10);
}

std::string TakeString(char* s) {
  std::string out = s ? s : "";
  gpr_free(s);
  return out;
}

}  // namespace

void CallLedger::RecordRefused(const std::string& path, const Status& status) {
  refused.fetch_add(1, std::memory_order_relaxed);
  const Route* route = FindRoute(path.c_str());
  if (route && metrics) metrics->RecordRequest(route->method, status.code(), 0.0);
}

grpc::experimental::Interceptor* CallMetricsFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  ledger_->handed.fetch_add(1, std::memory_order_relaxed);
  return new CallMetrics(ledger_.get(), FindRoute(info->method()));
}

std::function<int64_t()> CallMetricsFactory::CallsSeen() const {
  return [ledger = ledger_] { return ledger->handed.load(std::memory_order_relaxed); };
}

std::vector<intptr_t> ChannelzServerIds() {
  std::vector<intptr_t> ids;
  intptr_t next = 0;
  while (true) {
    const std::string json = TakeString(grpc_channelz_get_servers(next));
    size_t at = 0;
    const std::string key = "\"serverId\":\"";
    while ((at = json.find(key, at)) != std::string::npos) {
      at += key.size();
      ids.push_back(static_cast<intptr_t>(std::strtoll(json.c_str() + at, nullptr, 10)));
    }
    if (ids.empty() || json.find("\"end\":true") != std::string::npos) break;
    next = *std::max_element(ids.begin(), ids.end()) + 1;
  }
  return ids;
}

namespace {

// The ids after `"key":"` in channelz JSON.
std::vector<intptr_t> JsonIds(const std::string& json, const std::string& key) {
  std::vector<intptr_t> ids;
  const std::string k = "\"" + key + "\":\"";
  for (size_t at = 0; (at = json.find(k, at)) != std::string::npos;) {
    at += k.size();
    ids.push_back(static_cast<intptr_t>(std::strtoll(json.c_str() + at, nullptr, 10)));
  }
  return ids;
}

// HTTP/2 streams open now in the server's live connections (started less ended, per socket).
int64_t OpenStreams(intptr_t server_id) {
  int64_t open = 0;
  intptr_t next = 0;
  while (true) {
    const std::string json = TakeString(grpc_channelz_get_server_sockets(server_id, next, 0));
    const std::vector<intptr_t> ids = JsonIds(json, "socketId");
    for (const intptr_t id : ids) {
      const std::string socket = TakeString(grpc_channelz_get_socket(id));
      open += std::max<int64_t>(0, JsonInt(socket, "streamsStarted") -
                                       JsonInt(socket, "streamsSucceeded") -
                                       JsonInt(socket, "streamsFailed"));
    }
    if (ids.empty() || json.find("\"end\":true") != std::string::npos) break;
    next = *std::max_element(ids.begin(), ids.end()) + 1;
  }
  return open;
}

}  // namespace

int64_t TransportRejections::Sample() {
  // Calls started in gRPC's core, less those handed to the C++ server or refused by the TLS
  // metadata check, less those still arriving: their streams are open, beyond the streams of
  // calls the C++ server is still serving. Read in this order, a call moving on between two
  // reads makes the difference smaller, never larger.
  const int64_t started = JsonInt(TakeString(grpc_channelz_get_server(id_)), "callsStarted");
  const int64_t handed = ledger_->handed.load(std::memory_order_relaxed);
  const int64_t refused = ledger_->refused.load(std::memory_order_relaxed);
  const int64_t serving = handed - ledger_->finished.load(std::memory_order_relaxed);
  const int64_t arriving = std::max<int64_t>(0, OpenStreams(id_) - serving);
  recent_.push_back(std::max<int64_t>(0, started - handed - refused - arriving));
  if (recent_.size() > window_) recent_.pop_front();
  if (recent_.size() == window_) {
    counted_ = std::max(counted_, *std::min_element(recent_.begin(), recent_.end()));
  }
  return counted_;
}

}  // namespace gpusampler::server
