// Issue 31, item 5 (fair share of bytes): edge/request_bytes' budget policy. A refused
// charge puts the budget under pressure for a second; meanwhile no connection grows past half
// the budget while another waits, a SampleStream that has not read an answer for
// --pressure-write-timeout-ms ends RESOURCE_EXHAUSTED, and a stream's default share is a
// quarter of the budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "edge/call_limits.hpp"
#include "edge/request_bytes.hpp"
#include "overload_util.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

using Refusal = ByteBudget::Refusal;

std::shared_ptr<std::atomic<int64_t>> NewConnection() {
  return std::make_shared<std::atomic<int64_t>>(0);
}

TEST(FairBudgetTest, NoConnectionGrowsPastHalfWhileAnotherWaits) {
  ByteBudget budget(1000);
  const auto t0 = ByteBudget::Clock::now();
  ByteOwner a(NewConnection(), 1);
  ByteOwner b(NewConnection(), 2);
  // Alone, a connection may take more than half.
  EXPECT_EQ(budget.TryCharge(600, &a, t0), Refusal::kNone);
  EXPECT_FALSE(budget.UnderPressure(t0));
  // Another connection is refused: the budget is under pressure, and `a` may not grow.
  EXPECT_EQ(budget.TryCharge(500, &b, t0), Refusal::kFull);
  EXPECT_TRUE(budget.UnderPressure(t0));
  EXPECT_EQ(budget.TryCharge(10, &a, t0), Refusal::kOverShare);
  EXPECT_EQ(budget.used(), 600);
  // `b` may, up to half.
  EXPECT_EQ(budget.TryCharge(300, &b, t0), Refusal::kNone);
  EXPECT_EQ(b.connection_bytes(), 300);
  EXPECT_EQ(budget.TryCharge(100, &b, t0), Refusal::kNone);
  EXPECT_EQ(budget.TryCharge(1, &b, t0), Refusal::kFull);
  EXPECT_EQ(budget.used(), 1000);
  // Once the pressure window has passed, `a` (still over half) may grow again.
  budget.Release(300, &b);
  const auto later = t0 + ByteBudget::kPressureWindow + std::chrono::milliseconds(1);
  EXPECT_FALSE(budget.UnderPressure(later));
  EXPECT_EQ(budget.TryCharge(10, &a, later), Refusal::kNone);
  EXPECT_EQ(a.connection_bytes(), 610);
  EXPECT_EQ(b.connection_bytes(), 100);
}

TEST(FairBudgetTest, OwnRefusalAndOversizeRequestsDoNotLimitTheShare) {
  ByteBudget budget(1000);
  const auto t0 = ByteBudget::Clock::now();
  ByteOwner a(NewConnection(), 1);
  // A charge over the whole budget can never succeed: nobody waits for it.
  EXPECT_EQ(budget.TryCharge(5000, &a, t0), Refusal::kFull);
  EXPECT_FALSE(budget.UnderPressure(t0));
  EXPECT_EQ(budget.TryCharge(700, &a, t0), Refusal::kNone);
  EXPECT_EQ(budget.TryCharge(400, &a, t0), Refusal::kFull);
  EXPECT_TRUE(budget.UnderPressure(t0));
  // The only one waiting is `a` itself: it is not held to half.
  EXPECT_EQ(budget.TryCharge(100, &a, t0), Refusal::kNone);
  // Charges without an owner (no connection known) wait like another connection.
  EXPECT_EQ(budget.TryCharge(500, nullptr, t0), Refusal::kFull);
  EXPECT_EQ(budget.TryCharge(1, &a, t0), Refusal::kOverShare);
}

TEST(FairBudgetTest, CallsOfOneConnectionShareItsBytesUntilTheyEnd) {
  ByteBudget budget(1 << 20);
  auto connection = NewConnection();
  ByteOwner first(connection, 1);
  ByteOwner second(connection, 1);
  EXPECT_EQ(budget.TryCharge(1000, &first), Refusal::kNone);
  EXPECT_EQ(budget.TryCharge(500, &second), Refusal::kNone);
  EXPECT_EQ(first.connection_bytes(), 1500);
  EXPECT_EQ(first.held(), 1000);
  budget.Release(200, &first);
  EXPECT_EQ(second.connection_bytes(), 1300);
  // A call that ends leaves the share with whatever it still holds (a unary call releases
  // its budget bytes without naming the owner, then its ticket closes the owner).
  second.Close();
  EXPECT_EQ(first.connection_bytes(), 800);
  second.Remove(100);  // closed: nothing changes
  EXPECT_EQ(first.connection_bytes(), 800);
  budget.Release(800, &first);
  EXPECT_EQ(connection->load(), 0);
  budget.Release(500);
  EXPECT_EQ(budget.used(), 0);
}

