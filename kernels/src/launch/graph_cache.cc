#include "launch/graph_cache.hpp"

#include <algorithm>
#include <cstdio>

#include "pipeline/params.hpp"

namespace gpusampler::kernels {

// Launches of one stage set capture the same graph topology.
size_t GraphCache::SetOf(const std::vector<RowDesc>& rows) {
  // (class rows: the class path, whose round count follows the longest class row's index
  // digits)
  size_t c = 0;
  int64_t class_length = -1;
  for (const RowDesc& row : rows) {
    if (row.class_table >= 0) {
      class_length = std::max(class_length, row.length);
    } else {
      c |= row.length <= pipeline::kSmallRowMax ? 1 : 2;
    }
  }
  if (class_length >= 0) {
    c += 4 * static_cast<size_t>((pipeline::IndexBits(class_length) + 7) / 8);
  }
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
