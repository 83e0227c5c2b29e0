// lifecycle's probes on the metrics port: /readyz follows health, /healthz the process.
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

// Probes on the metrics port: /healthz while the process runs, /readyz only while SERVING.
TEST(ProbeTest, ReadyzFollowsHealthAndHealthzTheProcess) {
  auto t = StartServer(TestConfig());
  const int port = t.server->metrics_port();
  EXPECT_EQ(HttpStatus(port, "/healthz"), 200);
  EXPECT_EQ(HttpStatus(port, "/readyz"), 200);
  EXPECT_EQ(HttpGet(port, "/readyz"), "SERVING\n");
  EXPECT_EQ(HttpStatus(port, "/readyzX"), 404);
  t.server->Shutdown();  // draining, then stopped: not ready, still alive
  EXPECT_EQ(HttpStatus(port, "/readyz"), 503);
  EXPECT_EQ(HttpStatus(port, "/healthz"), 200);
}

}  // namespace
}  // namespace gpusampler::server::testing
