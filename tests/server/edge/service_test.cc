// The service end to end over gRPC (in-process server on port 0): golden samples through
// unary and streaming calls, alone and fused; streaming order and pipelining; batching
// independence under concurrent clients; GetServerInfo, a port in use, reflection.
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

TEST(StreamTest, PipelinedAndAnsweredInRequestOrder) {
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

TEST(StreamTest, FirstFailureEndsStreamAfterEarlierResponses) {
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

// A mix of shapes, dtypes, specs, ragged rows and features.
v1::SampleRequest MixedRequest(int i) {
  RequestSpec r;
  const int rows = 1 + i % 4;
  for (int b = 0; b < rows; ++b) {
    r.rows.push_back(RandomRow(i % 5 == 0 ? 0 : 200 + 97 * ((i * 7 + b) % 11),
                               static_cast<uint64_t>(i * 31 + b)));
  }
  r.ragged = i % 3 == 0;
  if (!r.ragged) {
    for (auto& row : r.rows) row.resize(r.rows[0].size());  // [B, N] needs equal rows
  }
  r.num_samples = 1 + (i * 13) % 300;
  r.dtype = std::vector<v1::DType>{v1::DTYPE_INT64, v1::DTYPE_INT8, v1::DTYPE_INT16,
                                   v1::DTYPE_INT32}[i % 4];
  r.positive_fraction = 0.1 * (i % 11);
  r.fill = static_cast<v1::FillPolicy>(i % 4);
  r.feature_dim = i % 2 ? 3 : 0;
  r.seed = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull;
  r.request_id = "mixed-" + std::to_string(i);
  return MakeRequest(r);
}

void ExpectSameOutputs(const v1::SampleResponse& a, const v1::SampleResponse& b, int i) {
  EXPECT_EQ(a.indices().SerializeAsString(), b.indices().SerializeAsString()) << i;
  EXPECT_EQ(a.labels().SerializeAsString(), b.labels().SerializeAsString()) << i;
  EXPECT_EQ(a.features().SerializeAsString(), b.features().SerializeAsString()) << i;
  EXPECT_EQ(a.num_positive().SerializeAsString(), b.num_positive().SerializeAsString()) << i;
  EXPECT_EQ(a.num_negative().SerializeAsString(), b.num_negative().SerializeAsString()) << i;
  EXPECT_EQ(a.request_id(), b.request_id());
}

// The batching-independence promise: outputs do not depend on what shares a launch.
TEST(BatchingIndependence, ConcurrentMixedClientsMatchUnbatchedRuns) {
  constexpr int kClients = 40;
  constexpr int kPerClient = 3;
  std::map<int, v1::SampleResponse> alone;
  {
    ServerConfig config = TestConfig();
    config.max_batch_rows = 1;  // no fusion: every request is its own launch
    auto t = StartServer(config);
    for (int i = 0; i < kClients * kPerClient; ++i) {
      grpc::ClientContext ctx;
      ASSERT_TRUE(t.stub->Sample(&ctx, MixedRequest(i), &alone[i]).ok()) << i;
      ASSERT_EQ(alone[i].timing().batch_rows(), MixedRequest(i).row_splits().shape_size()
                                                    ? MixedRequest(i).row_splits().shape(0) - 1
                                                    : MixedRequest(i).labels().shape(0));
    }
  }
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  config.max_batch_delay_us = 2000;
  config.cpu_workers = 2;
  auto t = StartServer(config);
  std::atomic<int> fused{0};
  std::vector<std::thread> clients;
  std::vector<std::map<int, v1::SampleResponse>> got(kClients);
  std::vector<std::string> errors(kClients);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      // Every client has its own channel (its own connection).
      grpc::ChannelArguments args;
      args.SetInt("client_index", c);
      auto channel = grpc::CreateCustomChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                               grpc::InsecureChannelCredentials(), args);
      auto stub = v1::Sampler::NewStub(channel);
      for (int j = 0; j < kPerClient; ++j) {
        const int i = c * kPerClient + j;
        const auto req = MixedRequest(i);
        grpc::ClientContext ctx;
        const grpc::Status s = stub->Sample(&ctx, req, &got[c][i]);
        if (!s.ok()) errors[c] = s.error_message();
        const int64_t own =
            req.has_row_splits() ? req.row_splits().shape(0) - 1 : req.labels().shape(0);
        if (got[c][i].timing().batch_rows() > own) ++fused;
      }
    });
  }
  for (auto& th : clients) th.join();
  for (int c = 0; c < kClients; ++c) {
    ASSERT_EQ(errors[c], "") << c;
    for (const auto& [i, resp] : got[c]) ExpectSameOutputs(resp, alone.at(i), i);
  }
  // The test only means something if requests were in fact fused.
  EXPECT_GT(fused.load(), kClients / 4);
}

