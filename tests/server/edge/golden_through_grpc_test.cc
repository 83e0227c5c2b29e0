// Golden samples end to end over gRPC (in-process server on port 0): through unary and
// streaming calls, alone and fused with other requests into one launch.
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

TEST(GoldenThroughGrpc, UnaryEachAlone) {
  auto t = StartServer(TestConfig());
  const auto golden = LoadGolden();
  ASSERT_EQ(golden.size(), 13u);
  for (const auto& g : golden) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, MakeRequest(g.request), &resp);
    ASSERT_TRUE(s.ok()) << g.name << ": " << s.error_message();
    ExpectGolden(g, resp, "unary");
    EXPECT_EQ(resp.timing().batch_rows(), static_cast<int64_t>(g.indices.size())) << g.name;
  }
}

TEST(GoldenThroughGrpc, StreamAllOnOneStream) {
  auto t = StartServer(TestConfig());
  const auto golden = LoadGolden();
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  for (const auto& g : golden) ASSERT_TRUE(stream->Write(MakeRequest(g.request)));
  stream->WritesDone();
  for (const auto& g : golden) {
    v1::SampleResponse resp;
    ASSERT_TRUE(stream->Read(&resp)) << g.name;
    ExpectGolden(g, resp, "stream");
  }
  v1::SampleResponse extra;
  EXPECT_FALSE(stream->Read(&extra));
  const grpc::Status s = stream->Finish();
  EXPECT_TRUE(s.ok()) << s.error_message();
}

// Every golden case queued while the worker is paused, then fused into one launch with
// filler requests of other shapes, dtypes and specs; unary and streaming together.
TEST(GoldenThroughGrpc, FusedWithOtherRequests) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 4096;
  auto t = StartServer(config);
  t.server->scheduler().SetPausedForTesting(true);
  const auto golden = LoadGolden();
  std::vector<std::unique_ptr<AsyncCall>> calls;
  int64_t queued = 0;
  for (size_t j = 0; j < golden.size(); ++j) {
    RequestSpec filler;
    filler.rows = {RandomRow(100 + 37 * static_cast<int64_t>(j), j), RandomRow(50, j + 100)};
    filler.ragged = true;
    filler.num_samples = 5 + static_cast<int64_t>(j);
    filler.dtype = j % 2 ? v1::DTYPE_INT8 : v1::DTYPE_INT32;
    filler.seed = 1000 + j;
    calls.push_back(StartSample(t.stub.get(), MakeRequest(filler)));
    calls.push_back(StartSample(t.stub.get(), MakeRequest(golden[j].request)));
    queued += 2;
  }
  // The same golden cases on a stream, queued behind the unary calls.
  grpc::ClientContext sctx;
  auto stream = t.stub->SampleStream(&sctx);
  for (const auto& g : golden) ASSERT_TRUE(stream->Write(MakeRequest(g.request)));
  stream->WritesDone();
  queued += static_cast<int64_t>(golden.size());
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == queued; }))
      << t.server->scheduler().queue_depth();
  const int64_t launches = t.server->scheduler().launches();
  t.server->scheduler().SetPausedForTesting(false);
  for (size_t j = 0; j < golden.size(); ++j) {
    AsyncCall& call = *calls[2 * j + 1];
    ASSERT_TRUE(call.status.get().ok()) << golden[j].name;
    ExpectGolden(golden[j], call.response, "fused unary");
    EXPECT_GT(call.response.timing().batch_rows(), static_cast<int64_t>(golden[j].indices.size()))
        << golden[j].name << " was not fused";
    ASSERT_TRUE(calls[2 * j]->status.get().ok());
  }
  for (const auto& g : golden) {
    v1::SampleResponse resp;
    ASSERT_TRUE(stream->Read(&resp));
    ExpectGolden(g, resp, "fused stream");
  }
  EXPECT_TRUE(stream->Finish().ok());
  // 39 requests, 82 rows: one launch.
  EXPECT_EQ(t.server->scheduler().launches() - launches, 1);
}

}  // namespace
}  // namespace gpusampler::server::testing
