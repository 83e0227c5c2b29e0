// Stages ClassKeys, ClassQuota and ClassPhase of the class path: every element's class and
// selection key, the member counts, the quotas on the device, and each phase's radix-select
// start per (row, class). See pipeline/README.md.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/classes_common.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// One block per class tile (kClassTile elements of one class row): the class of every
// element (ClassOfLabel over the table's ranges, in shared memory, and ScoreAdmits), written
// to class_codes; the member's phase-0 key to class_keys (UNIFORM: u << 32 | i; WEIGHTED: the
// weighted key's bits; HARDEST and MIXED: HardestKey(score) << 32 | u: ties of a key go by i);
// the members per class added to the pairs' n.
struct ClassKeysBody {
  Params p;
  struct Shared {
    ClassRange ranges[kMaxClassRanges];
    int32_t selection[kMaxClasses];
    int32_t count[kMaxClasses];
    ClassTile tile;
    int32_t num_ranges;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    b.Threads([&](int t) {
      if (t == 0) {
        const ClassTile tile = LoadClassTile(b, p, block, false);
        int32_t num_ranges = 0;
        ClassTableOf(b, p, tile.row, &num_ranges);
        b.SStore(&sh.tile, tile);
        b.SStore(&sh.num_ranges, num_ranges);
      }
    });
    const ClassTile tile = b.SLoad(&sh.tile);
    const int32_t num_ranges = b.SLoad(&sh.num_ranges);
    const int32_t num_classes = tile.row.num_classes;
    b.Threads([&](int t) {
      int32_t unused = 0;
      const ClassTablePtrs table = ClassTableOf(b, p, tile.row, &unused);
      for (int32_t k = t; k < num_ranges; k += kThreads) {
        b.SStore(&sh.ranges[k], b.Load(table.ranges + k));
      }
      for (int32_t c = t; c < num_classes; c += kThreads) {
        b.SStore(&sh.selection[c], b.Load(&table.classes[c].selection));
        b.SStore(&sh.count[c], 0);
      }
    });
    const uint8_t* labels = p.labels + tile.row.label_offset;
    DispatchLabels(tile.row.label_dtype, [&](auto tag) {
      using L = decltype(tag);
      b.Threads([&](int t) {
        for (int64_t i0 = tile.begin + 4 * int64_t{t}; i0 < tile.end; i0 += 4 * kThreads) {
          KeysOfQuad<L>(b, sh, tile, labels, num_ranges, i0);
        }
      });
    });
    b.Threads([&](int t) {
      for (int32_t c = t; c < num_classes; c += kThreads) {
        const int32_t n = b.SLoad(&sh.count[c]);
        if (n != 0) {
          b.GlobalAdd(&p.pairs[tile.first_pair + c].n, static_cast<unsigned long long>(n));
        }
      }
    });
  }

