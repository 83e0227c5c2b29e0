#include "lifecycle/server.hpp"

#include <CivetServer.h>
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/server_builder_option.h>
#include <grpcpp/resource_quota.h>
#include <malloc.h>
#include <prometheus/exposer.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <thread>

#include "datasets/datasets.hpp"
#include "datasets/repository.hpp"
#include "edge/health.hpp"
#include "edge/security.hpp"
#include "edge/service.hpp"
#include "edge/validate.hpp"
#include "gpusampler/kernels/device.hpp"
#include "lifecycle/accept_check.hpp"
#include "lifecycle/listener.hpp"
#include "observability/call_metrics.hpp"
#include "observability/metrics.hpp"
#include "scheduling/scheduler.hpp"

namespace gpusampler::server {

const char* Version() { return GPUSAMPLER_VERSION; }
const char* Revision() { return GPUSAMPLER_REVISION; }
const char* CudaVersion() { return GPUSAMPLER_CUDA_VERSION; }

namespace {

int64_t HostMemoryBytes() {
  return static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
}

// Reflection on one server builder, or not. (Loading gRPC's reflection library registers
// its plugin for every server of the process; this option removes or adds it.)
class ReflectionOption final : public grpc::ServerBuilderOption {
 public:
  explicit ReflectionOption(bool on) : on_(on) {}
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>* plugins) override {
    auto reflection = std::make_unique<grpc::reflection::ProtoServerReflectionPlugin>();
    const std::string name = reflection->name();
    plugins->erase(std::remove_if(plugins->begin(), plugins->end(),
                                  [&](const auto& p) { return p->name() == name; }),
                   plugins->end());
    if (on_) plugins->push_back(std::move(reflection));
  }

 private:
  const bool on_;
};

}  // namespace

// What /readyz answers for one server: SERVING or not (health), and whether the gRPC port
// still accepts connections (`accepting`); /healthz fails once it has not for a while
// (`alive`). The last two are the self-check's (AcceptWatch).
struct ProbeState {
  std::atomic<bool> serving{false};
  std::atomic<bool> accepting{true};
  std::atomic<bool> alive{true};
};

// The workers Start creates and the devices they sample on.
struct Fleet {
  std::vector<std::pair<std::string, std::string>> devices;  // (id, uuid): the metrics' devices
  google::protobuf::RepeatedPtrField<v1::DeviceInfo> devices_info;  // GetServerInfo's devices
  struct Slot {
    Slot(std::unique_ptr<Worker> w, int d, Scheduler::WorkerOptions o = {})
        : worker(std::move(w)), device(d), options(o) {}
    std::unique_ptr<Worker> worker;
    int device = 0;  // index into devices
    Scheduler::WorkerOptions options;
  };
  std::vector<Slot> workers;
};

