// Bearer tokens from the token file (edge/security): re-read within the refresh without a
// restart, and every line one whole trimmed token.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/credentials.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>
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

// Finding "the token file is read only at start": it is re-read every --tls-refresh-seconds;
// an added token works and a removed one stops, without a restart (plaintext and TLS).
TEST(TokenTest, TokenFileIsReReadWithinTheRefresh) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  for (const bool tls : {false, true}) {
    SCOPED_TRACE(tls ? "tls" : "plaintext");
    WriteFile(pki.path("tokens"), "first\n");
    ServerConfig c = TestConfig();
    c.auth_token_file = pki.path("tokens");
    c.tls_refresh_seconds = 1;
    if (tls) {
      c.tls_cert_file = pki.path("server.pem");
      c.tls_key_file = pki.path("server.key");
    }
    auto t = StartServer(c);
    const std::string target =
        tls ? Target(t) : "127.0.0.1:" + std::to_string(t.server->grpc_port());
    auto creds = tls ? Tls(pki, "ca") : grpc::InsecureChannelCredentials();
    EXPECT_TRUE(Call(target, creds, {"Bearer first"}).ok());
    EXPECT_EQ(Call(target, creds, {"Bearer second"}).error_code(),
              grpc::StatusCode::UNAUTHENTICATED);
    // Added (as a rotation does: new token first), then the old one removed.
    const auto added = std::chrono::steady_clock::now();
    WriteFile(pki.path("tokens"), "first\nsecond\n");
    EXPECT_TRUE(WaitFor([&] { return Call(target, creds, {"Bearer second"}).ok(); },
                        std::chrono::seconds(10)));
    EXPECT_LT(std::chrono::steady_clock::now() - added, std::chrono::seconds(10));
    WriteFile(pki.path("tokens"), "second\n");
    EXPECT_TRUE(WaitFor(
        [&] {
          return Call(target, creds, {"Bearer first"}).error_code() ==
                 grpc::StatusCode::UNAUTHENTICATED;
        },
        std::chrono::seconds(10)));
    // An empty or vanished file keeps the tokens read before.
    WriteFile(pki.path("tokens"), "");
    t.server->RefreshCredentialsForTesting();
    EXPECT_TRUE(Call(target, creds, {"Bearer second"}).ok());
    fs::remove(pki.path("tokens"));
    t.server->RefreshCredentialsForTesting();
    EXPECT_TRUE(Call(target, creds, {"Bearer second"}).ok());
  }
}

// Issue 31: the token file's "no token" error is logged once per streak, not every refresh.
TEST(TokenTest, NoTokenErrorIsLoggedOncePerStreak) {
  Pki pki;
  WriteFile(pki.path("tokens"), "first\n");
  ServerConfig c = TestConfig();
  c.auth_token_file = pki.path("tokens");
  c.tls_refresh_seconds = 3600;  // refreshed by hand below
  auto t = StartServer(c);
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(256);
  spdlog::default_logger()->sinks().push_back(sink);
  const auto logged = [&] {
    int n = 0;
    for (const std::string& line : sink->last_formatted()) {
      n += line.find("no token in the file") != std::string::npos;
    }
    return n;
  };
  WriteFile(pki.path("tokens"), "");
  for (int i = 0; i < 4; ++i) t.server->RefreshCredentialsForTesting();
  EXPECT_EQ(logged(), 1);
  WriteFile(pki.path("tokens"), "first\n");  // the streak ends
  t.server->RefreshCredentialsForTesting();
  WriteFile(pki.path("tokens"), "");
  for (int i = 0; i < 3; ++i) t.server->RefreshCredentialsForTesting();
  EXPECT_EQ(logged(), 2);
  spdlog::default_logger()->sinks().pop_back();
}

TEST(TokenTest, EveryLineIsOneWholeTrimmedToken) {
  Pki pki;
  WriteFile(pki.path("tokens"), "  alpha-1  \n\n\tbeta two\r\n");
  std::vector<std::string> tokens;
  ASSERT_TRUE(LoadTokens(pki.path("tokens"), &tokens).ok());
  EXPECT_EQ(tokens, (std::vector<std::string>{"alpha-1", "beta two"}));
  EXPECT_TRUE(CheckBearer(tokens, {"Bearer alpha-1"}).ok());
  EXPECT_TRUE(CheckBearer(tokens, {"Bearer beta two"}).ok());
  EXPECT_EQ(CheckBearer(tokens, {"Bearer beta"}).code(), Code::kUnauthenticated);
  EXPECT_EQ(CheckBearer(tokens, {}).code(), Code::kUnauthenticated);
  const Status dup = CheckBearer(tokens, {"Bearer alpha-1", "Bearer alpha-1"});
  EXPECT_EQ(dup.code(), Code::kUnauthenticated);
  EXPECT_NE(dup.message().find("2 authorization headers"), std::string::npos) << dup.message();
  WriteFile(pki.path("empty"), " \n\n");
  EXPECT_EQ(LoadTokens(pki.path("empty"), &tokens).code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace gpusampler::server::testing
