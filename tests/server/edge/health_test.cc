// edge/health (grpc.health.v1): NOT_SERVING from the port's opening until warm-up is done,
// Watch following the status, unknown services, and NOT_SERVING while draining.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "gpusampler/kernels/sampler.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

std::atomic<bool> g_warm_up_done{false};

// A CPU backend whose first Sample (the warm-up) takes 1.5 s, then sets g_warm_up_done.
class SlowWarmUpBackend final : public kernels::Backend {
 public:
  SlowWarmUpBackend() : cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    if (first_) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    cpu_->Sample(batch);
    if (first_) g_warm_up_done = true;
    first_ = false;
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
  bool first_ = true;
};

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(HealthTest, NotServingFromThePortOpeningUntilWarmUpIsDone) {
  g_warm_up_done = false;
  ServerConfig config = TestConfig();
  config.device = "cpu";  // the test backend runs on the host, as StartServer does
  const int port = FreePort();
  config.address = "127.0.0.1:" + std::to_string(port);
  config.port_file = ::testing::TempDir() + "/gpusampler-health-ports";
  std::remove(config.port_file.c_str());
  Server server(config, [](int) { return std::make_unique<SlowWarmUpBackend>(); });
  std::atomic<bool> started{false};
  std::thread start([&] {
    EXPECT_TRUE(server.Start().ok());
    started = true;
  });
  // Reconnect at once after a refused connection (the default backoff is about 1 s).
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 5);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 20);
  auto channel =
      grpc::CreateCustomChannel(config.address, grpc::InsecureChannelCredentials(), args);
  int not_serving = 0;
  // Poll as fast as possible until the port file appears (written once SERVING).
  while (!started && !std::ifstream(config.port_file).good()) {
    const std::string h = HealthStatus(channel);
    if (h == "NOT_SERVING") ++not_serving;
    if (h == "SERVING") EXPECT_TRUE(g_warm_up_done.load()) << "SERVING before warm-up finished";
  }
  start.join();
  EXPECT_GT(not_serving, 0) << "health was never reachable during the 1.5 s warm-up";
  EXPECT_TRUE(WaitFor([&] { return HealthStatus(channel) == "SERVING"; }));
  server.Shutdown();
  std::remove(config.port_file.c_str());
}

TEST(HealthTest, WatchFollowsTheStatusAndUnknownServicesAreNotFound) {
  auto t = StartServer(TestConfig());
  auto stub = grpc::health::v1::Health::NewStub(t.channel);
  {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service("no.such.Service");
    grpc::health::v1::HealthCheckResponse resp;
    EXPECT_EQ(stub->Check(&ctx, req, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
  }
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("gpusampler.v1.Sampler");
  auto watch = stub->Watch(&ctx, req);
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  std::thread drain([&] { t.server->Shutdown(); });
  ASSERT_TRUE(watch->Read(&resp));
  EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(watch->Read(&resp));  // ended by the shutdown
  watch->Finish();
  drain.join();
}

TEST(HealthTest, ServingAfterStartNotServingWhileDraining) {
  ServerConfig config = TestConfig();
  auto t = StartServer(config);
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
  // A request held in the queue keeps the drain going while we look.
  t.server->scheduler().SetPausedForTesting(true);
  RequestSpec r;
  r.rows = {RandomRow(1000, 1)};
  auto held = StartSample(t.stub.get(), MakeRequest(r));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  std::thread drain([&] { t.server->Shutdown(); });
  EXPECT_TRUE(WaitFor([&] { return HealthStatus(t.channel) == "NOT_SERVING"; }));
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status refused = t.stub->Sample(&ctx, MakeRequest(r), &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  t.server->scheduler().SetPausedForTesting(false);
  drain.join();
  // Accepted before the drain: answered.
  const grpc::Status s = held->status.get();
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(held->response.indices().shape(1), 8);
}

}  // namespace
}  // namespace gpusampler::server::testing