namespace {

// The probe state of each server of the process by metrics port: civetweb's callback is a
// plain function that knows the port the request came in on (tests run several servers).
std::mutex g_probes_mu;
std::map<int, std::shared_ptr<ProbeState>> g_probes;

void SendText(mg_connection* conn, int code, const char* text) {
  if (code == 200) {
    mg_send_http_ok(conn, "text/plain; charset=utf-8", static_cast<long long>(std::strlen(text)));
    mg_write(conn, text, std::strlen(text));
  } else {
    mg_send_http_error(conn, code, "%s", text);
  }
}

// The metrics port's own paths: /healthz (200 while the process runs), /readyz (200 while
// health is SERVING, else 503), and /metrics (handed to prometheus-cpp's handler). civetweb
// matches a handler's URI as a prefix ("/metricsX" would be served); anything else is
// answered 404 here, before the handlers.
std::shared_ptr<ProbeState> FindProbe(int port) {
  std::lock_guard<std::mutex> lock(g_probes_mu);
  const auto it = g_probes.find(port);
  return it != g_probes.end() ? it->second : nullptr;
}

int MetricsPortPaths(mg_connection* conn) {
  const mg_request_info* info = mg_get_request_info(conn);
  const char* uri = info ? info->local_uri : nullptr;
  if (uri && std::strcmp(uri, "/metrics") == 0) return 0;
  if (uri && std::strcmp(uri, "/healthz") == 0) {
    const std::shared_ptr<ProbeState> probe = FindProbe(info->server_port);
    if (probe && !probe->alive.load()) {
      SendText(conn, 503, "the gRPC port does not accept connections\n");
      return 503;
    }
    SendText(conn, 200, "ok\n");
    return 200;
  }
  if (uri && std::strcmp(uri, "/readyz") == 0) {
    const std::shared_ptr<ProbeState> probe = FindProbe(info->server_port);
    if (probe && probe->serving.load() && !probe->accepting.load()) {
      SendText(conn, 503, "NOT_SERVING (the gRPC port does not accept connections)\n");
      return 503;
    }
    const bool serving = probe && probe->serving.load();
    SendText(conn, serving ? 200 : 503, serving ? "SERVING\n" : "NOT_SERVING\n");
    return serving ? 200 : 503;
  }
  mg_send_http_error(conn, 404, "%s",
                     "not found (this port serves /metrics, /healthz and /readyz)\n");
  return 404;
}
const CivetCallbacks kMetricsPortPaths = [] {
  CivetCallbacks callbacks{};
  callbacks.begin_request = MetricsPortPaths;
  return callbacks;
}();

Status WritePortFile(const std::string& path, int grpc_port, int metrics_port) {
  // Written under a temporary name and renamed, so a reader never sees half a line.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << grpc_port << " " << metrics_port << "\n";
    if (!out) return Status(Code::kInternal, "cannot write port file " + tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(Code::kInternal, "cannot rename " + tmp + " to " + path);
  }
  return Status::Ok();
}

// CUDA workers' options from the configuration: staging, arena and buffers sized for the
// largest launch the limits allow (inline labels and the response each fit one message;
// sized for int64 labels), so that no request allocates.
CudaWorkerOptions CudaOptions(const ServerConfig& config) {
  CudaWorkerOptions options;
  options.device_timeout_ms = config.device_timeout_ms;
  options.reserve_rows = config.limits.max_rows;
  options.reserve_elements = config.limits.max_message_bytes / 8;
  options.reserve_slots = std::min(config.max_batch_slots, config.limits.max_message_bytes / 9);
  return options;
}

// Logs the exact reason whenever a visible GPU goes unused: `--device auto` serving on the
// CPU (no device, a driver too old for this build, no CUDA backend), `--device cpu` with
// GPUs visible, `--device cuda:N` leaving others idle.
void LogUnusedGpus(const std::string& device, int cuda_count, const DeviceSelection& selection) {
  if (selection.cuda_sim) return;
  if (selection.cuda_devices.empty()) {
    if (device == "auto") {
      spdlog::warn("--device auto: serving on the CPU, no usable CUDA device: {}",
                   kernels::CudaUnavailableReason());
    } else if (cuda_count > 0) {
      spdlog::info(
          "--device {}: {} visible CUDA device(s) left unused (use --device auto or "
          "cuda to serve on them)",
          device, cuda_count);
    }
    return;
  }
  const int unused = cuda_count - static_cast<int>(selection.cuda_devices.size());
  if (unused > 0) {
    spdlog::info("--device {}: {} of {} visible CUDA devices left unused", device, unused,
                 cuda_count);
  }
}

void AddDevice(Fleet* fleet, const std::string& id, const std::string& uuid,
               const std::string& name, int64_t memory_bytes) {
  fleet->devices.emplace_back(id, uuid);
  auto* d = fleet->devices_info.Add();
  d->set_name(name);
  d->set_id(id);
  d->set_memory_bytes(memory_bytes);
}

// The CUDA path on the host: CUDA workers on kernels::kSimDevice, whose memory is host
// memory, whose streams are host threads and whose kernels are the CUDA pipeline's bodies
// run by the host executor. The workers stage, copy, launch, gather dataset features and
// time out exactly as on a GPU (docs/server.md).
Fleet CudaSimFleet(const ServerConfig& config) {
  Fleet fleet;
  AddDevice(&fleet, "cuda-sim", "", "cuda-sim", HostMemoryBytes());
  const int n = std::max(1, config.streams_per_device);
  for (int s = 0; s < n; ++s) {
    fleet.workers.emplace_back(MakeCudaWorker(kernels::kSimDevice, CudaOptions(config)), 0);
  }
  spdlog::info("backend cuda-sim: {} stream worker(s), the CUDA path run on the host", n);
  return fleet;
}

Fleet CpuFleet(const ServerConfig& config, const BackendFactory& backend_factory) {
  Fleet fleet;
  AddDevice(&fleet, "cpu", "", "cpu", HostMemoryBytes());
  const int n = std::max(1, config.cpu_workers);
  const int hw = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  const int threads = config.cpu_threads > 0 ? config.cpu_threads : std::max(1, hw / n);
  for (int w = 0; w < n; ++w) {
    auto backend = backend_factory ? backend_factory(w) : kernels::MakeCpuBackend(threads);
    fleet.workers.emplace_back(MakeHostWorker(std::move(backend), "cpu"), 0);
  }
  if (config.cpu_express_elements > 0) {
    // The express worker: small requests (one image's anchors, a probe) take it while the
    // others run a large launch. One thread: its launches are short by construction.
    auto backend = backend_factory ? backend_factory(n) : kernels::MakeCpuBackend(1);
    fleet.workers.emplace_back(MakeHostWorker(std::move(backend), "cpu"), 0,
                               Scheduler::WorkerOptions{config.cpu_express_elements});
    spdlog::info(
        "backend cpu: {} worker(s) x {} thread(s), and 1 express worker x 1 thread for "
        "requests of at most {} label elements (--cpu-express-elements)",
        n, threads, config.cpu_express_elements);
  } else {
    spdlog::info("backend cpu: {} worker(s) x {} thread(s)", n, threads);
  }
  return fleet;
}

Fleet CudaFleet(const ServerConfig& config, const std::vector<int>& cuda_devices) {
  Fleet fleet;
  const int streams = std::max(1, config.streams_per_device);
  for (size_t i = 0; i < cuda_devices.size(); ++i) {
    const int dev = cuda_devices[i];
    const kernels::DeviceInfo di = kernels::GetDeviceInfo(dev);
    const std::string id = "cuda:" + std::to_string(dev);
    AddDevice(&fleet, id, di.uuid, di.name, static_cast<int64_t>(di.total_memory));
    for (int s = 0; s < streams; ++s) {
      fleet.workers.emplace_back(MakeCudaWorker(dev, CudaOptions(config)), static_cast<int>(i));
    }
    spdlog::info("backend {} ({}, {} MiB, {}): {} stream worker(s)", id, di.name,
                 di.total_memory >> 20, di.uuid, streams);
  }
  return fleet;
}

// What GetServerInfo answers: version, devices, backend, repository and limits.
v1::ServerInfo ServerInfo(const ServerConfig& config, const std::string& backend,
                          const Fleet& fleet) {
  v1::ServerInfo info;
  info.set_version(Version());
  info.set_revision(Revision());
  *info.mutable_devices() = fleet.devices_info;
  info.set_backend(backend);
  info.set_dataset_repository(!config.dataset_dir.empty());  // SPEC section 6
  auto* limits = info.mutable_limits();
  limits->set_max_message_bytes(config.limits.max_message_bytes);
  limits->set_max_rows(config.limits.max_rows);
  limits->set_max_elements(config.limits.max_elements);
  limits->set_max_row_elements(config.limits.max_row_elements);
  limits->set_max_num_samples(config.limits.max_num_samples);
  limits->set_max_batch_rows(config.max_batch_rows);
  return info;
}

// Message sizes, the memory quota, keepalive, streams, compression and connection age.
void ConfigureTransport(const ServerConfig& config, grpc::ServerBuilder* builder) {
  // Above --max-message-bytes, so that the service refuses an oversize request itself, with
  // a message naming the flag and a do-not-retry pushback (validate.hpp).
  const int max_bytes = TransportMessageLimit(config.limits.max_message_bytes);
  builder->SetMaxReceiveMessageSize(max_bytes);
  // Bytes gRPC is still receiving count against the budget too: its memory quota follows
  // --max-inflight-bytes (TransportQuotaBytes; issue 31, item 7) and shrinks the HTTP/2
  // flow-control windows as it fills, so that clients cannot push much more than the budget
  // into the process at once. (The builder keeps a reference to the quota.)
  // By default at least one message of the transport's limit plus the allowance: a request
  // over the budget must arrive whole, so that the service refuses it with a message naming
  // the flag, instead of gRPC's memory pressure cancelling it without one. (Equal to the
  // budget rule at the defaults: 1 GiB budget, 64 MiB messages.)
  int64_t quota_bytes = TransportQuotaBytes(config);
  if (config.transport_quota_bytes == 0) {
    quota_bytes = std::max<int64_t>(quota_bytes, int64_t{max_bytes} + kTransportAllowanceBytes);
  }
  grpc::ResourceQuota quota("gpusampler");
  quota.Resize(static_cast<size_t>(quota_bytes));
  builder->SetResourceQuota(quota);
  builder->SetMaxSendMessageSize(max_bytes);
  // No SO_REUSEPORT: a second server on a port in use fails to start ("cannot listen on")
  // instead of silently sharing the port's connections, and servers asking for port 0
  // never get the same one (gRPC's default allows both: grpc/grpc#10755, #17298).
  builder->AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                              static_cast<int>(config.keepalive_time_ms));
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                              static_cast<int>(config.keepalive_timeout_ms));
  builder->AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                              static_cast<int>(std::min<int64_t>(config.keepalive_time_ms, 10000)));
  builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                              static_cast<int>(config.max_concurrent_streams));
  if (!config.accept_compression) {
    // Identity only: a compressed request is refused before it is inflated (with TLS the
    // metadata check refuses it first, with a message naming --accept-compression).
    builder->AddChannelArgument(GRPC_COMPRESSION_CHANNEL_ENABLED_ALGORITHMS_BITSET, 1);
  }
  if (config.max_connection_age_ms > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                                static_cast<int>(config.max_connection_age_ms));
  }
}

}  // namespace

