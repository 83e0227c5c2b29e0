// The service end to end over gRPC (in-process server on port 0): features, 1-D labels,
// seeds, empty outputs, GetServerInfo and a port in use. Golden samples, streams, batching
// independence and reflection have suites of their own next to this one.
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

}  // namespace
}  // namespace gpusampler::server::testing
