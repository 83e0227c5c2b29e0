// Helpers of the TLS, token, bearer-auth, compression and probe suites (split from
// security_test.cc): files, a temporary PKI made by the openssl CLI, a small request, one
// Sample call on a fresh channel, TLS credentials and a server's target. Header-only.
#pragma once

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

namespace fs = std::filesystem;

inline std::string ReadFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteFile(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

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

inline v1::SampleRequest Small() {
  RequestSpec r;
  r.rows = {RandomRow(200, 3)};
  r.num_samples = 8;
  return MakeRequest(r);
}

// One Sample call on a fresh channel; the status.
inline grpc::Status Call(const std::string& target, std::shared_ptr<grpc::ChannelCredentials> creds,
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

inline std::shared_ptr<grpc::ChannelCredentials> Tls(const Pki& pki, const std::string& ca,
                                                     const std::string& client = "") {
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = pki.pem(ca);
  if (!client.empty()) {
    o.pem_cert_chain = pki.pem(client);
    o.pem_private_key = pki.key(client);
  }
  return grpc::SslCredentials(o);
}

inline std::string Target(const TestServer& t) {
  return "localhost:" + std::to_string(t.server->grpc_port());
}

}  // namespace gpusampler::server::testing
