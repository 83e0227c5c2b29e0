// gpusampler-bench: times Backend::Sample (selection, ordering and the feature gather) on
// inputs already resident where the backend works: host memory for cpu, device memory for
// cuda and cuda-sim (whose "device" memory is host memory), launched through StagedLaunch as
// the server launches a step over a resident dataset.
// Labels are uniform {0, 1} (half positives) like bench/pytorch_baselines.py.
//
//   gpusampler-bench --backend cpu|cuda|cuda-sim --rows B --n N --k K --dim D
//                    --label-dtype int64 --threads T --iters I [--warmup W] [--seed S] [--json]
//                    [--floor] [--classes binary|binary-as-classes|8|64|weighted-neg|hardest-neg]
//
// --classes (cpu; default binary) times the class path (SPEC section 7): binary-as-classes is
// the binary spec written as classes with the lowering off; 8 and 64 are that many UNIFORM
// classes of one label each (labels uniform over them, K / C each, the last the rest, all in
// the fill order); weighted-neg is binary-as-classes with WEIGHTED negatives (scores uniform in
// (0, 1]), hardest-neg the same with HARDEST negatives. Labels for 8 and 64 are uniform over
// [0, C).
// cuda-sim is the CUDA pipeline run on the host (slow; its time is not a GPU's): what it
// reports is the model of the GPU's work of the last timed Sample (Backend::last_launch_stats):
// kernel launches, global-memory bytes read and written, feature-row bytes
// (counted apart), Philox calls, and (read + written) / label elements. --json adds them as
// launches, bytes_read, bytes_written, feature_bytes, philox_calls, label_elements and
// bytes_per_element, smem_bytes_per_element (shared-memory bytes per label element), stream_ops
// (stream operations of the last timed launch: upload, graph, download, completion), graph,
// upload_bytes and download_bytes; the text output prints them on a line.
//
// cuda and cuda-sim: median_ms / p90_ms / min_ms are end to end (the launch with its upload,
// the kernels, the download of every output to the host, the completion). --json adds the
// device time apart from the copies, as PyTorch's CUDA baselines are timed: device_us (cuda:
// CUDA events around the kernels alone, on a backend of their own, with every input and output
// in device memory; null on cuda-sim, whose executor keeps no time estimate), h2d_bytes and
// d2h_bytes (the last timed launch's copies), and graph_captures (CUDA graphs captured per 100
// timed launches after warm-up: a launch whose size class, buffers and copy sizes match the
// last capture replays that graph without capturing).
//
// --floor (cpu) also measures, on the same inputs and threads, the work no CPU sampler can
// avoid: reading the labels once, B (N/4 + K) Philox calls (the selection keys of every
// element, four per call, and the order keys of the K selected), and the gather of the B K
// selected feature rows in index order. Each part is timed alone (median of the same
// iterations); their sum is the floor, and the JSON line reports our time as a multiple.
// The floor's keys come from the same instruction-set version as the backend's (cpu: the
// JSON's "isa", chosen once per process, GPUSAMPLER_PHILOX_ISA=portable|avx2|avx512 or the
// CPU's default; "isa_choice" says which and why).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/key_tiles.hpp"
#include "cpu/thread_pool.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/host_buffer.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "gpusampler/kernels/staged_launch.hpp"

namespace gk = gpusampler::kernels;

