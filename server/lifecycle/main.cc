// gpusampler-server: flags (each with a GPUSAMPLER_* environment variable), logging,
// signals, and the exit code (0 after a drain, 1 after a device fault or a start failure).
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/config.hpp"
#include "lifecycle/server.hpp"
#include "observability/logging.hpp"

int main(int argc, char** argv) {
  using namespace gpusampler::server;
  ServerConfig config;
  CLI::App app{"gpusampler-server: class-balanced sampling over gRPC"};
  app.set_version_flag("--version", std::string(Version()) + " (" + Revision() + ")");
  AddFlags(&app, &config);
  CLI11_PARSE(app, argc, argv);
  InitLogging(config.log_level, config.log_format);
  config.exit_when_grace_ends = true;  // the drain never outlasts --shutdown-grace-seconds

  // SIGTERM/SIGINT are blocked in every thread and taken by one sigwait thread, so no
  // handler runs in the middle of gRPC or CUDA code.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  Server server(config);
  std::thread([&server, signals] {
    int sig = 0;
    sigwait(&signals, &sig);
    spdlog::info("received {}; draining", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    server.RequestShutdown();
  }).detach();

  if (Status s = server.Start(); !s.ok()) {
    // The message names the flag and the reason; the status code is for programs, not for the
    // operator reading this line.
    spdlog::critical("start failed: {}", s.message());
    server.Shutdown();
    return 1;
  }
  server.WaitForShutdownRequest();
  // The exit bound: grace + 0.5 s whatever is still open. The drain answers accepted work
  // within the grace; what gRPC may wait on after it (connections that do not close, an
  // upload still sending) does not hold the exit.
  const auto grace =
      std::chrono::duration<double>(server.failed() ? 0.0 : config.shutdown_grace_seconds);
  static std::atomic<bool> exiting{false};  // the first of main and this thread ends it
  std::thread([&server, grace] {
    std::this_thread::sleep_for(grace + std::chrono::milliseconds(350));
    if (exiting.exchange(true)) return;
    spdlog::warn("still shutting down {:.2f} s after the drain began; exiting now",
                 grace.count() + 0.35);
    server.CleanUpForExit();
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(server.failed() ? 1 : 0);
  }).detach();
  server.Shutdown();
  if (exiting.exchange(true)) {
    while (true) std::this_thread::sleep_for(std::chrono::seconds(1));  // the watchdog exits
  }
  // Drained: exit now rather than in the destructors (stopping the metrics endpoint's
  // threads alone takes a second or two).
  const int code = server.failed() ? 1 : 0;
  server.CleanUpForExit();
  spdlog::default_logger()->flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
