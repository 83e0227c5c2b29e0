// gpusampler-cli: probe, feed and load-test a gpusampler server.
//
//   gpusampler-cli --target HOST:PORT sample --labels L.npy --num-samples K --out-dir DIR
//   gpusampler-cli --target HOST:PORT bench --concurrency 8 --duration 10 --json
//   gpusampler-cli --target HOST:PORT health      # grpc-health-probe's exit codes
//   gpusampler-cli --target HOST:PORT bench --dataset NAME [--rows B] --json
//   gpusampler-cli --target HOST:PORT bench --concurrency-range 1:8:1 --csv [--stability-percent
//   10] gpusampler-cli --target HOST:PORT info [--json] gpusampler-cli --version
//
// Exit codes: 0 success, 1 a call or a bench request failed, 2 usage error (bad flag or
// value, unknown subcommand, unreadable input file); health: 2 connection failure, 3 RPC
// failure, 4 not SERVING (as grpc-health-probe). README.md's table lists them side by side.
#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "bench.hpp"
#include "gpusampler/client/client.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

// Flag checks whose messages say what is wanted (CLI11 prefixes the flag's name). Values
// are parsed strictly: "2.5" is not an integer, "-1" is not a seed.
std::string Fmt(double x) {
  std::ostringstream out;
  out << x;
  return out.str();
}

CLI::Validator Number(bool integer, double min = -std::numeric_limits<double>::infinity()) {
  const std::string what = std::string(integer ? "an integer" : "a number") +
                           (std::isinf(min) ? std::string() : " >= " + Fmt(min));
  return CLI::Validator(
      [integer, min, what](std::string& value) -> std::string {
        char* end = nullptr;
        errno = 0;
        const double v = std::strtod(value.c_str(), &end);
        const bool number = !value.empty() && *end == '\0' && errno == 0 && std::isfinite(v);
        if (!number ||
            (integer && (v != std::floor(v) || value.find_first_of(".eE") != std::string::npos)) ||
            v < min) {
          return "wants " + what + ", got '" + value + "'";
        }
        return "";
      },
      integer ? "INT" : "NUMBER");
}

CLI::Validator Seed() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        errno = 0;
        char* end = nullptr;
        const bool digits =
            !value.empty() && value.find_first_not_of("0123456789") == std::string::npos;
        std::strtoull(value.c_str(), &end, 10);
        if (!digits || errno == ERANGE) {
          return "wants an integer in [0, 18446744073709551615], got '" + value + "'";
        }
        return "";
      },
      "UINT64");
}

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

// `items`, each written by `write`, separated by `sep`.
template <typename Items, typename Write>
std::string Join(const Items& items, const std::string& sep, Write write) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : sep) + write(item);
  return out;
}
std::string Int(int64_t v) { return std::to_string(v); }
std::string Text(const std::string& s) { return s; }