namespace {

// Inputs and outputs start on a cache line, as PyTorch's CPU allocator places tensors
// (bench/pytorch_baselines.py) and the server places resident datasets.
using Bytes = gk::HostBytes;

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
  bool floor = false;
  std::string classes = "binary";
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "gpusampler-bench: %s\n"
               "usage: gpusampler-bench --backend cpu|cuda|cuda-sim --rows B --n N --k K --dim D\n"
               "       --label-dtype bool|int8|uint8|int16|int32|int64 --threads T --iters I\n"
               "       [--warmup W] [--seed S] [--json] [--floor]\n"
               "       [--classes binary|binary-as-classes|8|64|weighted-neg|hardest-neg]\n",
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
    else if (flag == "--classes")
      o.classes = value();
    else if (flag == "--floor")
      o.floor = true;
    else if (flag == "--help" || flag == "-h")
      Usage("help");
    else
      Usage(("unknown flag " + flag).c_str());
  }
  if (o.k < 0) o.k = std::max<int64_t>(1, o.n / 10);
  if (o.rows < 1 || o.n < 0 || o.k < 1 || o.dim < 0 || o.iters < 1 || o.warmup < 0) {
    Usage("sizes must be positive");
  }
  if (o.backend != "cpu" && o.backend != "cuda" && o.backend != "cuda-sim") {
    Usage("--backend is cpu, cuda or cuda-sim");
  }
  if (o.classes != "binary" && o.classes != "binary-as-classes" && o.classes != "8" &&
      o.classes != "64" && o.classes != "weighted-neg" && o.classes != "hardest-neg") {
    Usage("--classes is binary, binary-as-classes, 8, 64, weighted-neg or hardest-neg");
  }
  if (o.classes != "binary" && o.backend != "cpu") Usage("--classes needs --backend cpu");
  if (o.floor && o.backend != "cpu") Usage("--floor measures the CPU floor; use --backend cpu");
  return o;
}

// The spec of --classes (the binary spec unchanged for "binary"); returns how many label
// values the labels are drawn from.
int64_t ClassSpecFor(const Options& o, gk::SamplingSpec* spec) {
  if (o.classes == "binary") return 2;
  auto one_label = [](int64_t v) {
    gk::ClassSpec c;
    c.labels = {{v, v}};
    return c;
  };
  if (o.classes == "binary-as-classes" || o.classes == "weighted-neg" ||
      o.classes == "hardest-neg") {
    gk::ClassSpec pos = one_label(1), neg = one_label(0);
    pos.share = gk::Share::kFraction;
    pos.fraction = 0.5;
    neg.share = gk::Share::kRest;
    if (o.classes == "weighted-neg") neg.selection = gk::Selection::kWeighted;
    if (o.classes == "hardest-neg") neg.selection = gk::Selection::kHardest;
    spec->classes = {pos, neg};
    spec->fill_order = {1, 0};
    return 2;
  }
  const int64_t num_classes = std::stoll(o.classes);
  for (int64_t c = 0; c < num_classes; ++c) {
    gk::ClassSpec cls = one_label(c);
    if (c + 1 < num_classes) {
      cls.share = gk::Share::kCount;
      cls.count = o.k / num_classes;
    } else {
      cls.share = gk::Share::kRest;
    }
    spec->classes.push_back(cls);
    spec->fill_order.push_back(static_cast<int32_t>(c));
  }
  return num_classes;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t at = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(at, v.size() - 1)];
}

template <typename Fn>
double MedianMs(int warmup, int iters, Fn&& fn) {
  std::vector<double> ms;
  for (int w = 0; w < warmup; ++w) fn();
  for (int it = 0; it < iters; ++it) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return Percentile(ms, 0.5);
}

struct Floor {
  double labels_ms = 0, keys_ms = 0, gather_ms = 0;
  double total() const { return labels_ms + keys_ms + gather_ms; }
};

