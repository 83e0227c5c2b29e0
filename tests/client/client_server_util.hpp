// Helpers of the ClientServer and FrozenServer suites (split from client_server_test.cc):
// gpusampler-server spawned on port 0 and stopped by SIGTERM, and a request. Header-only.
#pragma once

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

#include "gpusampler/client/client.hpp"
#include "gpusampler/client/tensor.hpp"

extern char** environ;

namespace gpusampler::client {

// Starts gpusampler-server (CPU, port 0) with its files in `dir`; sets `*pid`, `*target`
// and `*metrics_port`. Fails the current test when it does not come up.
inline void SpawnServer(const std::string& dir, pid_t* pid, std::string* target, int* metrics_port,
                        const std::vector<std::string>& extra = {}) {
  const std::string bin = GPUSAMPLER_SERVER_BIN;
  ASSERT_EQ(access(bin.c_str(), X_OK), 0)
      << bin << " does not exist: build the server (cmake --build build) before this test";
  ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  const std::string port_file = dir + "/ports", log = dir + "/server.log";
  std::remove(port_file.c_str());
  std::vector<std::string> args = {bin,           "--device",    "cpu",
                                   "--address",   "127.0.0.1:0", "--metrics-address",
                                   "127.0.0.1:0", "--port-file", port_file};
  args.insert(args.end(), extra.begin(), extra.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  ASSERT_EQ(posix_spawn(pid, bin.c_str(), &actions, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&actions);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    std::ifstream in(port_file);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!text.empty() && text.back() == '\n') {
      int grpc_port = 0;
      std::istringstream(text) >> grpc_port >> *metrics_port;
      *target = "127.0.0.1:" + std::to_string(grpc_port);
      return;
    }
    int status;
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      *pid = -1;
      FAIL() << "gpusampler-server exited before serving; see " << log;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  FAIL() << "gpusampler-server did not write " << port_file << " within 60 s";
}

// SIGTERM, and the exit status must be 0.
inline void StopServer(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "server did not exit 0 on SIGTERM (status " << status << ")";
}

inline v1::SampleRequest Request(int64_t rows, int64_t n, int64_t k, uint64_t seed) {
  std::vector<int64_t> labels(rows * n);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = (i * 7919 % 11) < 2 ? 1 : 0;
  v1::SampleRequest r;
  r.mutable_spec()->set_num_samples(k);
  *r.mutable_labels() = MakeTensor(labels, {rows, n});
  r.set_seed(seed);
  return r;
}

}  // namespace gpusampler::client
