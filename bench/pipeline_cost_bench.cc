// gpusampler-pipeline-cost: what the GPU pipeline moves on the full-size cases, as cuda-sim counts
// it (launches, global and shared bytes, Philox calls), printed; the print-only probes that were
// DISABLED_ tests in tests/kernels (docs/decisions.md quotes them). Counts, not times; slow
// (the 1e6 and 1e7 rows run on the host, thread phase by thread phase).
//   gpusampler-pipeline-cost [--full-sizes] [--per-kernel]   (neither: both)
//     --full-sizes   (b) 32 x 1e6 and (c) 1 x 1e7 through the cuda-sim backend, totals
//     --per-kernel   (a), (b), (c) through a logging executor: each kernel's blocks and bytes
#include <cxxabi.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <typeinfo>
#include <vector>

#include "gpusampler/kernels/batch_builder.hpp"
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

void PerKernelCounts() {
  PerKernel("(a) 32 x 1e3, K=100", 32, 1000, 100);
  PerKernel("(b) 32 x 1e6, K=1e5", 32, 1000000, 100000);
  PerKernel("(c) 1 x 1e7, K=1e6", 1, 10000000, 1000000);
}

}  // namespace
}  // namespace gpusampler::kernels::testing

int main(int argc, char** argv) {
  bool full = false, per_kernel = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--full-sizes") {
      full = true;
    } else if (arg == "--per-kernel") {
      per_kernel = true;
    } else {
      std::cerr << "usage: gpusampler-pipeline-cost [--full-sizes] [--per-kernel]\n";
      return 2;
    }
  }
  if (!full && !per_kernel) full = per_kernel = true;
  if (full) gpusampler::kernels::testing::FullSizes();
  if (per_kernel) gpusampler::kernels::testing::PerKernelCounts();
  return 0;
}
