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

GraphCache::Ran GraphCache::Run(void* stream, const std::vector<RowDesc>& rows,
                                const std::string& key, const std::function<bool()>& work) {
  Ran ran;
  if (rows.empty()) return ran;
  if (enabled_) {
    const size_t set = SetOf(rows);
    auto& graph = graphs_[set];
    if (!graph) graph = std::make_unique<StreamGraph>(stream);
    try {
      if (!key.empty() && graph->instantiated() && keys_[set] == key) {
        graph->Replay();
      } else {
        keys_[set].clear();  // (a capture that throws leaves no key)
        bool replayable = false;
        graph->Launch([&] { replayable = work(); });
        keys_[set] = replayable ? key : std::string();
        ran.captured = true;
      }
      ran.graph = true;
      return ran;
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
      keys_[set].clear();
    }
  }
  work();
  return ran;
}

void GraphCache::Release(Backend& backend) {
  for (auto& graph : graphs_) {
    if (graph) graph->Reset();
  }
  for (auto& key : keys_) key.clear();
  backend.ReleaseGraphs();
}

}  // namespace gpusampler::kernels
