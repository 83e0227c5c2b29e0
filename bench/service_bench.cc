// gpusampler-service-bench: loopback throughput and latency (p50/p99) of gpusampler-server
// (in-process; CPU unless --device) against a bare gRPC echo of the same bytes and against
// calling the backend directly, at concurrency 1, 8 and 64, with and without dynamic
// batching, labels-only and with features. Prints a Markdown table.
//
//   gpusampler-service-bench [--n 10000] [--k 1000] [--dim 16] [--seconds 2]
//                            [--concurrency 1,8,64] [--cpu-threads 0] [--worker-spin-us 300]
//                            [--device cpu|cuda|cuda:N|cuda-sim]
// The in-process row calls the CPU backend (the cuda-sim backend with --device cuda-sim); for
// CUDA, compare with `gpusampler-bench --backend cuda`.
#include <grpcpp/grpcpp.h>

#include <spdlog/spdlog.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>
#include <vector>

#include "echo_server.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/v1/sampler.grpc.pb.h"
#include "lifecycle/server.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = gpusampler::v1;
namespace gk = gpusampler::kernels;

struct Result {
  double rps = 0, p50_us = 0, p99_us = 0;
  int64_t errors = 0;
  // Means of the server's own ServerTiming (zero for the echo).
  double queue_us = 0, compute_us = 0, server_total_us = 0, batch_rows = 0;
};

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(i), v.end());
  return v[i];
}

v1::SampleRequest MakeRequest(int64_t n, int64_t k, int64_t dim, bool features) {
  v1::SampleRequest req;
  req.mutable_spec()->set_num_samples(k);
  req.set_seed(7);
  auto* l = req.mutable_labels();
  l->set_dtype(v1::DTYPE_INT64);
  l->add_shape(1);
  l->add_shape(n);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::mt19937_64 gen(1);
  for (auto& x : labels) x = static_cast<int64_t>(gen() & 1);  // half positives
  l->set_data(labels.data(), labels.size() * 8);
  if (features) {
    auto* f = req.mutable_features();
    f->set_dtype(v1::DTYPE_FLOAT32);
    f->add_shape(1);
    f->add_shape(n);
    f->add_shape(dim);
    std::vector<float> v(static_cast<size_t>(n * dim));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
    f->set_data(v.data(), v.size() * 4);
  }
  return req;
}

// GET http://127.0.0.1:port/metrics; "" on failure.
std::string Scrape(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  return out;
}

// The device gauges of a scrape (busy ratio, and NVML's GPU utilization and memory).
std::string DeviceGauges(const std::string& scrape) {
  std::istringstream lines(scrape);
  std::string out;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gpusampler_device_busy_ratio{", 0) == 0 ||
        line.rfind("gpusampler_gpu_", 0) == 0) {
      out += (out.empty() ? "" : "; ") + line;
    }
  }
  return out;
}

