// The service's bearer-token check (plaintext gRPC: edge/service's Authorize): Sample,
// SampleStream and GetServerInfo need the token when one is configured; health stays open.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gpusampler/client/client.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

v1::SampleRequest Small(int64_t k = 8, uint64_t seed = 1) {
  RequestSpec r;
  r.rows = {RandomRow(1000, seed)};
  r.num_samples = k;
  r.seed = seed;
  return MakeRequest(r);
}

TEST(AuthTest, BearerTokenRequiredWhenConfiguredHealthStaysOpen) {
  const std::string path = ::testing::TempDir() + "/gpusampler-token";
  std::ofstream(path) << "  s3cret-token\n";
  ServerConfig config = TestConfig();
  config.auth_token_file = path;
  auto t = StartServer(config);
  auto call = [&](const char* auth) {
    grpc::ClientContext ctx;
    if (auth) ctx.AddMetadata("authorization", auth);
    v1::SampleResponse resp;
    return t.stub->Sample(&ctx, Small(), &resp);
  };
  const grpc::Status missing = call(nullptr);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer wrong").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(call("Bearer s3cret-token-longer").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(call("Bearer s3cret-token").ok());
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    EXPECT_EQ(t.stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    grpc::ClientContext ctx;
    auto stream = t.stub->SampleStream(&ctx);
    stream->Write(Small());
    stream->WritesDone();
    v1::SampleResponse resp;
    EXPECT_FALSE(stream->Read(&resp));
    EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
}

}  // namespace
}  // namespace gpusampler::server::testing
