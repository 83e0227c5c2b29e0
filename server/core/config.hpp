// Server configuration: every knob is a CLI11 flag with a GPUSAMPLER_* environment
// variable (AddFlags). Plain values; thread-compatible.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace gpusampler::server {

// Request limits; anything over them is RESOURCE_EXHAUSTED (SPEC section 3).
struct Limits {
  int64_t max_message_bytes = 64 << 20;         // request and response messages
  int64_t max_rows = 65536;                     // B per request
  int64_t max_elements = int64_t{1} << 27;      // label elements per request
  int64_t max_row_elements = int64_t{1} << 27;  // N of one row (the kernels allow < 2^31)
  int64_t max_num_samples = int64_t{1} << 20;   // K
};

struct ServerConfig {
  std::string address = "0.0.0.0:50051";
  std::string metrics_address = "0.0.0.0:9464";  // empty: no metrics endpoint
  std::string device = "auto";                   // auto | cpu | cuda | cuda:0,1 | cuda-sim
  int streams_per_device = 2;                    // CUDA workers per device
  int64_t device_timeout_ms = 60000;  // a launch still running after this is a device fault
  int cpu_threads = 0;                // threads per CPU worker; 0 = hardware threads / cpu_workers
  int cpu_workers = 1;                // CPU workers (each a backend with its own pool)
  // CPU: one more worker, of one thread, that serves only requests of at most this many label
  // elements, so that a small request never waits behind a large launch; 0 = none.
  int64_t cpu_express_elements = int64_t{1} << 18;
  int64_t max_batch_rows = 256;                // rows fused into one launch; 1 disables fusion
  int64_t max_batch_slots = int64_t{1} << 26;  // output slots (sum of B * K) of one launch
  int64_t max_batch_delay_us = 200;  // how long a batch may wait to fill while devices are busy
  int64_t queue_capacity = 1024;     // queued requests before RESOURCE_EXHAUSTED
  int64_t worker_spin_us = 300;      // an idle worker polls this long before parking
  int64_t max_stream_inflight = 32;  // requests of one SampleStream in flight
  Limits limits;
  int64_t max_dataset_bytes = int64_t{1} << 30;  // resident datasets, all together
  std::string dataset_dir;                       // preloaded .npy datasets
  int64_t keepalive_time_ms = 60000;
  int64_t keepalive_timeout_ms = 20000;
  int64_t max_connection_age_ms = 0;  // 0 = unlimited
  double shutdown_grace_seconds = 30;
  // Not a flag: the gpusampler-server binary sets it. When the grace ends with a launch still
  // running, exit the process at once (its callers see UNAVAILABLE) instead of waiting for
  // the launch. In-process servers (tests) wait, since exiting would end the test process.
  bool exit_when_grace_ends = false;
  std::string log_level = "info";
  std::string log_format = "text";  // text | json
  std::string port_file;            // written once SERVING: "grpc_port metrics_port\n"
  // When set, Sampler calls need "authorization: Bearer <token>" with one of the tokens this
  // file holds, one per line (the whole line, trimmed; blank lines skipped), so that a new
  // token can be added before the old one is removed. Health stays open for probes.
  std::string auth_token_file;
  std::vector<std::string> auth_tokens;  // filled from auth_token_file by Server::Start
  // TLS: a PEM certificate chain and key (both or neither); with a client CA, mutual TLS
  // (clients must present a certificate that CA signed). The files are re-read every
  // tls_refresh_seconds, so rotated certificates are served without a restart.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  int64_t tls_refresh_seconds = 60;
  bool reflection = false;          // gRPC server reflection (behind auth when auth is on)
  bool accept_compression = false;  // compressed requests are refused unless set
  // Request and response bytes held at once (queued, running, waiting to be written);
  // a request over it gets RESOURCE_EXHAUSTED with a retry pushback.
  int64_t max_inflight_bytes = int64_t{1} << 30;
  // Bytes one SampleStream may hold before it stops reading (at least one request runs);
  // 0 = a quarter of max_inflight_bytes (StreamInflightBytes).
  int64_t max_stream_inflight_bytes = 0;
  int64_t max_concurrent_streams = 128;  // HTTP/2 streams (calls) per connection
  // gRPC's memory quota (bytes the transport holds: still arriving, or received and not yet
  // released); 0 = TransportQuotaBytes' default, which follows max_inflight_bytes.
  int64_t transport_quota_bytes = 0;
  // The dataset repository (SPEC section 6): --dataset-dir is re-scanned this often (0 =
  // never); an upload that sends nothing for upload_idle_timeout_ms ends DEADLINE_EXCEEDED.
  int64_t dataset_poll_seconds = 10;
  int64_t upload_idle_timeout_ms = 30000;
  // A SampleStream whose client has not taken an answer for this long ends
  // RESOURCE_EXHAUSTED and releases its bytes (a reader that stopped cannot pin the budget).
  int64_t stream_write_timeout_ms = 30000;
  // While calls wait for the byte budget (a charge refused within the last second), the
  // write timeout shrinks to this (issue 31, item 5; like Envoy's overload manager).
  int64_t pressure_write_timeout_ms = 1000;

