// scheduling's fair share: connections take turns in the queue, so one connection's
// flood cannot starve another's tiny request.
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

// Finding "one connection can starve another": the queue serves connections in turn, so a
// tiny request waits for about one launch, not for the whole flood ahead of it.
TEST(FairShareTest, TinyRequestIsAnsweredQuicklyDuringAnotherConnectionsFlood) {
  g_slow_ms = 400;
  ServerConfig c = TestConfig();
  c.max_batch_rows = 1;  // one request per launch, as long launches would be
  auto t = StartServer(c, Slow());
  auto flood_stub = OwnConnection(t);
  std::vector<std::unique_ptr<AsyncCall>> flood;
  for (int i = 0; i < 12; ++i) {
    flood.push_back(
        StartSample(flood_stub.get(), Request(100, kSlowK, 10 + i), std::chrono::seconds(60)));
  }
  // FIFO would now put the tiny request behind >= 8 launches of 400 ms (3.2 s).
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() >= 8; }));
  auto tiny_stub = OwnConnection(t);
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(tiny_stub->Sample(&ctx, Request(100, 4, 3), &resp).ok());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.5) << "the tiny request waited behind the other connection's flood";
  for (auto& f : flood) EXPECT_TRUE(f->status.get().ok());
}

}  // namespace
}  // namespace gpusampler::server::testing