std::string ShapeString(const v1::Tensor& t) { return "[" + Join(t.shape(), ",", Int) + "]"; }

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
  try {
    *client = std::make_unique<Client>(std::move(o));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

struct SampleFlags {
  std::string labels, features, row_splits, out_dir;
  std::string dataset, rows;  // sample a resident dataset (rows: INT64 [B'] .npy)
  bool return_features = false;
  int64_t num_samples = 0;
  double positive_fraction = 0.5;
  int64_t positive_label = 1, negative_label = 0;
  std::string fill = "both";
  std::optional<uint64_t> seed;
  // Classes (docs/semantics.md, "Classes"): each --class is one ClassSpec (ParseClassFlag).
  std::vector<std::string> classes;
  std::optional<std::string> fill_order;
  std::string scores;             // FLOAT32 .npy laid out like the labels
  bool binary_flags_set = false;  // --positive-fraction/--*-label/--fill given
};

// The request `sample` sends; "" or the error reading one of its .npy files.
std::string MakeSampleRequest(const SampleFlags& f, v1::SampleRequest* request) {
  std::string error;
  if (!f.dataset.empty()) {
    request->set_dataset(f.dataset);
    request->set_return_features(f.return_features);
    if (!f.rows.empty()) error = ReadNpy(f.rows, request->mutable_rows());
  } else {
    error = ReadNpy(f.labels, request->mutable_labels());
  }
  // mutable_*() marks a field present: only for files given.
  if (error.empty() && !f.features.empty()) {
    error = ReadNpy(f.features, request->mutable_features());
  }
  if (error.empty() && !f.row_splits.empty()) {
    error = ReadNpy(f.row_splits, request->mutable_row_splits());
  }
  if (error.empty() && !f.scores.empty()) error = ReadNpy(f.scores, request->mutable_scores());
  if (!error.empty()) return error;
  v1::SamplingSpec* spec = request->mutable_spec();
  spec->set_num_samples(f.num_samples);
  if (f.seed) request->set_seed(*f.seed);
  if (!f.classes.empty()) {
    for (const std::string& text : f.classes) {
      error = ParseClassFlag(text, spec->add_classes());
      if (!error.empty()) return error;
    }
    return ParseFillOrderFlag(f.fill_order.value_or(""), spec);
  }
  spec->set_positive_fraction(f.positive_fraction);
  spec->set_positive_label(f.positive_label);
  spec->set_negative_label(f.negative_label);
  spec->set_fill_policy(f.fill == "both"             ? v1::FILL_POLICY_BOTH
                        : f.fill == "negatives_only" ? v1::FILL_POLICY_NEGATIVES_ONLY
                                                     : v1::FILL_POLICY_NONE);
  return "";
}

// Writes the response's tensors into `out_dir` (made if missing) as indices.npy, labels.npy,
// features.npy (when it has features), num_positive.npy and num_negative.npy, and
// num_per_class.npy with classes.
std::string WriteSampleOutputs(const v1::SampleResponse& response, const std::string& out_dir) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return "cannot create " + out_dir + ": " + ec.message();
  const std::filesystem::path dir(out_dir);
  const std::pair<const char*, const v1::Tensor*> outputs[] = {
      {"indices.npy", &response.indices()},
      {"labels.npy", &response.labels()},
      {"features.npy", response.has_features() ? &response.features() : nullptr},
      {"num_positive.npy", &response.num_positive()},
      {"num_negative.npy", &response.num_negative()},
      {"num_per_class.npy", response.has_num_per_class() ? &response.num_per_class() : nullptr},
  };
  for (const auto& [name, tensor] : outputs) {
    if (tensor == nullptr) continue;  // labels-only request: no features to write
    std::string error = WriteNpy((dir / name).string(), *tensor);
    if (!error.empty()) return error;
  }
  return "";
}

int RunSample(Client& client, const SampleFlags& f) {
  v1::SampleRequest request;
  std::string error = MakeSampleRequest(f, &request);
  if (!error.empty()) return Fail(error);
  v1::SampleResponse response;
  grpc::Status status = client.Sample(request, &response);
  if (!status.ok()) return Fail(status);
  error = WriteSampleOutputs(response, f.out_dir);
  if (!error.empty()) return Fail(error);
  std::cout << "indices " << ShapeString(response.indices()) << " seed " << response.seed()
            << " device " << response.device() << " server_us " << response.timing().total_us()
            << " -> " << f.out_dir << "\n";
  return 0;
}

struct DatasetFlags {
  std::string name, labels, features, row_splits, scores;
  bool replace = false;
  bool json = false;
};

std::string DatasetLine(const v1::DatasetInfo& d) {
  const std::string shape = "[" + Join(d.feature_shape(), ", ", Int) + "]";
  return d.name() + "  rows " + std::to_string(d.num_rows()) + "  elements " +
         std::to_string(d.num_elements()) + "  labels " + v1::DType_Name(d.label_dtype()) +
         "  features " +
         (d.feature_dtype() ? v1::DType_Name(d.feature_dtype()) + " " + shape : "none") +
         "  bytes " + std::to_string(d.bytes()) + "  sha256 " + d.sha256() + "  devices " +
         Join(d.devices(), ",", Text);
}

// One JSON object, numbers as numbers (protobuf's JSON writes int64 as strings).
std::string DatasetJson(const v1::DatasetInfo& d) {
  std::ostringstream j;
  j << "{\"name\": " << JsonQuote(d.name()) << ", \"num_rows\": " << d.num_rows()
    << ", \"num_elements\": " << d.num_elements() << ", \"label_dtype\": \""
    << v1::DType_Name(d.label_dtype()) << "\", \"feature_dtype\": \""
    << v1::DType_Name(d.feature_dtype()) << "\", \"feature_shape\": ["
    << Join(d.feature_shape(), ", ", Int) << "], \"bytes\": " << d.bytes() << ", \"sha256\": \""
    << d.sha256() << "\", \"devices\": [" << Join(d.devices(), ", ", JsonQuote) << "]}";
  return j.str();
}

