// Stages ClassHist, ClassPick and ClassCollect of the class path: the radix-select rounds over
// the members' 96-bit (key, i), and the selected elements' order keys. See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/classes_common.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// The pairs' prefixes of a tile's row into shared memory (`open`: whether a pair's select
// is open, else its mode).
template <class B>
GPUSAMPLER_HD void LoadPrefixes(B& b, const Params& p, const ClassTile& tile, bool open,
                                ClassPrefix* out) {
  b.Threads([&](int t) {
    for (int32_t c = t; c < tile.row.num_classes; c += kThreads) {
      const ClassPairState* pair = p.pairs + tile.first_pair + c;
      ClassPrefix x;
      x.pk = b.Load(&pair->pk);
      x.pi = b.Load(&pair->pi);
      x.lo = b.Load(&pair->lo);
      const int32_t mode = b.Load(&pair->mode);
      x.active = open ? (mode != 0 && b.Load(&pair->cand) > b.Load(&pair->need) ? 1 : 0) : mode;
      x.selection = b.Load(&pair->selection);
      b.SStore(out + c, x);
    }
  });
}

// One block per class tile, round `hi` (the digit is bits [hi - 8, hi) of (key, i)): the
// histogram of the digit over the members of open pairs that agree with the prefix above hi.
// Classes below kSharedClasses count in shared memory, the others in global atomics. A tile
// whose row has no open pair exits at once.
struct ClassHistBody {
  Params p;
  int32_t hi = 96;
  struct Shared {
    ClassTile tile;
    ClassPrefix prefix[kMaxClasses];
    int32_t hist[kSharedClasses][256];
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      if (t == 0) b.SStore(&sh.tile, LoadClassTile(b, p, block, true));
    });
    const ClassTile tile = b.SLoad(&sh.tile);
    if (tile.open == 0) return;
    const int shared_classes =
        tile.row.num_classes < kSharedClasses ? tile.row.num_classes : kSharedClasses;
    LoadPrefixes(b, p, tile, true, sh.prefix);
    b.Threads([&](int t) {
      for (int c = 0; c < shared_classes; ++c) b.SStore(&sh.hist[c][t], 0);
    });
    const int lo = hi - 8;
    b.Threads([&](int t) {
      for (int64_t i = tile.begin + t; i < tile.end; i += kThreads) {
        const uint16_t code = b.Load(p.class_codes + tile.base + i);
        if (code == kNoClass) continue;
        const ClassPrefix x = b.SLoad(&sh.prefix[code]);
        if (x.active == 0) continue;
        const uint64_t k = b.Load(p.class_keys + tile.base + i);
        const uint32_t ii = static_cast<uint32_t>(i);
        if (!AgreeAbove(k, ii, x.pk, x.pi, hi)) continue;
        const int d = DigitAt(k, ii, lo);
        if (code < kSharedClasses) {
          b.SharedAdd(&sh.hist[code][d], 1);
        } else {
          b.GlobalAdd(p.class_hist + (int64_t{tile.first_pair} + code) * 256 + d, 1);
        }
      }
    });
    b.Threads([&](int t) {
      for (int c = 0; c < shared_classes; ++c) {
        const int32_t h = b.SLoad(&sh.hist[c][t]);
        if (h != 0) b.GlobalAdd(p.class_hist + (int64_t{tile.first_pair} + c) * 256 + t, h);
      }
    });
  }
};

