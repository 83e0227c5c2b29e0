// Host side of the GPU pipeline: the launch shape from the host copy of the rows, and where
// each scratch array lies in the arena. Shared by the CUDA backend and cuda-sim.
#include <algorithm>

#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels::pipeline {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

int32_t PrepareBlocks(const Shape& shape) {
  const int64_t words = (int64_t{2} * kSelectBins + (int64_t{2} << shape.order_bits)) *
                        shape.num_large * static_cast<int64_t>(sizeof(int32_t)) / 8;
  const int64_t per_block = int64_t{kThreads} * 16;
  return static_cast<int32_t>(std::clamp<int64_t>((words + per_block - 1) / per_block, 1, 1024));
}

}  // namespace

Shape MakeShape(const RowDesc* host_rows, int64_t num_rows, int64_t small_max) {
  Shape shape;
  shape.small_max = small_max;
  shape.num_rows = static_cast<int32_t>(num_rows);
  int64_t max_large_k = 0;
  // The smallest tile (each flushes up to 2 x kSelectBins histogram counters: smaller
  // tiles, more flushes) whose tiles fit in one wave of resident blocks (kResidentBlocks):
  // a single 1e7-element row gets 32Ki tiles (306 blocks, not 611 in 1.2 waves), 32 rows
  // of 1e6 get 64Ki (512 blocks), short large rows 16Ki.
  auto tiles_of = [&](int64_t tile) {
    int64_t tiles = 0;
    for (int64_t j = 0; j < num_rows; ++j) {
      if (host_rows[j].length > small_max) tiles += (host_rows[j].length + tile - 1) / tile;
    }
    return tiles;
  };
  shape.tile_elements = kMinTileElements;
  while (shape.tile_elements < kTileElements && tiles_of(shape.tile_elements) > kResidentBlocks) {
    shape.tile_elements *= 2;
  }
  for (int64_t j = 0; j < num_rows; ++j) {
    const RowDesc& row = host_rows[j];
    if (row.length <= small_max) {
      ++shape.num_small;
      continue;
    }
    ++shape.num_large;
    shape.num_tiles +=
        static_cast<int32_t>((row.length + shape.tile_elements - 1) / shape.tile_elements);
    shape.num_slot_tiles += static_cast<int32_t>((row.num_samples + kSlotTile - 1) / kSlotTile);
    shape.large_elements += row.length;
    shape.large_slots += row.num_samples;
    max_large_k = std::max(max_large_k, row.num_samples);
  }
  shape.order_bits = OrderBucketBits(max_large_k);
  shape.prepare_blocks = PrepareBlocks(shape);
  return shape;
}

Shape BoundShape(int64_t num_rows, int64_t total_elements, int64_t total_slots) {
  Shape shape;
  shape.num_rows = static_cast<int32_t>(num_rows);
  shape.num_large = static_cast<int32_t>(std::min(num_rows, total_elements / (kSmallRowMax + 1)));
  // (a bound for the device, whose small rows are always kSmallRowMax)
  shape.large_elements = total_elements;
  shape.large_slots = total_slots;
  shape.order_bits = OrderBucketBits(total_slots);
  shape.prepare_blocks = PrepareBlocks(shape);
  return shape;
}

Layout MakeLayout(const Shape& shape) {
  Layout layout;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    const size_t begin = at;
    at += AlignUp(bytes);
    return begin;
  };
  const size_t large = static_cast<size_t>(shape.num_large);
  const size_t order_bins = size_t{1} << shape.order_bits;
  layout.error = take(sizeof(uint32_t));
  layout.scratch = at;
  layout.large = take(sizeof(LargeRowState) * (large + 1));
  layout.zero_begin = at;
  layout.hist = take(sizeof(int32_t) * 2 * kSelectBins * large);
  layout.vhist = take(sizeof(int32_t) * order_bins * large);
  layout.vcursor = take(sizeof(int32_t) * order_bins * large);
  layout.zero_end = at;
  layout.cand = take(sizeof(uint64_t) * static_cast<size_t>(shape.large_elements));
  layout.sel = take(sizeof(uint64_t) * static_cast<size_t>(shape.large_slots));
  layout.bucketed = take(sizeof(uint64_t) * static_cast<size_t>(shape.large_slots));
  layout.bytes = at;
  return layout;
}

void Bind(const Shape& shape, const Layout& layout, uint8_t* arena, Params* p) {
  p->num_large = shape.num_large;
  p->num_tiles = shape.num_tiles;
  p->num_slot_tiles = shape.num_slot_tiles;
  p->order_bits = shape.order_bits;
  p->large = reinterpret_cast<LargeRowState*>(arena + layout.large);
  p->hist = reinterpret_cast<int32_t*>(arena + layout.hist);
  p->vhist = reinterpret_cast<int32_t*>(arena + layout.vhist);
  p->vcursor = reinterpret_cast<int32_t*>(arena + layout.vcursor);
  p->cand = reinterpret_cast<uint64_t*>(arena + layout.cand);
  p->sel = reinterpret_cast<uint64_t*>(arena + layout.sel);
  p->bucketed = reinterpret_cast<uint64_t*>(arena + layout.bucketed);
  p->error = reinterpret_cast<uint32_t*>(arena + layout.error);
}

Params ParamsOf(const Batch& batch) {
  Params p;
  p.rows = batch.rows;
  p.labels = batch.labels;
  p.features = batch.features;
  p.out_indices = batch.out_indices;
  p.out_labels = batch.out_labels;
  p.out_features = batch.out_features;
  p.out_num_positive = batch.out_num_positive;
  p.out_num_negative = batch.out_num_negative;
  return p;
}

}  // namespace gpusampler::kernels::pipeline