int RunDatasetCreate(Client& client, const DatasetFlags& f) {
  v1::Tensor labels, features, splits;
  std::string error = ReadNpy(f.labels, &labels);
  if (error.empty() && !f.features.empty()) error = ReadNpy(f.features, &features);
  if (error.empty() && !f.row_splits.empty()) error = ReadNpy(f.row_splits, &splits);
  v1::Tensor scores;
  if (error.empty() && !f.scores.empty()) error = ReadNpy(f.scores, &scores);
  if (!error.empty()) return Fail(error);
  v1::DatasetInfo info;
  const grpc::Status status =
      client.CreateDataset(f.name, labels, f.features.empty() ? nullptr : &features,
                           f.row_splits.empty() ? nullptr : &splits, f.replace, &info, {}, 0,
                           f.scores.empty() ? nullptr : &scores);
  if (!status.ok()) return Fail(status);
  std::cout << DatasetLine(info) << "\n";
  return 0;
}

int RunDatasetList(Client& client, bool json) {
  std::vector<v1::DatasetInfo> datasets;
  const grpc::Status status = client.ListDatasets(&datasets);
  if (!status.ok()) return Fail(status);
  // --json: one JSON object per line.
  for (const auto& d : datasets) std::cout << (json ? DatasetJson(d) : DatasetLine(d)) << "\n";
  return 0;
}

int RunDatasetDelete(Client& client, const std::string& name) {
  const grpc::Status status = client.DeleteDataset(name);
  if (!status.ok()) return Fail(status);
  std::cout << "deleted " << name << "\n";
  return 0;
}

// grpc-health-probe's exit codes.
constexpr int kHealthConnectionFailure = 2;
constexpr int kHealthRpcFailure = 3;
constexpr int kHealthNotServing = 4;

int RunHealth(Client& client, const std::string& service) {
  std::string serving;
  grpc::Status status = client.CheckHealth(&serving, service);
  if (!status.ok()) {
    Fail(status);
    // UNAVAILABLE, or a deadline that passed before any connection was made (a server that
    // accepts TCP but never speaks HTTP/2), is a connection failure; anything else is the
    // health RPC failing.
    const bool unreachable =
        status.error_code() == grpc::StatusCode::UNAVAILABLE ||
        (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED && !client.Connected());
    return unreachable ? kHealthConnectionFailure : kHealthRpcFailure;
  }
  std::cout << serving << "\n";
  return serving == "SERVING" ? 0 : kHealthNotServing;
}

// ServerInfo as JSON with numbers as numbers (proto3's JSON mapping writes int64 as strings).
std::string InfoJson(const v1::ServerInfo& info) {
  std::ostringstream j;
  j << "{\"version\": " << JsonQuote(info.version())
    << ", \"revision\": " << JsonQuote(info.revision())
    << ", \"backend\": " << JsonQuote(info.backend()) << ", \"devices\": [";
  for (int i = 0; i < info.devices_size(); ++i) {
    const v1::DeviceInfo& d = info.devices(i);
    j << (i ? ", " : "") << "{\"id\": " << JsonQuote(d.id())
      << ", \"name\": " << JsonQuote(d.name()) << ", \"memory_bytes\": " << d.memory_bytes() << "}";
  }
  const v1::Limits& l = info.limits();
  j << "], \"limits\": {\"max_message_bytes\": " << l.max_message_bytes()
    << ", \"max_rows\": " << l.max_rows() << ", \"max_elements\": " << l.max_elements()
    << ", \"max_row_elements\": " << l.max_row_elements()
    << ", \"max_num_samples\": " << l.max_num_samples()
    << ", \"max_batch_rows\": " << l.max_batch_rows() << "}}";
  return j.str();
}

