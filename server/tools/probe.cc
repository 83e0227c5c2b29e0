// gpusampler-probe: sends one random sample request and prints a summary. Exit 0 when the
// server answered with a well-formed sample. A smoke test for `make serve`, not the client
// library.
#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstring>
#include <iostream>
#include <random>

#include "gpusampler/v1/sampler.grpc.pb.h"

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:50051";
  int64_t n = 10000, k = 1000, rows = 1;
  uint64_t seed = 0;
  double timeout_s = 10;
  CLI::App app{"gpusampler-probe: one sample request"};
  app.add_option("--target", target, "server address")->capture_default_str();
  app.add_option("--n", n, "labels per row")->capture_default_str();
  app.add_option("--k", k, "num_samples")->capture_default_str();
  app.add_option("--rows", rows, "rows (B)")->capture_default_str();
  app.add_option("--seed", seed, "request seed (0: let the server draw one)");
  app.add_option("--timeout", timeout_s, "deadline in seconds")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  gpusampler::v1::SampleRequest req;
  req.set_request_id("probe");
  req.mutable_spec()->set_num_samples(k);
  if (seed) req.set_seed(seed);
  auto* labels = req.mutable_labels();
  labels->set_dtype(gpusampler::v1::DTYPE_INT64);
  labels->add_shape(rows);
  labels->add_shape(n);
  std::vector<int64_t> values(static_cast<size_t>(rows * n));
  std::mt19937_64 gen(12345);
  for (auto& v : values) v = static_cast<int64_t>(gen() % 10 == 0 ? 1 : (gen() % 5 == 0 ? -1 : 0));
  labels->set_data(values.data(), values.size() * sizeof(int64_t));

  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  auto stub = gpusampler::v1::Sampler::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() +
                   std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
  gpusampler::v1::SampleResponse resp;
  const auto start = std::chrono::steady_clock::now();
  const grpc::Status status = stub->Sample(&ctx, req, &resp);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    std::cerr << "probe: " << target << " answered " << status.error_code() << ": "
              << status.error_message() << "\n";
    return 1;
  }
  const auto& idx = resp.indices();
  const bool well_formed = idx.data().size() == static_cast<size_t>(rows * k * 8) &&
                           resp.num_positive().data().size() == static_cast<size_t>(rows * 4);
  int32_t pos = 0, neg = 0;
  if (well_formed) {
    std::memcpy(&pos, resp.num_positive().data().data(), 4);
    std::memcpy(&neg, resp.num_negative().data().data(), 4);
  }
  std::cout << "probe: " << target << " device=" << resp.device() << " seed=" << resp.seed()
            << " rows=" << rows << " n=" << n << " k=" << k << " row0: num_positive=" << pos
            << " num_negative=" << neg << " round_trip_ms=" << ms
            << " server_total_us=" << resp.timing().total_us()
            << " compute_us=" << resp.timing().compute_us() << "\n";
  return well_formed ? 0 : 1;
}