// `concurrency` threads issue blocking unary calls back to back for `seconds`. With
// `metrics_port`, the device gauges are scraped once, in the middle of the load (the
// gauges refresh every second).
Result Load(int port, const v1::SampleRequest& req, int concurrency, double seconds,
            int metrics_port = 0, std::string* gauges = nullptr) {
  const int channels = std::min(concurrency, 8);
  std::vector<std::unique_ptr<v1::Sampler::Stub>> stubs;
  for (int c = 0; c < channels; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("bench_channel", c);  // distinct args: a connection per channel
    args.SetMaxReceiveMessageSize(64 << 20);
    stubs.push_back(v1::Sampler::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args)));
  }
  // Warm-up: connect every channel.
  for (auto& stub : stubs) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    stub->Sample(&ctx, req, &resp);
  }
  std::vector<std::vector<double>> lat(static_cast<size_t>(concurrency));
  std::vector<std::array<double, 4>> timing(static_cast<size_t>(concurrency));
  std::atomic<int64_t> errors{0};
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  const auto start = Clock::now();
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&, t] {
      auto* stub = stubs[static_cast<size_t>(t % channels)].get();
      v1::SampleResponse resp;
      while (Clock::now() < end) {
        grpc::ClientContext ctx;
        const auto t0 = Clock::now();
        const grpc::Status s = stub->Sample(&ctx, req, &resp);
        const auto t1 = Clock::now();
        if (!s.ok()) {
          ++errors;
          continue;
        }
        lat[static_cast<size_t>(t)].push_back(
            std::chrono::duration<double, std::micro>(t1 - t0).count());
        auto& tm = timing[static_cast<size_t>(t)];
        tm[0] += static_cast<double>(resp.timing().queue_us());
        tm[1] += static_cast<double>(resp.timing().compute_us());
        tm[2] += static_cast<double>(resp.timing().total_us());
        tm[3] += static_cast<double>(resp.timing().batch_rows());
      }
    });
  }
  if (metrics_port > 0 && gauges != nullptr) {
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds * 0.75));
    *gauges = DeviceGauges(Scrape(metrics_port));
  }
  for (auto& th : threads) th.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Result r;
  r.rps = static_cast<double>(all.size()) / elapsed;
  r.p50_us = Percentile(all, 0.50);
  r.p99_us = Percentile(all, 0.99);
  r.errors = errors.load();
  for (const auto& tm : timing) {
    r.queue_us += tm[0];
    r.compute_us += tm[1];
    r.server_total_us += tm[2];
    r.batch_rows += tm[3];
  }
  const double count = std::max<double>(1, static_cast<double>(all.size()));
  r.queue_us /= count;
  r.compute_us /= count;
  r.server_total_us /= count;
  r.batch_rows /= count;
  return r;
}

// The backend called directly: labels already in memory, no gRPC, no copies.
Result InProcess(int64_t n, int64_t k, int threads, double seconds, bool cuda_sim) {
  auto backend = cuda_sim ? gk::MakeCudaSimBackend() : gk::MakeCpuBackend(threads);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  std::mt19937_64 gen(1);
  for (auto& x : labels) x = static_cast<int64_t>(gen() & 1);
  gk::BatchBuilder builder;
  gk::SamplingSpec spec;
  spec.num_samples = k;
  builder.AddRequest(spec, 7, gk::DType::kInt64, {n}, 0);
  gk::Batch batch;
  builder.FillSizes(&batch);
  std::vector<int64_t> idx(static_cast<size_t>(k));
  std::vector<int64_t> out_labels(static_cast<size_t>(k));
  std::vector<int32_t> pos(1), neg(1);
  batch.labels = reinterpret_cast<const uint8_t*>(labels.data());
  batch.out_indices = idx.data();
  batch.out_labels = reinterpret_cast<uint8_t*>(out_labels.data());
  batch.out_num_positive = pos.data();
  batch.out_num_negative = neg.data();
  std::vector<double> lat;
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(seconds));
  const auto start = Clock::now();
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    backend->Sample(batch);
    lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  Result r;
  r.rps =
      static_cast<double>(lat.size()) / std::chrono::duration<double>(Clock::now() - start).count();
  r.p50_us = Percentile(lat, 0.5);
  r.p99_us = Percentile(lat, 0.99);
  return r;
}

// Where to gather features: on the host from the request bytes (K rows) vs staging all N
// feature rows for the launch (the copy a device gather needs before any PCIe transfer).
void GatherCost(int64_t n, int64_t k, int64_t dim) {
  const size_t row = static_cast<size_t>(dim) * 4;
  std::vector<uint8_t> features(static_cast<size_t>(n) * row, 1), staged(features.size());
  std::vector<uint8_t> out(static_cast<size_t>(k) * row);
  std::vector<int64_t> idx(static_cast<size_t>(k));
  std::mt19937_64 gen(3);
  for (auto& i : idx) i = static_cast<int64_t>(gen() % static_cast<uint64_t>(n));
  constexpr int kIters = 2000;
  auto t0 = Clock::now();
  for (int it = 0; it < kIters; ++it) {
    gpusampler::kernels::GatherRows(idx.data(), nullptr, k, static_cast<int64_t>(row),
                                    features.data(), out.data());
    asm volatile("" : : "r"(out.data()) : "memory");
  }
  const double gather_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kIters;
  t0 = Clock::now();
  for (int it = 0; it < kIters; ++it) {
    std::memcpy(staged.data(), features.data(), features.size());
    asm volatile("" : : "r"(staged.data()) : "memory");
  }
  const double stage_us =
      std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kIters;
  std::printf(
      "\nFeature gather (N=%lld, K=%lld, D=%lld float32): host gather of K rows from the "
      "request bytes %.1f us (%zu bytes); staging all N rows for a device gather %.1f us "
      "(%zu bytes, before any PCIe transfer of them)\n",
      static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(dim), gather_us,
      out.size(), stage_us, staged.size());
}

