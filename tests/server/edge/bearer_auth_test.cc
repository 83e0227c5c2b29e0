// Bearer tokens checked before the body is read, on plaintext (by the service) and on TLS
// (in the metadata path): several tokens, duplicates, the health service.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "edge/security.hpp"
#include "edge/security_util.hpp"
#include "gpusampler/client/client.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// Auth on plaintext (checked by the service) and on TLS (checked in the metadata path).
class BearerAuthTest : public ::testing::TestWithParam<bool> {};

TEST_P(BearerAuthTest, TokensDuplicatesHealthAndBodyNeverRead) {
  const bool tls = GetParam();
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  WriteFile(pki.path("tokens"), "old-token\nnew-token\n");
  ServerConfig c = TestConfig();
  c.auth_token_file = pki.path("tokens");
  if (tls) {
    c.tls_cert_file = pki.path("server.pem");
    c.tls_key_file = pki.path("server.key");
  }
  auto t = StartServer(c);
  const std::string target = tls ? Target(t) : "127.0.0.1:" + std::to_string(t.server->grpc_port());
  auto creds = tls ? Tls(pki, "ca") : grpc::InsecureChannelCredentials();
  EXPECT_TRUE(Call(target, creds, {"Bearer old-token"}).ok());
  EXPECT_TRUE(Call(target, creds, {"Bearer new-token"}).ok());
  EXPECT_EQ(Call(target, creds, {"Bearer other"}).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Call(target, creds).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  const grpc::Status dup = Call(target, creds, {"Bearer new-token", "Bearer new-token"});
  EXPECT_EQ(dup.error_code(), grpc::StatusCode::UNAUTHENTICATED) << dup.error_message();
  // Health stays open for probes.
  auto channel = grpc::CreateChannel(target, creds);
  EXPECT_EQ(HealthStatus(channel), "SERVING");
  if (tls) {
    // Refused before the body is read: a body far over the transport limit would otherwise
    // be refused for its size.
    RequestSpec big;
    big.rows = {RandomRow(int64_t{12} << 20, 1)};  // 96 MiB of INT64 labels
    const grpc::Status s = Call(target, creds, {}, MakeRequest(big));
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAUTHENTICATED) << s.error_message();
  }
}

INSTANTIATE_TEST_SUITE_P(PlainAndTls, BearerAuthTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Tls" : "Plaintext"; });

}  // namespace
}  // namespace gpusampler::server::testing