// One block per class row, round `hi`: each open pair (a thread per class) finds the digit
// where its running count reaches `need`, fixes it in the prefix, and zeroes its histogram
// for the next round; the row's open count for the next round.
struct ClassPickBody {
  Params p;
  int32_t hi = 96;
  struct Shared {
    int32_t first_pair, num_classes, open, prev_open;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    LargeRowState* st = p.large + block;
    b.Threads([&](int t) {
      if (t == 0) {
        b.SStore(&sh.first_pair, b.Load(&st->first_pair));
        b.SStore(&sh.num_classes, b.Load(&p.rows[b.Load(&st->row)].num_classes));
        b.SStore(&sh.prev_open, b.Load(&st->open));
        b.SStore(&sh.open, 0);
      }
    });
    if (b.SLoad(&sh.prev_open) == 0) return;
    const int32_t first_pair = b.SLoad(&sh.first_pair);
    const int32_t num_classes = b.SLoad(&sh.num_classes);
    const int lo = hi - 8;
    b.Threads([&](int t) {
      for (int32_t c = t; c < num_classes; c += kThreads) {
        ClassPairState* pair = p.pairs + first_pair + c;
        const int64_t need = b.Load(&pair->need);
        const int64_t cand = b.Load(&pair->cand);
        if (b.Load(&pair->mode) == 0 || cand <= need) continue;
        int32_t* hist = p.class_hist + (int64_t{first_pair} + c) * 256;
        int64_t below = 0;
        int digit = -1;
        int64_t at_digit = 0;
        for (int d = 0; d < 256; ++d) {
          const int32_t h = b.Load(hist + d);
          if (h != 0) b.Store(hist + d, 0);
          if (digit < 0) {
            if (below + h >= need) {
              digit = d;
              at_digit = h;
            } else {
              below += h;
            }
          }
        }
        if (digit < 0) {  // (the counts do not add up: never expected)
          b.Fail(p.error, kErrorBoundary, "class select: digit not found");
          b.Store(&pair->mode, 0);
          continue;
        }
        const uint64_t d = static_cast<uint64_t>(digit);
        if (lo >= 32) {
          b.Store(&pair->pk, b.Load(&pair->pk) | (d << (lo - 32)));
        } else {
          b.Store(&pair->pi, b.Load(&pair->pi) | static_cast<uint32_t>(d << lo));
        }
        b.Store(&pair->lo, lo);
        b.Store(&pair->need, need - below);
        b.Store(&pair->cand, at_digit);
        if (at_digit > need - below) b.SharedAdd(&sh.open, 1);
      }
    });
    b.Threads([&](int t) {
      if (t == 0) b.Store(&st->open, b.SLoad(&sh.open));
    });
  }
};

// One block per class tile, after phase `phase`'s rounds: the members its selects took get
// v and go to the row's `sel` (v << 32 | i, at a cursor) and the v histogram. After phase 0
// (when phase 1 follows) the members left for phase 1 are rewritten: a MIXED member not
// taken keeps its class with key u << 32 | i (u: its hardest key's low half); every other
// element leaves the class path (kNoClass).
struct ClassCollectBody {
  Params p;
  int32_t phase = 0;
  bool next_phase = true;
  struct Shared {
    ClassTile tile;
    unsigned long long* cursor;
    int64_t sel_base;
    ClassPrefix prefix[kMaxClasses];
    int32_t vhist[kMaxOrderBins];
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int bins = 1 << p.order_bits;
    b.Threads([&](int t) {
      if (t == 0) {
        const ClassTile tile = LoadClassTile(b, p, block, false);
        b.SStore(&sh.tile, tile);
        b.SStore(&sh.cursor, &p.large[tile.l].sel_cursor);
        b.SStore(&sh.sel_base, b.Load(&p.large[tile.l].sel_base));
      }
      for (int bin = t; bin < bins; bin += kThreads) b.SStore(&sh.vhist[bin], 0);
    });
    const ClassTile tile = b.SLoad(&sh.tile);
    unsigned long long* cursor = b.SLoad(&sh.cursor);
    const int64_t sel_base = b.SLoad(&sh.sel_base);
    LoadPrefixes(b, p, tile, false, sh.prefix);
    b.Threads([&](int t) {
      for (int64_t i = tile.begin + t; i < tile.end; i += kThreads) {
        const uint16_t code = b.Load(p.class_codes + tile.base + i);
        if (code == kNoClass) continue;
        const ClassPrefix x = b.SLoad(&sh.prefix[code]);
        const uint64_t k = b.Load(p.class_keys + tile.base + i);
        const uint32_t ii = static_cast<uint32_t>(i);
        const bool taken = x.active != 0 && AtOrBelow(k, ii, x.pk, x.pi, x.lo);
        if (taken) {
          const uint32_t v = OrderKeyOf(tile.row, i);
          b.CountPhilox(1);
          const unsigned long long at = b.GlobalAdd(cursor, 1ull);
          if (static_cast<int64_t>(at) >= tile.row.num_samples) {
            b.Fail(p.error, kErrorClassSlots, "class collect: more selected than K");
          } else {
            b.Store(p.sel + sel_base + static_cast<int64_t>(at),
                    (static_cast<uint64_t>(v) << 32) | ii);
            b.SharedAdd(&sh.vhist[BucketOf(v, p.order_bits)], 1);
          }
        }
        if (phase == 0 && next_phase) {
          if (!taken && x.selection == static_cast<int32_t>(Selection::kMixed)) {
            b.Store(p.class_keys + tile.base + i, (k << 32) | ii);
          } else {
            b.Store(p.class_codes + tile.base + i, kNoClass);
          }
        }
      }
    });
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) {
        const int32_t c = b.SLoad(&sh.vhist[bin]);
        if (c != 0) b.GlobalAdd(p.vhist + int64_t{tile.l} * bins + bin, c);
      }
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
