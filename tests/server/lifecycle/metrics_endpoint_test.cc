// lifecycle's metrics endpoint: only the exact path is served, and idle connections
// cannot stall a scrape or a probe.
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
#include "overload_util.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(MetricsEndpointTest, OnlyTheExactPathIsServed) {
  auto t = StartServer(TestConfig());
  EXPECT_NE(HttpGet(t.server->metrics_port(), "/metrics").find("gpusampler_"), std::string::npos);
  EXPECT_EQ(HttpGet(t.server->metrics_port(), "/metricsX").find("gpusampler_"), std::string::npos);
  EXPECT_EQ(HttpGet(t.server->metrics_port(), "/metrics/x").find("gpusampler_"), std::string::npos);
}

// Finding "/metrics stalls behind idle connections": with 16 idle TCP connections held, a
// scrape and both probes still answer within a second.
TEST(MetricsEndpointTest, ScrapeAndProbesAnswerWithinASecondWith16IdleConnections) {
  auto t = StartServer(TestConfig());
  const int port = t.server->metrics_port();
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);  // connected, sends nothing
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(HttpStatus(port, path), 200) << path;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0)
        << path << " stalled behind idle connections";
  }
  for (int fd : idle) close(fd);
}

}  // namespace
}  // namespace gpusampler::server::testing