 private:
  // The class of `label`: ClassOfLabel's binary search, over the shared copy.
  template <class B>
  static GPUSAMPLER_HD int32_t ClassOf(B& b, Shared& sh, int32_t num_ranges, int64_t label) {
    int32_t lo = 0, hi = num_ranges;
    while (lo < hi) {
      const int32_t mid = (lo + hi) >> 1;
      if (b.SLoad(&sh.ranges[mid].lo) <= label) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    if (lo == 0) return -1;
    return label <= b.SLoad(&sh.ranges[lo - 1].hi) ? b.SLoad(&sh.ranges[lo - 1].cls) : -1;
  }

  // Elements [i0, i0 + 4) (i0 a multiple of 4; one Philox call per stream for the quad).
  template <class L, class B>
  GPUSAMPLER_HD void KeysOfQuad(B& b, Shared& sh, const ClassTile& tile, const uint8_t* labels,
                                int32_t num_ranges, int64_t i0) const {
    int32_t cls[4];
    int32_t sel[4];
    float score[4];
    bool any = false, weighted = false;
    GPUSAMPLER_UNROLL
    for (int w = 0; w < 4; ++w) {
      const int64_t i = i0 + w;
      cls[w] = -1;
      sel[w] = static_cast<int32_t>(Selection::kUniform);
      score[w] = NAN;
      if constexpr (!std::is_same_v<L, Unlabeled>) {
        if (i < tile.end) {
          const int64_t label = static_cast<int64_t>(
              LoadUnaligned<B, L>(b, labels + i * static_cast<int64_t>(sizeof(L))));
          cls[w] = ClassOf(b, sh, num_ranges, label);
        }
      }
      if (cls[w] >= 0) {
        sel[w] = b.SLoad(&sh.selection[cls[w]]);
        if (sel[w] != static_cast<int32_t>(Selection::kUniform) && p.scores != nullptr &&
            tile.row.score_offset >= 0) {
          score[w] = b.Load(p.scores + tile.row.score_offset + i);
        }
        if (!ScoreAdmits(sel[w], score[w])) cls[w] = -1;
      }
      any = any || cls[w] >= 0;
      weighted = weighted || (cls[w] >= 0 && sel[w] == static_cast<int32_t>(Selection::kWeighted));
    }
    Philox4 u{{0, 0, 0, 0}}, u2{{0, 0, 0, 0}};
    if (any) {
      u = GroupKeys(tile.row, kSelectionStream, i0);
      b.CountPhilox(1);
    }
    if (weighted) {
      u2 = GroupKeys(tile.row, kWeightStream, i0);
      b.CountPhilox(1);
    }
    GPUSAMPLER_UNROLL
    for (int w = 0; w < 4; ++w) {
      const int64_t i = i0 + w;
      if (i >= tile.end) continue;
      b.Store(p.class_codes + tile.base + i,
              cls[w] >= 0 ? static_cast<uint16_t>(cls[w]) : kNoClass);
      if (cls[w] < 0) continue;
      b.SharedAdd(&sh.count[cls[w]], 1);
      uint64_t key;
      switch (static_cast<Selection>(sel[w])) {
        case Selection::kWeighted:
          key = WeightedKeyBits(WeightedE(u.v[w], u2.v[w]), score[w]);
          break;
        case Selection::kHardest:
        case Selection::kMixed:
          key = (static_cast<uint64_t>(HardestKey(score[w])) << 32) | u.v[w];
          break;
        default:
          key = (static_cast<uint64_t>(u.v[w]) << 32) | static_cast<uint64_t>(i);
          break;
      }
      b.Store(p.class_keys + tile.base + i, key);
    }
  }
};

// One block per class row: the quotas m_c (ClassQuotas, thread 0, on shared copies of the
// table's targets and fill order), written out with num_positive / num_negative; each pair's
// phase-0 select (MIXED: its hardest h first); the padding slots [sum m_c, K).
struct ClassQuotaBody {
  Params p;
  struct Shared {
    RowDesc row;
    ClassEntry classes[kMaxClasses];
    int32_t fill[kMaxClasses];
    int64_t n[kMaxClasses];
    int64_t m[kMaxClasses];
    int64_t total;
    int32_t first_pair, r, num_fill, open;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    LargeRowState* st = p.large + block;
    b.Threads([&](int t) {
      if (t == 0) {
        const int32_t r = b.Load(&st->row);
        b.SStore(&sh.r, r);
        b.SStore(&sh.row, b.Load(p.rows + r));
        b.SStore(&sh.first_pair, b.Load(&st->first_pair));
        b.SStore(&sh.open, 0);
      }
    });
    const RowDesc row = b.SLoad(&sh.row);
    const int32_t first_pair = b.SLoad(&sh.first_pair);
    const int32_t num_classes = row.num_classes;
    b.Threads([&](int t) {
      int32_t num_ranges = 0;
      const ClassTablePtrs table = ClassTableOf(b, p, row, &num_ranges);
      if (t == 0) b.SStore(&sh.num_fill, b.Load(&table.header->num_fill));
      for (int32_t c = t; c < num_classes; c += kThreads) {
        b.SStore(&sh.classes[c], b.Load(table.classes + c));
        b.SStore(&sh.n[c], static_cast<int64_t>(b.Load(&p.pairs[first_pair + c].n)));
      }
    });
    b.Threads([&](int t) {
      int32_t num_ranges = 0;
      const ClassTablePtrs table = ClassTableOf(b, p, row, &num_ranges);
      const int32_t num_fill = b.SLoad(&sh.num_fill);
      for (int32_t j = t; j < num_fill; j += kThreads)
        b.SStore(&sh.fill[j], b.Load(table.fill + j));
    });
    b.Threads([&](int t) {
      if (t != 0) return;
      // (one thread, plain accesses to the shared copies: the quotas are serial, C <= 256)
      ClassQuotas(sh.classes, num_classes, sh.fill, b.SLoad(&sh.num_fill), row.num_samples, sh.n,
                  sh.m);
      int64_t total = 0;
      for (int32_t c = 0; c < num_classes; ++c) total += sh.m[c];
      b.SStore(&sh.total, total);
      const int32_t r = b.SLoad(&sh.r);
      const int64_t m0 = num_classes <= 2 ? sh.m[0] : 0;
      const int64_t m1 = num_classes == 2 ? sh.m[1] : 0;
      b.Store(p.out_num_positive + r, static_cast<int32_t>(m0));
      b.Store(p.out_num_negative + r, static_cast<int32_t>(m1));
      b.Store(&st->m[0], total);  // (Scatter reads the row's selected as m[0] + m[1])
      b.Store(&st->m[1], int64_t{0});
    });
    b.Threads([&](int t) {
      for (int32_t c = t; c < num_classes; c += kThreads) {
        const int64_t m = b.SLoad(&sh.m[c]);
        const int64_t n = b.SLoad(&sh.n[c]);
        const ClassEntry entry = b.SLoad(&sh.classes[c]);
        if (p.out_num_per_class != nullptr) {
          b.Store(p.out_num_per_class + row.out_class_offset + c, static_cast<int32_t>(m));
        }
        const bool mixed = entry.selection == static_cast<int32_t>(Selection::kMixed);
        const int64_t h = mixed ? HardQuota(m, entry.hard_fraction) : m;
        ClassPairState* pair = p.pairs + first_pair + c;
        b.Store(&pair->m, m);
        b.Store(&pair->h, h);
        b.Store(&pair->selection, entry.selection);
        if (StartSelect(b, pair, h, n)) b.SharedAdd(&sh.open, 1);
      }
    });
    b.Threads([&](int t) {
      if (t == 0) b.Store(&st->open, b.SLoad(&sh.open));
    });
    const int64_t total = b.SLoad(&sh.total);
    b.Threads([&](int t) {
      for (int64_t at = total + t; at < row.num_samples; at += kThreads)
        WriteSlot(b, p, row, at, -1);
    });
  }