int RunInfo(Client& client, bool json) {
  v1::ServerInfo info;
  grpc::Status status = client.GetServerInfo(&info);
  if (!status.ok()) return Fail(status);
  if (json) {
    std::cout << InfoJson(info) << "\n";
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

// A usage error: exit 2 (as getopt tools and grpc-health-probe's flag errors do).
int UsageError(const std::string& message) {
  std::cerr << "gpusampler-cli: " << message << "\nRun with --help for more information.\n";
  return 2;
}

void AddGlobalFlags(CLI::App& app, GlobalFlags* g) {
  app.add_option("-t,--target", g->targets,
                 "server HOST:PORT; repeat or comma-separate for round_robin over several")
      ->default_val(std::vector<std::string>{"127.0.0.1:50051"});
  app.add_flag("--tls", g->tls, "use TLS (system roots unless --tls-ca)");
  app.add_option("--tls-ca", g->tls_ca, "PEM file of the CA that signs the server certificate");
  app.add_option("--tls-cert", g->tls_cert, "PEM client certificate chain (mutual TLS)");
  app.add_option("--tls-key", g->tls_key, "PEM client private key (mutual TLS)");
  app.add_option("--tls-server-name", g->tls_server_name, "expected server certificate name");
  app.add_option("--token", g->token, "bearer token for the authorization header");
  app.add_option("--token-file", g->token_file, "file holding the bearer token");
  app.add_option("--timeout", g->timeout_s,
                 "deadline per call, and per message of a stream, in seconds (0 = none)")
      ->default_val(30)
      ->check(Number(false, 0));
  app.add_option("--max-message-bytes", g->max_message_bytes, "largest message sent or received")
      ->default_val(256 << 20)
      ->check(Number(true, 1));
  app.add_option("--max-attempts", g->max_attempts,
                 "attempts per call on UNAVAILABLE / RESOURCE_EXHAUSTED (1 = no retry)")
      ->default_val(4)
      ->check(CLI::Range(1, 5));
}

CLI::App* AddSampleCommand(CLI::App& app, SampleFlags* f) {
  CLI::App* sample = app.add_subcommand("sample", "sample .npy labels (and features)");
  sample->add_option("--labels", f->labels, "labels .npy: [N], [B,N] or [total]");
  sample->add_option("--dataset", f->dataset, "sample this resident dataset instead of --labels");
  sample->add_option("--rows", f->rows, "with --dataset: int64 [B'] .npy of dataset rows");
  sample->add_flag("--return-features", f->return_features,
                   "with --dataset: also return the sampled rows' features");
  sample->add_option("--features", f->features, "features .npy: [N,...], [B,N,...], [total,...]");
  sample->add_option("--row-splits", f->row_splits, "int64 [B+1] .npy for ragged labels");
  sample->add_option("-k,--num-samples", f->num_samples, "K, slots per row")
      ->required()
      ->check(Number(true));
  sample->add_option("--positive-fraction", f->positive_fraction)
      ->default_val(0.5)
      ->check(Number(false));
  sample->add_option("--positive-label", f->positive_label)->default_val(1)->check(Number(true));
  sample->add_option("--negative-label", f->negative_label)->default_val(0)->check(Number(true));
  sample->add_option("--fill", f->fill)
      ->default_val("both")
      ->check(CLI::IsMember({"both", "negatives_only", "none"}));
  sample->add_option("--seed", f->seed, "Philox seed (drawn by the server when absent)")
      ->check(Seed());
  sample->add_option("--class", f->classes,
                     "instead of the two-class flags, one class per flag (repeat): "
                     "'labels=LO:HI[/LO:HI...],count=N|fraction=F|rest"
                     "[,selection=uniform|weighted|hardest|mixed][,hard_fraction=F]', "
                     "e.g. --class 'labels=1:80,fraction=0.25' --class 'labels=0,rest'");
  sample->add_option("--fill-order", f->fill_order,
                     "with --class: class indices that fill unused quota, in order, e.g. 1,0");
  sample->add_option("--scores", f->scores,
                     "float32 .npy laid out like the labels (with --dataset: the requested "
                     "rows' elements); needed by weighted, hardest and mixed classes");
  sample->add_option("--out-dir", f->out_dir, "directory for the output .npy files")->required();
  sample->final_callback([sample, f] {
    for (const char* flag :
         {"--positive-fraction", "--positive-label", "--negative-label", "--fill"}) {
      if (sample->count(flag) > 0) f->binary_flags_set = true;
    }
  });
  return sample;
}

// The flag combinations CLI11 cannot check; "" or the usage error.
std::string CheckSampleFlags(const SampleFlags& f) {
  if (f.labels.empty() == f.dataset.empty()) {
    return "sample needs exactly one of --labels and --dataset";
  }
  if (f.dataset.empty() && (!f.rows.empty() || f.return_features)) {
    return "--rows and --return-features need --dataset";
  }
  if (!f.classes.empty() && f.binary_flags_set) {
    return "--class replaces --positive-fraction, --positive-label, --negative-label and --fill";
  }
  if (f.classes.empty() && f.fill_order) return "--fill-order needs --class";
  v1::SamplingSpec spec;  // the class syntax is a usage matter: checked before any call
  for (const std::string& text : f.classes) {
    std::string error = ParseClassFlag(text, spec.add_classes());
    if (!error.empty()) return error;
  }
  if (f.fill_order) return ParseFillOrderFlag(*f.fill_order, &spec);
  return "";
}

struct BenchFlags {
  BenchOptions options;
  CLI::Option* rows = nullptr;  // given or not: with --dataset, all rows unless given
  bool json = false;
  bool csv = false;
  bool quiet = false;
  std::string concurrency_range, rate_range;  // "a:b[:step]"; empty: one point
  double stability_percent = 0;               // 0: one window per point
  int max_windows = 10;
};

CLI::App* AddBenchCommand(CLI::App& app, BenchFlags* f) {
  BenchOptions& bo = f->options;
  CLI::App* bench = app.add_subcommand("bench", "load generator");
  bench
      ->add_option("-c,--concurrency", bo.concurrency,
                   "workers, each with one call or stream open (default: half the cores, 1-4)")
      ->default_val(DefaultConcurrency())
      ->check(Number(true, 1));
  bench->add_option("--concurrency-range", f->concurrency_range,
                    "sweep the concurrency: a:b[:step], one measurement per point");
  bench->add_option("--rate-range", f->rate_range,
                    "sweep --rate (requests/s): a:b[:step], one measurement per point");
  bench
      ->add_option("--stability-percent", f->stability_percent,
                   "repeat each point's window (--requests or --duration) until three in a row "
                   "agree within this percent in throughput and p50 (0 = one window)")
      ->check(Number(false, 0));
  bench->add_option("--max-windows", f->max_windows, "windows per point at most, with stability")
      ->default_val(10)
      ->check(Number(true, 3));
  bench->add_flag("--csv", f->csv, "print CSV: a header and one line per point");
  bench->add_option("-n,--requests", bo.requests, "total requests (default 1000)")
      ->check(Number(true, 0));
  bench->add_option("-d,--duration", bo.duration_s, "seconds to run")->check(Number(false, 0));
  bench->add_option("--rate", bo.rate, "total requests per second (0 = as fast as possible)")
      ->check(Number(false, 0));
  bench->add_flag("--stream", bo.stream, "use SampleStream sessions");
  bench->add_option("--window", bo.window, "requests in flight per stream")
      ->default_val(4)
      ->check(Number(true, 1));
  bench->add_flag("--labels-only", bo.labels_only, "send no features");
  f->rows = bench
                ->add_option("--rows", bo.rows,
                             "rows per request (B); with --dataset, dataset rows drawn per request")
                ->default_val(8)
                ->check(Number(true, 1));
  bench->add_option("--dataset", bo.dataset,
                    "sample this resident dataset (all its rows unless --rows) instead of "
                    "synthetic labels");
  bench->add_flag("--return-features", bo.return_features,
                  "with --dataset: also return the sampled rows' features");
  bench->add_option("--n", bo.n, "elements per row (N)")->default_val(4096)->check(Number(true, 0));
  bench->add_option("--k", bo.k, "num_samples (K)")->default_val(256)->check(Number(true));
  bench->add_option("--dim", bo.dim, "float32 features per element")
      ->default_val(16)
      ->check(Number(true, 0));
  bench->add_option("--positive-rate", bo.positive_rate, "share of positive labels")
      ->default_val(0.05)
      ->check(CLI::Range(0.0, 1.0));
  bench->add_flag("--json", f->json, "print one JSON object");
  bench->add_flag("-q,--quiet", f->quiet, "no progress lines on stderr");
  bench
      ->add_option("--abort-after", bo.abort_after_s,
                   "stop once every request has failed for this many seconds (0 = never)")
      ->default_val(3)
      ->check(Number(false, 0));
  return bench;
}

// The dataset's row count, for bench --rows' ids and rows/s; a missing dataset fails here.
grpc::Status LookUpDatasetRows(Client& client, const std::string& name, int64_t* num_rows) {
  std::vector<v1::DatasetInfo> datasets;
  const grpc::Status status = client.ListDatasets(&datasets);
  if (!status.ok()) return status;
  bool found = false;
  for (const v1::DatasetInfo& d : datasets) {
    if (d.name() == name) {
      *num_rows = d.num_rows();
      found = true;
    }
  }
  if (!found) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        "bench --dataset " + name + ": no such dataset");
  }
  return grpc::Status::OK;
}