Server::Server(ServerConfig config, BackendFactory backend_factory)
    : config_(std::move(config)), backend_factory_(std::move(backend_factory)) {}

Server::~Server() {
  Shutdown();
  if (metrics_port_ != 0) {
    std::lock_guard<std::mutex> lock(g_probes_mu);
    const auto it = g_probes.find(metrics_port_);
    if (it != g_probes.end() && it->second == probe_) g_probes.erase(it);
  }
}

void Server::RefreshCredentialsForTesting() {
  if (credentials_) credentials_->Refresh();
}

void Server::CleanUpForExit() {
  if (credentials_) credentials_->RemovePrivateFiles();
}

Status Server::Start() {
  if (std::string error; !CheckConfig(config_, &error)) {
    return Status(Code::kInvalidArgument, error);
  }
  fd_soft_limit_ = RaiseFdLimit().soft;
  ledger_ = std::make_shared<CallLedger>();
  probe_ = std::make_shared<ProbeState>();
  GPUSAMPLER_RETURN_IF_ERROR(StartCredentials());
  DeviceSelection selection;
  GPUSAMPLER_RETURN_IF_ERROR(SelectDevices(&selection));
  Fleet fleet;
  GPUSAMPLER_RETURN_IF_ERROR(CreateWorkers(selection, &fleet));
  BuildServices(selection, &fleet);
  GPUSAMPLER_RETURN_IF_ERROR(StartMetricsEndpoint());
  GPUSAMPLER_RETURN_IF_ERROR(StartGrpc());
  GPUSAMPLER_RETURN_IF_ERROR(scheduler_->Start());
  GPUSAMPLER_RETURN_IF_ERROR(OpenRepository());
  return ReportServing();
}

