// The metrics an SRE reads (SPEC section 4): SampleStream counted per message and code, the
// stream's lifetime in its own histogram, every unary call counted from its arrival (also
// those refused before the service ran), calls gRPC refused at the transport, process_*,
// the queue capacity and the device busy-seconds counter.
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <thread>

#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// The value of `series` (exact name and labels) in a scrape; -1 when absent.
double Value(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

std::string Scrape(const TestServer& t) { return HttpGet(t.server->metrics_port(), "/metrics"); }

v1::SampleRequest Small(uint64_t seed, const std::string& id = "") {
  RequestSpec r;
  r.rows = {RandomRow(500, seed)};
  r.num_samples = 8;
  r.seed = seed;
  r.request_id = id;
  return MakeRequest(r);
}

const char* kStreamOk = "gpusampler_requests_total{code=\"OK\",method=\"SampleStream\"}";

TEST(MetricsTest, HundredStreamMessagesCountAHundred) {
  auto t = StartServer(TestConfig());
  const double before = Value(Scrape(t), kStreamOk);
  ASSERT_GE(before, 0);
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  // Written and read in lockstep windows, so flow control never stalls either side.
  int read = 0;
  for (int i = 0; i < 100; ++i) {
    ASSERT_TRUE(stream->Write(Small(static_cast<uint64_t>(i), std::to_string(i))));
    if (i >= 8) {
      v1::SampleResponse resp;
      ASSERT_TRUE(stream->Read(&resp));
      EXPECT_EQ(resp.request_id(), std::to_string(read++));
    }
  }
  ASSERT_TRUE(stream->WritesDone());
  v1::SampleResponse resp;
  while (stream->Read(&resp)) EXPECT_EQ(resp.request_id(), std::to_string(read++));
  ASSERT_TRUE(stream->Finish().ok());
  EXPECT_EQ(read, 100);

  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, kStreamOk) - before, 100);
  EXPECT_EQ(Value(scrape, "gpusampler_request_duration_seconds_count{method=\"SampleStream\"}"),
            100);
  // The stream's lifetime goes to its own histogram, once, and not to the request latency.
  EXPECT_EQ(Value(scrape, "gpusampler_stream_duration_seconds_count"), 1);
  EXPECT_GT(Value(scrape, "gpusampler_stream_duration_seconds_sum"), 0);
  EXPECT_EQ(Value(scrape, "gpusampler_request_duration_seconds_count{method=\"Sample\"}"), 0);
}

TEST(MetricsTest, StreamMessagesCountWithTheirOwnCodes) {
  auto t = StartServer(TestConfig());
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  v1::SampleRequest bad = Small(2);
  bad.mutable_spec()->set_num_samples(0);  // INVALID_ARGUMENT
  ASSERT_TRUE(stream->Write(Small(1)));
  v1::SampleResponse resp;
  ASSERT_TRUE(stream->Read(&resp));
  ASSERT_TRUE(stream->Write(bad));
  stream->WritesDone();
  while (stream->Read(&resp)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, kStreamOk), 1);
  EXPECT_EQ(Value(scrape,
                  "gpusampler_requests_total{code=\"INVALID_ARGUMENT\",method="
                  "\"SampleStream\"}"),
            1);
  EXPECT_EQ(Value(scrape, "gpusampler_stream_duration_seconds_count"), 1);
}

TEST(MetricsTest, UnaryCallsCountedFromArrivalEvenWhenRefusedBeforeTheService) {
  auto t = StartServer(TestConfig());
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    ASSERT_TRUE(t.stub->Sample(&ctx, Small(1), &resp).ok());
  }
  {
    // Bytes that are no SampleRequest: gRPC fails the call before any reactor runs.
    grpc::GenericStub generic(t.channel);
    grpc::ClientContext ctx;
    grpc::Slice junk(std::string("\xff\xff\xff\xff\xff", 5));
    grpc::ByteBuffer request(&junk, 1), response;
    std::promise<grpc::Status> done;
    generic.UnaryCall(&ctx, "/gpusampler.v1.Sampler/Sample", grpc::StubOptions(), &request,
                      &response, [&](grpc::Status s) { done.set_value(s); });
    EXPECT_FALSE(done.get_future().get().ok());
  }
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(t.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  }
  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 1);
  EXPECT_EQ(Value(scrape, "gpusampler_request_duration_seconds_count{method=\"Sample\"}"), 2)
      << "the unparsable call is counted too";
  EXPECT_EQ(Value(scrape, "gpusampler_requests_total{code=\"OK\",method=\"GetServerInfo\"}"), 1);
}

