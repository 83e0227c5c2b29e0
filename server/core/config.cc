#include "core/config.hpp"

#include <CLI/CLI.hpp>
#include <cctype>
#include <iomanip>
#include <limits>
#include <optional>
#include <sstream>
#include <type_traits>
#include <variant>

namespace gpusampler::server {

namespace {

// Where a flag's value lives in ServerConfig.
using Field = std::variant<std::string ServerConfig::*, bool ServerConfig::*, int ServerConfig::*,
                           int64_t ServerConfig::*, double ServerConfig::*, int64_t Limits::*>;
using Value = std::variant<std::string*, bool*, int*, int64_t*, double*>;

// One flag; its environment variable is GPUSAMPLER_ and its name in capitals
// (--max-rows: GPUSAMPLER_MAX_ROWS).
struct Flag {
  const char* name;
  Field field;
  const char* help;
  double min = 0, max = 0;             // the allowed range of a numeric flag
  std::vector<std::string> choices{};  // the allowed values of a string flag (empty: any)
};

constexpr double kIntMax = std::numeric_limits<int>::max();
constexpr double kInt64Max = 9.2e18;  // below INT64_MAX, exact enough for a bound

// Every flag, in the order --help lists them. The ranges are shared by the CLI11 checks and
// CheckConfig.
const Flag kFlags[] = {
    {"--address", &ServerConfig::address, "gRPC listen address (host:port; port 0 picks one)"},
    {"--metrics-address", &ServerConfig::metrics_address,
     "Prometheus listen address (host:port; empty disables)"},
    {"--device", &ServerConfig::device,
     "auto | cpu | cuda | cuda:0,1 | cuda-sim (the CUDA pipeline run on the host; slow, "
     "exact, for testing; never chosen by auto)"},
    {"--streams-per-device", &ServerConfig::streams_per_device, "CUDA workers (streams) per device",
     1, 1024},
    {"--device-timeout-ms", &ServerConfig::device_timeout_ms,
     "a CUDA launch not complete after this long is a device fault (NOT_SERVING)", 1, 86400e3},
    {"--cpu-threads", &ServerConfig::cpu_threads,
     "threads per CPU worker (0 = hardware threads / cpu workers)", 0, 4096},
    {"--cpu-workers", &ServerConfig::cpu_workers, "CPU workers", 1, 1024},
    {"--cpu-express-elements", &ServerConfig::cpu_express_elements,
     "CPU: one more worker (1 thread) serves only requests of at most this many label elements, "
     "so small requests never wait behind a large launch (0 = none)",
     0, kIntMax},
    {"--max-batch-rows", &ServerConfig::max_batch_rows,
     "rows fused into one launch (1 disables dynamic batching)", 1, kIntMax},
    {"--max-batch-slots", &ServerConfig::max_batch_slots,
     "output slots (sum of rows * num_samples) fused into one launch", 1, kIntMax},
    {"--max-batch-delay-us", &ServerConfig::max_batch_delay_us,
     "how long a batch may wait to fill while other launches run", 0, 60e6},
    {"--queue-capacity", &ServerConfig::queue_capacity, "queued requests before RESOURCE_EXHAUSTED",
     1, kInt64Max},
    {"--worker-spin-us", &ServerConfig::worker_spin_us,
     "how long an idle worker polls for work before sleeping (latency vs idle CPU)", 0, 60e6},
    {"--max-stream-inflight", &ServerConfig::max_stream_inflight,
     "requests of one SampleStream in flight", 1, kInt64Max},
    // gRPC takes message sizes as int.
    {"--max-message-bytes", &Limits::max_message_bytes, "largest request or response message", 1,
     kIntMax},
    {"--max-rows", &Limits::max_rows, "rows per request", 1, kIntMax},
    {"--max-elements", &Limits::max_elements, "label elements per request", 1, kInt64Max},
    // The kernels index a row's elements with 32 bits.
    {"--max-row-elements", &Limits::max_row_elements, "elements of one row", 1, kIntMax},
    {"--max-num-samples", &Limits::max_num_samples, "largest num_samples (K)", 1, kIntMax},
    // gRPC takes these as int milliseconds.
    {"--keepalive-time-ms", &ServerConfig::keepalive_time_ms, "HTTP/2 keepalive ping interval", 1,
     kIntMax},
    {"--keepalive-timeout-ms", &ServerConfig::keepalive_timeout_ms, "keepalive ping ack timeout", 1,
     kIntMax},
    {"--max-connection-age-ms", &ServerConfig::max_connection_age_ms,
     "close connections after this age (0 = never)", 0, kIntMax},
    {"--shutdown-grace-seconds", &ServerConfig::shutdown_grace_seconds,
     "time accepted work gets to finish on SIGTERM", 0, 1e6},
    {"--log-level",
     &ServerConfig::log_level,
     "trace|debug|info|warn|error|critical|off",
     0,
     0,
     {"trace", "debug", "info", "warn", "error", "critical", "off"}},
    {"--log-format", &ServerConfig::log_format, "text | json", 0, 0, {"text", "json"}},
    {"--auth-token-file", &ServerConfig::auth_token_file,
     "require \"authorization: Bearer <token>\" on Sampler calls, token read from this file"},
    {"--tls-cert-file", &ServerConfig::tls_cert_file,
     "serve TLS with this PEM certificate chain (with --tls-key-file; reloaded on change)"},
    {"--tls-key-file", &ServerConfig::tls_key_file, "PEM private key of --tls-cert-file"},
    {"--tls-client-ca-file", &ServerConfig::tls_client_ca_file,
     "mutual TLS: clients must present a certificate signed by this PEM CA bundle"},
    {"--tls-refresh-seconds", &ServerConfig::tls_refresh_seconds,
     "how often the TLS files are re-read (certificate rotation without a restart)", 1, 86400},
    {"--reflection", &ServerConfig::reflection,
     "serve gRPC server reflection (behind --auth-token-file when set)"},
    {"--accept-compression", &ServerConfig::accept_compression,
     "accept compressed requests (their inflated size still bounded by "
     "--max-message-bytes); refused by default"},
    {"--max-inflight-bytes", &ServerConfig::max_inflight_bytes,
     "request and response bytes held at once (queued, running, being written)", 1, kInt64Max},
    {"--max-stream-inflight-bytes", &ServerConfig::max_stream_inflight_bytes,
     "bytes one SampleStream may hold before it stops reading (0 = a quarter of "
     "--max-inflight-bytes)",
     0, kInt64Max},
    {"--transport-quota-bytes", &ServerConfig::transport_quota_bytes,
     "gRPC's memory quota for bytes the transport holds (arriving, or received and not yet "
     "released); 0 = half of --max-inflight-bytes + 32 MiB, and at least one whole message "
     "+ 32 MiB",
     0, kInt64Max},
    {"--max-concurrent-streams", &ServerConfig::max_concurrent_streams,
     "concurrent calls per connection (advertised, and enforced: beyond it "
     "RESOURCE_EXHAUSTED)",
     1, kIntMax},
    {"--stream-write-timeout-ms", &ServerConfig::stream_write_timeout_ms,
     "a SampleStream whose client has not read an answer this long ends RESOURCE_EXHAUSTED "
     "and releases its bytes",
     1, 86400e3},
    {"--pressure-write-timeout-ms", &ServerConfig::pressure_write_timeout_ms,
     "while calls wait for --max-inflight-bytes (one was refused within the last second), "
     "--stream-write-timeout-ms shrinks to this: never-reading streams lose their bytes first",
     1, 86400e3},
    {"--max-dataset-bytes", &ServerConfig::max_dataset_bytes,
     "bytes of resident datasets (stored, uploading, and replaced until the new one commits)", 0,
     kInt64Max},
    // The dataset repository (SPEC section 6).
    {"--dataset-dir", &ServerConfig::dataset_dir,
     "the dataset repository, shared by replicas: NAME.dataset files and hand-written "
     "NAME.labels.npy (+ NAME.features.npy, NAME.row_splits.npy), loaded before SERVING"},
    {"--dataset-poll-seconds", &ServerConfig::dataset_poll_seconds,
     "re-scan --dataset-dir this often for new, replaced and deleted datasets (0 = never)", 0,
     86400},
    {"--upload-idle-timeout-ms", &ServerConfig::upload_idle_timeout_ms,
     "an upload that sends nothing this long ends DEADLINE_EXCEEDED and keeps nothing", 1, 86400e3},
    // Connections and calls (issue 31).
    {"--self-check-ms", &ServerConfig::self_check_ms,
     "connect to the gRPC port this often (0 = never): one failure fails /readyz", 0, 3600e3},
    {"--self-check-failures", &ServerConfig::self_check_failures,
     "consecutive failed self-checks that fail /healthz (the process must be restarted)", 1, 1000},
    {"--max-calls", &ServerConfig::max_calls,
     "live Sample and SampleStream calls in all (beyond: RESOURCE_EXHAUSTED with a retry pushback)",
     1, kInt64Max},
    {"--max-connections", &ServerConfig::max_connections,
     "connections open on the gRPC port at once; one beyond is closed when accepted (0 = the "
     "descriptor limit less a quarter, at least 64 kept for the rest; also the most allowed)",
     0, kInt64Max},
    {"--first-message-timeout-ms", &ServerConfig::first_message_timeout_ms,
     "a SampleStream that sends no message this long ends DEADLINE_EXCEEDED", 1, 86400e3},
    {"--port-file", &ServerConfig::port_file,
     "once SERVING, write \"grpc_port metrics_port\\n\" to this file"},
    // --- Shared memory (SPEC section 9) ---
    {"--allow-shared-memory", &ServerConfig::allow_shared_memory,
     "let clients of this host register POSIX shared-memory regions for answers "
     "(RegisterRegion; off: FAILED_PRECONDITION)"},
    {"--shm-key-prefix", &ServerConfig::shm_key_prefix,
     "shared-memory keys a client may register must start with this (with "
     "--allow-shared-memory)"},
    // --- end shared memory ---
};

Value Resolve(ServerConfig* config, const Field& field) {
  return std::visit(
      [config](auto member) -> Value {
        if constexpr (std::is_same_v<decltype(member), int64_t Limits::*>) {
          return &(config->limits.*member);
        } else {
          return &(config->*member);
        }
      },
      field);
}

template <class T>
constexpr bool kNumeric = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

template <class T>
void AddFlag(CLI::App* app, const Flag& flag, T* value) {
  std::string env = std::string("GPUSAMPLER_") + (flag.name + 2);
  for (char& ch : env) ch = ch == '-' ? '_' : static_cast<char>(std::toupper(ch));
  if constexpr (std::is_same_v<T, bool>) {
    app->add_flag(flag.name, *value, flag.help)->envname(env);
  } else {
    CLI::Option* opt =
        app->add_option(flag.name, *value, flag.help)->envname(env)->capture_default_str();
    if constexpr (std::is_integral_v<T>) {
      opt->check(CLI::Range(static_cast<int64_t>(flag.min), static_cast<int64_t>(flag.max)));
    } else if constexpr (kNumeric<T>) {
      opt->check(CLI::Range(flag.min, flag.max));
    } else if (!flag.choices.empty()) {
      opt->check(CLI::IsMember(flag.choices));
    }
  }
}

// The value of a numeric flag as a double; nothing for a string or bool flag.
std::optional<double> NumericValue(ServerConfig* config, const Flag& flag) {
  return std::visit(
      [](auto* value) -> std::optional<double> {
        if constexpr (kNumeric<std::remove_pointer_t<decltype(value)>>) {
          return static_cast<double>(*value);
        } else {
          return std::nullopt;
        }
      },
      Resolve(config, flag.field));
}

}  // namespace

bool CheckConfig(const ServerConfig& config, std::string* error) {
  ServerConfig copy = config;  // Resolve addresses a mutable config
  for (const Flag& flag : kFlags) {
    const std::optional<double> value = NumericValue(&copy, flag);
    if (!value || (*value >= flag.min && *value <= flag.max)) continue;  // NaN is outside
    std::ostringstream out;
    out << std::setprecision(17) << flag.name << " = " << *value << " is outside [" << flag.min
        << ", " << flag.max << "]";
    *error = out.str();
    return false;
  }
  return true;
}

void AddFlags(CLI::App* app, ServerConfig* c) {
  for (const Flag& flag : kFlags) {
    std::visit([&](auto* value) { AddFlag(app, flag, value); }, Resolve(c, flag.field));
  }
}

bool ParseDevice(const std::string& value, int device_count, DeviceSelection* out,
                 std::string* error) {
  out->cuda_devices.clear();
  out->cuda_sim = false;
  if (value == "cpu") return true;
  if (value == "cuda-sim") {
    out->cuda_sim = true;
    return true;
  }
  if (value == "auto" || value == "cuda") {
    for (int d = 0; d < device_count; ++d) out->cuda_devices.push_back(d);
    if (value == "cuda" && device_count == 0) {
      *error = "--device cuda: no CUDA device is available";
      return false;
    }
    return true;
  }
  if (value.rfind("cuda:", 0) != 0) {
    *error = "--device " + value + ": expected auto, cpu, cuda, cuda:0,1 or cuda-sim";
    return false;
  }
  std::stringstream list(value.substr(5));
  std::string item;
  while (std::getline(list, item, ',')) {
    char* end = nullptr;
    const long d = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || d < 0) {
      *error = "--device " + value + ": '" + item + "' is not a device index";
      return false;
    }
    if (d >= device_count) {
      *error = "--device " + value + ": device " + item + " absent (" +
               std::to_string(device_count) + " CUDA devices)";
      return false;
    }
    out->cuda_devices.push_back(static_cast<int>(d));
  }
  if (out->cuda_devices.empty()) {
    *error = "--device " + value + ": no device listed";
    return false;
  }
  return true;
}

}  // namespace gpusampler::server
