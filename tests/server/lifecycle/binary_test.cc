// The real gpusampler-server binary: port file, JSON logs, the probe client, metrics, and a
// SIGTERM drain with requests in flight (every accepted request answered, exit 0).
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "gpusampler/kernels/backend.hpp"
#include "test_util.hpp"

extern char** environ;

namespace gpusampler::server::testing {
namespace {

// `env`: extra NAME=VALUE entries, before the inherited environment (so they win).
pid_t Spawn(const std::vector<std::string>& argv, const std::string& log,
            const std::vector<std::string>& env = {}) {
  std::vector<char*> envp;
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  for (char** e = environ; *e != nullptr; ++e) {
    bool overridden = false;
    for (const auto& mine : env) {
      overridden = overridden || std::string(*e).rfind(mine.substr(0, mine.find('=') + 1), 0) == 0;
    }
    if (!overridden) envp.push_back(*e);
  }
  envp.push_back(nullptr);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  return rc == 0 ? pid : -1;
}

// Exit status, or -1 when it did not exit within `timeout`.
int WaitExit(pid_t pid, std::chrono::seconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  return -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A gpusampler-server process started with `args` plus a port file, killed when this goes out
// of scope unless it has exited (so an assertion that ends a test never leaves it behind).
struct ServerProcess {
  std::string log;
  std::string port_file;
  pid_t pid = -1;
  int grpc_port = 0;
  int metrics_port = 0;
  bool exited = false;

  explicit ServerProcess(const std::string& name)
      : log(::testing::TempDir() + "/gpusampler-" + name + "-" + std::to_string(getpid()) + ".log"),
        port_file(::testing::TempDir() + "/gpusampler-" + name + "-ports-" +
                  std::to_string(getpid())) {
    std::remove(port_file.c_str());
  }
  ~ServerProcess() {
    if (pid > 0 && !exited) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::remove(port_file.c_str());
  }
  // Spawns the server; true once it has written its ports (SERVING).
  bool Start(std::vector<std::string> args, const std::vector<std::string>& env = {},
             std::chrono::seconds timeout = std::chrono::seconds(60)) {
    args.insert(args.begin(), GPUSAMPLER_SERVER_BIN);
    args.push_back("--port-file");
    args.push_back(port_file);
    pid = Spawn(args, log, env);
    if (pid <= 0) return false;
    return WaitFor(
        [&] {
          std::ifstream in(port_file);
          return static_cast<bool>(in >> grpc_port >> metrics_port);
        },
        timeout);
  }
  std::string target() const { return "127.0.0.1:" + std::to_string(grpc_port); }
  // Exit status (-1: killed after `timeout`).
  int WaitForExit(std::chrono::seconds timeout) {
    exited = true;
    return WaitExit(pid, timeout);
  }
};

TEST(BinaryTest, ServesProbesAndDrainsOnSigterm) {
  ServerProcess server("drain");
  // The cuda-sim device with one stream worker: a launch of 800k elements takes tens of
  // milliseconds there against about a millisecond to upload it, so requests queue up behind
  // the running one whatever the machine's load. (On the CPU backend the sampling core
  // became fast enough that the overlap depended on load, and the test was flaky.)
  ASSERT_TRUE(server.Start({"--device", "cuda-sim", "--streams-per-device", "1", "--address",
                            "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--log-format",
                            "json", "--shutdown-grace-seconds", "30"},
                           {}, std::chrono::seconds(30)))
      << ReadFile(server.log);
  ASSERT_GT(server.grpc_port, 0);
  ASSERT_GT(server.metrics_port, 0);
  const std::string& log = server.log;
  const int metrics_port = server.metrics_port;
  const std::string target = server.target();

  // The probe client answers 0.
  const std::string probe =
      std::string(GPUSAMPLER_PROBE_BIN) + " --target " + target + " >> " + log + " 2>&1";
  EXPECT_EQ(std::system(probe.c_str()), 0) << ReadFile(log);

  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = v1::Sampler::NewStub(channel);
  EXPECT_EQ(HealthStatus(channel), "SERVING");

  // Heavy requests in flight, then SIGTERM.
  constexpr int kInFlight = 12;
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (int i = 0; i < kInFlight; ++i) {
    v1::SampleRequest req;
    req.mutable_spec()->set_num_samples(1000);
    req.set_seed(static_cast<uint64_t>(i));
    auto* l = req.mutable_labels();
    l->set_dtype(v1::DTYPE_INT8);
    l->add_shape(4);
    l->add_shape(200'000);
    std::string data(800'000, '\0');
    for (size_t j = 0; j < data.size(); j += 7) data[j] = 1;
    l->set_data(std::move(data));
    calls.push_back(StartSample(stub.get(), std::move(req), std::chrono::seconds(60)));
  }
  // The requests arrive interleaved on one connection; SIGTERM once several are accepted
  // and unanswered.
  constexpr int kAccepted = 3;
  const bool accepted = WaitFor(
      [&] {
        const std::string m = HttpGet(metrics_port, "/metrics");
        const size_t at = m.find("\ngpusampler_inflight_requests ");
        return at != std::string::npos && std::stod(m.substr(at + 30)) >= kAccepted;
      },
      std::chrono::seconds(30));
  if (!accepted) {
    // Let the calls finish before they go out of scope (gRPC still writes their responses).
    for (auto& call : calls) call->status.wait();
    FAIL() << "fewer than " << kAccepted << " requests were in flight at once";
  }
  ASSERT_EQ(kill(server.pid, SIGTERM), 0);
  // New work is refused once the server reports NOT_SERVING (or has closed: UNAVAILABLE
  // either way).
  EXPECT_TRUE(WaitFor([&] { return HealthStatus(channel) != "SERVING"; }));
  {
    grpc::ClientContext ctx;
    v1::SampleRequest req;
    req.mutable_spec()->set_num_samples(1);
    req.mutable_labels()->set_dtype(v1::DTYPE_INT64);
    req.mutable_labels()->add_shape(1);
    req.mutable_labels()->set_data(std::string(8, '\0'));
    v1::SampleResponse resp;
    EXPECT_EQ(stub->Sample(&ctx, req, &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  }
  // Accepted requests are answered; the rest (sent after SIGTERM) are refused.
  int answered = 0;
  for (int i = 0; i < kInFlight; ++i) {
    const grpc::Status s = calls[i]->status.get();
    if (s.ok()) {
      ++answered;
      EXPECT_EQ(calls[i]->response.indices().data().size(), 4u * 1000 * 8);
    } else {
      EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << i << ": " << s.error_message();
    }
  }
  EXPECT_GE(answered, kAccepted);
  EXPECT_EQ(server.WaitForExit(std::chrono::seconds(40)), 0) << ReadFile(log);

  // Every log line is a JSON object.
  std::istringstream lines(ReadFile(log));
  std::string line;
  int json_lines = 0;
  bool saw_drain = false;
  while (std::getline(lines, line)) {
    if (line.rfind("probe:", 0) == 0) continue;
    const auto j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(j.is_discarded()) << line;
    ASSERT_TRUE(j.contains("msg") && j.contains("level") && j.contains("time")) << line;
    saw_drain = saw_drain || j["msg"].get<std::string>().find("draining") != std::string::npos;
    ++json_lines;
  }
  EXPECT_GT(json_lines, 3);
  EXPECT_TRUE(saw_drain);
}

// A launch still running when the grace ends is not waited for: the binary exits within the
// grace (status 0), and the caller of that launch sees UNAVAILABLE (the connection closed),
// never CANCELLED and never an answer. The cuda-sim device makes a 30M-element launch take
// seconds, far past a 0.2 s grace.
TEST(BinaryTest, DrainExitsWithinTheGraceWhileALaunchRuns) {
  ServerProcess server("grace");
  ASSERT_TRUE(
      server.Start({"--device", "cuda-sim", "--streams-per-device", "1", "--address", "127.0.0.1:0",
                    "--metrics-address", "127.0.0.1:0", "--shutdown-grace-seconds", "0.2"}))
      << ReadFile(server.log);
  auto channel = grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials());
  auto stub = v1::Sampler::NewStub(channel);
  v1::SampleRequest req;
  req.mutable_spec()->set_num_samples(1000);
  auto* l = req.mutable_labels();
  l->set_dtype(v1::DTYPE_INT8);
  l->add_shape(2);
  l->add_shape(15'000'000);
  std::string data(30'000'000, '\0');
  for (size_t j = 0; j < data.size(); j += 3) data[j] = 1;
  l->set_data(std::move(data));
  auto call = StartSample(stub.get(), std::move(req), std::chrono::seconds(120));
  // Running: accepted, and no longer queued.
  auto metric = [&](const std::string& name) {
    const std::string m = HttpGet(server.metrics_port, "/metrics");
    const size_t at = m.find("\n" + name + " ");
    return at == std::string::npos ? -1.0 : std::stod(m.substr(at + name.size() + 2));
  };
  ASSERT_TRUE(WaitFor(
      [&] {
        return metric("gpusampler_inflight_requests") >= 1 && metric("gpusampler_queue_depth") == 0;
      },
      std::chrono::seconds(60)))
      << ReadFile(server.log);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(server.pid, SIGTERM), 0);
  EXPECT_EQ(server.WaitForExit(std::chrono::seconds(30)), 0) << ReadFile(server.log);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.5) << "the drain waited for the launch";
  const grpc::Status s = call->status.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNAVAILABLE) << s.error_message();
  EXPECT_NE(ReadFile(server.log).find("grace period over with a launch still running"),
            std::string::npos)
      << ReadFile(server.log);
}

// Finding "exit overruns a short grace": with --shutdown-grace-seconds 1 the process exits
// within 1.5 s of SIGTERM also with idle gRPC connections, an idle SampleStream, an upload
// still open and idle connections on the metrics port.
TEST(BinaryTest, GraceOfOneSecondExitsWithinOneAndAHalfWithIdleConnectionsAndAnOpenUpload) {
  ServerProcess server("short-grace");
  ASSERT_TRUE(server.Start({"--device", "cpu", "--address", "127.0.0.1:0", "--metrics-address",
                            "127.0.0.1:0", "--shutdown-grace-seconds", "1"}))
      << ReadFile(server.log);
  std::vector<std::shared_ptr<grpc::Channel>> idle;
  for (int i = 0; i < 4; ++i) {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    idle.push_back(
        grpc::CreateCustomChannel(server.target(), grpc::InsecureChannelCredentials(), args));
    ASSERT_TRUE(
        idle.back()->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10)));
  }
  auto stub = v1::Sampler::NewStub(idle[0]);
  grpc::ClientContext stream_ctx;
  auto stream = stub->SampleStream(&stream_ctx);  // open, nothing sent
  grpc::ClientContext upload_ctx;
  v1::DatasetInfo info;
  auto upload = v1::Sampler::NewStub(idle[1])->CreateDataset(&upload_ctx, &info);
  v1::DatasetChunk chunk;
  chunk.set_name("open-upload");
  chunk.mutable_labels()->set_dtype(v1::DTYPE_INT8);
  chunk.mutable_labels()->add_shape(1000);
  chunk.mutable_labels()->set_data(std::string(1000, '\1'));
  ASSERT_TRUE(upload->Write(chunk));  // and never finished
  std::vector<int> metrics_idle;
  for (int i = 0; i < 8; ++i) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(server.metrics_port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    metrics_idle.push_back(fd);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(server.pid, SIGTERM), 0);
  EXPECT_EQ(server.WaitForExit(std::chrono::seconds(30)), 0) << ReadFile(server.log);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(seconds, 1.5) << ReadFile(server.log);
  for (int fd : metrics_idle) close(fd);
  stream_ctx.TryCancel();
  upload_ctx.TryCancel();
}

TEST(BinaryTest, BadFlagsExitNonZero) {
  const std::string log = ::testing::TempDir() + "/gpusampler-badflags.log";
  const pid_t pid = Spawn({GPUSAMPLER_SERVER_BIN, "--device", "tpu:0", "--address", "127.0.0.1:0",
                           "--metrics-address", ""},
                          log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(20)), 1);
  EXPECT_NE(ReadFile(log).find("expected auto, cpu, cuda, cuda:0,1 or cuda-sim"), std::string::npos)
      << ReadFile(log);
}

