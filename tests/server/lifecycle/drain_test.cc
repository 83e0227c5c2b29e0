// lifecycle's drain: open streams and queued calls get answers, never CANCELLED.
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

TEST(DrainTest, OpenStreamsAndQueuedCallsGetAnswersNeverCancelled) {
  ServerConfig c = TestConfig();
  c.shutdown_grace_seconds = 20;
  auto t = StartServer(c);
  Scheduler& sched = t.server->scheduler();
  // An idle stream that already got one answer, and a queued unary call.
  grpc::ClientContext idle_ctx;
  auto idle = t.stub->SampleStream(&idle_ctx);
  ASSERT_TRUE(idle->Write(Request(100, 4, 1, "x")));
  v1::SampleResponse resp;
  ASSERT_TRUE(idle->Read(&resp));
  sched.SetPausedForTesting(true);
  auto queued = StartSample(t.stub.get(), Request(100, 4, 2));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 1; }));
  std::thread drain([&] { t.server->Shutdown(); });
  // The idle stream is ended by the drain, with UNAVAILABLE (clients retry that).
  EXPECT_FALSE(idle->Read(&resp));
  const grpc::Status s = idle->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  sched.SetPausedForTesting(false);
  EXPECT_TRUE(queued->status.get().ok());
  drain.join();
}

}  // namespace
}  // namespace gpusampler::server::testing
