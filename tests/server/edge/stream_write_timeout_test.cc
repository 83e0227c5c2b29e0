// edge/sample_stream's write-stall check (--stream-write-timeout-ms): a never-reading
// stream cannot pin the byte budget.
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

// Finding "the budget can be pinned": a stream whose client never reads holds its answers'
// bytes only until --stream-write-timeout-ms, then ends RESOURCE_EXHAUSTED naming the flag.
TEST(PinnedBudgetTest, NeverReadingStreamEndsResourceExhaustedAndReleasesItsBytes) {
  ServerConfig c = TestConfig();
  c.stream_write_timeout_ms = 1000;
  auto t = StartServer(c);
  // Each 14-byte request asks for 1M padded slots: an 8 MB answer.
  RequestSpec pad;
  pad.rows = {{1}};
  pad.num_samples = 1 << 20;
  pad.fill = v1::FILL_POLICY_NONE;
  auto stub = OwnConnection(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto stream = stub->SampleStream(&ctx);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(stream->Write(MakeRequest(pad)));
  ASSERT_TRUE(stream->WritesDone());
  // Never read: the answers pile up, held by the budget, until the timeout releases them.
  EXPECT_TRUE(WaitFor([&] { return Metric(t, "gpusampler_inflight_bytes") > 16e6; },
                      std::chrono::seconds(20)));
  EXPECT_TRUE(WaitFor([&] { return Metric(t, "gpusampler_inflight_bytes") == 0; },
                      std::chrono::seconds(20)))
      << Metric(t, "gpusampler_inflight_bytes");
  // The status comes after what the client has buffered (a part of the first answer).
  v1::SampleResponse unread;
  while (stream->Read(&unread)) {
  }
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--stream-write-timeout-ms"), std::string::npos)
      << s.error_message();
  EXPECT_GE(
      Metric(t, "gpusampler_requests_total{code=\"RESOURCE_EXHAUSTED\",method=\"SampleStream\"}"),
      1);
  // The budget serves others again.
  grpc::ClientContext ok_ctx;
  v1::SampleResponse resp;
  EXPECT_TRUE(OwnConnection(t)->Sample(&ok_ctx, Request(200000, 64, 5), &resp).ok());
}

}  // namespace
}  // namespace gpusampler::server::testing