Status Server::StartCredentials() {
  credentials_ = std::make_unique<CredentialManager>(config_);
  // Calls the TLS metadata check refuses are counted in requests_total (the ledger's
  // metrics are set in BuildServices, before the server listens).
  GPUSAMPLER_RETURN_IF_ERROR(
      credentials_->Init([ledger = ledger_](const std::string& path, const Status& status) {
        ledger->RecordRefused(path, status);
      }));
  const bool auth = !credentials_->tokens()->Get()->empty();
  if (auth) {
    spdlog::info(
        "authentication on: Sampler calls need a bearer token ({} accepted; the file is "
        "re-read every {} s)",
        credentials_->tokens()->Get()->size(), config_.tls_refresh_seconds);
  }
  if (auth && config_.tls_cert_file.empty()) {
    // Plaintext gRPC has no metadata hook: reflection could not be put behind the token.
    if (config_.reflection) {
      return InvalidArgument(
          "--reflection with --auth-token-file needs TLS (--tls-cert-file), "
          "which puts reflection behind the token");
    }
    spdlog::warn(
        "--auth-token-file without TLS: bearer tokens cross the network in cleartext, and a "
        "call's token is checked only once its request has arrived");
  }
  return Status::Ok();
}

Status Server::SelectDevices(DeviceSelection* selection) const {
  std::string error;
  const int cuda_count = backend_factory_ ? 0 : kernels::CudaDeviceCount();
  if (!ParseDevice(config_.device, cuda_count, selection, &error)) {
    // `--device cuda` (or cuda:N) without a usable GPU: the start fails naming the reason.
    if (cuda_count == 0 && !backend_factory_) error += ": " + kernels::CudaUnavailableReason();
    return Status(Code::kInvalidArgument, error);
  }
  LogUnusedGpus(config_.device, cuda_count, *selection);
  return Status::Ok();
}

