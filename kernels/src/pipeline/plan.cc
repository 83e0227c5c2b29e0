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

// The class path's derived sizes: v buckets, index digits, Prepare's blocks.
void SetClassBounds(int64_t max_k, int64_t max_length, Shape* shape) {
  shape->class_order_bits = OrderBucketBits(max_k);
  shape->class_index_digits = (IndexBits(max_length) + 7) / 8;
  const int64_t words =
      (static_cast<int64_t>(sizeof(ClassPairState) + 256 * sizeof(int32_t)) * shape->class_pairs +
       (int64_t{2} << shape->class_order_bits) * shape->num_class_rows *
           static_cast<int64_t>(sizeof(int32_t))) /
      8;
  const int64_t per_block = int64_t{kThreads} * 16;
  shape->class_prepare_blocks =
      static_cast<int32_t>(std::clamp<int64_t>((words + per_block - 1) / per_block, 1, 1024));
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
      if (host_rows[j].length > small_max && host_rows[j].class_table < 0)
        tiles += (host_rows[j].length + tile - 1) / tile;
    }
    return tiles;
  };
  shape.tile_elements = kMinTileElements;
  while (shape.tile_elements < kTileElements && tiles_of(shape.tile_elements) > kResidentBlocks) {
    shape.tile_elements *= 2;
  }
  int64_t max_class_k = 0, max_class_length = 0;
  for (int64_t j = 0; j < num_rows; ++j) {
    const RowDesc& row = host_rows[j];
    if (row.class_table >= 0) {
      ++shape.num_class_rows;
      shape.class_tiles += static_cast<int32_t>((row.length + kClassTile - 1) / kClassTile);
      shape.class_slot_tiles += static_cast<int32_t>((row.num_samples + kSlotTile - 1) / kSlotTile);
      shape.class_elements += row.length;
      shape.class_slots += row.num_samples;
      shape.class_pairs += row.num_classes;
      max_class_k = std::max(max_class_k, row.num_samples);
      max_class_length = std::max(max_class_length, row.length);
      continue;
    }
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
  SetClassBounds(max_class_k, max_class_length, &shape);
  return shape;
}

Shape BoundShape(int64_t num_rows, int64_t total_elements, int64_t total_slots,
                 int64_t total_class_pairs) {
  Shape shape;
  shape.num_rows = static_cast<int32_t>(num_rows);
  shape.num_large = static_cast<int32_t>(std::min(num_rows, total_elements / (kSmallRowMax + 1)));
  // (a bound for the device, whose small rows are always kSmallRowMax)
  shape.large_elements = total_elements;
  shape.large_slots = total_slots;
  shape.order_bits = OrderBucketBits(total_slots);
  shape.prepare_blocks = PrepareBlocks(shape);
  shape.num_class_rows = static_cast<int32_t>(num_rows);
  shape.class_tiles =
      static_cast<int32_t>(std::min<int64_t>(INT32_MAX, total_elements / kClassTile + num_rows));
  shape.class_slot_tiles =
      static_cast<int32_t>(std::min<int64_t>(INT32_MAX, total_slots / kSlotTile + num_rows));
  shape.class_elements = total_elements;
  shape.class_slots = total_slots;
  shape.class_pairs = total_class_pairs >= 0 ? total_class_pairs : num_rows * kMaxClasses;
  SetClassBounds(total_slots, std::min<int64_t>(total_elements, INT32_MAX), &shape);
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
  const size_t large_end = at;
  at = layout.scratch;  // the class path's arrays alias those above (see Layout)
  const size_t class_rows = static_cast<size_t>(shape.num_class_rows);
  const size_t class_bins = size_t{1} << shape.class_order_bits;
  const size_t pairs = static_cast<size_t>(shape.class_pairs);
  const size_t class_elements = static_cast<size_t>(shape.class_elements);
  layout.class_large = take(sizeof(LargeRowState) * (class_rows + 1));
  layout.class_zero_begin = at;
  layout.class_pairs = take(sizeof(ClassPairState) * pairs);
  layout.class_hist = take(sizeof(int32_t) * 256 * pairs);
  layout.class_vhist = take(sizeof(int32_t) * class_bins * class_rows);
  layout.class_vcursor = take(sizeof(int32_t) * class_bins * class_rows);
  layout.class_zero_end = at;
  layout.class_keys = take(sizeof(uint64_t) * class_elements);
  layout.class_codes = take(sizeof(uint16_t) * class_elements);
  layout.class_sel = take(sizeof(uint64_t) * static_cast<size_t>(shape.class_slots));
  layout.class_bucketed = take(sizeof(uint64_t) * static_cast<size_t>(shape.class_slots));
  layout.bytes = std::max(large_end, at);
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

void BindClasses(const Shape& shape, const Layout& layout, uint8_t* arena, Params* p) {
  p->num_large = shape.num_class_rows;
  p->num_tiles = shape.class_tiles;
  p->num_slot_tiles = shape.class_slot_tiles;
  p->order_bits = shape.class_order_bits;
  p->tile_elements = kClassTile;
  p->large = reinterpret_cast<LargeRowState*>(arena + layout.class_large);
  p->pairs = reinterpret_cast<ClassPairState*>(arena + layout.class_pairs);
  p->class_hist = reinterpret_cast<int32_t*>(arena + layout.class_hist);
  p->vhist = reinterpret_cast<int32_t*>(arena + layout.class_vhist);
  p->vcursor = reinterpret_cast<int32_t*>(arena + layout.class_vcursor);
  p->class_keys = reinterpret_cast<uint64_t*>(arena + layout.class_keys);
  p->class_codes = reinterpret_cast<uint16_t*>(arena + layout.class_codes);
  p->sel = reinterpret_cast<uint64_t*>(arena + layout.class_sel);
  p->bucketed = reinterpret_cast<uint64_t*>(arena + layout.class_bucketed);
  p->hist = nullptr;
  p->cand = nullptr;
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
  p.class_tables = batch.class_tables;
  p.scores = batch.scores;
  p.out_num_per_class = batch.out_num_per_class;
  return p;
}

}  // namespace gpusampler::kernels::pipeline