// A server on a loopback port (and its metrics on another, when asked).
gpusampler::server::ServerConfig LoopbackConfig(const std::string& device, int cpu_threads,
                                                bool metrics) {
  gpusampler::server::ServerConfig c;
  c.address = "127.0.0.1:0";
  c.metrics_address = metrics ? "127.0.0.1:0" : "";
  c.device = device;
  c.cpu_threads = cpu_threads;
  return c;
}

// Uploads labels (+ features) of `req` as dataset `name`, in chunks of at most 8 MiB.
grpc::Status UploadDataset(v1::Sampler::Stub* stub, const std::string& name,
                           const v1::SampleRequest& req, int64_t n, int64_t dim) {
  grpc::ClientContext ctx;
  v1::DatasetInfo info;
  auto writer = stub->CreateDataset(&ctx, &info);
  const int64_t row = dim * 4;
  const int64_t per = std::max<int64_t>(1, (8 << 20) / (8 + row));
  for (int64_t at = 0; at < n; at += per) {
    const int64_t m = std::min(per, n - at);
    v1::DatasetChunk c;
    if (at == 0) {
      c.set_name(name);
      c.set_replace(true);
    }
    auto* l = c.mutable_labels();
    l->set_dtype(v1::DTYPE_INT64);
    l->add_shape(m);
    l->set_data(
        req.labels().data().substr(static_cast<size_t>(at) * 8, static_cast<size_t>(m) * 8));
    auto* f = c.mutable_features();
    f->set_dtype(v1::DTYPE_FLOAT32);
    f->add_shape(m);
    f->add_shape(dim);
    f->set_data(
        req.features().data().substr(static_cast<size_t>(at * row), static_cast<size_t>(m * row)));
    writer->Write(c);
  }
  writer->WritesDone();
  return writer->Finish();
}

