#include "call_metrics.hpp"

#include <grpc/grpc.h>
#include <grpc/support/alloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "job.hpp"
#include "metrics.hpp"

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
};

class CallMetrics final : public grpc::experimental::Interceptor {
 public:
  CallMetrics(Metrics* metrics, const Route& route)
      : metrics_(metrics), route_(route), arrival_(Clock::now()) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS)) {
      const double seconds = std::chrono::duration<double>(Clock::now() - arrival_).count();
      if (route_.kind == Kind::kUnary) {
        const auto code = static_cast<Code>(methods->GetSendStatus().error_code());
        metrics_->RecordRequest(route_.method, code, seconds);
        if (code == Code::kResourceExhausted) {
          // Shedding or a limit: the retry pushback the service put in the trailers says.
          int64_t pushback = 0;
          if (const auto* trailers = methods->GetSendTrailingMetadata()) {
            const auto it = trailers->find("grpc-retry-pushback-ms");
            if (it != trailers->end()) pushback = std::atoll(it->second.c_str());
          }
          metrics_->RecordResourceExhausted(route_.method, pushback);
        }
      } else {
        metrics_->RecordStream(seconds);
      }
    }
    methods->Proceed();
  }

 private:
  Metrics* const metrics_;
  const Route route_;
  const Clock::time_point arrival_;
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

grpc::experimental::Interceptor* CallMetricsFactory::CreateServerInterceptor(
    grpc::experimental::ServerRpcInfo* info) {
  seen_->calls.fetch_add(1, std::memory_order_relaxed);
  for (const Route& r : kRoutes) {
    if (std::strcmp(info->method(), r.path) == 0) return new CallMetrics(metrics_, r);
  }
  return nullptr;  // health, reflection: not accounted here
}

std::function<int64_t()> CallMetricsFactory::CallsSeen() const {
  return [seen = seen_] { return seen->calls.load(std::memory_order_relaxed); };
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

int64_t TransportRejections::Sample() {
  // Started first: a call handed over between the two reads then makes the difference
  // smaller, never larger.
  const int64_t started = JsonInt(TakeString(grpc_channelz_get_server(id_)), "callsStarted");
  const int64_t seen = calls_seen_();
  // Calls started in gRPC's core and not (yet) handed to the C++ server.
  recent_.push_back(std::max<int64_t>(0, started - seen));
  if (recent_.size() > window_) recent_.pop_front();
  if (recent_.size() == window_) {
    counted_ = std::max(counted_, *std::min_element(recent_.begin(), recent_.end()));
  }
  return counted_;
}

}  // namespace gpusampler::server
