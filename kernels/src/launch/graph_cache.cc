#include "launch/graph_cache.hpp"

#include <cstdio>

#include "pipeline/params.hpp"

namespace gpusampler::kernels {

// Launches of one stage set capture the same graph topology.
size_t GraphCache::SetOf(const std::vector<RowDesc>& rows) {
  size_t c = 0;
  for (const RowDesc& row : rows) c |= row.length <= pipeline::kSmallRowMax ? 1 : 2;
  return c;
}

bool GraphCache::Run(void* stream, const std::vector<RowDesc>& rows,
                     const std::function<void()>& work) {
  if (rows.empty()) return false;
  if (enabled_) {
    auto& graph = graphs_[SetOf(rows)];
    if (!graph) graph = std::make_unique<StreamGraph>(stream);
    try {
      graph->Launch(work);
      return true;
    } catch (const Error& e) {
      // Bad input, no memory, a device fault: the same without a graph.
      if (e.code() != Error::Code::kInternal) throw;
      // Capture is an optimization: a device or driver that refuses it still samples.
      std::fprintf(stderr,
                   "gpusampler: %s: CUDA graph capture failed (%s); launching "
                   "without graphs from now on\n",
                   name_.c_str(), e.what());
      enabled_ = false;
      graph->Reset();
    }
  }
  work();
  return false;
}

void GraphCache::Release(Backend& backend) {
  for (auto& graph : graphs_) {
    if (graph) graph->Reset();
  }
  backend.ReleaseGraphs();
}

}  // namespace gpusampler::kernels