// One trainer loop at concurrency 1, three ways of getting K rows with features per step
// (the patterns of client/README-trainer.md), against the same server and data:
//   inline       labels and features [1, N, D] in every request;
//   labels-only  labels in the request, the K feature rows gathered locally afterwards;
//   dataset      labels and features uploaded once (CreateDataset), then {dataset,
//                return_features} per step: a few bytes up, K rows down.
void DatasetSteps(int port, int64_t n, int64_t k, int64_t dim, double seconds) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(-1);
  args.SetMaxSendMessageSize(-1);
  auto stub = v1::Sampler::NewStub(grpc::CreateCustomChannel(
      "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  const v1::SampleRequest with_features = MakeRequest(n, k, dim, true);
  const v1::SampleRequest labels_only = MakeRequest(n, k, dim, false);
  // Upload the same labels and features.
  if (const grpc::Status s = UploadDataset(stub.get(), "bench", with_features, n, dim); !s.ok()) {
    std::fprintf(stderr, "CreateDataset failed: %s\n", s.error_message().c_str());
    std::exit(1);
  }
  v1::SampleRequest by_name;
  by_name.mutable_spec()->set_num_samples(k);
  by_name.set_seed(7);
  by_name.set_dataset("bench");
  by_name.set_return_features(true);
  // The trainer's local copy of the features, for the labels-only pattern.
  const std::string& local = with_features.features().data();
  std::vector<uint8_t> gathered(static_cast<size_t>(k * dim * 4));

  struct Mode {
    const char* name;
    const v1::SampleRequest* req;
    bool local_gather;
  } modes[] = {{"inline (labels + features)", &with_features, false},
               {"labels only + local gather", &labels_only, true},
               {"resident dataset", &by_name, false}};
  std::printf(
      "\nTrainer steps at concurrency 1 (N=%lld, K=%lld, D=%lld float32; each step gets K "
      "rows with features):\n\n| mode | request bytes | steps/s | p50 us | p99 us | server "
      "total us | vs inline |\n|---|---:|---:|---:|---:|---:|---:|\n",
      static_cast<long long>(n), static_cast<long long>(k), static_cast<long long>(dim));
  double inline_rate = 0;
  v1::SampleResponse check[3];
  int mode_index = 0;
  for (const Mode& m : modes) {
    std::vector<double> lat;
    double server_us = 0;
    v1::SampleResponse resp;
    const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(seconds));
    const auto start = Clock::now();
    while (Clock::now() < end || lat.size() < 3) {
      grpc::ClientContext ctx;
      const auto t0 = Clock::now();
      const grpc::Status s = stub->Sample(&ctx, *m.req, &resp);
      if (!s.ok()) {
        std::fprintf(stderr, "%s: %s\n", m.name, s.error_message().c_str());
        std::exit(1);
      }
      if (m.local_gather) {
        const auto* idx = reinterpret_cast<const int64_t*>(resp.indices().data().data());
        gpusampler::kernels::GatherRows(idx, nullptr, k, dim * 4,
                                        reinterpret_cast<const uint8_t*>(local.data()),
                                        gathered.data());
      }
      lat.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      server_us += static_cast<double>(resp.timing().total_us());
    }
    const double rate = static_cast<double>(lat.size()) /
                        std::chrono::duration<double>(Clock::now() - start).count();
    if (inline_rate == 0) inline_rate = rate;
    check[mode_index++] = resp;
    std::printf("| %s | %zu | %.1f | %.0f | %.0f | %.0f | %.1fx |\n", m.name, m.req->ByteSizeLong(),
                rate, Percentile(lat, 0.5), Percentile(lat, 0.99),
                server_us / static_cast<double>(lat.size()), rate / inline_rate);
    std::fflush(stdout);
  }
  // The three patterns answer the same sample (same seed, same rows).
  const bool same = check[0].indices().data() == check[1].indices().data() &&
                    check[0].indices().data() == check[2].indices().data() &&
                    check[0].features().data() == check[2].features().data();
  std::printf("\nSame indices from all three modes, same feature bytes inline and dataset: %s\n",
              same ? "yes" : "NO");
  if (!same) std::exit(1);
}

