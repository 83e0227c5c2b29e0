// TLS, mutual TLS and certificate rotation with certificates made by openssl at test time;
// bearer tokens (several, whole trimmed lines, one header only) checked before the body is
// read; compressed requests refused; reflection off by default and behind the token.
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
#include "gpusampler/client/client.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteFile(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// A temporary directory of certificates: CAs and leaves signed by them (openssl CLI).
class Pki {
 public:
  Pki() {
    char tmpl[] = "/tmp/gpusampler-pki-XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  ~Pki() { fs::remove_all(dir_); }
  fs::path path(const std::string& name) const { return dir_ / name; }

  void MakeCa(const std::string& name) {
    Run("openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name + " -keyout " +
        Q(name + ".key") + " -out " + Q(name + ".pem"));
  }
  // A leaf `name` signed by `ca`, valid for localhost and 127.0.0.1.
  void MakeLeaf(const std::string& name, const std::string& ca) {
    WriteFile(path(name + ".ext"), "subjectAltName=DNS:localhost,IP:127.0.0.1\n");
    Run("openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout " + Q(name + ".key") +
        " -out " + Q(name + ".csr"));
    Run("openssl x509 -req -days 2 -in " + Q(name + ".csr") + " -CA " + Q(ca + ".pem") +
        " -CAkey " + Q(ca + ".key") + " -CAcreateserial -extfile " + Q(name + ".ext") + " -out " +
        Q(name + ".pem"));
  }
  std::string pem(const std::string& name) const { return ReadFile(path(name + ".pem")); }
  std::string key(const std::string& name) const { return ReadFile(path(name + ".key")); }

 private:
  std::string Q(const std::string& name) const { return "'" + path(name).string() + "'"; }
  static void Run(const std::string& cmd) {
    ASSERT_EQ(std::system((cmd + " >/dev/null 2>&1").c_str()), 0) << cmd;
  }
  fs::path dir_;
};

v1::SampleRequest Small() {
  RequestSpec r;
  r.rows = {RandomRow(200, 3)};
  r.num_samples = 8;
  return MakeRequest(r);
}

// One Sample call on a fresh channel; the status.
grpc::Status Call(const std::string& target, std::shared_ptr<grpc::ChannelCredentials> creds,
                  const std::vector<std::string>& authorization = {},
                  v1::SampleRequest request = Small(),
                  grpc_compression_algorithm compression = GRPC_COMPRESS_NONE) {
  grpc::ChannelArguments args;
  args.SetMaxSendMessageSize(-1);
  auto channel = grpc::CreateCustomChannel(target, creds, args);
  auto stub = v1::Sampler::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  for (const auto& a : authorization) ctx.AddMetadata("authorization", a);
  if (compression != GRPC_COMPRESS_NONE) ctx.set_compression_algorithm(compression);
  v1::SampleResponse response;
  grpc::Status s = stub->Sample(&ctx, request, &response);
  if (s.ok() && response.indices().shape_size() == 0) {
    return grpc::Status(grpc::StatusCode::INTERNAL, "empty response");
  }
  return s;
}

std::shared_ptr<grpc::ChannelCredentials> Tls(const Pki& pki, const std::string& ca,
                                              const std::string& client = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = pki.pem(ca);
  if (!client.empty()) {
    o.pem_cert_chain = pki.pem(client);
    o.pem_private_key = pki.key(client);
  }
  return grpc::SslCredentials(o);
}

std::string Target(const TestServer& t) {
  return "localhost:" + std::to_string(t.server->grpc_port());
}

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

// The HTTP status line's code of GET http://127.0.0.1:port/path; 0 on failure.
int HttpCode(int port, const std::string& path) {
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
  return out.size() > 12 && out.rfind("HTTP/1.", 0) == 0 ? std::atoi(out.c_str() + 9) : 0;
}

// Finding "turning TLS on breaks the shipped health checks": the probes live on the plain
// HTTP metrics port, so an mTLS server is probed without a client certificate.
TEST(ProbeTest, ReadyzAnswersUnderMutualTlsWithoutAClientCertificate) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  pki.MakeCa("clients");
  ServerConfig c = TestConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  c.tls_client_ca_file = pki.path("clients.pem");
  auto t = StartServer(c);
  EXPECT_EQ(HttpCode(t.server->metrics_port(), "/readyz"), 200);
  EXPECT_EQ(HttpCode(t.server->metrics_port(), "/healthz"), 200);
  // The gRPC port itself refuses a client without a certificate.
  EXPECT_EQ(Call(Target(t), Tls(pki, "ca")).error_code(), grpc::StatusCode::UNAVAILABLE);
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

// One ServerReflectionInfo exchange (list_services) through the generic stub.
grpc::Status ListServices(const std::string& target,
                          std::shared_ptr<grpc::ChannelCredentials> creds,
                          const std::string& authorization = "") {
  auto channel = grpc::CreateChannel(target, creds);
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!authorization.empty()) ctx.AddMetadata("authorization", authorization);
  const char list_services[] = {0x3a, 0x00};  // ServerReflectionRequest{list_services: ""}
  grpc::Slice slice(list_services, sizeof(list_services));
  grpc::ByteBuffer request(&slice, 1), response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                 grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

TEST(ReflectionTest, OffByDefaultBehindTheTokenWhenOn) {
  auto plain = StartServer(TestConfig());
  const std::string plain_target = "127.0.0.1:" + std::to_string(plain.server->grpc_port());
  EXPECT_EQ(ListServices(plain_target, grpc::InsecureChannelCredentials()).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
  ServerConfig on = TestConfig();
  on.reflection = true;
  auto t = StartServer(on);
  EXPECT_TRUE(ListServices("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                           grpc::InsecureChannelCredentials())
                  .ok());

  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  WriteFile(pki.path("tokens"), "tok\n");
  ServerConfig secured = TestConfig();
  secured.reflection = true;
  secured.auth_token_file = pki.path("tokens");
  {
    // Plaintext has no metadata hook for reflection: refused at start.
    Server s(secured);
    const Status st = s.Start();
    EXPECT_EQ(st.code(), Code::kInvalidArgument);
    EXPECT_NE(st.message().find("--reflection"), std::string::npos) << st.message();
  }
  secured.tls_cert_file = pki.path("server.pem");
  secured.tls_key_file = pki.path("server.key");
  auto st = StartServer(secured);
  EXPECT_EQ(ListServices(Target(st), Tls(pki, "ca")).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(ListServices(Target(st), Tls(pki, "ca"), "Bearer tok").ok());
}

}  // namespace
}  // namespace gpusampler::server::testing