// The three unavoidable parts. Each is timed spread over the pool and on the calling thread
// alone, and the faster counts (a small row gains nothing from waking a second thread, and
// the backend does not split it either).
Floor MeasureFloor(const Options& o, const Bytes& labels, size_t item, const Bytes& features,
                   int64_t feature_row_bytes) {
  const int threads = o.threads > 0
                          ? o.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  gk::ThreadPool pool(threads);
  const int64_t tasks = threads * 4;
  auto best = [&](const std::function<void(int64_t)>& task) {
    const double parallel = MedianMs(
        o.warmup, o.iters, [&] { pool.ParallelFor(tasks, [&](int64_t t, int) { task(t); }); });
    const double serial = MedianMs(o.warmup, o.iters, [&] {
      for (int64_t t = 0; t < tasks; ++t) task(t);
    });
    return std::min(parallel, serial);
  };
  auto part = [&](int64_t total, int64_t t, int64_t align) {
    const int64_t per = ((total + tasks - 1) / tasks + align - 1) / align * align;
    return std::pair<int64_t, int64_t>{std::min(total, t * per), std::min(total, (t + 1) * per)};
  };
  Floor f;
  // 1. Read every label byte once (a sum the compiler vectorizes; the result is kept).
  const int64_t words = static_cast<int64_t>(o.rows * o.n * item / 8);
  std::vector<uint64_t> sums(static_cast<size_t>(tasks));
  const uint64_t* lw = reinterpret_cast<const uint64_t*>(labels.data());
  f.labels_ms = best([&](int64_t t) {
    const auto [b, e] = part(words, t, 8);
    uint64_t acc = 0;
    for (int64_t j = b; j < e; ++j) acc += lw[j];
    sums[static_cast<size_t>(t)] = acc;
    asm volatile("" : : "r"(sums.data()) : "memory");
  });
  // 2. N/4 calls per row in tiles (u of every element), then K calls (v of the selected).
  std::mt19937_64 gen(o.seed + 1);
  std::vector<std::vector<uint32_t>> sel(static_cast<size_t>(o.rows));
  for (auto& r : sel) {
    std::vector<uint8_t> taken(static_cast<size_t>(o.n), 0);
    for (int64_t j = 0; j < std::min(o.k, o.n);) {
      const uint64_t i = gen() % static_cast<uint64_t>(o.n);
      if (!taken[i]) {
        taken[i] = 1;
        r.push_back(static_cast<uint32_t>(i));
        ++j;
      }
    }
    std::sort(r.begin(), r.end());
  }
  const int64_t tiles = (o.n + gk::cpu::kTileElements - 1) / gk::cpu::kTileElements;
  std::vector<std::vector<uint32_t>> keys(static_cast<size_t>(tasks),
                                          std::vector<uint32_t>(gk::cpu::kTileElements));
  f.keys_ms = best([&](int64_t t) {
    {
      uint32_t* out = keys[static_cast<size_t>(t)].data();
      const auto [b, e] = part(o.rows * tiles, t, 1);
      for (int64_t j = b; j < e; ++j) {
        gk::cpu::KeyTile(o.seed, static_cast<uint32_t>(j / tiles), gk::kSelectionStream,
                         static_cast<uint64_t>(j % tiles) * gk::cpu::kTileElements, out);
      }
      const auto [kb, ke] = part(o.rows * o.k, t, gk::cpu::kTileElements);
      for (int64_t j = kb; j < ke; j += gk::cpu::kTileElements) {
        const int64_t row = j / o.k, at = j % o.k;
        const int64_t count = std::min<int64_t>({gk::cpu::kTileElements, ke - j, o.k - at});
        if (at >= static_cast<int64_t>(sel[static_cast<size_t>(row)].size())) continue;
        gk::cpu::KeysOfElements(o.seed, static_cast<uint32_t>(row), gk::kOrderStream,
                                sel[static_cast<size_t>(row)].data() + at, count, out);
      }
    }
    asm volatile("" : : "r"(keys.data()) : "memory");
  });
  // 3. The K selected feature rows of each row, in index order, into their slots, with
  // whichever stores are faster.
  if (feature_row_bytes > 0) {
    Bytes out(static_cast<size_t>(o.rows * o.k * feature_row_bytes));
    std::vector<uint32_t> slots(static_cast<size_t>(o.k));
    for (int64_t j = 0; j < o.k; ++j) slots[static_cast<size_t>(j)] = static_cast<uint32_t>(j);
    std::shuffle(slots.begin(), slots.end(), gen);
    auto gather = [&](gk::RowStores stores) {
      return best([&](int64_t t) {
        {
          const auto [b, e] = part(o.rows * o.k, t, 1);
          for (int64_t j = b; j < e;) {
            const int64_t row = j / o.k, at = j % o.k;
            const int64_t count = std::min(e - j, o.k - at);
            const auto& r = sel[static_cast<size_t>(row)];
            const int64_t have = std::max<int64_t>(0, std::min<int64_t>(count, r.size() - at));
            gk::GatherRows(r.data() + at, slots.data() + at, have, feature_row_bytes,
                           features.data() + row * o.n * feature_row_bytes,
                           out.data() + row * o.k * feature_row_bytes, stores);
            j += count;
          }
        }
        asm volatile("" : : "r"(out.data()) : "memory");
      });
    };
    // With plain and with non-temporal stores (the backend's choice for large outputs).
    f.gather_ms = std::min(gather(gk::RowStores::kCached), gather(gk::RowStores::kStreaming));
  }
  return f;
}

}  // namespace

