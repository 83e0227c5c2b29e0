// gpusampler-pipeline-cost: what the GPU pipeline moves on the full-size cases, as cuda-sim counts
// it (launches, global and shared bytes, Philox calls), printed; the print-only probes that were
// DISABLED_ tests in tests/kernels (docs/decisions.md quotes them). Counts, not times; slow
// (the 1e6 and 1e7 rows run on the host, thread phase by thread phase).
//   gpusampler-pipeline-cost [--full-sizes] [--per-kernel]   (neither: both)
//     --full-sizes   (b) 32 x 1e6 and (c) 1 x 1e7 through the cuda-sim backend, totals
//     --per-kernel   (a), (b), (c) through a logging executor: each kernel's blocks and bytes
//     --classes      (d) 32 x 1e6, K=1e5 with classes (positives UNIFORM, negatives WEIGHTED)
//                    against the same rows binary (uniform): totals, per kernel, and the
//                    StagedLaunch stream operations on the cuda-sim device (not in the default)
#include <cxxabi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include <chrono>
#include <random>

#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/classes.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/staged_launch.hpp"
#include "gpusampler/kernels/types.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_block.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

// Per kernel counts (docs/decisions.md): the pipeline run straight through a logging
// executor over host buffers. Features are left out (their bytes are K rows per row, the
// same in every design; the docs add them).
struct LoggingExec {
  LaunchStats* stats;
  sim::SimExec exec;
  explicit LoggingExec(LaunchStats* s) : stats(s), exec(s) {}
  void Scratch(uint8_t* begin, size_t bytes) { exec.Scratch(begin, bytes); }
  template <class Body>
  void Launch(const Body& body, int64_t blocks) {
    const LaunchStats before = *stats;
    exec.Launch(body, blocks);
    int status = 0;
    char* name = abi::__cxa_demangle(typeid(Body).name(), nullptr, nullptr, &status);
    std::string kernel = name != nullptr ? name : typeid(Body).name();
    std::free(name);
    const size_t colon = kernel.rfind("::");
    if (colon != std::string::npos) kernel = kernel.substr(colon + 2);
    std::cout << "  " << kernel << ": blocks " << blocks << ", global bytes "
              << (stats->bytes_read + stats->bytes_written - before.bytes_read -
                  before.bytes_written)
              << ", smem bytes " << stats->smem_bytes - before.smem_bytes << ", philox "
              << stats->philox_calls - before.philox_calls << "\n";
  }
};

void PerKernel(const std::string& name, int64_t rows, int64_t n, int64_t k) {
  HostBatch host(rows, n, k, 99);
  const Batch& batch = host.batch;
  const pipeline::Shape shape = pipeline::MakeShape(batch.rows, rows);
  const pipeline::Layout layout = pipeline::MakeLayout(shape);
  std::unique_ptr<uint64_t[]> arena(new uint64_t[layout.bytes / 8 + 1]);
  LaunchStats stats;
  stats.label_elements = rows * n;
  std::cout << name << "\n";
  LoggingExec exec(&stats);
  pipeline::Enqueue(exec, shape, layout, reinterpret_cast<uint8_t*>(arena.get()),
                    pipeline::ParamsOf(batch));
  PrintStats("  total", stats);
}

void FullSizes() {
  {
    const Case c = BalancedCase(32, 1000000, 100000, 0, 31);
    (void)RunOne("cudasim", c);
    PrintStats("(b) 32 x 1e6, K=1e5 (features counted apart)", LastStats("cudasim"));
  }
  {
    const Case c = BalancedCase(1, 10000000, 1000000, 0, 37);
    (void)RunOne("cudasim", c);
    PrintStats("(c) 1 x 1e7, K=1e6, D=0", LastStats("cudasim"));
  }
}

// (d): classes [positives {1}: fraction 0.5, UNIFORM; negatives {0}: rest, WEIGHTED], fill
// order [1, 0] (section 1's BOTH with weighted negatives), scores in (0, 1].
SamplingSpec WeightedNegatives(int64_t k) {
  SamplingSpec spec;
  spec.num_samples = k;
  spec.classes.resize(2);
  spec.classes[0].labels = {{1, 1}};
  spec.classes[0].share = Share::kFraction;
  spec.classes[0].fraction = 0.5;
  spec.classes[1].labels = {{0, 0}};
  spec.classes[1].share = Share::kRest;
  spec.classes[1].selection = Selection::kWeighted;
  spec.fill_order = {1, 0};
  return spec;
}