Status Server::CreateWorkers(const DeviceSelection& selection, Fleet* fleet) {
  backend_ = selection.cuda_sim ? "cuda-sim" : selection.cuda_devices.empty() ? "cpu" : "cuda";
  try {
    if (selection.cuda_sim) {
      *fleet = CudaSimFleet(config_);
    } else if (selection.cuda_devices.empty()) {
      *fleet = CpuFleet(config_, backend_factory_);
    } else {
      *fleet = CudaFleet(config_, selection.cuda_devices);
    }
  } catch (...) {  // kernels -> server: opening devices and backends throws kernels::Error
    return FromCurrentException("cannot create the workers");
  }
  return Status::Ok();
}

void Server::BuildServices(const DeviceSelection& selection, Fleet* fleet) {
  metrics_ = std::make_unique<Metrics>(fleet->devices,
                                       BuildInfo{Version(), Revision(), CudaVersion(), backend_});
  metrics_->queue_capacity().Set(static_cast<double>(config_.queue_capacity));
  scheduler_ = std::make_unique<Scheduler>(
      Scheduler::Options{config_.queue_capacity, std::max<int64_t>(1, config_.max_batch_rows),
                         config_.max_batch_delay_us, config_.worker_spin_us,
                         config_.limits.max_elements, config_.max_batch_slots},
      metrics_.get(), [this](const Status& s) { OnFatal(s); });
  for (auto& w : fleet->workers) {
    scheduler_->AddWorker(std::move(w.worker), w.device, w.options);
  }
  // Datasets live where the workers sample: device memory for CUDA workers, host memory for
  // CPU and cuda-sim workers (listed under the workers' device id).
  datasets_ = std::make_unique<DatasetRegistry>(
      config_.max_dataset_bytes,
      selection.cuda_sim ? std::vector<int>{kernels::kSimDevice} : selection.cuda_devices);
  service_ =
      std::make_unique<SamplerService>(config_, scheduler_.get(), metrics_.get(),
                                       ServerInfo(config_, backend_, *fleet), datasets_.get());
  service_->SetTokens(credentials_->tokens());
  ledger_->metrics = metrics_.get();
}

Status Server::StartMetricsEndpoint() {
  if (!config_.metrics_address.empty()) {
    try {
      // civetweb serves one connection per thread, and an idle connection holds its thread
      // until request_timeout_ms: many threads (cheap while idle) and a short timeout, so
      // that idle connections cannot stall a scrape or a probe (docs/server.md); no
      // keep-alive. /healthz and /readyz answer here too (MetricsPortPaths).
      exposer_ = std::make_unique<prometheus::Exposer>(
          std::vector<std::string>{"listening_ports", config_.metrics_address, "num_threads", "64",
                                   "request_timeout_ms", "1000", "enable_keep_alive", "no"},
          &kMetricsPortPaths);
    } catch (...) {  // prometheus-cpp -> server: civetweb cannot listen (a bad or taken port)
      // Whatever the exception, the endpoint is unavailable: its message says why.
      return Unavailable("cannot listen on metrics address " + config_.metrics_address + ": " +
                         FromCurrentException().message());
    }
    exposer_->RegisterCollectable(metrics_->registry());
    exposer_->RegisterCollectable(metrics_->process_collector());
    const auto ports = exposer_->GetListeningPorts();
    metrics_port_ = ports.empty() ? 0 : ports.front();
    std::lock_guard<std::mutex> lock(g_probes_mu);
    g_probes[metrics_port_] = probe_;
  }
  metrics_->StartUpdater(std::chrono::milliseconds(1000));
  return Status::Ok();
}

