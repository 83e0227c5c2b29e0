// The cuda-sim backend: CudaBackend's pipeline (pipeline/pipeline.hpp) on the host, with the
// same shape, arena layout and launch sequence, counting what the GPU would move. Two modes:
//   - MakeCudaSimBackend(): host memory like the CPU backend; Sample() runs to completion.
//   - MakeCudaBackend(kSimDevice) (sim::MakeStreamBackend): "device" memory of the sim
//     device; Sample() enqueues the launch on the backend's SimStream and returns at once,
//     like CudaBackend, so launchers and workers written for CUDA run on it unchanged.
#include <algorithm>
#include <climits>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/arena_policy.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "pipeline/pipeline.hpp"
#include "sim/sim_backend.hpp"
#include "sim/sim_block.hpp"
#include "sim/sim_device.hpp"

namespace gpusampler::kernels {
namespace {

pipeline::Params ParamsOf(const Batch& batch, const CudaSimOptions& options) {
  pipeline::Params p = pipeline::ParamsOf(batch);
  p.capacity = options.block_capacity;
  return p;
}

class SimBackend final : public Backend {
 public:
  SimBackend(const CudaSimOptions& options, bool own_stream) : options_(options) {
    if (own_stream) stream_ = std::make_unique<sim::SimStream>();
  }
  ~SimBackend() override { stream_.reset(); }  // drains the queued launches first

  std::string name() const override { return "cuda-sim"; }
  MemorySpace memory_space() const override {
    return stream_ ? MemorySpace::kDevice : MemorySpace::kHost;
  }
  void* stream() const override { return stream_.get(); }

  void Sample(const Batch& batch) override {
    if (!stream_) {
      SampleNow(batch);
      return;
    }
    if (batch.num_rows < 0 || batch.num_rows > INT_MAX / 2) {
      throw Error(Error::Code::kInvalidArgument,
                  "cuda-sim: num_rows " + std::to_string(batch.num_rows) + " out of range");
    }
    if (batch.num_rows == 0) return;
    // As CudaBackend: the shape comes from the host copy of the rows; the kernels read the
    // device copy when they run.
    if (batch.host_rows == nullptr) {
      throw Error(Error::Code::kInvalidArgument,
                  "cuda-sim: Batch::host_rows is required (the launch shape is planned on the "
                  "host)");
    }
    ValidateRows(batch.host_rows, batch.num_rows);
    const pipeline::Shape shape =
        pipeline::MakeShape(batch.host_rows, batch.num_rows, options_.small_row_max);
    const pipeline::Layout layout = pipeline::MakeLayout(shape);
    GrowArena(layout.bytes);
    const pipeline::Params p = ParamsOf(batch, options_);
    const int64_t elements = batch.total_elements;
    uint8_t* arena = reinterpret_cast<uint8_t*>(arena_.get());
    stream_->Enqueue([this, shape, layout, p, elements, arena] {
      LaunchStats stats;
      stats.label_elements = elements;
      std::fill(arena, arena + layout.bytes, uint8_t{0xA5});
      sim::SimExec exec(&stats);
      pipeline::Enqueue(exec, shape, layout, arena, p);
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = stats;
    });
  }

  bool SampleSmallClass(const Batch& batch, int32_t class_rows, const void* sizes) override {
    // (tests that lower small_row_max take Sample: the class is the device's)
    if (!stream_ || options_.small_row_max != pipeline::kSmallRowMax || batch.num_rows <= 0 ||
        batch.num_rows > INT_MAX / 2 || class_rows < batch.num_rows || sizes == nullptr ||
        batch.host_rows == nullptr) {
      return false;
    }
    ValidateRows(batch.host_rows, batch.num_rows);
    if (!AllSmallBinaryRows(batch.host_rows, batch.num_rows, pipeline::kSmallRowMax)) {
      return false;
    }
    pipeline::Params p = ParamsOf(batch, options_);
    p.sizes = static_cast<const pipeline::LaunchSizes*>(sizes);
    const int64_t elements = batch.total_elements;
    stream_->Enqueue([this, p, class_rows, elements] {
      LaunchStats stats;
      stats.label_elements = elements;
      sim::SimExec exec(&stats);
      pipeline::EnqueueSmallClass(exec, class_rows, p);
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = stats;
    });
    return true;
  }

