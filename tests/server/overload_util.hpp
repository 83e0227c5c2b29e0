// Helpers of the overload and hostile-client suites (split from hardening_test.cc): a
// request of one row, a scrape's series, a connection of its own, an HTTP status, a slow
// backend and a call's retry pushback. Header-only, for the suites that include it.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpusampler/kernels/sampler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {

inline v1::SampleRequest Request(int64_t n, int64_t k, uint64_t seed, const std::string& id = "") {
  RequestSpec r;
  r.rows = {RandomRow(n, seed)};
  r.num_samples = k;
  r.seed = seed;
  r.request_id = id;
  return MakeRequest(r);
}

// The value of `series` (exact name and labels) in a scrape; -1 when absent.
inline double Value(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

inline double Metric(const TestServer& t, const std::string& series) {
  return Value(HttpGet(t.server->metrics_port(), "/metrics"), series);
}

// A channel of its own (its own TCP connection: a connection is the unit of fair share).
inline std::unique_ptr<v1::Sampler::Stub> OwnConnection(const TestServer& t) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  return v1::Sampler::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                grpc::InsecureChannelCredentials(), args));
}

// The HTTP status code of GET http://127.0.0.1:port/path; 0 on failure.
inline int HttpStatus(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (out.rfind("HTTP/1.", 0) != 0 || out.size() < 12) return 0;
  return std::atoi(out.c_str() + 9);
}

// A CPU backend whose launches holding a row with K = kSlowK take `g_slow_ms` each; others
// run at once. g_slow_running counts slow launches begun.
inline constexpr int64_t kSlowK = 999;
inline std::atomic<int> g_slow_ms{300};
inline std::atomic<int> g_slow_running{0};
class SlowBackend final : public kernels::Backend {
 public:
  SlowBackend() : cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (batch.rows[r].num_samples == kSlowK) {
        ++g_slow_running;
        std::this_thread::sleep_for(std::chrono::milliseconds(g_slow_ms.load()));
        break;
      }
    }
    cpu_->Sample(batch);
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};
inline BackendFactory Slow() {
  return [](int) { return std::make_unique<SlowBackend>(); };
}

inline int64_t Pushback(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto it = trailers.find("grpc-retry-pushback-ms");
  if (it == trailers.end()) return 0;
  return std::stoll(std::string(it->second.data(), it->second.size()));
}

}  // namespace gpusampler::server::testing
