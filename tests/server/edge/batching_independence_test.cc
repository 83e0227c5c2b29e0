// The batching-independence promise over gRPC (in-process server on port 0): concurrent
// clients sending a mix of requests get what each request gets alone.
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

}  // namespace
}  // namespace gpusampler::server::testing
