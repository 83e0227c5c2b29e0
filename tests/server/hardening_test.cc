// Hostile and overloaded clients: the byte budget (unary and streams), stream byte
// backpressure, a message that does not parse (unary and in a stream), the tensor rank cap
// and bounded error messages, drain answering UNAVAILABLE, the exact metrics path.
#include <gtest/gtest.h>

#include <thread>

#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

v1::SampleRequest Request(int64_t n, int64_t k, uint64_t seed, const std::string& id = "") {
  RequestSpec r;
  r.rows = {RandomRow(n, seed)};
  r.num_samples = k;
  r.seed = seed;
  r.request_id = id;
  return MakeRequest(r);
}

int64_t Pushback(const grpc::ClientContext& ctx) {
  const auto& trailers = ctx.GetServerTrailingMetadata();
  const auto it = trailers.find("grpc-retry-pushback-ms");
  if (it == trailers.end()) return 0;
  return std::stoll(std::string(it->second.data(), it->second.size()));
}

TEST(BudgetTest, FullBudgetIsResourceExhaustedWithPushbackAndFreesAfterwards) {
  ServerConfig c = TestConfig();
  // One request of 100k INT64 labels holds about 2 * 800 KB (received and parsed): two do
  // not fit in 2.5 MB.
  c.max_inflight_bytes = 2500000;
  auto t = StartServer(c);
  t.server->scheduler().SetPausedForTesting(true);
  auto first = StartSample(t.stub.get(), Request(100000, 8, 1));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, Request(100000, 8, 2), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-inflight-bytes"), std::string::npos)
      << s.error_message();
  EXPECT_GT(Pushback(ctx), 0);
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_TRUE(first->status.get().ok());
  // The budget is free again once the answer is sent.
  grpc::ClientContext again;
  EXPECT_TRUE(WaitFor([&] {
    grpc::ClientContext c2;
    return t.stub->Sample(&c2, Request(100000, 8, 3), &resp).ok();
  }));
}

TEST(BudgetTest, RequestLargerThanTheWholeBudgetIsNotRetried) {
  ServerConfig c = TestConfig();
  c.max_inflight_bytes = 1000000;
  auto t = StartServer(c);
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, Request(200000, 8, 1), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << s.error_message();
  EXPECT_EQ(Pushback(ctx), -1);
  // The response counts too: a small request whose answer is over the budget.
  grpc::ClientContext ctx2;
  const grpc::Status r = t.stub->Sample(&ctx2, Request(1000, 200000, 1), &resp);
  EXPECT_EQ(r.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.error_message();
  EXPECT_NE(r.error_message().find("the response needs"), std::string::npos) << r.error_message();
}

TEST(StreamTest, ByteBackpressureStopsReadingThenAllAreAnswered) {
  ServerConfig c = TestConfig();
  c.max_stream_inflight = 32;
  c.max_stream_inflight_bytes = 100000;  // under one request of 20k INT64 labels (2 x 160 KB)
  auto t = StartServer(c);
  Scheduler& sched = t.server->scheduler();
  sched.SetPausedForTesting(true);
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(stream->Write(Request(20000, 8, i, std::to_string(i))));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 1; }));
  // Requests stay unread while the stream holds its byte allowance.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(sched.queue_depth(), 1);
  sched.SetPausedForTesting(false);
  stream->WritesDone();
  v1::SampleResponse resp;
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(stream->Read(&resp));
    EXPECT_EQ(resp.request_id(), std::to_string(i));
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(StreamTest, BadMessageEndsTheStreamWithInvalidArgumentAfterEarlierResponses) {
  auto t = StartServer(TestConfig());
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  ASSERT_TRUE(stream->Write(Request(100, 4, 1, "a")));
  ASSERT_TRUE(stream->Write(Request(100, 4, 2, "b")));
  // proto3 strings must be UTF-8: the server cannot parse this one.
  stream->Write(Request(100, 4, 3, "\xff\xfe"));
  stream->Write(Request(100, 4, 4, "d"));
  stream->WritesDone();
  std::vector<std::string> ids;
  v1::SampleResponse resp;
  while (stream->Read(&resp)) ids.push_back(resp.request_id());
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(ids, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_NE(s.error_message().find("message 3"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("does not parse"), std::string::npos) << s.error_message();
}

TEST(ParseTest, UnparseableUnaryRequestIsInvalidArgumentWithAMessage) {
  auto t = StartServer(TestConfig());
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, Request(100, 4, 1, "\xc3\x28"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("does not parse"), std::string::npos) << s.error_message();
}

TEST(RankTest, HugeRankIsInvalidArgumentWithABoundedMessage) {
  auto t = StartServer(TestConfig());
  for (const int rank : {9, 100000}) {
    v1::SampleRequest r = Request(100, 4, 1);
    r.mutable_labels()->clear_shape();
    for (int i = 0; i < rank; ++i) r.mutable_labels()->add_shape(1);
    r.mutable_labels()->set_data(std::string(8, '\0'));
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, r, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
    // Rank 9 is refused by validation; rank 100000 from the wire bytes, before parsing.
    EXPECT_NE(s.error_message().find("labels.shape has"), std::string::npos)
        << s.error_message().substr(0, 200);
    EXPECT_NE(s.error_message().find(rank == 9 ? "9 dims, over the 8 allowed"
                                               : "more than 8 dims"),
              std::string::npos)
        << s.error_message().substr(0, 200);
    EXPECT_LT(s.error_message().size(), 1100u);
  }
  // Features with many trailing dims: the same.
  RequestSpec spec;
  spec.rows = {RandomRow(10, 1)};
  spec.feature_dim = 1;
  v1::SampleRequest r = MakeRequest(spec);
  for (int i = 0; i < 50000; ++i) r.mutable_features()->add_shape(1);
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, r, &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_LT(s.error_message().size(), 1100u);
}

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

TEST(MetricsEndpointTest, OnlyTheExactPathIsServed) {
  auto t = StartServer(TestConfig());
  EXPECT_NE(HttpGet(t.server->metrics_port(), "/metrics").find("gpusampler_"), std::string::npos);
  EXPECT_EQ(HttpGet(t.server->metrics_port(), "/metricsX").find("gpusampler_"), std::string::npos);
  EXPECT_EQ(HttpGet(t.server->metrics_port(), "/metrics/x").find("gpusampler_"),
            std::string::npos);
}

}  // namespace
}  // namespace gpusampler::server::testing
