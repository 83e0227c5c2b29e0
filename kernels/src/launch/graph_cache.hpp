// StagedLaunch's CUDA graphs: one captured launch per stage set of the pipeline (fused rows
// only, large rows only, both), created on first use and updated in place by each launch of
// its set, so alternating sets never re-instantiate; the capture's fallback (a device that
// refuses capture samples uncaptured from then on); and the reset before the buffers they
// refer to move. Everything StagedLaunch knows about graphs is here; the capture itself is the
// device seam's (StreamGraph, device.hpp). Not thread-safe: the StagedLaunch's caller owns it.
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels {

class GraphCache {
 public:
  // `name` labels the note on stderr when capture fails.
  explicit GraphCache(std::string name) : name_(std::move(name)) {}

  // Runs `work` (which enqueues on `stream`), captured as the graph of `rows`' stage set when
  // capture is on; returns whether it ran as a graph. Nothing runs for no rows. A capture that
  // fails with Error(kInternal) turns capture off (one note on stderr) and runs `work`
  // uncaptured; other errors propagate. Call it where `work` may run (CudaLauncher::Launch).
  bool Run(void* stream, const std::vector<RowDesc>& rows, const std::function<void()>& work);

  // Destroys every graph and tells `backend` so (Backend::ReleaseGraphs, which lets its
  // scratch move again): call it before the buffers or scratch the graphs captured move.
  void Release(Backend& backend);

  // Capture on (the default) or off.
  void set_enabled(bool on) { enabled_ = on; }

 private:
  // The pipeline's stage set for these rows: bit 1 fused rows, bit 2 large binary rows, plus
  // 4 x the class path's index digits (0 without class rows, else 1-4: its round count).
  static size_t SetOf(const std::vector<RowDesc>& rows);

  std::string name_;
  bool enabled_ = true;
  std::array<std::unique_ptr<StreamGraph>, 20> graphs_;
};

}  // namespace gpusampler::kernels