// `--device cuda` on a host without the NVIDIA driver's library: the operator reads that no
// driver is there (not a version to upgrade) and no status code name.
TEST(BinaryTest, DeviceCudaWithoutADriverSaysSo) {
  if (!kernels::CudaCompiled()) GTEST_SKIP() << "no CUDA backend in this build";
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
    GTEST_SKIP() << "this host has libcuda.so.1";
  }
  const std::string log = ::testing::TempDir() + "/gpusampler-nodriver.log";
  const pid_t pid = Spawn({GPUSAMPLER_SERVER_BIN, "--device", "cuda", "--address", "127.0.0.1:0",
                           "--metrics-address", ""},
                          log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(20)), 1);
  const std::string text = ReadFile(log);
  EXPECT_NE(text.find("--device cuda: no CUDA device is available: no NVIDIA driver found"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("INVALID_ARGUMENT"), std::string::npos) << text;
  EXPECT_EQ(text.find("driver supports CUDA none"), std::string::npos) << text;
}

TEST(BinaryTest, DeviceCudaSimFromTheEnvironmentServesAndDrains) {
  ServerProcess server("sim");
  // No --device: GPUSAMPLER_DEVICE picks cuda-sim.
  ASSERT_TRUE(server.Start({"--address", "127.0.0.1:0", "--metrics-address", ""},
                           {"GPUSAMPLER_DEVICE=cuda-sim"}))
      << ReadFile(server.log);
  auto stub = v1::Sampler::NewStub(
      grpc::CreateChannel(server.target(), grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext ctx;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&ctx, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.backend(), "cuda-sim");
    ASSERT_EQ(info.devices_size(), 1);
    EXPECT_EQ(info.devices(0).id(), "cuda-sim");
  }
  {
    RequestSpec r;
    r.rows = {RandomRow(300, 4)};
    r.num_samples = 10;
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    ASSERT_TRUE(stub->Sample(&ctx, MakeRequest(r), &resp).ok());
    EXPECT_EQ(resp.device(), "cuda-sim");
  }
  kill(server.pid, SIGTERM);
  EXPECT_EQ(server.WaitForExit(std::chrono::seconds(30)), 0) << ReadFile(server.log);
  EXPECT_NE(ReadFile(server.log).find("backend=cuda-sim"), std::string::npos)
      << ReadFile(server.log);
}