TEST(MetricsTest, CallsRefusedByTheTransportAreCounted) {
  ServerConfig config = TestConfig();
  config.limits.max_message_bytes = 4096;
  auto t = StartServer(config);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Sampler::NewStub(channel);
  for (int i = 0; i < 2; ++i) {
    // Far over the transport limit (which sits above --max-message-bytes): gRPC refuses it
    // unread, and the service never sees it.
    RequestSpec r;
    r.rows = {RandomRow(300000, 1)};  // 2.4 MB: over 4096 + the transport margin (1 MiB)
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    EXPECT_EQ(stub->Sample(&ctx, MakeRequest(r), &resp).error_code(),
              grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    ASSERT_TRUE(stub->Sample(&ctx, Small(1), &resp).ok());
  }
  // Counted once missing from the service for three updater periods (1 s each).
  EXPECT_TRUE(
      WaitFor([&] { return Value(Scrape(t), "gpusampler_transport_rejected_calls_total") == 2; },
              std::chrono::seconds(15)))
      << Scrape(t);
  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 1);
  EXPECT_EQ(Value(scrape, "gpusampler_request_duration_seconds_count{method=\"Sample\"}"), 1);
}

// Finding "counts lie": calls whose large bodies take a while to arrive are not counted as
// transport rejections once they reach the service; the budget in use is a gauge.
TEST(MetricsTest, SlowArrivingCallsAreNotTransportRejectionsAndInflightBytesIsAGauge) {
  ServerConfig config = TestConfig();
  auto t = StartServer(config);
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                           grpc::InsecureChannelCredentials(), args);
  auto stub = v1::Sampler::NewStub(channel);
  EXPECT_EQ(Value(Scrape(t), "gpusampler_inflight_bytes"), 0);
  RequestSpec r;
  r.rows = {RandomRow(int64_t{1} << 20, 1)};  // 8 MiB each, 24 at once on one connection
  r.num_samples = 16;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < 24; ++i) {
    calls.push_back(StartSample(stub.get(), MakeRequest(r), std::chrono::seconds(120)));
  }
  int ok = 0;
  for (auto& c : calls) ok += c->status.get().ok();
  EXPECT_EQ(ok, 24);
  // Three updater periods pass before a missing call would count.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, "gpusampler_transport_rejected_calls_total"), 0);
  EXPECT_EQ(Value(scrape, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 24);
  EXPECT_EQ(Value(scrape, "gpusampler_inflight_bytes"), 0);
}

TEST(MetricsTest, ProcessQueueCapacityAndBusySeconds) {
  ServerConfig config = TestConfig();
  config.queue_capacity = 77;
  auto t = StartServer(config);
  for (int i = 0; i < 20; ++i) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    ASSERT_TRUE(t.stub->Sample(&ctx, Small(static_cast<uint64_t>(i)), &resp).ok());
  }
  const std::string device = "{device=\"" + TestDeviceId() + "\"}";
  // The busy-seconds counter advances with the 1 s updater.
  EXPECT_TRUE(WaitFor(
      [&] { return Value(Scrape(t), "gpusampler_device_busy_seconds_total" + device) > 0; }));
  const std::string scrape = Scrape(t);
  EXPECT_EQ(Value(scrape, "gpusampler_queue_capacity"), 77);
  EXPECT_EQ(Value(scrape, "gpusampler_serving"), 1);
  EXPECT_NE(scrape.find("# TYPE gpusampler_device_busy_seconds_total counter"), std::string::npos);
  EXPECT_NE(scrape.find("# TYPE gpusampler_stream_duration_seconds histogram"), std::string::npos);
  EXPECT_GT(Value(scrape, "process_resident_memory_bytes"), 1 << 20);
  EXPECT_GT(Value(scrape, "process_open_fds"), 3);
  EXPECT_GT(Value(scrape, "process_max_fds"), 3);
  EXPECT_GE(Value(scrape, "process_cpu_seconds_total"), 0);
  EXPECT_NE(scrape.find("# TYPE process_cpu_seconds_total counter"), std::string::npos);
  // Started within the last hour, by the wall clock.
  const double start = Value(scrape, "process_start_time_seconds");
  const double now =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(start, now + 1);
  EXPECT_GT(start, now - 3600);
}

}  // namespace
}  // namespace gpusampler::server::testing
