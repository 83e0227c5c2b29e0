// Helpers of the server tests: in-process servers on port 0, request builders, response
// decoding, the golden cases, async calls, and a tiny HTTP GET for the metrics endpoint.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "gpusampler/v1/sampler.grpc.pb.h"
#include "lifecycle/server.hpp"
#include "scheduling/scheduler.hpp"

namespace gpusampler::server::testing {

// The device the suite runs on: $GPUSAMPLER_TEST_DEVICE (a --device value), default "cpu".
std::string TestDevice();
// The device id of the first worker: "cpu", "cuda-sim", or "cuda:N" for the first CUDA
// device selected.
std::string TestDeviceId();
// What ServerInfo.backend and the build_info metric say: "cpu", "cuda-sim" or "cuda".
std::string TestBackend();
bool TestOnCpu();
// CPU or cuda-sim: host memory, no GPU in use (no NVML gauges, cuda_driver "none").
bool TestOnHost();

// 127.0.0.1:0 for gRPC and metrics, TestDevice(), one worker (a CPU worker of two threads,
// or one stream per CUDA device).
ServerConfig TestConfig();

struct TestServer {
  std::unique_ptr<Server> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Sampler::Stub> stub;
};
// Starts a server (asserting success) and connects a stub. With a backend factory (test
// backends on the host) the device is always "cpu".
TestServer StartServer(const ServerConfig& config, BackendFactory factory = nullptr);

// A request with labels `rows` (encoded as `dtype`, [B, N]; [N] when `one_dim`).
struct RequestSpec {
  std::vector<std::vector<int64_t>> rows;
  int64_t num_samples = 8;
  std::optional<double> positive_fraction;
  std::optional<int64_t> positive_label, negative_label;
  v1::FillPolicy fill = v1::FILL_POLICY_UNSPECIFIED;
  std::optional<uint64_t> seed = 1;
  v1::DType dtype = v1::DTYPE_INT64;
  bool one_dim = false;
  bool ragged = false;      // labels [total] + row_splits
  int64_t feature_dim = 0;  // > 0: FLOAT32 features [.., feature_dim] with a known pattern
  std::string request_id;
};
v1::SampleRequest MakeRequest(const RequestSpec& spec);

// The feature value of element i of row r, dimension d (exact in float32).
float FeatureValue(int64_t r, int64_t i, int64_t d);

template <typename T>
std::vector<T> Values(const v1::Tensor& t) {
  std::vector<T> out(t.data().size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), t.data().data(), out.size() * sizeof(T));
  return out;
}

// Random labels in {-1, 0, 1}.
std::vector<int64_t> RandomRow(int64_t n, uint64_t seed);

struct Golden {
  std::string name;
  RequestSpec request;
  std::vector<std::vector<int64_t>> indices;
  std::vector<int32_t> num_positive, num_negative;
};
std::vector<Golden> LoadGolden();
// Checks `response` against `g` (indices, counts, labels at the indices).
void ExpectGolden(const Golden& g, const v1::SampleResponse& response, const std::string& where);

// A unary call running in the background.
struct AsyncCall {
  grpc::ClientContext context;
  v1::SampleRequest request;
  v1::SampleResponse response;
  std::promise<grpc::Status> promise;
  std::future<grpc::Status> status = promise.get_future();
};
std::unique_ptr<AsyncCall> StartSample(
    v1::Sampler::Stub* stub, v1::SampleRequest request,
    std::chrono::milliseconds timeout = std::chrono::seconds(30));

// grpc.health.v1 Check of service "" (the server as a whole): "SERVING", "NOT_SERVING", or
// the error.
std::string HealthStatus(const std::shared_ptr<grpc::Channel>& channel);

// GET http://127.0.0.1:port/path; the body, or "" on failure.
std::string HttpGet(int port, const std::string& path);

// Polls `pred` every millisecond up to `timeout`; true once it holds.
template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return pred();
}

}  // namespace gpusampler::server::testing
