#include "config.hpp"

#include <CLI/CLI.hpp>
#include <iomanip>
#include <limits>
#include <sstream>
#include <type_traits>

namespace gpusampler::server {

namespace {

// The allowed range of every numeric flag, shared by the CLI11 checks and CheckConfig.
struct Range {
  const char* flag;
  double value;
  double min, max;
};

constexpr double kIntMax = std::numeric_limits<int>::max();
constexpr double kInt64Max = 9.2e18;  // below INT64_MAX, exact enough for a bound

std::vector<Range> Ranges(const ServerConfig& c) {
  return {
      {"--streams-per-device", double(c.streams_per_device), 1, 1024},
      {"--device-timeout-ms", double(c.device_timeout_ms), 1, 86400e3},
      {"--cpu-threads", double(c.cpu_threads), 0, 4096},
      {"--cpu-workers", double(c.cpu_workers), 1, 1024},
      {"--max-batch-rows", double(c.max_batch_rows), 1, kIntMax},
      {"--max-batch-slots", double(c.max_batch_slots), 1, kIntMax},
      {"--max-batch-delay-us", double(c.max_batch_delay_us), 0, 60e6},
      {"--queue-capacity", double(c.queue_capacity), 1, kInt64Max},
      {"--worker-spin-us", double(c.worker_spin_us), 0, 60e6},
      {"--max-stream-inflight", double(c.max_stream_inflight), 1, kInt64Max},
      // gRPC takes message sizes as int.
      {"--max-message-bytes", double(c.limits.max_message_bytes), 1, kIntMax},
      {"--max-rows", double(c.limits.max_rows), 1, kIntMax},
      {"--max-elements", double(c.limits.max_elements), 1, kInt64Max},
      // The kernels index a row's elements with 32 bits.
      {"--max-row-elements", double(c.limits.max_row_elements), 1, kIntMax},
      {"--max-num-samples", double(c.limits.max_num_samples), 1, kIntMax},
      {"--max-dataset-bytes", double(c.max_dataset_bytes), 0, kInt64Max},
      // gRPC takes these as int milliseconds.
      {"--keepalive-time-ms", double(c.keepalive_time_ms), 1, kIntMax},
      {"--keepalive-timeout-ms", double(c.keepalive_timeout_ms), 1, kIntMax},
      {"--max-connection-age-ms", double(c.max_connection_age_ms), 0, kIntMax},
      {"--shutdown-grace-seconds", c.shutdown_grace_seconds, 0, 1e6},
      {"--tls-refresh-seconds", double(c.tls_refresh_seconds), 1, 86400},
      {"--max-inflight-bytes", double(c.max_inflight_bytes), 1, kInt64Max},
      {"--max-stream-inflight-bytes", double(c.max_stream_inflight_bytes), 1, kInt64Max},
      {"--max-concurrent-streams", double(c.max_concurrent_streams), 1, kIntMax},
      // The dataset repository.
      {"--dataset-poll-seconds", double(c.dataset_poll_seconds), 0, 86400},
      {"--upload-idle-timeout-ms", double(c.upload_idle_timeout_ms), 1, 86400e3},
      {"--stream-write-timeout-ms", double(c.stream_write_timeout_ms), 1, 86400e3},
  };
}

}  // namespace

bool CheckConfig(const ServerConfig& config, std::string* error) {
  for (const Range& r : Ranges(config)) {
    if (!(r.value >= r.min && r.value <= r.max)) {  // also rejects NaN
      std::ostringstream out;
      out << std::setprecision(17) << r.flag << " = " << r.value << " is outside [" << r.min << ", "
          << r.max << "]";
      *error = out.str();
      return false;
    }
  }
  return true;
}

void AddFlags(CLI::App* app, ServerConfig* c) {
  const std::vector<Range> ranges = Ranges(*c);
  auto add = [&](const char* flag, auto* value, const char* env, const char* help) {
    CLI::Option* opt = app->add_option(flag, *value, help)->envname(env)->capture_default_str();
    for (const Range& r : ranges) {
      if (std::string(r.flag) != flag) continue;
      using T = std::remove_pointer_t<decltype(value)>;
      if constexpr (std::is_integral_v<T>) {
        opt->check(CLI::Range(static_cast<int64_t>(r.min), static_cast<int64_t>(r.max)));
      } else {
        opt->check(CLI::Range(r.min, r.max));
      }
    }
  };
  add("--address", &c->address, "GPUSAMPLER_ADDRESS",
      "gRPC listen address (host:port; port 0 picks one)");
  add("--metrics-address", &c->metrics_address, "GPUSAMPLER_METRICS_ADDRESS",
      "Prometheus listen address (host:port; empty disables)");
  add("--device", &c->device, "GPUSAMPLER_DEVICE",
      "auto | cpu | cuda | cuda:0,1 | cuda-sim (the CUDA pipeline run on the host; slow, "
      "exact, for testing; never chosen by auto)");
  add("--streams-per-device", &c->streams_per_device, "GPUSAMPLER_STREAMS_PER_DEVICE",
      "CUDA workers (streams) per device");
  add("--device-timeout-ms", &c->device_timeout_ms, "GPUSAMPLER_DEVICE_TIMEOUT_MS",
      "a CUDA launch not complete after this long is a device fault (NOT_SERVING)");
  add("--cpu-threads", &c->cpu_threads, "GPUSAMPLER_CPU_THREADS",
      "threads per CPU worker (0 = hardware threads / cpu workers)");
  add("--cpu-workers", &c->cpu_workers, "GPUSAMPLER_CPU_WORKERS", "CPU workers");
  add("--max-batch-rows", &c->max_batch_rows, "GPUSAMPLER_MAX_BATCH_ROWS",
      "rows fused into one launch (1 disables dynamic batching)");
  add("--max-batch-slots", &c->max_batch_slots, "GPUSAMPLER_MAX_BATCH_SLOTS",
      "output slots (sum of rows * num_samples) fused into one launch");
  add("--max-batch-delay-us", &c->max_batch_delay_us, "GPUSAMPLER_MAX_BATCH_DELAY_US",
      "how long a batch may wait to fill while other launches run");
  add("--queue-capacity", &c->queue_capacity, "GPUSAMPLER_QUEUE_CAPACITY",
      "queued requests before RESOURCE_EXHAUSTED");
  add("--worker-spin-us", &c->worker_spin_us, "GPUSAMPLER_WORKER_SPIN_US",
      "how long an idle worker polls for work before sleeping (latency vs idle CPU)");
  add("--max-stream-inflight", &c->max_stream_inflight, "GPUSAMPLER_MAX_STREAM_INFLIGHT",
      "requests of one SampleStream in flight");
  add("--max-message-bytes", &c->limits.max_message_bytes, "GPUSAMPLER_MAX_MESSAGE_BYTES",
      "largest request or response message");
  add("--max-rows", &c->limits.max_rows, "GPUSAMPLER_MAX_ROWS", "rows per request");
  add("--max-elements", &c->limits.max_elements, "GPUSAMPLER_MAX_ELEMENTS",
      "label elements per request");
  add("--max-row-elements", &c->limits.max_row_elements, "GPUSAMPLER_MAX_ROW_ELEMENTS",
      "elements of one row");
  add("--max-num-samples", &c->limits.max_num_samples, "GPUSAMPLER_MAX_NUM_SAMPLES",
      "largest num_samples (K)");
  add("--keepalive-time-ms", &c->keepalive_time_ms, "GPUSAMPLER_KEEPALIVE_TIME_MS",
      "HTTP/2 keepalive ping interval");
  add("--keepalive-timeout-ms", &c->keepalive_timeout_ms, "GPUSAMPLER_KEEPALIVE_TIMEOUT_MS",
      "keepalive ping ack timeout");
  add("--max-connection-age-ms", &c->max_connection_age_ms, "GPUSAMPLER_MAX_CONNECTION_AGE_MS",
      "close connections after this age (0 = never)");
  add("--shutdown-grace-seconds", &c->shutdown_grace_seconds, "GPUSAMPLER_SHUTDOWN_GRACE_SECONDS",
      "time accepted work gets to finish on SIGTERM");
  app->add_option("--log-level", c->log_level, "trace|debug|info|warn|error|critical|off")
      ->envname("GPUSAMPLER_LOG_LEVEL")
      ->capture_default_str()
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}));
  app->add_option("--log-format", c->log_format, "text | json")
      ->envname("GPUSAMPLER_LOG_FORMAT")
      ->capture_default_str()
      ->check(CLI::IsMember({"text", "json"}));
  add("--auth-token-file", &c->auth_token_file, "GPUSAMPLER_AUTH_TOKEN_FILE",
      "require \"authorization: Bearer <token>\" on Sampler calls, token read from this file");
  add("--tls-cert-file", &c->tls_cert_file, "GPUSAMPLER_TLS_CERT_FILE",
      "serve TLS with this PEM certificate chain (with --tls-key-file; reloaded on change)");
  add("--tls-key-file", &c->tls_key_file, "GPUSAMPLER_TLS_KEY_FILE",
      "PEM private key of --tls-cert-file");
  add("--tls-client-ca-file", &c->tls_client_ca_file, "GPUSAMPLER_TLS_CLIENT_CA_FILE",
      "mutual TLS: clients must present a certificate signed by this PEM CA bundle");
  add("--tls-refresh-seconds", &c->tls_refresh_seconds, "GPUSAMPLER_TLS_REFRESH_SECONDS",
      "how often the TLS files are re-read (certificate rotation without a restart)");
  app->add_flag("--reflection", c->reflection,
                "serve gRPC server reflection (behind --auth-token-file when set)")
      ->envname("GPUSAMPLER_REFLECTION");
  app->add_flag("--accept-compression", c->accept_compression,
                "accept compressed requests (their inflated size still bounded by "
                "--max-message-bytes); refused by default")
      ->envname("GPUSAMPLER_ACCEPT_COMPRESSION");
  add("--max-inflight-bytes", &c->max_inflight_bytes, "GPUSAMPLER_MAX_INFLIGHT_BYTES",
      "request and response bytes held at once (queued, running, being written)");
  add("--max-stream-inflight-bytes", &c->max_stream_inflight_bytes,
      "GPUSAMPLER_MAX_STREAM_INFLIGHT_BYTES",
      "bytes one SampleStream may hold before it stops reading");
  add("--max-concurrent-streams", &c->max_concurrent_streams, "GPUSAMPLER_MAX_CONCURRENT_STREAMS",
      "concurrent calls per connection");
  add("--stream-write-timeout-ms", &c->stream_write_timeout_ms,
      "GPUSAMPLER_STREAM_WRITE_TIMEOUT_MS",
      "a SampleStream whose client has not read an answer this long ends RESOURCE_EXHAUSTED "
      "and releases its bytes");
  add("--max-dataset-bytes", &c->max_dataset_bytes, "GPUSAMPLER_MAX_DATASET_BYTES",
      "bytes of resident datasets (stored, uploading, and replaced until the new one commits)");
  add("--dataset-dir", &c->dataset_dir, "GPUSAMPLER_DATASET_DIR",
      "the dataset repository, shared by replicas: NAME.dataset files and hand-written "
      "NAME.labels.npy (+ NAME.features.npy, NAME.row_splits.npy), loaded before SERVING");
  // The dataset repository (SPEC section 6).
  add("--dataset-poll-seconds", &c->dataset_poll_seconds, "GPUSAMPLER_DATASET_POLL_SECONDS",
      "re-scan --dataset-dir this often for new, replaced and deleted datasets (0 = never)");
  add("--upload-idle-timeout-ms", &c->upload_idle_timeout_ms, "GPUSAMPLER_UPLOAD_IDLE_TIMEOUT_MS",
      "an upload that sends nothing this long ends DEADLINE_EXCEEDED and keeps nothing");
  add("--port-file", &c->port_file, "GPUSAMPLER_PORT_FILE",
      "once SERVING, write \"grpc_port metrics_port\\n\" to this file");
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
