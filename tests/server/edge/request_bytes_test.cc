// edge/request_bytes: the --max-inflight-bytes budget (unary), a message that does not
// parse, and the tensor rank cap checked on the wire bytes with a bounded message.
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

#include "edge/request_bytes.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "overload_util.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(RequestBytesTest, FullBudgetIsResourceExhaustedWithPushbackAndFreesAfterwards) {
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
  EXPECT_NE(s.error_message().find("--max-inflight-bytes"), std::string::npos) << s.error_message();
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

TEST(RequestBytesTest, RequestLargerThanTheWholeBudgetIsNotRetried) {
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

TEST(RequestBytesTest, UnparseableUnaryRequestIsInvalidArgumentWithAMessage) {
  auto t = StartServer(TestConfig());
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, Request(100, 4, 1, "\xc3\x28"), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("does not parse"), std::string::npos) << s.error_message();
}

TEST(RequestBytesTest, HugeRankIsInvalidArgumentWithABoundedMessage) {
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
    EXPECT_NE(s.error_message().find(rank == 9 ? "9 dims, over the 8 allowed" : "more than 8 dims"),
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

// Issue 31, item 7: a tensor over protobuf's 50 MB first reservation is parsed into a string
// reserved at its size (protobuf alone grows it to 100 MB, peaking at 150 MB), and the
// message is the one protobuf parses; a truncated one is still INVALID_ARGUMENT.
TEST(RequestBytesTest, LargeTensorParsesIntoAnExactReservation) {
  v1::SampleRequest want = Request(1000, 4, 9, "big");
  want.mutable_features()->set_dtype(v1::DTYPE_INT8);
  want.mutable_features()->add_shape(1000);
  want.mutable_features()->add_shape(60000);
  want.mutable_features()->set_data(std::string(60000000, '\x07'));
  const std::string wire = want.SerializeAsString();
  // In 64 KiB slices, as gRPC hands a large message over.
  std::vector<grpc::Slice> slices;
  for (size_t at = 0; at < wire.size(); at += 65536) slices.emplace_back(wire.substr(at, 65536));
  grpc::ByteBuffer bytes(slices.data(), slices.size());
  v1::SampleRequest got;
  ASSERT_TRUE(ParseRequest(bytes, &got, "the request").ok());
  EXPECT_EQ(got.SerializeAsString(), wire);
  EXPECT_EQ(got.features().data().capacity(), got.features().data().size());
  // A message cut inside the large tensor does not parse.
  grpc::Slice cut(wire.substr(0, wire.size() - 1000));
  grpc::ByteBuffer truncated(&cut, 1);
  const Status s = ParseRequest(truncated, &got, "the request");
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("does not parse"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace gpusampler::server::testing
