// gpusampler::client against a gpusampler-server of its own stopped with SIGSTOP (a wedged
// replica): sessions, health and unary calls fail by their deadlines.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_server_util.hpp"
#include "gpusampler/client/client.hpp"
#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

// A server of its own, answering once and then stopped with SIGSTOP: the process keeps its
// sockets open but never answers again, as a wedged replica does.
class FrozenServer : public ::testing::Test {
 protected:
  void SetUp() override {
    // A short grace: the drain need not wait for what the frozen server left half-done.
    SpawnServer(::testing::TempDir() + "/gpusampler_frozen." + std::to_string(getpid()), &pid_,
                &target_, &metrics_port_, {"--shutdown-grace-seconds", "1"});
    ClientOptions o;
    o.targets = {target_};
    Client warm(o);
    v1::SampleResponse response;
    ASSERT_TRUE(warm.Sample(Request(1, 40, 4, 1), &response).ok());
    ASSERT_EQ(kill(pid_, SIGSTOP), 0);
  }
  void TearDown() override {
    kill(pid_, SIGCONT);
    StopServer(pid_);
  }
  pid_t pid_ = -1;
  std::string target_;
  int metrics_port_ = 0;
};

ClientOptions FrozenClientOptions(const std::string& target) {
  ClientOptions o;
  o.targets = {target};
  return o;
}

TEST_F(FrozenServer, SessionFailsByItsPerMessageDeadline) {
  ClientOptions o = FrozenClientOptions(target_);
  o.default_timeout = std::chrono::milliseconds(500);  // per message for sessions
  Client client(o);
  auto session = client.OpenSession(2);
  int sent = 0, received = 0;
  const grpc::Status status = session->Run(
      [&](v1::SampleRequest* r) {
        if (sent == 3) return false;
        *r = Request(1, 40, 4, sent++);
        return true;
      },
      [&](v1::SampleResponse&&) { ++received; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_NE(status.error_message().find("per-message deadline of 500 ms"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(received, 0);
}

TEST_F(FrozenServer, HealthAndUnaryCallsFailByTheirDeadline) {
  ClientOptions o = FrozenClientOptions(target_);
  o.default_timeout = std::chrono::milliseconds(300);
  Client client(o);
  v1::SampleResponse response;
  EXPECT_EQ(client.Sample(Request(1, 40, 4, 1), &response).error_code(),
            grpc::StatusCode::DEADLINE_EXCEEDED);
  std::string serving;
  EXPECT_EQ(client.CheckHealth(&serving).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
}

}  // namespace
}  // namespace gpusampler::client