  void Reserve(int64_t num_rows, int64_t total_elements, int64_t total_slots,
               int64_t total_class_pairs = 0) override {
    if (!stream_ || num_rows <= 0) return;
    GrowArena(pipeline::MakeLayout(
                  pipeline::BoundShape(num_rows, total_elements, total_slots, total_class_pairs))
                  .bytes);
  }

  void ReleaseGraphs() override { policy_.ReleaseGraphs(); }

  bool last_launch_stats(LaunchStats* stats) const override {
    std::lock_guard<std::mutex> lock(mu_);
    *stats = stats_;
    return true;
  }

 private:
  void SampleNow(const Batch& batch) {
    LaunchStats stats;
    stats.label_elements = batch.total_elements;
    ValidateRows(batch.rows, batch.num_rows);
    if (batch.num_rows > 0) {
      const pipeline::Shape shape =
          pipeline::MakeShape(batch.rows, batch.num_rows, options_.small_row_max);
      const pipeline::Layout layout = pipeline::MakeLayout(shape);
      GrowArena(layout.bytes);
      uint8_t* arena = reinterpret_cast<uint8_t*>(arena_.get());
      std::fill(arena, arena + layout.bytes, uint8_t{0xA5});
      sim::SimExec exec(&stats);
      pipeline::Enqueue(exec, shape, layout, arena, ParamsOf(batch, options_));
    }
    std::lock_guard<std::mutex> lock(mu_);
    stats_ = stats;
  }

  // The arena moves only between launches (in stream mode queued ones finish first, as the
  // CUDA backend's stream-ordered free waits). Allocated uninitialized, like cudaMalloc's
  // (untouched pages cost nothing); each launch fills what it uses with a pattern. In stream
  // mode growth follows CudaBackend's rule (arena_policy.hpp): refused under capture, and
  // refused while a captured graph may still refer to the arena.
  void GrowArena(size_t bytes) {
    if (stream_) {
      detail::Capacity have, need;
      have.temp_bytes = static_cast<int64_t>(arena_bytes_);
      need.temp_bytes = static_cast<int64_t>(bytes);
      std::string why;
      switch (policy_.Check(have, need, stream_->capturing(), &why)) {
        case detail::ArenaPolicy::Decision::kFits:
          return;
        case detail::ArenaPolicy::Decision::kRefused:
          throw Error(Error::Code::kInvalidArgument, "cuda-sim: " + why);
        case detail::ArenaPolicy::Decision::kGrow:
          break;
      }
    }
    if (bytes <= arena_bytes_) return;
    if (stream_) stream_->Synchronize();
    arena_bytes_ = static_cast<size_t>(
        detail::GrowArenaBytes(static_cast<int64_t>(arena_bytes_), static_cast<int64_t>(bytes)));
    arena_.reset(new uint64_t[arena_bytes_ / 8 + 1]);
  }

  CudaSimOptions options_;
  std::unique_ptr<sim::SimStream> stream_;
  std::unique_ptr<uint64_t[]> arena_;
  size_t arena_bytes_ = 0;
  detail::ArenaPolicy policy_;
  mutable std::mutex mu_;
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
  return std::make_unique<SimBackend>(options, /*own_stream=*/false);
}

std::unique_ptr<Backend> MakeCudaSimBackend() { return MakeCudaSimBackend(CudaSimOptions{}); }

std::unique_ptr<Backend> sim::MakeStreamBackend() {
  return std::make_unique<SimBackend>(CudaSimOptions{}, /*own_stream=*/true);
}

}  // namespace gpusampler::kernels