// A bench that fails before it measures (no dataset, no server): with --json, the failure as
// a JSON object on stdout too, so a script reading stdout always gets one.
int FailBench(const BenchFlags& f, const grpc::Status& status) {
  if (f.json) {
    std::cout << "{\"requests\": 0, \"ok\": 0, \"errors\": {\""
              << StatusCodeName(status.error_code()) << "\": 1}, \"error_messages\": {\""
              << StatusCodeName(status.error_code()) << "\": " << JsonQuote(status.error_message())
              << "}, \"aborted\": true}\n";
  }
  return Fail(status);
}

int RunBenchCommand(Client& client, BenchFlags& f) {
  BenchOptions& bo = f.options;
  if (bo.dataset.empty() && bo.return_features) {
    return UsageError("bench --return-features needs --dataset");
  }
  if (f.json && f.csv) return UsageError("bench: --json and --csv exclude each other");
  if (!f.concurrency_range.empty() && !f.rate_range.empty()) {
    return UsageError("bench: --concurrency-range and --rate-range exclude each other");
  }
  std::vector<BenchOptions> points;
  for (const auto& [text, is_rate] :
       {std::pair{f.concurrency_range, false}, std::pair{f.rate_range, true}}) {
    if (text.empty()) continue;
    Range range;
    if (std::string why = ParseRange(text, &range); !why.empty()) {
      return UsageError(std::string("bench ") +
                        (is_rate ? "--rate-range " : "--concurrency-range ") + why);
    }
    for (double v : RangePoints(range)) {
      BenchOptions point = bo;
      if (is_rate) {
        point.rate = v;
      } else {
        if (v < 1 || v != std::floor(v)) {
          return UsageError("bench --concurrency-range " + text +
                            ": every point must be a whole "
                            "number >= 1 (got " +
                            std::to_string(v) + ")");
        }
        point.concurrency = static_cast<int>(v);
      }
      points.push_back(point);
    }
  }
  if (points.empty()) points.push_back(bo);
  if (!bo.dataset.empty()) {
    const grpc::Status status = LookUpDatasetRows(client, bo.dataset, &bo.dataset_num_rows);
    if (!status.ok()) return FailBench(f, status);
    for (BenchOptions& p : points) {
      p.dataset_num_rows = bo.dataset_num_rows;
      p.dataset_rows = f.rows->count() > 0 ? bo.rows : 0;
    }
  }
  if (f.csv) PrintBenchCsvHeader(std::cout);
  bool all_ok = true;
  for (BenchOptions& p : points) {
    if (!f.quiet) p.progress = &std::cerr;
    const BenchResult result = f.stability_percent > 0
                                   ? RunStable(client, p, f.stability_percent, f.max_windows)
                                   : RunBench(client, p);
    if (f.csv) {
      PrintBenchCsvRow(p, result, std::cout);
    } else if (f.json) {
      PrintBenchJson(p, result, std::cout);  // one object per line (per point)
    } else {
      PrintBenchText(p, result, std::cout);
    }
    std::cout.flush();
    all_ok = all_ok && result.errors.empty() && result.ok > 0;
  }
  return all_ok ? 0 : 1;
}

