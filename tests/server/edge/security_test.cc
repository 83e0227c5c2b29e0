// TLS, mutual TLS and certificate rotation with certificates made by openssl at test time,
// bad TLS files and settings, counts of unauthenticated calls, and the C++ client and CLI
// over TLS. Tokens, bearer auth, compression, the probes and reflection under TLS have
// suites of their own next to this one; the helpers they share are in security_util.hpp.
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

TEST(TlsTest, ServesTlsAndRefusesPlaintext) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  auto t = StartServer(c);
  EXPECT_TRUE(Call(Target(t), Tls(pki, "ca")).ok());
  const grpc::Status plain = Call(Target(t), grpc::InsecureChannelCredentials());
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
  // A client that trusts another CA does not accept the server.
  pki.MakeCa("other");
  EXPECT_EQ(Call(Target(t), Tls(pki, "other")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(TlsTest, MutualTlsAcceptsSignedClientsOnly) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  pki.MakeCa("clients");
  pki.MakeLeaf("good", "clients");
  pki.MakeCa("rogue");
  pki.MakeLeaf("bad", "rogue");
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  c.tls_client_ca_file = pki.path("clients.pem");
  auto t = StartServer(c);
  EXPECT_TRUE(Call(Target(t), Tls(pki, "ca", "good")).ok());
  EXPECT_EQ(Call(Target(t), Tls(pki, "ca")).error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(Call(Target(t), Tls(pki, "ca", "bad")).error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(TlsTest, RotatedCertificateIsServedWithoutRestart) {
  Pki pki;
  pki.MakeCa("old-ca");
  pki.MakeLeaf("old", "old-ca");
  pki.MakeCa("new-ca");
  pki.MakeLeaf("new", "new-ca");
  fs::copy_file(pki.path("old.pem"), pki.path("server.pem"));
  fs::copy_file(pki.path("old.key"), pki.path("server.key"));
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  c.tls_refresh_seconds = 1;
  auto t = StartServer(c);
  ASSERT_TRUE(Call(Target(t), Tls(pki, "old-ca")).ok());
  ASSERT_FALSE(Call(Target(t), Tls(pki, "new-ca")).ok());
  // As cert-manager does: new files renamed into place.
  fs::copy_file(pki.path("new.key"), pki.path("server.key.tmp"));
  fs::copy_file(pki.path("new.pem"), pki.path("server.pem.tmp"));
  fs::rename(pki.path("server.key.tmp"), pki.path("server.key"));
  fs::rename(pki.path("server.pem.tmp"), pki.path("server.pem"));
  EXPECT_TRUE(
      WaitFor([&] { return Call(Target(t), Tls(pki, "new-ca")).ok(); }, std::chrono::seconds(30)));
  EXPECT_FALSE(Call(Target(t), Tls(pki, "old-ca")).ok());
}

// Finding "one bad TLS file during rotation blocks every new connection": a mismatched key,
// a garbage certificate or a deleted file is logged and the last good pair keeps serving;
// a good pair afterwards is taken.
TEST(TlsTest, BadCertificateFilesKeepTheLastGoodPairServing) {
  Pki pki;
  pki.MakeCa("old-ca");
  pki.MakeLeaf("old", "old-ca");
  pki.MakeCa("new-ca");
  pki.MakeLeaf("new", "new-ca");
  fs::copy_file(pki.path("old.pem"), pki.path("server.pem"));
  fs::copy_file(pki.path("old.key"), pki.path("server.key"));
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  c.tls_refresh_seconds = 1;
  auto t = StartServer(c);
  ASSERT_TRUE(Call(Target(t), Tls(pki, "old-ca")).ok());
  const std::vector<std::pair<std::string, std::function<void()>>> breakages = {
      {"mismatched key", [&] { WriteFile(pki.path("server.key"), pki.key("new")); }},
      {"garbage certificate",
       [&] {
         WriteFile(pki.path("server.key"), pki.key("old"));
         WriteFile(pki.path("server.pem"), "-----BEGIN CERTIFICATE-----\ngarbage\n");
       }},
      {"deleted certificate", [&] { fs::remove(pki.path("server.pem")); }},
      {"deleted key",
       [&] {
         WriteFile(pki.path("server.pem"), pki.pem("old"));
         fs::remove(pki.path("server.key"));
       }},
  };
  for (const auto& [what, breakage] : breakages) {
    SCOPED_TRACE(what);
    breakage();
    t.server->RefreshCredentialsForTesting();
    // gRPC's watcher rereads the served copy every second: give it two.
    std::this_thread::sleep_for(std::chrono::milliseconds(2200));
    for (int i = 0; i < 3; ++i) {
      const grpc::Status s = Call(Target(t), Tls(pki, "old-ca"));
      EXPECT_TRUE(s.ok()) << s.error_message();
    }
    EXPECT_EQ(HealthStatus(grpc::CreateChannel(Target(t), Tls(pki, "old-ca"))), "SERVING");
  }
  // A good new pair is taken by the refresh (every second here).
  WriteFile(pki.path("server.key"), pki.key("new"));
  WriteFile(pki.path("server.pem"), pki.pem("new"));
  EXPECT_TRUE(
      WaitFor([&] { return Call(Target(t), Tls(pki, "new-ca")).ok(); }, std::chrono::seconds(30)));
}

// Finding "counts lie": calls the TLS metadata check refuses count UNAUTHENTICATED in
// requests_total, and not as transport rejections.
TEST(TlsTest, UnauthenticatedCallsAreCountedInRequestsTotal) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  WriteFile(pki.path("tokens"), "tok\n");
  ServerConfig c = TestConfig();
  c.auth_token_file = pki.path("tokens");
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  auto t = StartServer(c);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(Call(Target(t), Tls(pki, "ca")).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  EXPECT_TRUE(Call(Target(t), Tls(pki, "ca"), {"Bearer tok"}).ok());
  const auto scrape = [&] { return HttpGet(t.server->metrics_port(), "/metrics"); };
  const auto value = [](const std::string& text, const std::string& series) {
    const size_t at = text.find("\n" + series + " ");
    return at == std::string::npos ? -1.0 : std::stod(text.substr(at + series.size() + 2));
  };
  const std::string unauth =
      "gpusampler_requests_total{code=\"UNAUTHENTICATED\",method=\"Sample\"}";
  EXPECT_EQ(value(scrape(), unauth), 3);
  EXPECT_EQ(value(scrape(), "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 1);
  // Three updater periods (1 s each) pass before a missing call would count.
  std::this_thread::sleep_for(std::chrono::milliseconds(4500));
  EXPECT_EQ(value(scrape(), "gpusampler_transport_rejected_calls_total"), 0);
}

TEST(TlsTest, CppClientAndCliConnectWithCaCertAndKeyAndToken) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  pki.MakeLeaf("client", "ca");
  WriteFile(pki.path("tokens"), "tok\n");
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  c.tls_client_ca_file = pki.path("ca.pem");
  c.auth_token_file = pki.path("tokens");
  auto t = StartServer(c);
  client::ClientOptions o;
  o.targets = {Target(t)};
  o.tls.enabled = true;
  o.tls.root_certs_pem = pki.pem("ca");
  o.tls.client_cert_pem = pki.pem("client");
  o.tls.client_key_pem = pki.key("client");
  o.bearer_token = "tok";
  client::Client cli(o);
  v1::SampleResponse response;
  const grpc::Status s = cli.Sample(Small(), &response);
  EXPECT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(response.indices().shape_size(), 2);  // [1, K]
  const std::string flags = " --target " + Target(t) + " --tls-ca '" + pki.path("ca.pem").string() +
                            "' --tls-cert '" + pki.path("client.pem").string() + "' --tls-key '" +
                            pki.path("client.key").string() + "' --token tok";
  const std::string cli_bin = GPUSAMPLER_CLI_BIN;
  EXPECT_EQ(std::system((cli_bin + flags + " info >/dev/null").c_str()), 0) << cli_bin + flags;
  // Without the client certificate the handshake fails: exit code 2 or 3, never 0.
  const std::string no_cert =
      " --target " + Target(t) + " --tls-ca '" + pki.path("ca.pem").string() + "' --token tok";
  EXPECT_NE(std::system((cli_bin + no_cert + " info >/dev/null 2>&1").c_str()), 0);
}

TEST(TlsTest, BadSettingsFailTheStart) {
  Pki pki;
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("missing.pem");
  c.tls_key_file = pki.path("missing.key");
  Server s1(c);
  const Status st = s1.Start();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("--tls-cert-file"), std::string::npos) << st.message();
  ServerConfig only_key = TestConfig();
  only_key.tls_key_file = pki.path("x.key");
  Server s2(only_key);
  EXPECT_EQ(s2.Start().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace gpusampler::server::testing