TEST(FairBudgetTest, ChargeUsesTheThreadsCurrentOwnerAndNamesTheNumbers) {
  ByteBudget budget(1000);
  // The calls' fixed overhead is charged to another budget: not part of this test.
  ByteBudget big(int64_t{1} << 40);
  CallLimits roomy(100, 100, &big);
  CallTicket a;
  CallTicket b;
  Status admitted;
  ASSERT_TRUE(a.Take(&roomy, "ipv4:127.0.0.1:1", &admitted));
  EXPECT_EQ(ByteOwner::Current(), a.owner());
  ASSERT_TRUE(Charge(budget, 600, "the request").ok());
  EXPECT_EQ(a.owner()->connection_bytes(), 600);
  ASSERT_TRUE(b.Take(&roomy, "ipv4:127.0.0.1:2", &admitted));
  EXPECT_EQ(ByteOwner::Current(), b.owner());
  const Status full = Charge(budget, 500, "the request");
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-inflight-bytes"), std::string::npos) << full.message();
  EXPECT_GT(full.retry_pushback_ms(), 0);
  {
    const ByteOwner::Scope scope(a.owner());
    const Status over = Charge(budget, 10, "the response");
    EXPECT_EQ(over.code(), Code::kResourceExhausted);
    EXPECT_NE(over.message().find("the response needs 10 bytes; this connection already holds "
                                  "600, and no connection may hold more than half (500) of the "
                                  "1000-byte budget while other calls wait (--max-inflight-bytes)"),
              std::string::npos)
        << over.message();
    EXPECT_GT(over.retry_pushback_ms(), 0);
  }
  EXPECT_EQ(ByteOwner::Current(), b.owner());  // the scope restored it
  // A connection is the same one for every call it makes (its own refusals are not
  // "another waits"), and its calls share its bytes.
  {
    CallTicket again;
    ASSERT_TRUE(again.Take(&roomy, "ipv4:127.0.0.1:1", &admitted));
    EXPECT_EQ(again.owner()->connection_id(), a.owner()->connection_id());
    EXPECT_NE(again.owner()->connection_id(), b.owner()->connection_id());
    EXPECT_EQ(again.owner()->connection_bytes(), 600);
  }
  // A refused admission leaves no owner for what this thread charges next.
  CallLimits none(1, 1, &big);
  CallTicket c;
  CallTicket d;
  ASSERT_TRUE(c.Take(&none, "x", &admitted));
  EXPECT_FALSE(d.Take(&none, "x", &admitted));
  EXPECT_EQ(ByteOwner::Current(), nullptr);
  budget.Release(600);
}

TEST(FairBudgetTest, StreamShareDefaultsToAQuarterOfTheBudget) {
  ServerConfig c;
  EXPECT_EQ(c.max_stream_inflight_bytes, 0);
  EXPECT_EQ(StreamInflightBytes(c), c.max_inflight_bytes / 4);
  c.max_inflight_bytes = 268435456;
  EXPECT_EQ(StreamInflightBytes(c), 67108864);
  c.max_stream_inflight_bytes = 1000;
  EXPECT_EQ(StreamInflightBytes(c), 1000);
}

// Through a server: a never-reading stream keeps its answers while nobody waits (the write
// timeout is 60 s), and ends RESOURCE_EXHAUSTED naming --pressure-write-timeout-ms once a
// request from another connection is refused for want of budget, which is then served.
TEST(FairBudgetTest, NeverReadingStreamLosesItsBytesWhenAnotherCallWaits) {
  ServerConfig c = TestConfig();
  c.max_inflight_bytes = 64 << 20;
  c.max_stream_inflight_bytes = 24 << 20;  // about three 8 MB answers: the budget stays free
  c.stream_write_timeout_ms = 60000;
  auto t = StartServer(c);
  RequestSpec pad;  // 14 bytes asking for 1M padded slots: an 8 MB answer
  pad.rows = {{1}};
  pad.num_samples = 1 << 20;
  pad.fill = v1::FILL_POLICY_NONE;
  auto stub = OwnConnection(t);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub->SampleStream(&ctx);
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(stream->Write(MakeRequest(pad)));
  ASSERT_TRUE(stream->WritesDone());
  ASSERT_TRUE(WaitFor([&] { return Metric(t, "gpusampler_inflight_bytes") > 16e6; },
                      std::chrono::seconds(30)));
  // No pressure: the stream keeps its bytes (only --stream-write-timeout-ms, 60 s, ends it).
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_GT(Metric(t, "gpusampler_inflight_bytes"), 16e6);
  // 2.5M INT64 labels: 40 MB held (received and parsed), more than is left.
  const v1::SampleRequest big = Request(2500000, 8, 7);
  auto other = OwnConnection(t);
  grpc::ClientContext refused_ctx;
  v1::SampleResponse resp;
  const grpc::Status refused = other->Sample(&refused_ctx, big, &resp);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  // The stall check ends the never-reader within about a second; the retry is served.
  std::string last;
  EXPECT_TRUE(WaitFor(
      [&] {
        grpc::ClientContext retry;
        const grpc::Status r = other->Sample(&retry, big, &resp);
        last = r.error_message();
        return r.ok();
      },
      std::chrono::seconds(30)))
      << "first: " << refused.error_message() << "; last: " << last
      << "; held: " << Metric(t, "gpusampler_inflight_bytes");
  v1::SampleResponse unread;
  while (stream->Read(&unread)) {
  }
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_NE(s.error_message().find("--pressure-write-timeout-ms"), std::string::npos)
      << s.error_message();
}

}  // namespace
}  // namespace gpusampler::server::testing