// The dataset repository (docs/datasets.md): replicas A and B share one --dataset-dir (on
// this machine's disk). An upload goes through A; then B, which does not hold the dataset,
// gets its first request for it: the time to that first sample includes B's load from the
// repository (read your writes). Also: B's next sample (in memory), and a replica started
// after the upload (it loads the dataset before SERVING) from start to its first sample.
void RepositoryLoad(const std::string& device, int cpu_threads, int64_t n, int64_t k, int64_t dim,
                    int reps) {
  char tmpl[] = "/tmp/gpusampler-bench-repo-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  auto start = [&](int poll) {
    gpusampler::server::ServerConfig c = LoopbackConfig(device, cpu_threads, false);
    c.dataset_dir = dir;
    c.dataset_poll_seconds = poll;  // 0: B learns of the dataset only from the request
    c.max_dataset_bytes = int64_t{8} << 30;
    auto s = std::make_unique<gpusampler::server::Server>(c);
    if (!s->Start().ok()) std::abort();
    return s;
  };
  auto connect = [](int port) {
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(-1);
    args.SetMaxSendMessageSize(-1);
    return v1::Sampler::NewStub(grpc::CreateCustomChannel(
        "127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials(), args));
  };
  auto ms_since = [](Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
  };
  const v1::SampleRequest data = MakeRequest(n, k, dim, true);
  auto a = start(0);
  auto a_stub = connect(a->grpc_port());
  std::vector<double> upload_ms, first_ms, next_ms, late_ms;
  std::string sha;
  for (int r = 0; r < reps; ++r) {
    auto b = start(0);  // before the upload: B does not hold the dataset
    auto b_stub = connect(b->grpc_port());
    const std::string name = "repo" + std::to_string(r);
    auto t0 = Clock::now();
    if (const grpc::Status s = UploadDataset(a_stub.get(), name, data, n, dim); !s.ok()) {
      std::fprintf(stderr, "CreateDataset failed: %s\n", s.error_message().c_str());
      std::exit(1);
    }
    upload_ms.push_back(ms_since(t0));
    v1::SampleRequest req;
    req.mutable_spec()->set_num_samples(k);
    req.set_seed(7);
    req.set_dataset(name);
    req.set_return_features(true);
    v1::SampleResponse resp, from_a;
    for (int which = 0; which < 2; ++which) {
      grpc::ClientContext ctx;
      t0 = Clock::now();
      const grpc::Status s = b_stub->Sample(&ctx, req, &resp);
      if (!s.ok()) {
        std::fprintf(stderr, "sample on B failed: %s\n", s.error_message().c_str());
        std::exit(1);
      }
      (which == 0 ? first_ms : next_ms).push_back(ms_since(t0));
    }
    grpc::ClientContext actx;
    if (!a_stub->Sample(&actx, req, &from_a).ok() ||
        from_a.indices().data() != resp.indices().data() ||
        from_a.features().data() != resp.features().data() ||
        from_a.dataset_sha256() != resp.dataset_sha256() || resp.dataset_sha256().empty()) {
      std::fprintf(stderr, "B's answer differs from A's\n");
      std::exit(1);
    }
    sha = resp.dataset_sha256();
    b->Shutdown();
    // A replica started after the upload: it loads the repository before SERVING.
    t0 = Clock::now();
    auto c = start(0);
    auto c_stub = connect(c->grpc_port());
    grpc::ClientContext cctx;
    if (!c_stub->Sample(&cctx, req, &resp).ok() ||
        resp.indices().data() != from_a.indices().data()) {
      std::fprintf(stderr, "late replica's answer differs\n");
      std::exit(1);
    }
    late_ms.push_back(ms_since(t0));
    c->Shutdown();
  }
  a->Shutdown();
  std::printf(
      "\nRepository load (N=%lld int64 labels + [N, %lld] float32 features = %.1f MB, K=%lld, "
      "device %s, %d reps, medians; directory on local disk):\n\n"
      "| what | ms (median) | min | max |\n|---|---:|---:|---:|\n",
      static_cast<long long>(n), static_cast<long long>(dim),
      static_cast<double>(n * (8 + 4 * dim)) / 1e6, static_cast<long long>(k), device.c_str(),
      reps);
  for (auto [what, v] : {std::pair<const char*, std::vector<double>*>{
                             "CreateDataset through replica A (write-through commit)", &upload_ms},
                         {"first sample on replica B, which lacked it (load + sample)", &first_ms},
                         {"next sample on replica B (in memory)", &next_ms},
                         {"replica started after the upload: start to first sample", &late_ms}}) {
    std::sort(v->begin(), v->end());
    std::printf("| %s | %.1f | %.1f | %.1f |\n", what, (*v)[v->size() / 2], v->front(), v->back());
  }
  std::printf("\nB's answers equal A's (indices, features, dataset_sha256 %s...)\n",
              sha.substr(0, 12).c_str());
  std::string cmd = "rm -rf " + dir;
  if (std::system(cmd.c_str()) != 0) std::fprintf(stderr, "cannot remove %s\n", dir.c_str());
}
}  // namespace