TEST(ServiceTest, FeaturesAreGatheredAtTheSampledIndices) {
  auto t = StartServer(TestConfig());
  RequestSpec r;
  r.rows = {RandomRow(300, 5), RandomRow(300, 6)};
  r.num_samples = 250;  // more than one class has: padding rows appear
  r.fill = v1::FILL_POLICY_NONE;
  r.feature_dim = 4;
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(t.stub->Sample(&ctx, MakeRequest(r), &resp).ok());
  ASSERT_EQ(resp.features().dtype(), v1::DTYPE_FLOAT32);
  ASSERT_EQ(resp.features().shape_size(), 3);
  EXPECT_EQ(resp.features().shape(2), 4);
  const auto idx = Values<int64_t>(resp.indices());
  const auto feat = Values<float>(resp.features());
  ASSERT_EQ(feat.size(), idx.size() * 4);
  int padding = 0;
  for (size_t s = 0; s < idx.size(); ++s) {
    const int64_t row = static_cast<int64_t>(s) / 250;
    for (int d = 0; d < 4; ++d) {
      const float want = idx[s] < 0 ? 0.0f : FeatureValue(row, idx[s], d);
      ASSERT_EQ(feat[s * 4 + d], want) << s;
    }
    padding += idx[s] < 0;
  }
  EXPECT_GT(padding, 0);
}

TEST(ServiceTest, OneDimensionalLabelsDropTheBatchDim) {
  auto t = StartServer(TestConfig());
  RequestSpec r;
  r.rows = {RandomRow(100, 3)};
  r.one_dim = true;
  r.num_samples = 10;
  r.feature_dim = 2;
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(t.stub->Sample(&ctx, MakeRequest(r), &resp).ok());
  ASSERT_EQ(resp.indices().shape_size(), 1);
  EXPECT_EQ(resp.indices().shape(0), 10);
  EXPECT_EQ(resp.labels().shape_size(), 1);
  ASSERT_EQ(resp.features().shape_size(), 2);
  EXPECT_EQ(resp.num_positive().shape(0), 1);
}

TEST(ServiceTest, SeedIsDrawnWhenAbsentAndReplays) {
  auto t = StartServer(TestConfig());
  RequestSpec r;
  r.rows = {RandomRow(5000, 9)};
  r.num_samples = 100;
  r.seed.reset();
  grpc::ClientContext c1, c2, c3;
  v1::SampleResponse a, b, replay;
  ASSERT_TRUE(t.stub->Sample(&c1, MakeRequest(r), &a).ok());
  ASSERT_TRUE(t.stub->Sample(&c2, MakeRequest(r), &b).ok());
  EXPECT_NE(a.seed(), b.seed());
  EXPECT_NE(a.indices().data(), b.indices().data());
  r.seed = a.seed();
  ASSERT_TRUE(t.stub->Sample(&c3, MakeRequest(r), &replay).ok());
  EXPECT_EQ(replay.indices().data(), a.indices().data());
}

TEST(ServiceTest, ZeroRowsGiveEmptyOutputs) {
  auto t = StartServer(TestConfig());
  RequestSpec r;
  r.rows = {};
  r.ragged = true;
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, MakeRequest(r), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.indices().shape(0), 0);
  EXPECT_EQ(resp.indices().data().size(), 0u);
}

TEST(ServiceTest, GetServerInfoReportsBackendAndLimits) {
  ServerConfig config = TestConfig();
  config.limits.max_num_samples = 1234;
  config.max_batch_rows = 77;
  auto t = StartServer(config);
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  ASSERT_TRUE(t.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), TestBackend());
  EXPECT_EQ(info.version(), Version());
  ASSERT_GE(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).id(), TestDeviceId());
  EXPECT_GT(info.devices(0).memory_bytes(), 0);
  EXPECT_EQ(info.limits().max_num_samples(), 1234);
  EXPECT_EQ(info.limits().max_batch_rows(), 77);
}

// half of the port's new connections, and two servers asking for port 0 could get one port.
TEST(ServiceTest, ASecondServerOnAPortInUseFailsToStart) {
  auto first = StartServer(TestConfig());
  ServerConfig config = TestConfig();
  config.address = "127.0.0.1:" + std::to_string(first.server->grpc_port());
  Server second(config);
  const Status s = second.Start();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.message();
  EXPECT_NE(s.message().find("cannot listen on " + config.address), std::string::npos)
      << s.message();
  // The first server still answers.
  grpc::ClientContext ctx;
  v1::ServerInfo info;
  EXPECT_TRUE(first.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
}

// grpc++_reflection already registers the reflection messages in the descriptor pool, so
// the test speaks the protocol through a generic stub with hand-encoded bytes.
TEST(ReflectionTest, ListsTheSamplerAndHealthServices) {
  ServerConfig config = TestConfig();
  config.reflection = true;  // off by default (--reflection)
  auto t = StartServer(config);
  grpc::GenericStub stub(t.channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    ASSERT_EQ(tag, want);
    ASSERT_TRUE(ok);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(reinterpret_cast<void*>(1));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  const char request[] = {0x3a, 0x00};
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  step(reinterpret_cast<void*>(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  step(reinterpret_cast<void*>(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  step(reinterpret_cast<void*>(4));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("gpusampler.v1.Sampler"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(reinterpret_cast<void*>(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace gpusampler::server::testing