TEST(BinaryTest, HelpNamesCudaSim) {
  const std::string log = ::testing::TempDir() + "/gpusampler-help.log";
  const pid_t pid = Spawn({GPUSAMPLER_SERVER_BIN, "--help"}, log);
  ASSERT_GT(pid, 0);
  EXPECT_EQ(WaitExit(pid, std::chrono::seconds(20)), 0);
  EXPECT_NE(ReadFile(log).find("auto | cpu | cuda | cuda:0,1 | cuda-sim"), std::string::npos)
      << ReadFile(log);
}

TEST(BinaryTest, OutOfRangeFlagValuesExitNonZeroNamingTheFlag) {
  const std::string log = ::testing::TempDir() + "/gpusampler-badrange.log";
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"--max-row-elements", "2147483648"},
           {"--max-row-elements", "0"},
           {"--max-stream-inflight", "0"},
           {"--max-batch-rows", "0"},
           {"--queue-capacity", "0"},
           {"--streams-per-device", "0"},
           {"--cpu-workers", "0"},
           {"--keepalive-time-ms", "3000000000"},
           {"--max-connection-age-ms", "-1"},
           {"--max-num-samples", "0"},
           {"--shutdown-grace-seconds", "-1"},
       }) {
    const pid_t pid = Spawn({GPUSAMPLER_SERVER_BIN, "--device", "cpu", "--address", "127.0.0.1:0",
                             "--metrics-address", "", flag, value},
                            log);
    ASSERT_GT(pid, 0);
    const int rc = WaitExit(pid, std::chrono::seconds(20));
    EXPECT_NE(rc, 0) << flag << " " << value;
    EXPECT_NE(rc, -1) << flag << " " << value << ": still running";
    EXPECT_NE(ReadFile(log).find(flag), std::string::npos) << flag << ": " << ReadFile(log);
  }
}

TEST(BinaryTest, OutOfRangeConfigFailsStart) {
  ServerConfig config = TestConfig();
  config.limits.max_row_elements = int64_t{1} << 31;
  Server server(config);
  const Status s = server.Start();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("--max-row-elements = 2147483648 is outside [1, 2147483647]"),
            std::string::npos)
      << s.message();
}

}  // namespace
}  // namespace gpusampler::server::testing
