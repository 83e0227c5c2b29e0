// Hostile and overloaded clients: the byte budget (unary and streams), stream byte
// backpressure, a message that does not parse (unary and in a stream), the tensor rank cap
// and bounded error messages, drain answering UNAVAILABLE, the exact metrics path; and
// (round 2) a never-reading stream cannot pin the budget, connections get fair turns in the
// queue, a client killed mid-compute counts CANCELLED, the metrics port answers /healthz and
// /readyz and is not stalled by idle connections.
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

// The value of `series` (exact name and labels) in a scrape; -1 when absent.
double Value(const std::string& scrape, const std::string& series) {
  const size_t at = scrape.find("\n" + series + " ");
  if (at == std::string::npos) return -1;
  return std::stod(scrape.substr(at + series.size() + 2));
}

double Metric(const TestServer& t, const std::string& series) {
  return Value(HttpGet(t.server->metrics_port(), "/metrics"), series);
}

// A channel of its own (its own TCP connection: a connection is the unit of fair share).
std::unique_ptr<v1::Sampler::Stub> OwnConnection(const TestServer& t) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxReceiveMessageSize(-1);
  return v1::Sampler::NewStub(
      grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                grpc::InsecureChannelCredentials(), args));
}

// The HTTP status code of GET http://127.0.0.1:port/path; 0 on failure.
int HttpStatus(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  if (out.rfind("HTTP/1.", 0) != 0 || out.size() < 12) return 0;
  return std::atoi(out.c_str() + 9);
}

// A CPU backend whose launches holding a row with K = kSlowK take `g_slow_ms` each; others
// run at once. g_slow_running counts slow launches begun.
constexpr int64_t kSlowK = 999;
std::atomic<int> g_slow_ms{300};
std::atomic<int> g_slow_running{0};
class SlowBackend final : public kernels::Backend {
 public:
  SlowBackend() : cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (batch.rows[r].num_samples == kSlowK) {
        ++g_slow_running;
        std::this_thread::sleep_for(std::chrono::milliseconds(g_slow_ms.load()));
        break;
      }
    }
    cpu_->Sample(batch);
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};
BackendFactory Slow() {
  return [](int) { return std::make_unique<SlowBackend>(); };
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
  EXPECT_EQ(HttpGet(t.server->metrics_port(), "/metrics/x").find("gpusampler_"), std::string::npos);
}

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

// Finding "one connection can starve another": the queue serves connections in turn, so a
// tiny request waits for about one launch, not for the whole flood ahead of it.
TEST(FairShareTest, TinyRequestIsAnsweredQuicklyDuringAnotherConnectionsFlood) {
  g_slow_ms = 400;
  ServerConfig c = TestConfig();
  c.max_batch_rows = 1;  // one request per launch, as long launches would be
  auto t = StartServer(c, Slow());
  auto flood_stub = OwnConnection(t);
  std::vector<std::unique_ptr<AsyncCall>> flood;
  for (int i = 0; i < 12; ++i) {
    flood.push_back(
        StartSample(flood_stub.get(), Request(100, kSlowK, 10 + i), std::chrono::seconds(60)));
  }
  // FIFO would now put the tiny request behind >= 8 launches of 400 ms (3.2 s).
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() >= 8; }));
  auto tiny_stub = OwnConnection(t);
  const auto start = std::chrono::steady_clock::now();
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(tiny_stub->Sample(&ctx, Request(100, 4, 3), &resp).ok());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 1.5) << "the tiny request waited behind the other connection's flood";
  for (auto& f : flood) EXPECT_TRUE(f->status.get().ok());
}

// Finding "counts lie": a unary call whose client was SIGKILLed mid-compute counts
// CANCELLED, not OK.
TEST(CountsTest, SigkilledClientsCallCountsCancelled) {
  g_slow_ms = 1500;
  g_slow_running = 0;
  auto t = StartServer(TestConfig(), Slow());
  const std::string request_file =
      ::testing::TempDir() + "/gpusampler-killed-request-" + std::to_string(getpid());
  {
    std::ofstream out(request_file, std::ios::binary);
    out << Request(1000, kSlowK, 7).SerializeAsString();
  }
  const std::string target = "127.0.0.1:" + std::to_string(t.server->grpc_port());
  const char* script =
      "import grpc, sys\n"
      "ch = grpc.insecure_channel(sys.argv[1])\n"
      "call = ch.unary_unary('/gpusampler.v1.Sampler/Sample', request_serializer=lambda b: b,"
      " response_deserializer=lambda b: b)\n"
      "call(open(sys.argv[2], 'rb').read(), timeout=60)\n";
  // The client is plain Python: it must not inherit an LD_PRELOAD meant for this (sanitized)
  // test process, such as the TSan stage's gRPC sync shim, which Python cannot load.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("LD_PRELOAD=", 0) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const char* argv[] = {"python3", "-c", script, target.c_str(), request_file.c_str(), nullptr};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve("/usr/bin/python3", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  const bool running = WaitFor([&] { return g_slow_running.load() > 0; }, std::chrono::seconds(30));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::remove(request_file.c_str());
  ASSERT_TRUE(running) << "the client's call never reached the backend";
  const std::string cancelled = "gpusampler_requests_total{code=\"CANCELLED\",method=\"Sample\"}";
  EXPECT_TRUE(WaitFor([&] { return Metric(t, cancelled) == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Metric(t, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 0);
}

// Finding "/metrics stalls behind idle connections": with 16 idle TCP connections held, a
// scrape and both probes still answer within a second.
TEST(MetricsEndpointTest, ScrapeAndProbesAnswerWithinASecondWith16IdleConnections) {
  auto t = StartServer(TestConfig());
  const int port = t.server->metrics_port();
  std::vector<int> idle;
  for (int i = 0; i < 16; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    idle.push_back(fd);  // connected, sends nothing
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  for (const char* path : {"/metrics", "/healthz", "/readyz"}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(HttpStatus(port, path), 200) << path;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0)
        << path << " stalled behind idle connections";
  }
  for (int fd : idle) close(fd);
}

// Probes on the metrics port: /healthz while the process runs, /readyz only while SERVING.
TEST(ProbeTest, ReadyzFollowsHealthAndHealthzTheProcess) {
  auto t = StartServer(TestConfig());
  const int port = t.server->metrics_port();
  EXPECT_EQ(HttpStatus(port, "/healthz"), 200);
  EXPECT_EQ(HttpStatus(port, "/readyz"), 200);
  EXPECT_EQ(HttpGet(port, "/readyz"), "SERVING\n");
  EXPECT_EQ(HttpStatus(port, "/readyzX"), 404);
  t.server->Shutdown();  // draining, then stopped: not ready, still alive
  EXPECT_EQ(HttpStatus(port, "/readyz"), 503);
  EXPECT_EQ(HttpStatus(port, "/healthz"), 200);
}

}  // namespace
}  // namespace gpusampler::server::testing
