// StagedLaunch's CUDA graphs: one captured launch per stage set of the pipeline (fused rows
// only, large rows only, both), created on first use and updated in place by each launch of
// its set, so alternating sets never re-instantiate; replayed without capture while the
// launch's key (its size class, buffers and copy sizes) stays the same; the capture's fallback (a
// device that refuses capture samples uncaptured from then on); and the reset before the buffers
// they refer to move. Everything StagedLaunch knows about graphs is here; the capture itself is the
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

  struct Ran {
    bool graph = false;     // the work ran as a graph (captured now or replayed)
    bool captured = false;  // ... captured by this call (false: replayed, or no graph)
  };
  // Runs `work` (which enqueues on `stream`), captured as the graph of `rows`' stage set when
  // capture is on. `key` names everything the captured operations depend on (kernel
  // arguments and grids, copy addresses and sizes): when the set's graph was last captured
  // under the same non-empty key, it is replayed without running `work` (captured once per
  // key); an empty key always captures. `work` returns whether its capture may be replayed
  // under `key` (false: it took a path that the key does not describe). Nothing runs for no
  // rows. A capture that fails with Error(kInternal) turns capture off (one note on stderr)
  // and runs `work` uncaptured; other errors propagate. Call it where `work` may run
  // (CudaLauncher::Launch).
  Ran Run(void* stream, const std::vector<RowDesc>& rows, const std::string& key,
          const std::function<bool()>& work);

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
  std::array<std::string, 20> keys_;  // the key each graph was last captured under
};

}  // namespace gpusampler::kernels
