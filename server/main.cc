// gpusampler-server: flags (each with a GPUSAMPLER_* environment variable), logging,
// signals, and the exit code (0 after a drain, 1 after a device fault or a start failure).
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <CLI/CLI.hpp>
#include <csignal>
#include <thread>

#include "config.hpp"
#include "logging.hpp"
#include "server.hpp"

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
    spdlog::critical("start failed: {} ({})", s.message(), CodeName(s.code()));
    server.Shutdown();
    return 1;
  }
  server.WaitForShutdownRequest();
  server.Shutdown();
  return server.failed() ? 1 : 0;
}
