// The gpusampler server: workers, scheduler, gRPC service (+ health, reflection) and the
// metrics endpoint, with its lifecycle (warm-up, drain, device fault). Used by main.cc and
// in-process by the tests and the benchmark. Thread-safe unless noted.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/config.hpp"
#include "core/status.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace grpc {
class Server;
namespace experimental {
class ExternalConnectionAcceptor;
}
}  // namespace grpc
namespace prometheus {
class Exposer;
}

namespace gpusampler::server {

class DatasetRegistry;
class Metrics;
class Scheduler;
class SamplerService;
class HealthService;
class CredentialManager;
struct CallLedger;
struct ProbeState;
struct Fleet;
class AcceptWatch;
class ConnectionListener;

// Test hook: builds the backend of CPU worker `index` instead of MakeCpuBackend (CPU workers
// only: a --device cuda-sim server always runs MakeCudaSimBackend).
using BackendFactory = std::function<std::unique_ptr<kernels::Backend>(int index)>;

class Server {
 public:
  explicit Server(ServerConfig config, BackendFactory backend_factory = nullptr);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Creates the workers, starts gRPC (NOT_SERVING) and metrics, warms up every worker,
  // then reports SERVING and writes the port file. Not thread-safe; call once.
  Status Start();

  int grpc_port() const { return grpc_port_; }
  // Connections the gRPC port takes at once: --max-connections, or what the descriptor
  // limit allows (MaxConnectionsFor) when it is 0 or more than that. Set once listening.
  int64_t max_connections() const { return max_connections_; }
  int metrics_port() const { return metrics_port_; }
  const std::string& backend() const { return backend_; }

  // Blocks until RequestShutdown() or a fatal device fault.
  void WaitForShutdownRequest();
  void RequestShutdown();
  // True once a device fault made the server unusable (exit non-zero).
  bool failed() const;

  // Drain: NOT_SERVING, new work UNAVAILABLE, accepted work gets up to
  // --shutdown-grace-seconds (0 after a device fault), then gRPC and the workers stop.
  // Idempotent.
  void Shutdown();

  Scheduler& scheduler() { return *scheduler_; }
  SamplerService& service() { return *service_; }
  // Re-reads the token file and the TLS files now (the refresh thread does it every
  // --tls-refresh-seconds). Test hook.
  void RefreshCredentialsForTesting();
  // Removes what the server keeps on disk (the private copy of the TLS files); called by
  // the binary before it exits without running destructors.
  void CleanUpForExit();

 private:
  // The steps of Start, in order.
  Status StartCredentials();  // token file and TLS
  Status SelectDevices(DeviceSelection* selection) const;
  Status CreateWorkers(const DeviceSelection& selection, Fleet* fleet);
  // Metrics, scheduler (given the fleet's workers), dataset registry and service.
  void BuildServices(const DeviceSelection& selection, Fleet* fleet);
  Status StartMetricsEndpoint();  // /metrics, /healthz, /readyz and the metrics updater
  Status StartGrpc();             // listening, NOT_SERVING
  // Hands the listener's connections to gRPC (after BuildAndStart), at most
  // --max-connections at once.
  void StartListener(std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor);
  void WatchTransportRejections(const std::vector<intptr_t>& servers_before);
  Status OpenRepository();  // --dataset-dir
  Status ReportServing();   // SERVING, then the port file
  void StartSelfCheck();    // --self-check-ms: /readyz and /healthz fail when not accepting

  // The steps of Shutdown after the queue drained.
  void WaitForArrivals(std::chrono::steady_clock::time_point deadline);  // bodies arriving
  // Until no CreateDataset commit runs, or `deadline`: false when one still runs then.
  bool WaitForCommits(std::chrono::steady_clock::time_point deadline);
  void StopGrpc(std::chrono::steady_clock::time_point deadline);
  void StopTrimmer();

  void OnFatal(const Status& status);
  void TrimLoop();  // returns memory to the OS after a burst (malloc_trim)

  ServerConfig config_;
  BackendFactory backend_factory_;
  std::string backend_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<DatasetRegistry> datasets_;
  std::unique_ptr<SamplerService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<CredentialManager> credentials_;
  std::shared_ptr<CallLedger> ledger_;
  std::shared_ptr<ProbeState> probe_;  // what /readyz answers
  std::unique_ptr<grpc::Server> grpc_server_;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::function<int64_t()> calls_seen_;  // calls handed to the service so far (drain)
  int grpc_port_ = 0;
  int metrics_port_ = 0;
  uint64_t fd_soft_limit_ = 0;  // after RaiseFdLimit
  int64_t max_connections_ = 0;
  std::unique_ptr<ConnectionListener> listener_;  // the gRPC port

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool shutdown_requested_ = false;
  bool failed_ = false;
  bool shut_down_ = false;
  bool trim_stop_ = false;
  std::condition_variable trim_cv_;
  std::thread trimmer_;
  std::unique_ptr<AcceptWatch> accept_watch_;
};

// Values fixed at configure time (CMake).
const char* Version();
const char* Revision();
const char* CudaVersion();  // "none" when built without CUDA

}  // namespace gpusampler::server
