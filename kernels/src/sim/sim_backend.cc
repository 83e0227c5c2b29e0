// The cuda-sim device: CudaBackend's pipeline (pipeline/pipeline.hpp) on the host, with the
// same shape, arena layout and launch sequence, counting what the GPU would move.
#include <memory>
#include <string>
#include <vector>

#include "gpusampler/kernels/sampler.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_backend.hpp"
#include "sim/sim_block.hpp"

namespace gpusampler::kernels {
namespace {

class SimBackend final : public Backend {
 public:
  explicit SimBackend(const CudaSimOptions& options) : options_(options) {}
  std::string name() const override { return "cuda-sim"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  void Sample(const Batch& batch) override {
    stats_ = LaunchStats{};
    stats_.label_elements = batch.total_elements;
    ValidateRows(batch.rows, batch.num_rows);
    if (batch.num_rows == 0) return;
    const pipeline::Shape shape = pipeline::MakeShape(batch.rows, batch.num_rows, options_.small_row_max);
    const pipeline::Layout layout = pipeline::MakeLayout(shape);
    // The arena, uninitialized as cudaMalloc's: filled with a pattern each launch.
    arena_.assign(layout.bytes / 8 + 1, 0xA5A5A5A5A5A5A5A5ull);
    pipeline::Params p;
    p.rows = batch.rows;
    p.labels = batch.labels;
    p.features = batch.features;
    p.out_indices = batch.out_indices;
    p.out_labels = batch.out_labels;
    p.out_features = batch.out_features;
    p.out_num_positive = batch.out_num_positive;
    p.out_num_negative = batch.out_num_negative;
    p.capacity = options_.block_capacity;
    sim::SimExec exec(&stats_);
    pipeline::Enqueue(exec, shape, layout, reinterpret_cast<uint8_t*>(arena_.data()), p);
  }

  bool last_launch_stats(LaunchStats* stats) const override {
    *stats = stats_;
    return true;
  }

 private:
  CudaSimOptions options_;
  std::vector<uint64_t> arena_;
  LaunchStats stats_;
};

}  // namespace

std::unique_ptr<Backend> MakeCudaSimBackend(const CudaSimOptions& options) {
  if (options.block_capacity < 1 || options.block_capacity > pipeline::kBlockKeys) {
    throw Error(Error::Code::kInvalidArgument,
                "cuda-sim: block_capacity " + std::to_string(options.block_capacity) +
                    " outside [1, " + std::to_string(pipeline::kBlockKeys) + "]");
  }
  if (options.small_row_max < 0 || options.small_row_max > pipeline::kSmallRowMax) {
    throw Error(Error::Code::kInvalidArgument,
                "cuda-sim: small_row_max " + std::to_string(options.small_row_max) +
                    " outside [0, " + std::to_string(pipeline::kSmallRowMax) + "]");
  }
  return std::make_unique<SimBackend>(options);
}

std::unique_ptr<Backend> MakeCudaSimBackend() { return MakeCudaSimBackend(CudaSimOptions{}); }

}  // namespace gpusampler::kernels
