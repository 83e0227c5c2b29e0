// Stage Pass2: per tile, the selected keys and the boundary candidates. See
// pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

struct Pass2Body {
  Params p;
  struct Shared {
    RowDesc row;
    int64_t begin, end, cand_base, sel_base;
    int64_t sel_below[2], cand_bin[2], cand_off[2], cand_count[2];
    int32_t large;
    int32_t n_sel, n_cand[2];
    // The round's first place in p.sel and in p.cand per class (kDropped: none), set by
    // ReserveRound as absolute indices, so that WriteRound holds no tile pointers.
    unsigned long long sel_at, cand_at[2];
    int32_t vhist[kMaxOrderBins];
  };
  // The tile's uniform values that the classification reads, once from shared memory
  // (registers; what only thread 0 or the writes need stays in shared memory, so that Pass2
  // fits 64 registers: 4 blocks per SM, MinBlocksPerSm in cuda/pipeline_exec.cuh).
  struct Tile {
    RowDesc row;
    int32_t l;
    int64_t begin, end;
    int64_t sel_below0, sel_below1, cand_bin0, cand_bin1;
  };
  // Per round (two quads per thread, both loaded before either is used), each thread holds
  // up to eight keys and where they go: code = kind | off << 2 (kind: 0 none, 1 selected,
  // 2 + c a candidate of class c; off: its place among the round's keys, < 2 kRoundElements).
  template <class B>
  struct Round {
    typename B::template Items<uint64_t, 8> key;
    typename B::template Items<int32_t, 8> code;
  };

  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    const int bins = 1 << p.order_bits;
    LoadTile(b, sh, block, bins);
    const Tile tl = ReadTile(b, sh);
    const uint8_t* labels = p.labels + tl.row.label_offset;
    DispatchLabels(tl.row.label_dtype, [&](auto tag) {
      using L = decltype(tag);
      const bool aligned = QuadAligned<L>(labels);
      Round<B> r;
      for (int64_t round = tl.begin; round < tl.end; round += 2 * kRoundElements) {
        ClassifyRound<L>(b, sh, tl, labels, aligned, round, r);
        ReserveRound(b, sh, tl);
        WriteRound(b, sh, r);
      }
    });
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) {
        const int32_t h = b.SLoad(&sh.vhist[bin]);
        if (h != 0) b.GlobalAdd(p.vhist + int64_t{tl.l} * bins + bin, h);
      }
    });
  }

  // Thread 0 copies the tile's row and its large-row state into shared memory; the v
  // histogram is zeroed.
  template <class B>
  GPUSAMPLER_HD void LoadTile(B& b, Shared& sh, int64_t block, int bins) const {
    b.Threads([&](int t) {
      for (int bin = t; bin < bins; bin += kThreads) b.SStore(&sh.vhist[bin], 0);
      if (t == 0) {
        const int32_t l = LargeOfTile(b, p, block, false);
        const LargeRowState* st = p.large + l;
        const RowDesc row = b.Load(p.rows + b.Load(&st->row));
        const int64_t begin = (block - b.Load(&st->first_tile)) * p.tile_elements;
        b.SStore(&sh.large, l);
        b.SStore(&sh.row, row);
        b.SStore(&sh.begin, begin);
        b.SStore(&sh.end,
                 begin + p.tile_elements < row.length ? begin + p.tile_elements : row.length);
        b.SStore(&sh.cand_base, b.Load(&st->cand_base));
        b.SStore(&sh.sel_base, b.Load(&st->sel_base));
        for (int c = 0; c < 2; ++c) {
          b.SStore(&sh.sel_below[c], b.Load(&st->sel_below[c]));
          b.SStore(&sh.cand_bin[c], b.Load(&st->cand_bin[c]));
          b.SStore(&sh.cand_off[c], b.Load(&st->cand_off[c]));
          b.SStore(&sh.cand_count[c], b.Load(&st->cand_count[c]));
          b.SStore(&sh.n_cand[c], 0);
        }
        b.SStore(&sh.n_sel, 0);
      }
    });
  }

  template <class B>
  GPUSAMPLER_HD Tile ReadTile(B& b, Shared& sh) const {
    Tile tl;
    tl.row = b.SLoad(&sh.row);
    tl.l = b.SLoad(&sh.large);
    tl.begin = b.SLoad(&sh.begin);
    tl.end = b.SLoad(&sh.end);
    tl.sel_below0 = b.SLoad(&sh.sel_below[0]);
    tl.sel_below1 = b.SLoad(&sh.sel_below[1]);
    tl.cand_bin0 = b.SLoad(&sh.cand_bin[0]);
    tl.cand_bin1 = b.SLoad(&sh.cand_bin[1]);
    return tl;
  }

  // Classes, u, and (for the selected) v of the round's two quads per thread; places among
  // the round's selected and candidates come from shared counters.
  template <class L, class B>
  GPUSAMPLER_HD void ClassifyRound(B& b, Shared& sh, const Tile& tl, const uint8_t* labels,
                                   bool aligned, int64_t round, Round<B>& r) const {
    const RowDesc& row = tl.row;
    b.Threads([&](int t) {
      uint32_t quad[2][4];
      GPUSAMPLER_UNROLL
      for (int h = 0; h < 2; ++h) {
        const int64_t i0 = round + h * kRoundElements + 4 * t;
        if (i0 < tl.end) {
          QuadClasses<L>(b, labels, row, aligned, i0, quad[h]);
        } else {
          quad[h][0] = quad[h][1] = quad[h][2] = quad[h][3] = kIgnored;
        }
      }
      GPUSAMPLER_UNROLL
      for (int h = 0; h < 2; ++h) {
        uint64_t* k_ = b.Mine(r.key, t) + 4 * h;
        int32_t* code_ = b.Mine(r.code, t) + 4 * h;
        const int64_t i0 = round + h * kRoundElements + 4 * t;
        const uint32_t* cls = quad[h];
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) code_[w] = 0;
        if (cls[0] == kIgnored && cls[1] == kIgnored && cls[2] == kIgnored && cls[3] == kIgnored) {
          continue;
        }
        const Philox4 u = GroupKeys(row, kSelectionStream, i0);
        b.CountPhilox(1);
        bool any_selected = false;
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) {
          if (cls[w] == kIgnored) continue;
          const int64_t bin = u.v[w] >> (32 - kSelectBits);
          const int c = static_cast<int>(cls[w]);
          if (bin < Pick(c, tl.sel_below0, tl.sel_below1)) {
            code_[w] = 1;
            any_selected = true;
          } else if (bin == Pick(c, tl.cand_bin0, tl.cand_bin1)) {
            k_[w] = (static_cast<uint64_t>(u.v[w]) << 32) | static_cast<uint64_t>(i0 + w);
            code_[w] = (2 + static_cast<int32_t>(cls[w])) | b.SharedAdd(&sh.n_cand[cls[w]], 1) << 2;
          }
        }
        if (!any_selected) continue;
        const Philox4 v = GroupKeys(row, kOrderStream, i0);
        b.CountPhilox(1);
        GPUSAMPLER_UNROLL
        for (int w = 0; w < 4; ++w) {
          if (code_[w] != 1) continue;
          k_[w] = (static_cast<uint64_t>(v.v[w]) << 32) | static_cast<uint64_t>(i0 + w);
          code_[w] = 1 | b.SharedAdd(&sh.n_sel, 1) << 2;
          b.SharedAdd(&sh.vhist[BucketOf(v.v[w], p.order_bits)], 1);
        }
      }
    });
  }

  // Thread 0 reserves the round's places in the row's selected and candidate ranges (global
  // cursors), as absolute indices into p.sel and p.cand, and resets the round's counters.
  template <class B>
  GPUSAMPLER_HD void ReserveRound(B& b, Shared& sh, const Tile& tl) const {
    b.Threads([&](int t) {
      if (t != 0) return;
      LargeRowState* st = p.large + tl.l;
      const int32_t n_sel = b.SLoad(&sh.n_sel);
      if (n_sel > 0) {
        const unsigned long long at =
            b.GlobalAdd(&st->sel_cursor, static_cast<unsigned long long>(n_sel));
        b.SStore(&sh.sel_at, static_cast<unsigned long long>(b.SLoad(&sh.sel_base)) + at);
      }
      for (int c = 0; c < 2; ++c) {
        const int32_t n_cand = b.SLoad(&sh.n_cand[c]);
        if (n_cand > 0) {
          const unsigned long long at =
              b.GlobalAdd(&st->cand_cursor[c], static_cast<unsigned long long>(n_cand));
          // Bounded: Threshold counted the boundary bucket's keys.
          if (static_cast<int64_t>(at) + n_cand > b.SLoad(&sh.cand_count[c])) {
            b.Fail(p.error, kErrorCandidates, "Pass2: more boundary candidates than counted");
            b.SStore(&sh.cand_at[c], kDropped);  // (the device goes on without writing)
          } else {
            b.SStore(&sh.cand_at[c], static_cast<unsigned long long>(b.SLoad(&sh.cand_base) +
                                                                     b.SLoad(&sh.cand_off[c])) +
                                         at);
          }
        }
      }
      // Reset the round counters (read above by this thread only).
      b.SStore(&sh.n_sel, 0);
      b.SStore(&sh.n_cand[0], 0);
      b.SStore(&sh.n_cand[1], 0);
    });
  }

  template <class B>
  GPUSAMPLER_HD void WriteRound(B& b, Shared& sh, Round<B>& r) const {
    b.Threads([&](int t) {
      const uint64_t* k_ = b.Mine(r.key, t);
      const int32_t* code_ = b.Mine(r.code, t);
      GPUSAMPLER_UNROLL
      for (int w = 0; w < 8; ++w) {
        const int32_t kind = code_[w] & 3;
        const int64_t off = code_[w] >> 2;
        if (kind == 1) {
          b.Store(p.sel + static_cast<int64_t>(b.SLoad(&sh.sel_at)) + off, k_[w]);
        } else if (kind >= 2) {
          const unsigned long long at = b.SLoad(&sh.cand_at[kind - 2]);
          if (at != kDropped) b.Store(p.cand + static_cast<int64_t>(at) + off, k_[w]);
        }
      }
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