struct DatasetCommands {
  CLI::App* create = nullptr;
  CLI::App* list = nullptr;
  CLI::App* remove = nullptr;
};

DatasetCommands AddDatasetCommands(CLI::App& app, DatasetFlags* f) {
  CLI::App* dataset = app.add_subcommand("dataset", "resident datasets: create, list, delete");
  dataset->require_subcommand(1);
  DatasetCommands c;
  c.create = dataset->add_subcommand("create", "upload .npy files as a dataset");
  c.create->add_option("name", f->name, "[A-Za-z0-9._-]{1,128}")->required();
  c.create->add_option("--labels", f->labels, "labels .npy, 1-D [total]")->required();
  c.create->add_option("--features", f->features, "features .npy [total, ...]");
  c.create->add_option("--row-splits", f->row_splits, "int64 [B+1] .npy");
  c.create->add_option("--scores", f->scores,
                       "float32 [total] .npy of scores, for classes that select by score");
  c.create->add_flag("--replace", f->replace, "replace a dataset of the same name");
  c.list = dataset->add_subcommand("list", "list the stored datasets");
  c.list->add_flag("--json", f->json, "one JSON object per line");
  c.remove = dataset->add_subcommand("delete", "delete a dataset");
  c.remove->add_option("name", f->name)->required();
  return c;
}

