// observability/call_metrics: a client killed mid-compute counts CANCELLED.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gpusampler/kernels/sampler.hpp"
#include "overload_util.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// Finding "counts lie": a unary call whose client was SIGKILLed mid-compute counts
// CANCELLED, not OK.
TEST(CountsTest, SigkilledClientsCallCountsCancelled) {
  g_slow_ms = 1500;
  g_slow_running = 0;
  auto t = StartServer(TestConfig(), Slow());
  const std::string request_file =
      ::testing::TempDir() + "/gpusampler-killed-request-" + std::to_string(getpid());
  {
    std::ofstream out(request_file, std::ios::binary);
    out << Request(1000, kSlowK, 7).SerializeAsString();
  }
  const std::string target = "127.0.0.1:" + std::to_string(t.server->grpc_port());
  const char* script =
      "import grpc, sys\n"
      "ch = grpc.insecure_channel(sys.argv[1])\n"
      "call = ch.unary_unary('/gpusampler.v1.Sampler/Sample', request_serializer=lambda b: b,"
      " response_deserializer=lambda b: b)\n"
      "call(open(sys.argv[2], 'rb').read(), timeout=60)\n";
  // The client is plain Python: it must not inherit an LD_PRELOAD meant for this (sanitized)
  // test process, such as the TSan stage's gRPC sync shim, which Python cannot load.
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::string(*e).rfind("LD_PRELOAD=", 0) != 0) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  const char* argv[] = {"python3", "-c", script, target.c_str(), request_file.c_str(), nullptr};
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    execve("/usr/bin/python3", const_cast<char* const*>(argv), envp.data());
    _exit(127);
  }
  const bool running = WaitFor([&] { return g_slow_running.load() > 0; }, std::chrono::seconds(30));
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  std::remove(request_file.c_str());
  ASSERT_TRUE(running) << "the client's call never reached the backend";
  const std::string cancelled = "gpusampler_requests_total{code=\"CANCELLED\",method=\"Sample\"}";
  EXPECT_TRUE(WaitFor([&] { return Metric(t, cancelled) == 1; }, std::chrono::seconds(10)));
  EXPECT_EQ(Metric(t, "gpusampler_requests_total{code=\"OK\",method=\"Sample\"}"), 0);
}

}  // namespace
}  // namespace gpusampler::server::testing
