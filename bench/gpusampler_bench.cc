// gpusampler-bench: times Backend::Sample (selection, ordering and the feature gather) on
// inputs already resident where the backend works: host memory for cpu, device memory for
// cuda. Labels are uniform {0, 1} (half positives) like bench/pytorch_baselines.py.
//
//   gpusampler-bench --backend cpu|cuda --rows B --n N --k K --dim D --label-dtype int64
//                    --threads T --iters I [--warmup W] [--seed S] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gk = gpusampler::kernels;

namespace {

struct Options {
  std::string backend = "cpu";
  int64_t rows = 1;
  int64_t n = 10000;
  int64_t k = -1;  // default n / 10
  int64_t dim = 16;
  std::string label_dtype = "int64";
  int threads = 0;
  int iters = 50;
  int warmup = 5;
  uint64_t seed = 1;
  bool json = false;
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "gpusampler-bench: %s\n"
               "usage: gpusampler-bench --backend cpu|cuda --rows B --n N --k K --dim D\n"
               "       --label-dtype bool|int8|uint8|int16|int32|int64 --threads T --iters I\n"
               "       [--warmup W] [--seed S] [--json]\n",
               why);
  std::exit(2);
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int a = 1; a < argc; ++a) {
    const std::string flag = argv[a];
    auto value = [&]() -> std::string {
      if (a + 1 >= argc) Usage(("missing value for " + flag).c_str());
      return argv[++a];
    };
    if (flag == "--backend")
      o.backend = value();
    else if (flag == "--rows")
      o.rows = std::stoll(value());
    else if (flag == "--n")
      o.n = static_cast<int64_t>(std::stod(value()));
    else if (flag == "--k")
      o.k = static_cast<int64_t>(std::stod(value()));
    else if (flag == "--dim")
      o.dim = std::stoll(value());
    else if (flag == "--label-dtype")
      o.label_dtype = value();
    else if (flag == "--threads")
      o.threads = std::stoi(value());
    else if (flag == "--iters")
      o.iters = std::stoi(value());
    else if (flag == "--warmup")
      o.warmup = std::stoi(value());
    else if (flag == "--seed")
      o.seed = std::stoull(value());
    else if (flag == "--json")
      o.json = true;
    else if (flag == "--help" || flag == "-h")
      Usage("help");
    else
      Usage(("unknown flag " + flag).c_str());
  }
  if (o.k < 0) o.k = std::max<int64_t>(1, o.n / 10);
  if (o.rows < 1 || o.n < 0 || o.k < 1 || o.dim < 0 || o.iters < 1 || o.warmup < 0) {
    Usage("sizes must be positive");
  }
  if (o.backend != "cpu" && o.backend != "cuda") Usage("--backend is cpu or cuda");
  return o;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t at = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(at, v.size() - 1)];
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  gk::DType dtype;
  if (!gk::ParseDType(o.label_dtype, &dtype) || !gk::IsLabelDType(dtype)) {
    Usage("--label-dtype must be an integer dtype or bool");
  }
  const size_t item = gk::ItemSize(dtype);
  const int64_t feature_row_bytes = o.dim * 4;  // float32 features

  gk::SamplingSpec spec;
  spec.num_samples = o.k;
  gk::BatchBuilder builder;
  builder.AddRequest(spec, o.seed, dtype, std::vector<int64_t>(o.rows, o.n), feature_row_bytes);

  std::mt19937_64 gen(o.seed);
  std::vector<uint8_t> labels(builder.label_bytes() + 1);
  for (int64_t e = 0; e < o.rows * o.n; ++e) {
    const int64_t v = static_cast<int64_t>(gen() & 1);
    std::memcpy(labels.data() + e * item, &v, item);
  }
  std::vector<uint8_t> features(builder.feature_bytes() + 1);
  for (auto& b : features) b = static_cast<uint8_t>(gen());
  std::vector<int64_t> out_idx(builder.total_slots());
  std::vector<uint8_t> out_lab(builder.out_label_bytes() + 1);
  std::vector<uint8_t> out_feat(builder.out_feature_bytes() + 1);
  std::vector<int32_t> num_pos(o.rows), num_neg(o.rows);

  std::unique_ptr<gk::Backend> backend;
  try {
    backend = o.backend == "cuda" ? gk::MakeCudaBackend(0) : gk::MakeCpuBackend(o.threads);
  } catch (const gk::Error& e) {
    std::fprintf(stderr, "gpusampler-bench: %s\n", e.what());
    return 3;
  }
  gk::Batch batch;
  builder.FillSizes(&batch);
  std::vector<void*> device_buffers;
  void* stream = backend->stream();
  if (backend->memory_space() == gk::MemorySpace::kHost) {
    batch.labels = labels.data();
    batch.features = features.data();
    batch.out_indices = out_idx.data();
    batch.out_labels = out_lab.data();
    batch.out_features = out_feat.data();
    batch.out_num_positive = num_pos.data();
    batch.out_num_negative = num_neg.data();
  } else {
    auto upload = [&](const void* src, size_t bytes) {
      void* d = gk::DeviceAlloc(0, bytes + 8);
      device_buffers.push_back(d);
      if (src && bytes) gk::CopyAsync(d, src, bytes, stream);
      return d;
    };
    batch.rows = static_cast<const gk::RowDesc*>(
        upload(builder.rows().data(), builder.rows().size() * sizeof(gk::RowDesc)));
    batch.labels = static_cast<const uint8_t*>(upload(labels.data(), labels.size()));
    batch.features = static_cast<const uint8_t*>(upload(features.data(), features.size()));
    batch.out_indices = static_cast<int64_t*>(upload(nullptr, out_idx.size() * 8));
    batch.out_labels = static_cast<uint8_t*>(upload(nullptr, out_lab.size()));
    batch.out_features = static_cast<uint8_t*>(upload(nullptr, out_feat.size()));
    batch.out_num_positive = static_cast<int32_t*>(upload(nullptr, o.rows * 4));
    batch.out_num_negative = static_cast<int32_t*>(upload(nullptr, o.rows * 4));
    gk::StreamSynchronize(stream);
  }

  auto run_once = [&] {
    backend->Sample(batch);
    if (stream) gk::StreamSynchronize(stream);
  };
  std::vector<double> ms;
  try {
    for (int w = 0; w < o.warmup; ++w) run_once();
    for (int it = 0; it < o.iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      run_once();
      const auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
  } catch (const gk::Error& e) {
    std::fprintf(stderr, "gpusampler-bench: %s\n", e.what());
    return 4;
  }
  for (void* d : device_buffers) gk::DeviceFree(d);

  const double median = Percentile(ms, 0.5), p90 = Percentile(ms, 0.9);
  const char* memory = backend->memory_space() == gk::MemorySpace::kHost ? "host" : "device";
  if (o.json) {
    std::printf(
        "{\"impl\": \"gpusampler\", \"backend\": \"%s\", \"device\": \"%s\", \"rows\": %lld, "
        "\"n\": %lld, \"k\": %lld, \"dim\": %lld, \"label_dtype\": \"%s\", \"threads\": %d, "
        "\"iters\": %d, \"warmup\": %d, \"median_ms\": %.6f, \"p90_ms\": %.6f, "
        "\"min_ms\": %.6f, \"inputs\": \"%s\", \"timed\": \"sample+feature gather\"}\n",
        o.backend.c_str(), backend->name().c_str(), static_cast<long long>(o.rows),
        static_cast<long long>(o.n), static_cast<long long>(o.k), static_cast<long long>(o.dim),
        o.label_dtype.c_str(), o.threads, o.iters, o.warmup, median, p90,
        *std::min_element(ms.begin(), ms.end()), memory);
  } else {
    std::printf(
        "%s rows=%lld n=%lld k=%lld dim=%lld %s threads=%d iters=%d: median %.4f ms, "
        "p90 %.4f ms (inputs in %s memory)\n",
        backend->name().c_str(), static_cast<long long>(o.rows), static_cast<long long>(o.n),
        static_cast<long long>(o.k), static_cast<long long>(o.dim), o.label_dtype.c_str(),
        o.threads, o.iters, median, p90, memory);
  }
  return 0;
}
