// gpusampler-cli: probe, feed and load-test a gpusampler server.
//
//   gpusampler-cli --target HOST:PORT sample --labels L.npy --num-samples K --out-dir DIR
//   gpusampler-cli --target HOST:PORT bench --concurrency 8 --duration 10 --json
//   gpusampler-cli --target HOST:PORT health      # exit 0 only when SERVING
//   gpusampler-cli --target HOST:PORT info
#include <google/protobuf/util/json_util.h>

#include <CLI/CLI.hpp>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "bench.hpp"
#include "gpusampler/client/client.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

struct GlobalFlags {
  std::vector<std::string> targets;
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key, tls_server_name;
  std::string token, token_file;
  double timeout_s = 30;
  int max_message_bytes = 256 << 20;
  int max_attempts = 4;
};

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

int Fail(const std::string& message) {
  std::cerr << "gpusampler-cli: " << message << "\n";
  return 2;
}

int Fail(const grpc::Status& status) {
  std::cerr << "gpusampler-cli: " << StatusCodeName(status.error_code()) << ": "
            << status.error_message() << "\n";
  return 1;
}

std::string ShapeString(const v1::Tensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.shape_size(); ++i) s += (i ? "," : "") + std::to_string(t.shape(i));
  return s + "]";
}

// Builds the client from the global flags; "" or an error message.
std::string MakeClient(const GlobalFlags& g, std::unique_ptr<Client>* client) {
  ClientOptions o;
  for (const std::string& t : g.targets) {
    std::stringstream list(t);
    std::string item;
    while (std::getline(list, item, ',')) {
      if (!item.empty()) o.targets.push_back(item);
    }
  }
  o.default_timeout = std::chrono::milliseconds(static_cast<int64_t>(g.timeout_s * 1000));
  o.max_send_message_bytes = o.max_receive_message_bytes = g.max_message_bytes;
  o.retry.max_attempts = g.max_attempts;
  o.retry.enabled = g.max_attempts >= 2;
  o.tls.enabled = g.tls || !g.tls_ca.empty() || !g.tls_cert.empty();
  if (!g.tls_ca.empty() && !ReadFile(g.tls_ca, &o.tls.root_certs_pem)) {
    return "cannot read " + g.tls_ca;
  }
  if (!g.tls_cert.empty() && !ReadFile(g.tls_cert, &o.tls.client_cert_pem)) {
    return "cannot read " + g.tls_cert;
  }
  if (!g.tls_key.empty() && !ReadFile(g.tls_key, &o.tls.client_key_pem)) {
    return "cannot read " + g.tls_key;
  }
  o.tls.server_name_override = g.tls_server_name;
  o.bearer_token = g.token;
  if (!g.token_file.empty()) {
    if (!ReadFile(g.token_file, &o.bearer_token)) return "cannot read " + g.token_file;
    while (!o.bearer_token.empty() &&
           std::isspace(static_cast<unsigned char>(o.bearer_token.back()))) {
      o.bearer_token.pop_back();
    }
  }
  *client = std::make_unique<Client>(std::move(o));
  return "";
}

struct SampleFlags {
  std::string labels, features, row_splits, out_dir;
  int64_t num_samples = 0;
  double positive_fraction = 0.5;
  int64_t positive_label = 1, negative_label = 0;
  std::string fill = "both";
  std::optional<uint64_t> seed;
};

