// SampleStream through the service (in-process server on port 0): pipelined and answered in
// request order; the first failure ends the stream after the earlier responses.
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

TEST(ServiceStreamTest, PipelinedAndAnsweredInRequestOrder) {
  ServerConfig config = TestConfig();
  config.max_stream_inflight = 32;
  config.max_batch_rows = 7;  // several launches, so completion order could differ
  config.cpu_workers = 2;
  auto t = StartServer(config);
  t.server->scheduler().SetPausedForTesting(true);
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  constexpr int kRequests = 24;
  std::vector<v1::SampleRequest> reqs;
  for (int i = 0; i < kRequests; ++i) {
    RequestSpec r;
    // Later requests are smaller, so they would finish first if order were not kept.
    r.rows = {RandomRow(4000 - 150 * i, static_cast<uint64_t>(i))};
    r.num_samples = 3 + i;
    r.seed = static_cast<uint64_t>(i);
    r.request_id = "req-" + std::to_string(i);
    reqs.push_back(MakeRequest(r));
    ASSERT_TRUE(stream->Write(reqs.back()));
  }
  // Pipelining: every request of the stream is in the server at once, none answered.
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == kRequests; }));
  t.server->scheduler().SetPausedForTesting(false);
  stream->WritesDone();
  for (int i = 0; i < kRequests; ++i) {
    v1::SampleResponse resp;
    ASSERT_TRUE(stream->Read(&resp)) << i;
    EXPECT_EQ(resp.request_id(), "req-" + std::to_string(i));
    EXPECT_EQ(resp.indices().shape(1), 3 + i);
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST(ServiceStreamTest, FirstFailureEndsStreamAfterEarlierResponses) {
  auto t = StartServer(TestConfig());
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  const int64_t rows_before = t.server->scheduler().launched_rows();
  RequestSpec good;
  good.rows = {RandomRow(1000, 1)};
  good.request_id = "ok-0";
  ASSERT_TRUE(stream->Write(MakeRequest(good)));
  good.request_id = "ok-1";
  ASSERT_TRUE(stream->Write(MakeRequest(good)));
  RequestSpec bad = good;
  bad.num_samples = 0;
  bad.request_id = "bad";
  ASSERT_TRUE(stream->Write(MakeRequest(bad)));
  good.request_id = "after";
  stream->Write(MakeRequest(good));  // may fail: the server may have ended the stream
  stream->WritesDone();
  v1::SampleResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "ok-0");
  ASSERT_TRUE(stream->Read(&resp));
  EXPECT_EQ(resp.request_id(), "ok-1");
  EXPECT_FALSE(stream->Read(&resp));
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("spec.num_samples = 0"), std::string::npos) << s.error_message();
  // The stream stops reading at the failure (one read at a time), so "after" is never read:
  // only ok-0 and ok-1 (one row each) ever launched.
  ASSERT_TRUE(t.server->scheduler().WaitIdle(Clock::now() + std::chrono::seconds(10)));
  EXPECT_EQ(t.server->scheduler().launched_rows() - rows_before, 2);
}

}  // namespace
}  // namespace gpusampler::server::testing
