// Server reflection and security: off by default, and behind the bearer token when on.
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

TEST(ReflectionAuthTest, OffByDefaultBehindTheTokenWhenOn) {
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