// cuda: the kernels alone, timed like PyTorch's CUDA baselines: CUDA events around
// Backend::Sample on a backend of its own (its own stream and arena), every input and output
// in device memory, nothing copied to or from the host inside the events; the median of
// `iters` launches after `warmup`, in microseconds. The batch's sizes come from `sizes`
// (BatchBuilder::FillSizes), its rows from `builder`.
double DeviceKernelUs(const Options& o, const gk::BatchBuilder& builder, const gk::Batch& sizes,
                      const void* d_labels, const void* d_features) {
  const int device = 0;
  std::unique_ptr<gk::Backend> backend = gk::MakeCudaBackend(device);
  std::vector<void*> buffers;
  auto alloc = [&](int64_t bytes) {
    buffers.push_back(gk::DeviceAlloc(device, static_cast<size_t>(std::max<int64_t>(bytes, 8))));
    return static_cast<uint8_t*>(buffers.back());
  };
  const std::vector<gk::RowDesc>& rows = builder.rows();
  gk::Batch batch = sizes;
  uint8_t* d_rows = alloc(static_cast<int64_t>(rows.size() * sizeof(gk::RowDesc)));
  gk::CopyToDevice(device, d_rows, rows.data(), rows.size() * sizeof(gk::RowDesc));
  batch.rows = reinterpret_cast<const gk::RowDesc*>(d_rows);
  batch.host_rows = rows.data();
  batch.labels = static_cast<const uint8_t*>(d_labels);
  batch.features = static_cast<const uint8_t*>(d_features);
  batch.out_indices = reinterpret_cast<int64_t*>(alloc(builder.total_slots() * 8));
  batch.out_labels = alloc(builder.out_label_bytes());
  batch.out_features = alloc(builder.out_feature_bytes());
  batch.out_num_positive = reinterpret_cast<int32_t*>(alloc(o.rows * 4));
  batch.out_num_negative = reinterpret_cast<int32_t*>(alloc(o.rows * 4));
  batch.class_tables = nullptr;
  batch.scores = nullptr;
  batch.out_num_per_class = nullptr;
  backend->Reserve(batch.num_rows, batch.total_elements, batch.total_slots);
  std::vector<double> us;
  {
    gk::StreamTimer timer(backend->stream());
    for (int it = 0; it < o.warmup + o.iters; ++it) {
      timer.Start();
      backend->Sample(batch);
      timer.Stop();
      const double ms = timer.ElapsedMs();
      if (it >= o.warmup) us.push_back(ms * 1000.0);
    }
  }
  backend.reset();
  for (void* b : buffers) gk::DeviceFree(b);
  return Percentile(us, 0.5);
}

