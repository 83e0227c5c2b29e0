// Issue 31, item 2 (every connection bounded): --max-calls in all and
// --max-concurrent-streams per connection, enforced by the service (edge/call_limits), each
// live call's fixed overhead charged to the byte budget, and --first-message-timeout-ms for a
// SampleStream that sends nothing.
#include "edge/call_limits.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "edge/request_bytes.hpp"
#include "overload_util.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(CallLimitsTest, PerConnectionThenTotal) {
  ByteBudget budget(1 << 20);
  CallLimits limits(3, 2, &budget);
  EXPECT_TRUE(limits.Admit("ipv4:127.0.0.1:1").ok());
  EXPECT_TRUE(limits.Admit("ipv4:127.0.0.1:1").ok());
  const Status third = limits.Admit("ipv4:127.0.0.1:1");
  EXPECT_EQ(third.code(), Code::kResourceExhausted);
  EXPECT_NE(third.message().find("has 2 calls open, the most --max-concurrent-streams = 2"),
            std::string::npos)
      << third.message();
  EXPECT_GT(third.retry_pushback_ms(), 0);
  EXPECT_TRUE(limits.Admit("ipv4:127.0.0.1:2").ok());
  const Status fourth = limits.Admit("ipv4:127.0.0.1:3");
  EXPECT_EQ(fourth.code(), Code::kResourceExhausted);
  EXPECT_NE(fourth.message().find("3 calls are open, the most --max-calls = 3"), std::string::npos)
      << fourth.message();
  EXPECT_GT(fourth.retry_pushback_ms(), 0);
  EXPECT_EQ(limits.open(), 3);
  EXPECT_EQ(budget.used(), 3 * kCallOverheadBytes);
  limits.Leave("ipv4:127.0.0.1:1");
  EXPECT_TRUE(limits.Admit("ipv4:127.0.0.1:3").ok());
  limits.Leave("ipv4:127.0.0.1:1");
  limits.Leave("ipv4:127.0.0.1:2");
  limits.Leave("ipv4:127.0.0.1:3");
  EXPECT_EQ(limits.open(), 0);
  EXPECT_EQ(budget.used(), 0);
}

TEST(CallLimitsTest, OverheadIsChargedToTheBudget) {
  ByteBudget budget(kCallOverheadBytes + kCallOverheadBytes / 2);
  CallLimits limits(100, 100, &budget);
  EXPECT_TRUE(limits.Admit("a").ok());
  const Status second = limits.Admit("a");
  EXPECT_EQ(second.code(), Code::kResourceExhausted);
  EXPECT_NE(second.message().find("--max-inflight-bytes"), std::string::npos) << second.message();
  EXPECT_EQ(limits.open(), 1);  // the refused call holds nothing
  limits.Leave("a");
  EXPECT_EQ(budget.used(), 0);
}

TEST(CallLimitsTest, TicketLeavesOnce) {
  ByteBudget budget(1 << 20);
  CallLimits limits(1, 1, &budget);
  {
    CallTicket ticket;
    Status status;
    ASSERT_TRUE(ticket.Take(&limits, "p", &status)) << status.message();
    CallTicket refused;
    EXPECT_FALSE(refused.Take(&limits, "q", &status));
    EXPECT_EQ(limits.open(), 1);
  }
  EXPECT_EQ(limits.open(), 0);
  EXPECT_EQ(budget.used(), 0);
}

TEST(CallLimitsServerTest, CallsBeyondMaxCallsAreRefusedWithPushback) {
  ServerConfig c = TestConfig();
  c.max_calls = 2;
  auto t = StartServer(c);
  // Two open streams (each on its own connection) hold both calls.
  auto a = OwnConnection(t), b = OwnConnection(t), third = OwnConnection(t);
  grpc::ClientContext ca, cb;
  auto sa = a->SampleStream(&ca);
  auto sb = b->SampleStream(&cb);
  RequestSpec spec;
  spec.rows = {{1, 0, 1, 0}};
  v1::SampleResponse resp;
  ASSERT_TRUE(sa->Write(MakeRequest(spec)) && sa->Read(&resp));
  ASSERT_TRUE(sb->Write(MakeRequest(spec)) && sb->Read(&resp));
  grpc::ClientContext cu;
  cu.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  const grpc::Status refused = third->Sample(&cu, MakeRequest(spec), &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("--max-calls = 2"), std::string::npos)
      << refused.error_message();
  EXPECT_GT(Pushback(cu), 0);
  // Once one stream ends, a call gets in again.
  ASSERT_TRUE(sa->WritesDone());
  EXPECT_TRUE(sa->Finish().ok());
  EXPECT_TRUE(WaitFor([&] {
    grpc::ClientContext again;
    again.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return third->Sample(&again, MakeRequest(spec), &resp).ok();
  }));
  ASSERT_TRUE(sb->WritesDone());
  EXPECT_TRUE(sb->Finish().ok());
}

TEST(CallLimitsServerTest, StreamWithoutAMessageEndsDeadlineExceeded) {
  ServerConfig c = TestConfig();
  c.first_message_timeout_ms = 300;
  auto t = StartServer(c);
  auto stub = OwnConnection(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->SampleStream(&ctx);
  v1::SampleResponse resp;
  EXPECT_FALSE(stream->Read(&resp));  // nothing sent: the server ends the stream
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << s.error_message();
  EXPECT_NE(s.error_message().find("--first-message-timeout-ms"), std::string::npos)
      << s.error_message();
  EXPECT_TRUE(WaitFor([&] { return Metric(t, "gpusampler_inflight_bytes") == 0; }));
}

TEST(CallLimitsServerTest, StreamThatSentAMessageMayPauseLonger) {
  ServerConfig c = TestConfig();
  c.first_message_timeout_ms = 200;
  auto t = StartServer(c);
  auto stub = OwnConnection(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->SampleStream(&ctx);
  RequestSpec spec;
  spec.rows = {{1, 0, 1, 0}};
  v1::SampleResponse resp;
  ASSERT_TRUE(stream->Write(MakeRequest(spec)) && stream->Read(&resp));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));  // a pause after the first
  ASSERT_TRUE(stream->Write(MakeRequest(spec)) && stream->Read(&resp));
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());
}

}  // namespace
}  // namespace gpusampler::server::testing