  // Connections and calls (issue 31): the self-check connects to the gRPC port every
  // self_check_ms (0 = never); one failure fails /readyz, self_check_failures in a row fail
  // /healthz (a listener that stopped accepting never resumes: grpc/grpc#20418).
  int64_t self_check_ms = 3000;
  int64_t self_check_failures = 3;
  // Live Sampler calls at once (each also limited to max_concurrent_streams per connection);
  // a SampleStream that sends no message within first_message_timeout_ms ends
  // DEADLINE_EXCEEDED.
  int64_t max_calls = 4096;
  int64_t first_message_timeout_ms = 30000;
  // Connections open on the gRPC port at once (the server's own listener); 0 = the soft
  // descriptor limit less a reserve (MaxConnectionsFor), which also caps a value set here.
  int64_t max_connections = 0;
  // --- Shared memory (SPEC section 9; issue 33) ---
  // Off by default: RegisterRegion is FAILED_PRECONDITION. When on, a client of this host may
  // register a POSIX shm object whose key starts with shm_key_prefix and have answers
  // written there (docs/shared-memory.md).
  bool allow_shared_memory = false;
  std::string shm_key_prefix = "/gpusampler";
  // --- end shared memory ---
};

// The bytes one SampleStream may hold: --max-stream-inflight-bytes, or when 0 a quarter of
// --max-inflight-bytes (at least 1).
inline int64_t StreamInflightBytes(const ServerConfig& config) {
  if (config.max_stream_inflight_bytes > 0) return config.max_stream_inflight_bytes;
  return config.max_inflight_bytes / 4 > 0 ? config.max_inflight_bytes / 4 : 1;
}

// The fixed part of the default transport quota: connection and stream buffers, headers,
// and the start of messages still arriving while the budget is full.
constexpr int64_t kTransportAllowanceBytes = int64_t{32} << 20;
// gRPC's memory quota: --transport-quota-bytes, or when 0 half of --max-inflight-bytes plus
// kTransportAllowanceBytes (issue 31, item 7). The budget charges each request twice
// (received and parsed) and the received half is also in gRPC's quota, so the two together
// hold about the budget plus the allowance. A request the budget can take (at most half of
// it) always fits the quota alone.
inline int64_t TransportQuotaBytes(const ServerConfig& config) {
  if (config.transport_quota_bytes > 0) return config.transport_quota_bytes;
  return config.max_inflight_bytes / 2 + kTransportAllowanceBytes;
}

// Registers every flag of `config` on `app` (defaults are the current values); numeric flags
// are range-checked as CheckConfig does.
void AddFlags(CLI::App* app, ServerConfig* config);

// False with `error` naming the flag, its value and the allowed range when a numeric setting
// is out of range (counts >= 1, 32-bit row indexing, int milliseconds for gRPC).
bool CheckConfig(const ServerConfig& config, std::string* error);

// Which devices `--device` selects. `cuda_devices` empty means CPU workers, or with
// `cuda_sim` CUDA workers on the cuda-sim device (kernels::kSimDevice: the CUDA path run on
// the host; `auto` never selects it).
struct DeviceSelection {
  std::vector<int> cuda_devices;
  bool cuda_sim = false;
};
// Parses --device; `device_count` is CudaDeviceCount(). Returns false with `error` set
// when the value is malformed or names an absent device.
bool ParseDevice(const std::string& value, int device_count, DeviceSelection* out,
                 std::string* error);

}  // namespace gpusampler::server