Status Server::StartGrpc() {
  // Our own health service, NOT_SERVING from the start: gRPC's default one would answer
  // SERVING between BuildAndStart and the first SetServingStatus(false).
  grpc::EnableDefaultHealthCheckService(false);
  health_ = std::make_unique<HealthService>();
  grpc::ServerBuilder builder;
  // Reflection only when asked for, on this server alone (the global plugin would add it to
  // every server of the process); behind the bearer token like the Sampler methods.
  builder.SetOption(std::make_unique<ReflectionOption>(config_.reflection));
  // Our own listener (listener.hpp): a connection limit, and no dead port after EMFILE.
  GPUSAMPLER_RETURN_IF_ERROR(ConnectionListener::Open(config_.address, &listener_));
  grpc_port_ = listener_->port();
  std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor =
      builder.experimental().AddExternalConnectionAcceptor(
          grpc::ServerBuilder::experimental_type::ExternalConnectionType::FROM_FD,
          credentials_->server_credentials());
  builder.RegisterService(service_.get());
  builder.RegisterService(health_.get());
  // Requests are counted and timed from their arrival, before parsing (call_metrics.hpp).
  auto call_metrics = std::make_unique<CallMetricsFactory>(ledger_);
  calls_seen_ = call_metrics->CallsSeen();
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
  creators.push_back(std::move(call_metrics));
  builder.experimental().SetInterceptorCreators(std::move(creators));
  ConfigureTransport(config_, &builder);
  const std::vector<intptr_t> servers_before = ChannelzServerIds();
  grpc_server_ = builder.BuildAndStart();
  if (!grpc_server_ || grpc_port_ == 0) {
    return Status(Code::kUnavailable, "cannot listen on " + config_.address);
  }
  StartListener(std::move(acceptor));
  WatchTransportRejections(servers_before);
  spdlog::info("gRPC listening on port {} ({}), metrics on port {} ({}); warming up", grpc_port_,
               config_.address, metrics_port_, config_.metrics_address);
  return Status::Ok();
}

void Server::StartListener(
    std::shared_ptr<grpc::experimental::ExternalConnectionAcceptor> acceptor) {
  const int64_t most = MaxConnectionsFor(fd_soft_limit_);
  int64_t max_connections = config_.max_connections > 0 ? config_.max_connections : most;
  if (max_connections > most) {
    spdlog::warn(
        "--max-connections {} is more than the file descriptor limit {} allows: {} (the "
        "limit less a reserve for the rest of the process)",
        max_connections, fd_soft_limit_, most);
    max_connections = most;
  }
  spdlog::info("at most {} connections on the gRPC port (descriptor limit {})", max_connections,
               fd_soft_limit_);
  max_connections_ = max_connections;
  Metrics* m = metrics_.get();
  listener_->Start(
      max_connections,
      [acceptor](int listener_fd, int fd) {
        grpc::experimental::ExternalConnectionAcceptor::NewConnectionParameters p;
        p.listener_fd = listener_fd;
        p.fd = fd;
        acceptor->HandleNewConnection(&p);
      },
      ConnectionListener::Hooks{
          [m](int64_t open) { m->connections().Set(static_cast<double>(open)); },
          [m](Refusal why) { m->refused_connections(static_cast<int>(why)).Increment(); }});
}

void Server::WatchTransportRejections(const std::vector<intptr_t>& servers_before) {
  // This server's channelz node: the one that is new. (Only tests run several servers in one
  // process; one started concurrently could be taken for this one.)
  for (const intptr_t id : ChannelzServerIds()) {
    if (std::find(servers_before.begin(), servers_before.end(), id) != servers_before.end()) {
      continue;
    }
    metrics_->SetTransportRejections([rejections = std::make_shared<TransportRejections>(
                                          id, ledger_)] { return rejections->Sample(); });
    break;
  }
}

Status Server::OpenRepository() {
  if (config_.dataset_dir.empty()) return Status::Ok();
  // The repository (SPEC section 6), loaded before SERVING: a client that sees SERVING
  // finds its datasets. Bad files are logged, counted and skipped.
  Metrics* m = metrics_.get();
  DatasetRegistry* registry = datasets_.get();
  registry->SetEvictionHook([m] { m->dataset_evictions().Increment(); });
  auto repository = std::make_unique<Repository>(
      config_.dataset_dir, config_.limits, registry,
      Repository::Hooks{[m](bool ok) { m->dataset_loads(ok).Increment(); },
                        [m, registry] { m->SetDatasets(registry->count(), registry->bytes()); },
                        [m] { m->dataset_scan_failures().Increment(); }});
  Repository* repo = repository.get();
  registry->AttachRepository(std::move(repository));
  GPUSAMPLER_RETURN_IF_ERROR(repo->Open());
  repo->StartPolling(config_.dataset_poll_seconds);
  return Status::Ok();
}