  // A pair's select of `need` of its `cand` members: none (need 0), all (need == cand: the
  // empty prefix, lo = 96), or open (the rounds narrow it). Returns whether it is open.
  template <class B>
  static GPUSAMPLER_HD bool StartSelect(B& b, ClassPairState* pair, int64_t need, int64_t cand) {
    b.Store(&pair->pk, uint64_t{0});
    b.Store(&pair->pi, uint32_t{0});
    b.Store(&pair->lo, 96);
    b.Store(&pair->need, need);
    b.Store(&pair->cand, cand);
    b.Store(&pair->mode, need > 0 ? 1 : 0);
    return need > 0 && need < cand;
  }
};

// One block per class row, between the phases: MIXED pairs select their m - h uniform rest
// among the n - h members ClassCollect left them (their keys now u << 32 | i); the others
// select nothing more.
struct ClassPhaseBody {
  Params p;
  struct Shared {
    int32_t first_pair, num_classes, open;
  };
  template <class B>
  GPUSAMPLER_HD void operator()(B& b, int64_t block) const {
    Shared& sh = b.template SharedAs<Shared>();
    LargeRowState* st = p.large + block;
    b.Threads([&](int t) {
      if (t == 0) {
        b.SStore(&sh.first_pair, b.Load(&st->first_pair));
        b.SStore(&sh.num_classes, b.Load(&p.rows[b.Load(&st->row)].num_classes));
        b.SStore(&sh.open, 0);
      }
    });
    const int32_t first_pair = b.SLoad(&sh.first_pair);
    const int32_t num_classes = b.SLoad(&sh.num_classes);
    b.Threads([&](int t) {
      for (int32_t c = t; c < num_classes; c += kThreads) {
        ClassPairState* pair = p.pairs + first_pair + c;
        const bool mixed = b.Load(&pair->selection) == static_cast<int32_t>(Selection::kMixed);
        const int64_t m = b.Load(&pair->m);
        const int64_t h = b.Load(&pair->h);
        const int64_t n = static_cast<int64_t>(b.Load(&pair->n));
        if (ClassQuotaBody::StartSelect(b, pair, mixed ? m - h : 0, mixed ? n - h : 0)) {
          b.SharedAdd(&sh.open, 1);
        }
      }
    });
    b.Threads([&](int t) {
      if (t == 0) b.Store(&st->open, b.SLoad(&sh.open));
    });
  }
};

}  // namespace gpusampler::kernels::pipeline
