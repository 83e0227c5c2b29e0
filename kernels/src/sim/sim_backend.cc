// PLACEHOLDER while the pipeline is written: delegates to the CPU backend so callers can be
// wired. Replaced by the real cuda-sim pipeline before any issue is marked resolved.
#include <memory>

#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::kernels {
namespace {
class SimBackend final : public Backend {
 public:
  SimBackend() : cpu_(MakeCpuBackend(1)) {}
  std::string name() const override { return "cuda-sim"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }
  void Sample(const Batch& batch) override {
    cpu_->Sample(batch);
    stats_ = LaunchStats{};
    stats_.label_elements = batch.total_elements;
  }
  bool last_launch_stats(LaunchStats* stats) const override {
    *stats = stats_;
    return true;
  }

 private:
  std::unique_ptr<Backend> cpu_;
  LaunchStats stats_;
};
}  // namespace

std::unique_ptr<Backend> MakeCudaSimBackend() { return std::make_unique<SimBackend>(); }

}  // namespace gpusampler::kernels
