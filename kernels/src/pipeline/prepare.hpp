// Stage Prepare: the large rows' tables and zeroed counters. See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// Large-row tables and zeroed counters (`classes`: the class rows', for the class path, with
// their first (row, class) pair; else the large binary rows'). Block 0 writes every LargeRowState
// field that is not written later (bases, tile starts, zeroed cursors); every block zeroes a share
// of the histograms [zero_begin, zero_end) (passed as words), which the states do not overlap.
struct PrepareBody {
  Params p;
  uint64_t* zero = nullptr;
  int64_t zero_words = 0;
  int64_t blocks = 1;
  bool classes = false;
  struct Shared {
    int32_t pairs[kThreads];
    int32_t flag[kThreads];
    int32_t tiles[kThreads];
    int32_t slot_tiles[kThreads];
    int64_t elems[kThreads];
    int64_t slots[kThreads];
    int32_t base_large, base_tiles, base_slot_tiles, base_pairs;
    int64_t base_elems, base_slots;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    b.Threads([&](int t) {
      for (int64_t w = block * kThreads + t; w < zero_words; w += blocks * kThreads) {
        b.Store(zero + w, uint64_t{0});
      }
    });
    if (block != 0) return;
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      if (t == 0) {
        b.SStore(&sh.base_large, 0);
        b.SStore(&sh.base_tiles, 0);
        b.SStore(&sh.base_slot_tiles, 0);
        b.SStore(&sh.base_pairs, 0);
        b.SStore(&sh.base_elems, int64_t{0});
        b.SStore(&sh.base_slots, int64_t{0});
      }
    });
    for (int64_t chunk = 0; chunk < p.num_rows; chunk += kThreads) {
      SizeChunk(b, sh, chunk);
      ScanChunk(b, sh, chunk);
    }
    b.Threads([&](int t) {
      if (t == 0) {
        LargeRowState* end = p.large + b.SLoad(&sh.base_large);
        b.Store(&end->first_tile, b.SLoad(&sh.base_tiles));
        b.Store(&end->first_slot_tile, b.SLoad(&sh.base_slot_tiles));
      }
    });
  }

 private:
  // Per row of the chunk [chunk, chunk + kThreads): whether it is large, and its tiles, slot
  // tiles, elements and slots (0 for a small row), in shared memory.
  template <class B>
  GPUSAMPLER_HD void SizeChunk(B& b, Shared& sh, int64_t chunk) const {
    b.Threads([&](int t) {
      const int64_t j = chunk + t;
      int32_t flag = 0, tiles = 0, slot_tiles = 0, pairs = 0;
      int64_t elems = 0, slots = 0;
      if (j < p.num_rows) {
        const int64_t n = b.Load(&p.rows[j].length);
        const int64_t k = b.Load(&p.rows[j].num_samples);
        const bool class_row = b.Load(&p.rows[j].class_table) >= 0;
        if (classes ? class_row : (n > p.small_max && !class_row)) {
          flag = 1;
          pairs = classes ? b.Load(&p.rows[j].num_classes) : 0;
          tiles = static_cast<int32_t>((n + p.tile_elements - 1) / p.tile_elements);
          slot_tiles = static_cast<int32_t>((k + kSlotTile - 1) / kSlotTile);
          elems = n;
          slots = k;
        }
      }
      b.SStore(&sh.flag[t], flag);
      b.SStore(&sh.pairs[t], pairs);
      b.SStore(&sh.tiles[t], tiles);
      b.SStore(&sh.slot_tiles[t], slot_tiles);
      b.SStore(&sh.elems[t], elems);
      b.SStore(&sh.slots[t], slots);
    });
  }

  // The chunk's large rows get their LargeRowState (bases from the running sums, zeroed
  // cursors), and the running sums move past the chunk.
  template <class B>
  GPUSAMPLER_HD void ScanChunk(B& b, Shared& sh, int64_t chunk) const {
    // A serial scan of the chunk (kThreads rows) by thread 0: rows are few next to
    // elements, and this runs once per launch.
    b.Threads([&](int t) {
      if (t != 0) return;
      int32_t base_large = b.SLoad(&sh.base_large);
      int32_t base_tiles = b.SLoad(&sh.base_tiles);
      int32_t base_slot_tiles = b.SLoad(&sh.base_slot_tiles);
      int32_t base_pairs = b.SLoad(&sh.base_pairs);
      int64_t base_elems = b.SLoad(&sh.base_elems);
      int64_t base_slots = b.SLoad(&sh.base_slots);
      for (int k = 0; k < kThreads; ++k) {
        if (!b.SLoad(&sh.flag[k])) continue;
        const int32_t l = base_large++;
        LargeRowState* st = p.large + l;
        b.Store(&st->row, static_cast<int32_t>(chunk + k));
        b.Store(&st->first_tile, base_tiles);
        b.Store(&st->first_slot_tile, base_slot_tiles);
        b.Store(&st->first_pair, base_pairs);
        b.Store(&st->cand_base, base_elems);
        b.Store(&st->sel_base, base_slots);
        b.Store(&st->cand_cursor[0], 0ull);
        b.Store(&st->cand_cursor[1], 0ull);
        b.Store(&st->sel_cursor, 0ull);
        base_tiles += b.SLoad(&sh.tiles[k]);
        base_slot_tiles += b.SLoad(&sh.slot_tiles[k]);
        base_pairs += b.SLoad(&sh.pairs[k]);
        base_elems += b.SLoad(&sh.elems[k]);
        base_slots += b.SLoad(&sh.slots[k]);
      }
      b.SStore(&sh.base_large, base_large);
      b.SStore(&sh.base_tiles, base_tiles);
      b.SStore(&sh.base_slot_tiles, base_slot_tiles);
      b.SStore(&sh.base_pairs, base_pairs);
      b.SStore(&sh.base_elems, base_elems);
      b.SStore(&sh.base_slots, base_slots);
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