void Server::StartSelfCheck() {
  if (config_.self_check_ms <= 0) return;
  const std::string host = SelfCheckHost(config_.address);
  const int port = grpc_port_;
  const auto period = std::chrono::milliseconds(config_.self_check_ms);
  const auto timeout = std::min<std::chrono::milliseconds>(period, std::chrono::seconds(2));
  accept_watch_ = std::make_unique<AcceptWatch>(
      [host, port, timeout, tls = !config_.tls_cert_file.empty()] {
        // With TLS, no bytes: a preface would make gRPC log a failed handshake every check.
        return tls ? AcceptsQuietly(host, port, timeout) : AcceptsConnections(host, port, timeout);
      },
      period, static_cast<int>(config_.self_check_failures),
      [probe = probe_](bool ready, bool alive) {
        probe->accepting.store(ready);
        probe->alive.store(alive);
      });
}

Status Server::ReportServing() {
  trimmer_ = std::thread([this] { TrimLoop(); });
  StartSelfCheck();
  health_->SetServing(true);
  metrics_->serving().Set(1);
  probe_->serving.store(true);
  credentials_->StartRefresh();
  spdlog::info("SERVING: grpc_port={} metrics_port={} backend={}", grpc_port_, metrics_port_,
               backend_);
  if (config_.port_file.empty()) return Status::Ok();
  return WritePortFile(config_.port_file, grpc_port_, metrics_port_);
}

void Server::TrimLoop() {
  // After a burst, glibc keeps freed request and response buffers in its arenas; give them
  // back once the burst is over (the byte budget's peak was large and little is held now).
  constexpr int64_t kBurstBytes = int64_t{64} << 20;
  // A call storm (issue 31, item 2): gRPC allocates every call (about 18 KB) before the
  // service admits or refuses it, far more than the 16 KiB per live call that the budget
  // sees, and refused calls are never in the budget at all. So a second in which at least
  // kBurstCalls calls arrived starts a burst; each of the next kQuietTrims seconds with fewer
  // arrivals and under a quarter of the burst's peak of open calls trims (gRPC frees the
  // calls of a closed connection over a few seconds).
  constexpr int64_t kBurstCalls = 1024;
  constexpr int kQuietTrims = 3;
  CallLimits& calls = service_->calls();
  int64_t arrivals = calls.arrivals();
  int64_t burst_peak_open = 0;
  int quiet_trims = 0;
  std::unique_lock<std::mutex> lock(mu_);
  while (!trim_stop_) {
    trim_cv_.wait_for(lock, std::chrono::seconds(1));
    if (trim_stop_) break;
    const int64_t peak = service_->budget().TakePeak();
    bool trim = peak >= kBurstBytes && service_->budget().used() < peak / 4;
    const int64_t now_arrivals = calls.arrivals();
    const int64_t peak_open = calls.TakePeakOpen();
    if (now_arrivals - arrivals >= kBurstCalls) {
      burst_peak_open = std::max(burst_peak_open, peak_open);
      quiet_trims = kQuietTrims;
    } else if (quiet_trims > 0 && calls.open() <= burst_peak_open / 4) {
      trim = true;
      if (--quiet_trims == 0) burst_peak_open = 0;
    }
    arrivals = now_arrivals;
    if (trim) {
      lock.unlock();
      malloc_trim(0);
      lock.lock();
    }
  }
}

void Server::WaitForShutdownRequest() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return shutdown_requested_; });
}

void Server::RequestShutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    shutdown_requested_ = true;
  }
  cv_.notify_all();
}

bool Server::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

void Server::OnFatal(const Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
  }
  if (service_) service_->StopAccepting();
  if (probe_) probe_->serving.store(false);
  if (health_) health_->SetServing(false);
  if (metrics_) metrics_->serving().Set(0);
  spdlog::critical("NOT_SERVING after device fault ({}); exiting", status.message());
  RequestShutdown();
}