int RunSample(Client& client, const SampleFlags& f) {
  v1::SampleRequest request;
  std::string error = ReadNpy(f.labels, request.mutable_labels());
  if (!error.empty()) return Fail(error);
  if (!f.features.empty()) {
    error = ReadNpy(f.features, request.mutable_features());
    if (!error.empty()) return Fail(error);
  }
  if (!f.row_splits.empty()) {
    error = ReadNpy(f.row_splits, request.mutable_row_splits());
    if (!error.empty()) return Fail(error);
  }
  v1::SamplingSpec* spec = request.mutable_spec();
  spec->set_num_samples(f.num_samples);
  spec->set_positive_fraction(f.positive_fraction);
  spec->set_positive_label(f.positive_label);
  spec->set_negative_label(f.negative_label);
  spec->set_fill_policy(f.fill == "both"             ? v1::FILL_POLICY_BOTH
                        : f.fill == "negatives_only" ? v1::FILL_POLICY_NEGATIVES_ONLY
                                                     : v1::FILL_POLICY_NONE);
  if (f.seed) request.set_seed(*f.seed);

  v1::SampleResponse response;
  grpc::Status status = client.Sample(request, &response);
  if (!status.ok()) return Fail(status);

  std::error_code ec;
  std::filesystem::create_directories(f.out_dir, ec);
  if (ec) return Fail("cannot create " + f.out_dir + ": " + ec.message());
  const std::filesystem::path dir(f.out_dir);
  const std::pair<const char*, const v1::Tensor*> outputs[] = {
      {"indices.npy", &response.indices()},
      {"labels.npy", &response.labels()},
      {"features.npy", response.has_features() ? &response.features() : nullptr},
      {"num_positive.npy", &response.num_positive()},
      {"num_negative.npy", &response.num_negative()},
  };
  for (const auto& [name, tensor] : outputs) {
    if (tensor == nullptr) continue;  // labels-only request: no features to write
    error = WriteNpy((dir / name).string(), *tensor);
    if (!error.empty()) return Fail(error);
  }
  std::cout << "indices " << ShapeString(response.indices()) << " seed " << response.seed()
            << " device " << response.device() << " server_us " << response.timing().total_us()
            << " -> " << f.out_dir << "\n";
  return 0;
}

int RunHealth(Client& client, const std::string& service) {
  std::string serving;
  grpc::Status status = client.CheckHealth(&serving, service);
  if (!status.ok()) return Fail(status);
  std::cout << serving << "\n";
  return serving == "SERVING" ? 0 : 1;
}