int main(int argc, char** argv) {
  int64_t n = 10000, k = 1000, dim = 16;
  double seconds = 2;
  std::string concurrency_list = "1,8,64";
  int cpu_threads = 0;
  std::string device = "cpu";
  int64_t spin_us = gpusampler::server::ServerConfig().worker_spin_us;
  CLI::App app{"gpusampler-service-bench"};
  app.add_option("--n", n)->capture_default_str();
  app.add_option("--k", k)->capture_default_str();
  app.add_option("--dim", dim)->capture_default_str();
  app.add_option("--seconds", seconds, "per measurement")->capture_default_str();
  app.add_option("--concurrency", concurrency_list)->capture_default_str();
  app.add_option("--cpu-threads", cpu_threads, "server CPU threads (0 = all)")
      ->capture_default_str();
  app.add_option("--device", device, "server --device (cpu, cuda, cuda:0, ..., cuda-sim)")
      ->capture_default_str();
  app.add_option("--worker-spin-us", spin_us, "server --worker-spin-us")->capture_default_str();
  bool dataset_mode = false;
  app.add_flag("--dataset", dataset_mode,
               "only the trainer-step comparison: inline vs labels-only vs resident dataset");
  bool repository_mode = false;
  int reps = 5;
  app.add_flag("--repository", repository_mode,
               "only the repository load: time to the first sample on a replica that lacked "
               "the dataset");
  app.add_option("--reps", reps, "repetitions of the repository load")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (repository_mode) {
    spdlog::set_level(spdlog::level::warn);
    RepositoryLoad(device, cpu_threads, n, k, dim, reps);
    return 0;
  }
  std::vector<int> concurrency;
  std::stringstream list(concurrency_list);
  for (std::string item; std::getline(list, item, ',');) concurrency.push_back(std::stoi(item));

  spdlog::set_level(spdlog::level::warn);
  gpusampler::bench::EchoService echo_service;
  int echo_port = 0;
  auto echo = gpusampler::bench::StartEchoServer(&echo_service, &echo_port);

  auto start_server = [&](bool batching) {
    gpusampler::server::ServerConfig c = LoopbackConfig(device, cpu_threads, true);
    c.worker_spin_us = spin_us;
    c.max_batch_rows = batching ? 256 : 1;
    c.max_batch_delay_us = batching ? 200 : 0;
    auto s = std::make_unique<gpusampler::server::Server>(c);
    if (!s->Start().ok()) std::abort();
    return s;
  };
  auto batched = start_server(true);
  if (dataset_mode) {
    DatasetSteps(batched->grpc_port(), n, k, dim, seconds);
    batched->Shutdown();
    echo->Shutdown();
    return 0;
  }
  auto unbatched = start_server(false);

  std::vector<std::string> gauge_notes;
  const Result direct = InProcess(n, k, cpu_threads, seconds, device == "cuda-sim");
  std::printf(
      "In-process backend call (N=%lld, K=%lld, labels only): %.0f calls/s, p50 %.1f us, "
      "p99 %.1f us\n\n",
      static_cast<long long>(n), static_cast<long long>(k), direct.rps, direct.p50_us,
      direct.p99_us);
  std::printf(
      "| payload | concurrency | target | req/s | p50 us | p99 us | errors | server queue us "
      "| server compute us | server total us | rows per launch |\n");
  std::printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (bool features : {false, true}) {
    const v1::SampleRequest req = MakeRequest(n, k, dim, features);
    for (int c : concurrency) {
      const struct {
        const char* name;
        int port;
        int metrics_port;
      } targets[] = {{"bare gRPC echo", echo_port, 0},
                     {"service, batching off", unbatched->grpc_port(), 0},
                     {"service, batching on", batched->grpc_port(), batched->metrics_port()}};
      for (const auto& t : targets) {
        std::string gauges;
        const Result r = Load(t.port, req, c, seconds, t.metrics_port, &gauges);
        if (!gauges.empty()) gauge_notes.push_back(std::to_string(c) + " " + gauges);
        std::printf("| %s | %d | %s | %.0f | %.0f | %.0f | %lld | %.0f | %.0f | %.0f | %.1f |\n",
                    features ? "labels + features" : "labels only", c, t.name, r.rps, r.p50_us,
                    r.p99_us, static_cast<long long>(r.errors), r.queue_us, r.compute_us,
                    r.server_total_us, r.batch_rows);
        std::fflush(stdout);
      }
    }
  }
  if (!gauge_notes.empty()) {
    std::printf(
        "\nDevice gauges of the batching server, scraped during each load (payload order "
        "as above, by concurrency):\n");
    for (const auto& g : gauge_notes) std::printf("- c=%s\n", g.c_str());
  }
  GatherCost(n, k, dim);
  batched->Shutdown();
  unbatched->Shutdown();
  echo->Shutdown();
  return 0;
}
