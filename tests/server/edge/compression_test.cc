// Compressed requests are refused unless compression is accepted.
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

TEST(CompressionTest, RefusedUnlessAccepted) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  for (const bool tls : {false, true}) {
    for (const bool accept : {false, true}) {
      ServerConfig c = TestConfig();
      c.accept_compression = accept;
      if (tls) {
        c.tls_cert_file = pki.path("server.pem");
        c.tls_key_file = pki.path("server.key");
      }
      auto t = StartServer(c);
      const std::string target =
          tls ? Target(t) : "127.0.0.1:" + std::to_string(t.server->grpc_port());
      auto creds = tls ? Tls(pki, "ca") : grpc::InsecureChannelCredentials();
      const grpc::Status s = Call(target, creds, {}, Small(), GRPC_COMPRESS_GZIP);
      SCOPED_TRACE(std::string(tls ? "tls" : "plaintext") + (accept ? " accept" : " refuse"));
      if (accept) {
        EXPECT_TRUE(s.ok()) << s.error_message();
      } else {
        EXPECT_FALSE(s.ok());
        if (tls) {
          EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
          EXPECT_NE(s.error_message().find("--accept-compression"), std::string::npos)
              << s.error_message();
        }
      }
      EXPECT_TRUE(Call(target, creds).ok());  // uncompressed requests are served either way
    }
  }
}

}  // namespace
}  // namespace gpusampler::server::testing