int RunInfo(Client& client, bool json) {
  v1::ServerInfo info;
  grpc::Status status = client.GetServerInfo(&info);
  if (!status.ok()) return Fail(status);
  if (json) {
    std::string text;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_primitive_fields = true;
    options.preserve_proto_field_names = true;
    (void)google::protobuf::util::MessageToJsonString(info, &text, options);
    std::cout << text << "\n";
    return 0;
  }
  std::cout << "version   " << info.version() << " (" << info.revision() << ")\n"
            << "backend   " << info.backend() << "\n";
  for (const v1::DeviceInfo& d : info.devices()) {
    std::cout << "device    " << d.id() << ": " << d.name() << ", " << d.memory_bytes()
              << " bytes\n";
  }
  const v1::Limits& l = info.limits();
  std::cout << "limits    max_message_bytes " << l.max_message_bytes() << ", max_rows "
            << l.max_rows() << ", max_elements " << l.max_elements() << ", max_row_elements "
            << l.max_row_elements() << ", max_num_samples " << l.max_num_samples()
            << ", max_batch_rows " << l.max_batch_rows() << "\n";
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{"gpusampler-cli: probe, feed and load-test a gpusampler server"};
  app.require_subcommand(1);
  GlobalFlags g;
  app.add_option("-t,--target", g.targets,
                 "server HOST:PORT; repeat or comma-separate for round_robin over several")
      ->default_val(std::vector<std::string>{"127.0.0.1:50051"});
  app.add_flag("--tls", g.tls, "use TLS (system roots unless --tls-ca)");
  app.add_option("--tls-ca", g.tls_ca, "PEM file of the CA that signs the server certificate");
  app.add_option("--tls-cert", g.tls_cert, "PEM client certificate chain (mutual TLS)");
  app.add_option("--tls-key", g.tls_key, "PEM client private key (mutual TLS)");
  app.add_option("--tls-server-name", g.tls_server_name, "expected server certificate name");
  app.add_option("--token", g.token, "bearer token for the authorization header");
  app.add_option("--token-file", g.token_file, "file holding the bearer token");
  app.add_option("--timeout", g.timeout_s, "deadline per call in seconds (0 = none)")
      ->default_val(30);
  app.add_option("--max-message-bytes", g.max_message_bytes, "largest message sent or received")
      ->default_val(256 << 20);
  app.add_option("--max-attempts", g.max_attempts,
                 "attempts per call on UNAVAILABLE / RESOURCE_EXHAUSTED (1 = no retry)")
      ->default_val(4)
      ->check(CLI::Range(1, 5));

  SampleFlags sf;
  CLI::App* sample = app.add_subcommand("sample", "sample .npy labels (and features)");
  sample->add_option("--labels", sf.labels, "labels .npy: [N], [B,N] or [total]")->required();
  sample->add_option("--features", sf.features, "features .npy: [N,...], [B,N,...], [total,...]");
  sample->add_option("--row-splits", sf.row_splits, "int64 [B+1] .npy for ragged labels");
  sample->add_option("-k,--num-samples", sf.num_samples, "K, slots per row")->required();
  sample->add_option("--positive-fraction", sf.positive_fraction)->default_val(0.5);
  sample->add_option("--positive-label", sf.positive_label)->default_val(1);
  sample->add_option("--negative-label", sf.negative_label)->default_val(0);
  sample->add_option("--fill", sf.fill)
      ->default_val("both")
      ->check(CLI::IsMember({"both", "negatives_only", "none"}));
  sample->add_option("--seed", sf.seed, "Philox seed (drawn by the server when absent)");
  sample->add_option("--out-dir", sf.out_dir, "directory for the output .npy files")->required();

  BenchOptions bo;
  bool bench_json = false;
  CLI::App* bench = app.add_subcommand("bench", "load generator");
  bench->add_option("-c,--concurrency", bo.concurrency)->default_val(4);
  bench->add_option("-n,--requests", bo.requests, "total requests (default 1000)");
  bench->add_option("-d,--duration", bo.duration_s, "seconds to run");
  bench->add_option("--rate", bo.rate, "total requests per second (0 = as fast as possible)");
  bench->add_flag("--stream", bo.stream, "use SampleStream sessions");
  bench->add_option("--window", bo.window, "requests in flight per stream")->default_val(4);
  bench->add_flag("--labels-only", bo.labels_only, "send no features");
  bench->add_option("--rows", bo.rows, "rows per request (B)")->default_val(8);
  bench->add_option("--n", bo.n, "elements per row (N)")->default_val(4096);
  bench->add_option("--k", bo.k, "num_samples (K)")->default_val(256);
  bench->add_option("--dim", bo.dim, "float32 features per element")->default_val(16);
  bench->add_option("--positive-rate", bo.positive_rate, "share of positive labels")
      ->default_val(0.05);
  bench->add_flag("--json", bench_json, "print one JSON object");

  std::string health_service;
  CLI::App* health = app.add_subcommand("health", "exit 0 only if the server is SERVING");
  health->add_option("--service", health_service, "service name (default: whole server)");

  bool info_json = false;
  CLI::App* info = app.add_subcommand("info", "print the server's version, devices and limits");
  info->add_flag("--json", info_json, "print JSON");

  CLI11_PARSE(app, argc, argv);

  std::unique_ptr<Client> client;
  std::string error = MakeClient(g, &client);
  if (!error.empty()) return Fail(error);
  if (*sample) return RunSample(*client, sf);
  if (*health) return RunHealth(*client, health_service);
  if (*info) return RunInfo(*client, info_json);
  if (*bench) {
    BenchResult result = RunBench(*client, bo);
    if (bench_json) {
      PrintBenchJson(bo, result, std::cout);
    } else {
      PrintBenchText(bo, result, std::cout);
    }
    return result.errors.empty() && result.ok > 0 ? 0 : 1;
  }
  return 2;
}

}  // namespace
}  // namespace gpusampler::client

int main(int argc, char** argv) { return gpusampler::client::Main(argc, argv); }