// The command line: every subcommand, its flags' values, and which one was given.
struct Commands {
  GlobalFlags global;
  SampleFlags sample_flags;
  BenchFlags bench_flags;
  DatasetFlags dataset_flags;
  std::string health_service;
  bool info_json = false;
  CLI::App* sample = nullptr;
  CLI::App* bench = nullptr;
  DatasetCommands dataset;
  CLI::App* health = nullptr;
  CLI::App* info = nullptr;
};

void AddCommands(CLI::App& app, Commands* c) {
  app.set_version_flag("--version", std::string("gpusampler-cli ") + GPUSAMPLER_CLI_VERSION + " (" +
                                        GPUSAMPLER_CLI_REVISION + ")");
  app.require_subcommand(1);
  AddGlobalFlags(app, &c->global);
  c->sample = AddSampleCommand(app, &c->sample_flags);
  c->bench = AddBenchCommand(app, &c->bench_flags);
  c->dataset = AddDatasetCommands(app, &c->dataset_flags);
  c->health = app.add_subcommand(
      "health", "exit 0 if SERVING; 2 connection failure, 3 RPC failure, 4 not serving");
  c->health->add_option("--service", c->health_service, "service name (default: whole server)");
  c->info = app.add_subcommand("info", "print the server's version, devices and limits");
  c->info->add_flag("--json", c->info_json, "print JSON");
}

// The message for a command line CLI11 rejects: a word where a subcommand belongs is an
// unknown subcommand; anything else keeps CLI11's message.
std::string ParseErrorMessage(const CLI::App& app, const CLI::ParseError& e, int argc,
                              char** argv) {
  if (!app.get_subcommands().empty()) return e.what();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.empty() || arg[0] == '-') {
      // A global option; skip its value too when it takes one.
      const bool has_value = arg.find('=') == std::string::npos && arg != "--tls" && i + 1 < argc;
      if (has_value) ++i;
      continue;
    }
    if (arg != "sample" && arg != "bench" && arg != "health" && arg != "info" && arg != "dataset") {
      return "unknown subcommand '" + arg + "' (expected sample, dataset, bench, health or info)";
    }
    break;
  }
  return e.what();
}

// Parses the command line. The exit code when that ends the run (help, version, a usage
// error); nullopt when a subcommand is to run.
std::optional<int> Parse(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    return app.exit(e);  // --help, --help-all, or --version (printed on stdout, exit 0)
  } catch (const CLI::ParseError& e) {
    return UsageError(ParseErrorMessage(app, e, argc, argv));
  }
  return std::nullopt;
}

// Runs the subcommand that was given.
int RunCommand(Client& client, Commands& c) {
  if (*c.sample) return RunSample(client, c.sample_flags);
  if (*c.dataset.create) return RunDatasetCreate(client, c.dataset_flags);
  if (*c.dataset.list) return RunDatasetList(client, c.dataset_flags.json);
  if (*c.dataset.remove) return RunDatasetDelete(client, c.dataset_flags.name);
  if (*c.health) return RunHealth(client, c.health_service);
  if (*c.info) return RunInfo(client, c.info_json);
  if (*c.bench) return RunBenchCommand(client, c.bench_flags);
  return 2;
}

int Main(int argc, char** argv) {
  CLI::App app{"gpusampler-cli: probe, feed and load-test a gpusampler server"};
  Commands commands;
  AddCommands(app, &commands);
  if (std::optional<int> exit_code = Parse(app, argc, argv)) return *exit_code;
  if (*commands.sample) {
    const std::string error = CheckSampleFlags(commands.sample_flags);
    if (!error.empty()) return UsageError(error);
  }
  std::unique_ptr<Client> client;
  const std::string error = MakeClient(commands.global, &client);
  if (!error.empty()) return Fail(error);
  return RunCommand(*client, commands);
}

}  // namespace
}  // namespace gpusampler::client

int main(int argc, char** argv) { return gpusampler::client::Main(argc, argv); }
