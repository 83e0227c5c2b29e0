// edge/sample_stream under hostile clients: byte backpressure stops reading, and a message
// that does not parse ends the stream after the earlier responses.
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

TEST(SampleStreamTest, ByteBackpressureStopsReadingThenAllAreAnswered) {
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

TEST(SampleStreamTest, BadMessageEndsTheStreamWithInvalidArgumentAfterEarlierResponses) {
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

}  // namespace
}  // namespace gpusampler::server::testing
