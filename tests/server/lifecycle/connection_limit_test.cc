// Issue 31, item 3: --max-connections through a whole server, plaintext and TLS (the
// listener hands connections to gRPC's external acceptor with the server's credentials).
// The listener alone is tests/server/lifecycle/listener_test.cc.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "edge/security_util.hpp"
#include "lifecycle/listener.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// A channel with a connection of its own (no subchannel shared with the other channels).
std::shared_ptr<grpc::Channel> OwnChannel(const std::string& target,
                                          std::shared_ptr<grpc::ChannelCredentials> creds) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(target, std::move(creds), args);
}

grpc::Status CallOn(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = v1::Sampler::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(3));
  v1::SampleResponse response;
  return stub->Sample(&ctx, Small(), &response);
}

void ServesUpToTheLimit(const std::string& target,
                        const std::function<std::shared_ptr<grpc::ChannelCredentials>()>& creds) {
  // Two connections are served and kept.
  auto a = OwnChannel(target, creds());
  auto b = OwnChannel(target, creds());
  ASSERT_TRUE(CallOn(a).ok());
  ASSERT_TRUE(CallOn(b).ok());
  // The third is closed as it is accepted: the call cannot get a connection.
  auto c = OwnChannel(target, creds());
  const grpc::Status refused = CallOn(c);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE) << refused.error_message();
  // The first two still work.
  EXPECT_TRUE(CallOn(a).ok());
  EXPECT_TRUE(CallOn(b).ok());
  // One closed makes room for a new one.
  a.reset();
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool served = false;
  while (!served && std::chrono::steady_clock::now() < until) {
    served = CallOn(OwnChannel(target, creds())).ok();
  }
  EXPECT_TRUE(served) << "no connection was taken after one closed";
}

ServerConfig LimitedConfig() {
  ServerConfig c = TestConfig();
  c.max_connections = 2;
  c.self_check_ms = 0;  // its connection would take a place now and then
  return c;
}

TEST(ConnectionLimitTest, APlaintextServerServesMaxConnectionsAndRefusesBeyond) {
  auto t = StartServer(LimitedConfig());
  ServesUpToTheLimit("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                     [] { return grpc::InsecureChannelCredentials(); });
}

TEST(ConnectionLimitTest, ATlsServerServesMaxConnectionsAndRefusesBeyond) {
  Pki pki;
  pki.MakeCa("ca");
  pki.MakeLeaf("server", "ca");
  ServerConfig c = LimitedConfig();
  c.tls_cert_file = pki.path("server.pem");
  c.tls_key_file = pki.path("server.key");
  auto t = StartServer(c);
  ServesUpToTheLimit(Target(t), [&pki] { return Tls(pki, "ca"); });
}

TEST(ConnectionLimitTest, AValueOverTheDescriptorLimitIsCappedBelowIt) {
  ServerConfig c = TestConfig();
  c.max_connections = int64_t{1} << 40;
  auto t = StartServer(c);  // starts (with a warning), serving
  rlimit fds{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &fds), 0);
  EXPECT_EQ(t.server->max_connections(), MaxConnectionsFor(fds.rlim_cur));
  c.max_connections = 0;  // auto: the same
  auto u = StartServer(c);
  EXPECT_EQ(u.server->max_connections(), MaxConnectionsFor(fds.rlim_cur));
  c.max_connections = 5;
  auto v = StartServer(c);
  EXPECT_EQ(v.server->max_connections(), 5);
  EXPECT_TRUE(CallOn(OwnChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                grpc::InsecureChannelCredentials()))
                  .ok());
}

}  // namespace
}  // namespace gpusampler::server::testing
