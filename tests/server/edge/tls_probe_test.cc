// The HTTP probes of a TLS server: /readyz answers under mutual TLS without a client
// certificate, on the plain metrics port.
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
TEST(TlsProbeTest, ReadyzAnswersUnderMutualTlsWithoutAClientCertificate) {
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

}  // namespace
}  // namespace gpusampler::server::testing