namespace {

// True when every call handed to gRPC has sent its status, waiting up to `wait` for calls
// that are finishing (health Watch calls ended by the drain).
bool NoCallOpen(const CallLedger& ledger, std::chrono::milliseconds wait) {
  const auto until = std::chrono::steady_clock::now() + wait;
  while (true) {
    if (ledger.finished.load() >= ledger.handed.load()) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

void Server::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  const bool fault = failed();
  const auto grace = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(fault ? 0.0 : config_.shutdown_grace_seconds));
  const auto deadline = Clock::now() + grace;
  // Refuse new work before reporting NOT_SERVING, so that a client that saw NOT_SERVING
  // is never accepted.
  if (service_) service_->StopAccepting();
  if (scheduler_) scheduler_->StopAccepting();
  if (probe_) probe_->serving.store(false);
  if (health_) health_->SetServing(false);
  if (metrics_) metrics_->serving().Set(0);
  if (grpc_server_) {
    spdlog::info("draining: NOT_SERVING, new requests get UNAVAILABLE, grace {:.1f} s",
                 std::chrono::duration<double>(grace).count());
  }
  if (scheduler_) {
    if (!scheduler_->WaitIdle(deadline)) {
      spdlog::warn("grace period over with work left; remaining requests get UNAVAILABLE");
    }
  }
  WaitForArrivals(deadline);
  // Stopping the scheduler answers whatever is still queued (UNAVAILABLE), so every call
  // reaches Finish before gRPC waits for them. A launch still running when the grace ends
  // (a huge request, a slow device) is not waited for by the binary
  // (exit_when_grace_ends): the process exits now, and the callers of that launch see their
  // connection close, which gRPC reports as UNAVAILABLE (retried by the clients), never
  // CANCELLED. Exit status 0: the shutdown was requested.
  const bool bounded = config_.exit_when_grace_ends && !fault;
  if (scheduler_ && !scheduler_->Stop(bounded ? deadline : Clock::time_point::max())) {
    spdlog::warn(
        "grace period over with a launch still running; exiting without it (its "
        "callers see UNAVAILABLE)");
    CleanUpForExit();
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  // A CreateDataset commit (hashing, writing and syncing up to GBs) still running when the
  // grace ends is not waited for either: gRPC's Wait would block until it finished (issue
  // 31: 2.10 s for a grace of 1 s during a 768 MiB commit). The commit writes a temporary
  // file and renames it only once complete, so exiting mid-commit leaves the committed
  // version intact (the uploader sees its connection close: UNAVAILABLE, retried) and a
  // leftover that the cleaner removes (Repository::kLeftoverAge).
  if (bounded && !WaitForCommits(deadline)) {
    spdlog::warn(
        "grace period over with {} dataset commit(s) running; exiting without them (the "
        "committed versions stay; the uploaders see UNAVAILABLE)",
        service_->commits_running());
    CleanUpForExit();
    spdlog::default_logger()->flush();
    std::fflush(nullptr);
    std::_Exit(0);
  }
  StopGrpc(deadline);
  StopTrimmer();
  accept_watch_.reset();
  if (metrics_) metrics_->StopUpdater();
  spdlog::info("shut down{}", fault ? " after a device fault" : "");
}

bool Server::WaitForCommits(Clock::time_point deadline) {
  if (!service_) return true;
  while (service_->commits_running() > 0) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

void Server::WaitForArrivals(Clock::time_point deadline) {
  // A call whose body is still arriving is invisible until it has arrived, and gRPC's
  // Shutdown would cancel it (CANCELLED, which clients do not retry). Wait, within the grace,
  // until no call has reached the service for a moment, so that those get UNAVAILABLE.
  if (!calls_seen_ || !grpc_server_) return;
  constexpr auto kQuiet = std::chrono::milliseconds(300);
  int64_t seen = calls_seen_();
  auto quiet_since = Clock::now();
  while (Clock::now() < deadline && Clock::now() - quiet_since < kQuiet) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (const int64_t now_seen = calls_seen_(); now_seen != seen) {
      seen = now_seen;
      quiet_since = Clock::now();
    }
  }
}

void Server::StopGrpc(Clock::time_point deadline) {
  if (health_) health_->Shutdown();  // ends Watch calls, so they do not hold up the drain
  if (!grpc_server_) return;
  // Streams that are still open (idle clients) are cancelled once the deadline passes.
  // With no call open there is nothing left to answer, and gRPC's graceful shutdown would
  // wait seconds on an idle client connection: close at once (an idle server exits
  // within a second of SIGTERM).
  const auto now = Clock::now();
  auto left = deadline > now ? deadline - now : Clock::duration::zero();
  if (ledger_ && NoCallOpen(*ledger_, std::chrono::milliseconds(100))) {
    left = Clock::duration::zero();
  }
  // No connection may reach gRPC once it shuts down (its acceptor would neither take nor
  // close it).
  if (listener_) listener_->Stop();
  grpc_server_->Shutdown(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
  grpc_server_->Wait();
}

void Server::StopTrimmer() {
  if (!trimmer_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    trim_stop_ = true;
  }
  trim_cv_.notify_all();
  trimmer_.join();
}

}  // namespace gpusampler::server