void ClassesPerKernel(int64_t rows, int64_t n, int64_t k, const std::vector<int64_t>& labels,
                      const std::vector<float>& scores) {
  BatchBuilder builder;
  builder.AddRequest(WeightedNegatives(k), 99, DType::kInt64,
                     std::vector<int64_t>(static_cast<size_t>(rows), n), 0, true);
  Batch batch;
  builder.FillSizes(&batch);
  std::vector<int64_t> out(static_cast<size_t>(builder.total_slots()));
  std::vector<uint8_t> out_labels(static_cast<size_t>(builder.out_label_bytes()) + 8);
  std::vector<int32_t> pos(rows), neg(rows), per_class(builder.total_class_outputs());
  batch.labels = reinterpret_cast<const uint8_t*>(labels.data());
  batch.scores = scores.data();
  batch.class_tables = builder.class_tables().data();
  batch.out_indices = out.data();
  batch.out_labels = out_labels.data();
  batch.out_num_positive = pos.data();
  batch.out_num_negative = neg.data();
  batch.out_num_per_class = per_class.data();
  const pipeline::Shape shape = pipeline::MakeShape(batch.rows, rows);
  const pipeline::Layout layout = pipeline::MakeLayout(shape);
  std::unique_ptr<uint64_t[]> arena(new uint64_t[layout.bytes / 8 + 1]);
  LaunchStats stats;
  stats.label_elements = rows * n;
  std::cout << "(d) per kernel, WEIGHTED negatives\n";
  LoggingExec exec(&stats);
  pipeline::Enqueue(exec, shape, layout, reinterpret_cast<uint8_t*>(arena.get()),
                    pipeline::ParamsOf(batch));
  PrintStats("  total", stats);
}

void ClassesCounts() {
  const int64_t rows = 32, n = 1000000, k = 100000;
  const Case c = BalancedCase(rows, n, k, 0, 31);
  std::vector<int64_t> labels;
  std::vector<int64_t> offsets = {0};
  for (const auto& row : c.rows) {
    labels.insert(labels.end(), row.begin(), row.end());
    offsets.push_back(static_cast<int64_t>(labels.size()));
  }
  std::mt19937 gen(5);
  std::vector<float> scores(labels.size());
  for (float& s : scores) s = static_cast<float>(gen() % 1000000 + 1) * 1e-6f;
  StagedLaunch launch(kSimDevice, std::chrono::milliseconds(3600000));
  for (const bool classes : {false, true}) {
    LaunchRequest q;
    q.spec = classes ? WeightedNegatives(k) : c.spec;
    q.seed = c.seed;
    q.num_rows = rows;
    q.row_offsets = offsets.data();
    q.labels = reinterpret_cast<const uint8_t*>(labels.data());
    q.scores = classes ? scores.data() : nullptr;
    (void)launch.Run({q});
    LaunchStats stats;
    launch.backend().last_launch_stats(&stats);
    PrintStats(classes ? "(d) 32 x 1e6, K=1e5, classes: UNIFORM positives, WEIGHTED negatives"
                       : "(d) 32 x 1e6, K=1e5, binary (uniform)",
               stats);
    std::cout << "  stream_ops " << launch.last_stats().stream_ops << ", graph "
              << launch.last_stats().graph << ", upload_bytes " << launch.last_stats().upload_bytes
              << ", download_bytes " << launch.last_stats().download_bytes << "\n";
  }
  std::vector<float> all_scores = scores;
  ClassesPerKernel(rows, n, k, labels, all_scores);
}

void PerKernelCounts() {
  PerKernel("(a) 32 x 1e3, K=100", 32, 1000, 100);
  PerKernel("(b) 32 x 1e6, K=1e5", 32, 1000000, 100000);
  PerKernel("(c) 1 x 1e7, K=1e6", 1, 10000000, 1000000);
}

}  // namespace
}  // namespace gpusampler::kernels::testing

int main(int argc, char** argv) {
  bool full = false, per_kernel = false, classes = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--full-sizes") {
      full = true;
    } else if (arg == "--per-kernel") {
      per_kernel = true;
    } else if (arg == "--classes") {
      classes = true;
    } else {
      std::cerr << "usage: gpusampler-pipeline-cost [--full-sizes] [--per-kernel] [--classes]\n";
      return 2;
    }
  }
  if (!full && !per_kernel && !classes) full = per_kernel = true;
  if (classes) gpusampler::kernels::testing::ClassesCounts();
  if (full) gpusampler::kernels::testing::FullSizes();
  if (per_kernel) gpusampler::kernels::testing::PerKernelCounts();
  return 0;
}