int main(int argc, char** argv) {
  const Options o = Parse(argc, argv);
  gk::DType dtype;
  if (!gk::ParseDType(o.label_dtype, &dtype) || !gk::IsLabel(dtype)) {
    Usage("--label-dtype must be an integer dtype or bool");
  }
  const size_t item = gk::DTypeSize(dtype);
  const int64_t feature_row_bytes = o.dim * 4;  // float32 features

  gk::SamplingSpec spec;
  spec.num_samples = o.k;
  const int64_t label_values = ClassSpecFor(o, &spec);
  const bool with_scores = o.classes == "weighted-neg" || o.classes == "hardest-neg";
  gk::BatchBuilder builder;
  builder.set_lower_binary(false);
  builder.AddRequest(spec, o.seed, dtype, std::vector<int64_t>(o.rows, o.n), feature_row_bytes,
                     with_scores);

  std::mt19937_64 gen(o.seed);
  Bytes labels(builder.label_bytes() + 1);
  for (int64_t e = 0; e < o.rows * o.n; ++e) {
    const int64_t v = static_cast<int64_t>(gen() % static_cast<uint64_t>(label_values));
    std::memcpy(labels.data() + e * item, &v, item);
  }
  std::vector<float> scores(static_cast<size_t>(builder.total_scores()) + 1);
  for (auto& x : scores) x = static_cast<float>((gen() >> 40) + 1) * 0x1p-24f;
  std::vector<int32_t> num_per_class(static_cast<size_t>(builder.total_class_outputs()) + 1);
  Bytes features(builder.feature_bytes() + 1);
  for (auto& b : features) b = static_cast<uint8_t>(gen());
  std::vector<int64_t> out_idx(builder.total_slots());
  Bytes out_lab(builder.out_label_bytes() + 1);
  Bytes out_feat(builder.out_feature_bytes() + 1);
  std::vector<int32_t> num_pos(o.rows), num_neg(o.rows);

  // cpu: host memory, Sample() runs to completion. cuda and cuda-sim: the server's launch
  // (kernels::StagedLaunch: stream, arena, pinned staging, device buffers, one captured
  // graph, completion) on CUDA device 0 or on the cuda-sim device, over a dataset resident in
  // the device's memory (uploaded once): each timed launch uploads the row table, samples,
  // writes the feature rows and downloads the outputs, as a server step over a resident
  // dataset does.
  std::unique_ptr<gk::Backend> host_backend;
  std::unique_ptr<gk::StagedLaunch> launch;
  struct DeviceBuffer {
    void* ptr = nullptr;
    ~DeviceBuffer() { gk::DeviceFree(ptr); }
  } d_labels, d_features;
  std::vector<int64_t> row_offsets(static_cast<size_t>(o.rows) + 1);
  for (int64_t r = 0; r <= o.rows; ++r) row_offsets[static_cast<size_t>(r)] = r * o.n;
  gk::LaunchRequest request;
  request.spec = spec;
  request.seed = o.seed;
  request.label_dtype = dtype;
  request.num_rows = o.rows;
  request.row_offsets = row_offsets.data();
  request.feature_row_bytes = feature_row_bytes;
  try {
    if (o.backend == "cuda" || o.backend == "cuda-sim") {
      const int device = o.backend == "cuda" ? 0 : gk::kSimDevice;
      launch = std::make_unique<gk::StagedLaunch>(device, std::chrono::milliseconds(600000));
      d_labels.ptr = gk::DeviceAlloc(device, labels.size());
      gk::CopyToDevice(device, d_labels.ptr, labels.data(), labels.size());
      request.device_labels = static_cast<const uint8_t*>(d_labels.ptr);
      if (feature_row_bytes > 0) {
        d_features.ptr = gk::DeviceAlloc(device, features.size());
        gk::CopyToDevice(device, d_features.ptr, features.data(), features.size());
        request.device_features = static_cast<const uint8_t*>(d_features.ptr);
      }
      gk::StagedSizes sizes;
      sizes.rows = o.rows;
      sizes.elements = builder.total_elements();
      sizes.slots = builder.total_slots();
      sizes.feature_bytes = builder.out_feature_bytes();
      launch->Reserve(sizes);
    } else {
      host_backend = gk::MakeCpuBackend(o.threads);
    }
  } catch (const gk::Error& e) {
    std::fprintf(stderr, "gpusampler-bench: %s\n", e.what());
    return 3;
  }
  gk::Backend& backend = launch ? launch->backend() : *host_backend;
  gk::Batch batch;
  builder.FillSizes(&batch);
  batch.labels = labels.data();
  batch.features = features.data();
  batch.out_indices = out_idx.data();
  batch.out_labels = out_lab.data();
  batch.out_features = out_feat.data();
  batch.out_num_positive = num_pos.data();
  batch.out_num_negative = num_neg.data();
  batch.class_tables = builder.class_tables().data();
  batch.scores = scores.data();
  batch.out_num_per_class = num_per_class.data();
  const std::vector<gk::LaunchRequest> requests = {request};

  auto run_once = [&] {
    if (launch) {
      launch->Run(requests);
    } else {
      backend.Sample(batch);
    }
  };
  std::vector<double> ms;
  int64_t captures = 0;  // graphs captured by the timed launches (after warm-up)
  double device_us = -1;
  try {
    for (int w = 0; w < o.warmup; ++w) run_once();
    for (int it = 0; it < o.iters; ++it) {
      const auto t0 = std::chrono::steady_clock::now();
      run_once();
      const auto t1 = std::chrono::steady_clock::now();
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      if (launch && launch->last_stats().graph_captured) ++captures;
    }
    if (o.backend == "cuda" && o.classes == "binary") {
      device_us = DeviceKernelUs(o, builder, batch, d_labels.ptr, d_features.ptr);
    }
  } catch (const gk::Error& e) {
    std::fprintf(stderr, "gpusampler-bench: %s\n", e.what());
    return 4;
  }
  // The counts of the last timed Sample, for backends that keep them (cuda-sim).
  gk::LaunchStats stats;
  const bool has_stats = backend.last_launch_stats(&stats);
  // Stream operations per Sample: what the last timed launch enqueued on the stream (upload,
  // kernels, download, completion; a captured graph counts one), as cuda-sim counts them.
  const int64_t stream_ops = launch ? launch->last_stats().stream_ops : -1;
  char stats_json[512] = "";
  if (has_stats) {
    std::snprintf(
        stats_json, sizeof(stats_json),
        ", \"launches\": %lld, \"bytes_read\": %lld, \"bytes_written\": %lld, "
        "\"feature_bytes\": %lld, \"philox_calls\": %lld, \"label_elements\": %lld, "
        "\"bytes_per_element\": %.6f, \"smem_bytes_per_element\": %.6f, "
        "\"stream_ops\": %lld, \"graph\": %s, "
        "\"upload_bytes\": %lld, \"download_bytes\": %lld",
        static_cast<long long>(stats.launches), static_cast<long long>(stats.bytes_read),
        static_cast<long long>(stats.bytes_written), static_cast<long long>(stats.feature_bytes),
        static_cast<long long>(stats.philox_calls), static_cast<long long>(stats.label_elements),
        stats.bytes_per_element(), stats.smem_bytes_per_element(),
        static_cast<long long>(stream_ops), launch && launch->last_stats().graph ? "true" : "false",
        static_cast<long long>(launch ? launch->last_stats().upload_bytes : 0),
        static_cast<long long>(launch ? launch->last_stats().download_bytes : 0));
  }

  // Device time apart from the copies: device_us (cuda: CUDA events around the kernels with
  // every output left on the device, DeviceKernelUs; null on cuda-sim, whose executor keeps
  // no time estimate, and on cpu), h2d_bytes / d2h_bytes (what the last timed launch copied
  // to and from the device), and graph_captures: graphs captured per 100 timed launches
  // (after warm-up; 0 when every launch replayed its size class's graph).
  char device_json[320] = "";
  if (launch) {
    char device_us_text[32] = "null";
    if (device_us >= 0) std::snprintf(device_us_text, sizeof(device_us_text), "%.3f", device_us);
    std::snprintf(device_json, sizeof(device_json),
                  ", \"device_us\": %s, \"h2d_bytes\": %lld, \"d2h_bytes\": %lld, "
                  "\"graph_captures\": %.3f",
                  device_us_text, static_cast<long long>(launch->last_stats().upload_bytes),
                  static_cast<long long>(launch->last_stats().download_bytes),
                  100.0 * static_cast<double>(captures) / static_cast<double>(o.iters));
  }
  const double median = Percentile(ms, 0.5), p90 = Percentile(ms, 0.9);
  Floor floor;
  char floor_json[256] = "";
  if (o.floor) {
    floor = MeasureFloor(o, labels, item, features, feature_row_bytes);
    std::snprintf(floor_json, sizeof(floor_json),
                  ", \"floor_ms\": %.6f, \"floor_labels_ms\": %.6f, \"floor_keys_ms\": %.6f, "
                  "\"floor_gather_ms\": %.6f, \"x_floor\": %.3f",
                  floor.total(), floor.labels_ms, floor.keys_ms, floor.gather_ms,
                  median / floor.total());
  }
  const char* memory = backend.memory_space() == gk::MemorySpace::kHost ? "host" : "device";
  // cpu: which instruction-set version ran (the backend's and the floor's).
  std::string isa_json;
  if (o.backend == "cpu") {
    std::string why;
    for (const char* c = gk::cpu::IsaChoice(); *c != '\0'; ++c) {
      if (*c == '"' || *c == '\\') why += '\\';
      why += *c;
    }
    isa_json = std::string(", \"isa\": \"") + gk::cpu::KeyIsaName() + "\", \"isa_choice\": \"" +
               why + "\"";
  }
  if (o.json) {
    std::printf(
        "{\"impl\": \"gpusampler\", \"backend\": \"%s\", \"device\": \"%s\", \"rows\": %lld, "
        "\"n\": %lld, \"k\": %lld, \"dim\": %lld, \"label_dtype\": \"%s\", \"threads\": %d, "
        "\"iters\": %d, \"warmup\": %d, \"median_ms\": %.6f, \"p90_ms\": %.6f, "
        "\"min_ms\": %.6f, \"inputs\": \"%s\", \"classes\": \"%s\", "
        "\"timed\": \"sample+feature gather\"%s%s%s%s}\n",
        o.backend.c_str(), backend.name().c_str(), static_cast<long long>(o.rows),
        static_cast<long long>(o.n), static_cast<long long>(o.k), static_cast<long long>(o.dim),
        o.label_dtype.c_str(), o.threads, o.iters, o.warmup, median, p90,
        *std::min_element(ms.begin(), ms.end()), memory, o.classes.c_str(), floor_json, stats_json,
        device_json, isa_json.c_str());
  } else {
    std::printf(
        "%s rows=%lld n=%lld k=%lld dim=%lld %s threads=%d iters=%d: median %.4f ms, "
        "p90 %.4f ms (inputs in %s memory, classes %s)\n",
        backend.name().c_str(), static_cast<long long>(o.rows), static_cast<long long>(o.n),
        static_cast<long long>(o.k), static_cast<long long>(o.dim), o.label_dtype.c_str(),
        o.threads, o.iters, median, p90, memory, o.classes.c_str());
    if (o.backend == "cpu") {
      std::printf("isa %s (%s)\n", gk::cpu::KeyIsaName(), gk::cpu::IsaChoice());
    }
    if (o.floor) {
      std::printf("floor %.4f ms (labels %.4f, keys %.4f, gather %.4f): %.2fx the floor\n",
                  floor.total(), floor.labels_ms, floor.keys_ms, floor.gather_ms,
                  median / floor.total());
    }
    if (launch) {
      std::printf(
          "device %s us (kernels, outputs on the device), %lld bytes h2d, %lld bytes d2h, "
          "%.1f graph captures per 100 launches\n",
          device_us >= 0 ? std::to_string(device_us).c_str() : "n/a",
          static_cast<long long>(launch->last_stats().upload_bytes),
          static_cast<long long>(launch->last_stats().download_bytes),
          100.0 * static_cast<double>(captures) / static_cast<double>(o.iters));
    }
    if (has_stats) {
      std::printf(
          "last launch: %lld launches, %lld bytes read, %lld bytes written, %lld feature bytes, "
          "%lld Philox calls, %.3f bytes per label element, %lld stream operations\n",
          static_cast<long long>(stats.launches), static_cast<long long>(stats.bytes_read),
          static_cast<long long>(stats.bytes_written), static_cast<long long>(stats.feature_bytes),
          static_cast<long long>(stats.philox_calls), stats.bytes_per_element(),
          static_cast<long long>(stream_ops));
    }
  }
  return 0;
}
