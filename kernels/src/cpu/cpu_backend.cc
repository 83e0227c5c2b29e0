// The CPU backend. Per row (SPEC section 1):
//   1. count positives and negatives, derive the quotas;
//   2. one pass generates the selection keys u and keeps only the candidates whose key is
//      below a per-class bound (CandidateBound: the quota plus a few standard deviations),
//      rerunning without a bound on the rare miss, so the result stays exact;
//   3. select the quota's smallest (u, i) among the candidates (nth_element, no sort);
//   4. order the selected set by (v, i) with a stable radix sort on v over index order.
// Rows are spread over the pool; a row of at least split_row_elements is also split.
// Rows with a class table (SPEC section 7) take the class path (classes.cc); one batch may
// mix both kinds.
#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "cpu/classes.hpp"
#include "cpu/filter_tiles.hpp"
#include "cpu/key_tiles.hpp"
#include "cpu/radix_sort.hpp"
#include "cpu/thread_pool.hpp"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::kernels {
namespace {

constexpr uint64_t kKeepAll = uint64_t{1} << 32;

struct Counts {
  int64_t pos = 0;
  int64_t neg = 0;
};

// One class's candidates: runs of packed keys (one per filter chunk), in index order run
// after run. The filter leaves them where its chunks wrote them: closing the gaps first was
// a serial copy of every candidate (50 us of a 1.7 ms row at B = 1 x 1e6, 2 threads).
using Runs = std::vector<std::pair<const uint64_t*, int64_t>>;

struct Scratch {
  // Sized for every element of the row a candidate; the filter writes a few per chunk.
  ScratchVector<uint64_t> pos, neg;
  std::vector<uint64_t> tmp, tmp_neg, items;
  Runs pos_runs, neg_runs;  // the filter's candidates, per class, in pos / neg
  std::vector<uint32_t> sel_pos, sel_neg;
  // Per-chunk bookkeeping, kept to avoid allocations per row.
  std::vector<Counts> chunk_counts, got;
  std::vector<int64_t> pos_at, neg_at;
  std::vector<int64_t> bucket_count, bucket_start;
  cpu::ClassScratch classes;  // the class path's buffers
};

// Stores `value` in the label dtype of `item` bytes (little-endian low bytes).
inline void StoreLabel(uint8_t* dst, size_t item, int64_t value) {
  switch (item) {
    case 1: {
      const uint8_t v = static_cast<uint8_t>(value);
      std::memcpy(dst, &v, 1);
      break;
    }
    case 2: {
      const uint16_t v = static_cast<uint16_t>(value);
      std::memcpy(dst, &v, 2);
      break;
    }
    case 4: {
      const uint32_t v = static_cast<uint32_t>(value);
      std::memcpy(dst, &v, 4);
      break;
    }
    default:
      std::memcpy(dst, &value, 8);
      break;
  }
}

template <typename T>
Counts CountRange(const T* labels, int64_t begin, int64_t end, int64_t pos, int64_t neg) {
  int64_t p = 0, q = 0;
  cpu::CountLabels(sizeof(T), std::is_signed_v<T>, labels + begin, end - begin, pos, neg, &p, &q);
  return {p, q};
}

// Appends to pos_out / neg_out, in index order, PackKey(u, i) of every element of
// [begin, end) of its class whose key is below the class bound. Each output needs room for
// the class's members in the range plus cpu::kFilterSlack (writes are branch-free, and
// vector versions store whole registers). Without `need_keys`
// (no class keeps only part of itself) keys are left 0. Returns the counts.
template <typename T>
Counts FilterRange(const T* labels, int64_t begin, int64_t end, const RowDesc& row,
                   uint64_t pos_bound, uint64_t neg_bound, bool need_keys, uint64_t* pos_out,
                   uint64_t* neg_out) {
  const int64_t pos = row.positive_label, neg = row.negative_label;
  int64_t np = 0, nq = 0;
  alignas(64) uint32_t keys[cpu::kTileElements] = {};
  constexpr bool kSigned = std::is_signed_v<T>;
  for (int64_t tile = begin; tile < end; tile += cpu::kTileElements) {
    const int64_t tile_end = std::min(end, tile + cpu::kTileElements);
    if (need_keys) {
      cpu::KeyTile(row.seed, row.row_in_request, kSelectionStream, static_cast<uint64_t>(tile),
                   keys);
    }
    if (tile_end - tile == cpu::kTileElements) {
      cpu::FilterTile(sizeof(T), kSigned, labels + tile, keys, static_cast<uint32_t>(tile), pos,
                      neg, pos_bound, neg_bound, pos_out, &np, neg_out, &nq);
      continue;
    }
    for (int64_t i = tile; i < tile_end; ++i) {
      const int64_t x = static_cast<int64_t>(labels[i]);
      const uint32_t u = keys[i - tile];
      const uint64_t packed = PackKey(u, static_cast<uint64_t>(i));
      pos_out[np] = packed;
      np += (x == pos) & (u < pos_bound);
      neg_out[nq] = packed;
      nq += (x == neg) & (u < neg_bound);
    }
  }
  return {np, nq};
}

// Calls fn with the row's labels typed as their dtype widens (cpu::WithLabelWords).
template <typename Fn>
void DispatchLabels(DType dtype, const uint8_t* bytes, Fn&& fn) {
  if (!cpu::WithLabelWords(dtype, bytes, fn)) {
    throw Error(Error::Code::kInvalidArgument,
                std::string("label dtype ") + Traits(dtype).name + " is not an integer type");
  }
}

template <typename Fn>
void ForEachCandidate(const Runs& runs, Fn&& fn) {
  for (const auto& [run, n] : runs) {
    for (int64_t j = 0; j < n; ++j) fn(run[j]);
  }
}

// Leaves in `out`, in increasing index order, the indices of the m candidates with the
// smallest packed keys, of the c in `runs`; every key's u is below `bound`.
// Keys are uniform below the bound, so a histogram of their top bits finds the bucket that
// holds the m-th smallest; only that bucket (a few keys) needs nth_element. Measured 3x
// faster than nth_element over all candidates (docs/decisions.md K2).
void SelectSmallest(const Runs& runs, int64_t c, int64_t m, uint64_t bound,
                    std::vector<uint64_t>* tmp, std::vector<uint32_t>* out) {
  // One spare slot: the branch-free loop below writes once past the last selection.
  out->resize(static_cast<size_t>(m) + 1);
  uint32_t* o = out->data();
  if (m == 0 || c == m) {
    int64_t k = 0;
    ForEachCandidate(runs, [&](uint64_t x) { o[k++] = PackedIndex(x); });
    out->resize(static_cast<size_t>(m));
    return;
  }
  // About two candidates per bucket (at most 2^11 buckets): the counters to clear and the
  // buckets to scan grow with c, not with a fixed table (a fixed 2^11 table, cleared and
  // scanned from the bottom, was a sixth of a 1e4-element row).
  int c_bits = 0;
  while (c_bits < 30 && (int64_t{1} << c_bits) < c) ++c_bits;
  const int bucket_bits = std::clamp(c_bits - 1, 4, 11);
  int key_bits = 0;
  while (key_bits < 32 && (uint64_t{1} << key_bits) < bound) ++key_bits;
  const int shift = 32 + std::max(0, key_bits - bucket_bits);  // of the packed key
  uint32_t hist[1 << 11];
  const uint64_t top = (bound - 1) >> (shift - 32);  // the highest bucket a key can reach
  std::memset(hist, 0, static_cast<size_t>(top + 1) * sizeof(uint32_t));
  for (const auto& [run, n] : runs) {
    for (int64_t j = 0; j < n; ++j) ++hist[run[j] >> shift];
  }
  // The m-th smallest sits in the bucket where the count from the top passes c - m; the
  // bound keeps c - m small (about 4 sqrt(m) + 16), so scan from the top.
  int64_t above = 0;
  uint64_t bucket = top;
  while (c - above - hist[bucket] >= m) above += hist[bucket--];
  const int64_t below = c - above - hist[bucket];
  tmp->clear();
  ForEachCandidate(runs, [&](uint64_t x) {
    if ((x >> shift) == bucket) tmp->push_back(x);
  });
  const int64_t r = m - below;  // 1 <= r <= size of the bucket
  std::nth_element(tmp->begin(), tmp->begin() + (r - 1), tmp->end());
  const uint64_t pivot = (*tmp)[static_cast<size_t>(r - 1)];
  uint32_t* w = o;
  for (const auto& [run, n] : runs) {
    for (int64_t j = 0; j < n; ++j) {
      *w = PackedIndex(run[j]);
      w += run[j] <= pivot;
    }
  }
  out->resize(static_cast<size_t>(m));
}

// Indices and labels of slots [begin, end) of the selection, from the sorted items
// (v << 32 | i << 1 | class). The label dtype is a template parameter and the class choice a
// select, so the loop has no unpredictable branch.
template <typename T>
void WriteSelectedAs(const uint64_t* items, int64_t begin, int64_t end, int64_t* out_idx,
                     uint8_t* out_lab, int64_t pos, int64_t neg) {
  const T labels[2] = {static_cast<T>(pos), static_cast<T>(neg)};
  for (int64_t slot = begin; slot < end; ++slot) {
    const uint32_t low = PackedIndex(items[slot]);
    out_idx[slot] = low >> 1;
    std::memcpy(out_lab + slot * sizeof(T), &labels[low & 1], sizeof(T));
  }
}

void WriteSelected(size_t item, const uint64_t* items, int64_t begin, int64_t end, int64_t* out_idx,
                   uint8_t* out_lab, int64_t pos, int64_t neg) {
  switch (item) {
    case 1:
      return WriteSelectedAs<uint8_t>(items, begin, end, out_idx, out_lab, pos, neg);
    case 2:
      return WriteSelectedAs<uint16_t>(items, begin, end, out_idx, out_lab, pos, neg);
    case 4:
      return WriteSelectedAs<uint32_t>(items, begin, end, out_idx, out_lab, pos, neg);
    default:
      return WriteSelectedAs<uint64_t>(items, begin, end, out_idx, out_lab, pos, neg);
  }
}

// Sorts n items by their high word (any order among equal high words), then each run of
// equal high words by the whole item. Equal order keys come about m^2 / 2^33 times per row.
void SortItemsSerial(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp,
                     int equal_top_bits = 0) {
  cpu::SortByHighWord(items, n, tmp, equal_top_bits);
  for (int64_t j = 1; j < n; ++j) {
    if ((items[j] >> 32) != (items[j - 1] >> 32)) continue;
    int64_t end = j + 1;
    while (end < n && (items[end] >> 32) == (items[j] >> 32)) ++end;
    std::sort(items + (j - 1), items + end);
    j = end - 1;
  }
}

// Per-thread scratch of the bucket sorts below.
std::vector<uint64_t>& BucketScratch() {
  thread_local std::vector<uint64_t> tmp;
  return tmp;
}

// Per-thread items of one value range (CpuBackend::OrderAndSortByRanges).
std::vector<uint64_t>& RangeScratch() {
  thread_local std::vector<uint64_t> items;
  return items;
}

// A split row whose selection has [kMinRangeSortItems, kMaxRangeSortItems) items orders and
// sorts it in value ranges (OrderAndSortByRanges); fewer: one thread, as the pool round
// costs more than it saves; more: in buckets (OrderAndSortByBuckets).
constexpr int64_t kMinRangeSortItems = 2048;
constexpr int64_t kMaxRangeSortItems = 16384;

// A row's passes: `chunks` chunks of whole key tiles, run on `pool` (a split row) or one
// after the other on the calling thread. Called as split(count, fn): fn(c) for c < count.
// A split row has one chunk per thread: the caller claims chunk 0 and the spinning workers
// the next ones, so each pass mostly finds its chunk's labels and candidates in the cache of
// the thread that touched them in the pass before. Four chunks per thread, claimed in any
// order, read about half of them from the other core: B = 1 x 1e5, K = 1e4, 2 threads took
// 0.150 ms against 0.136 ms (docs/decisions.md K2); a late thread's chunk is then the
// whole stall, which the pool's stall fallback bounds.
struct RowSplit {
  RowSplit(int64_t length, ThreadPool* on)
      : n(length),
        chunks(on ? on->size() : 1),
        chunk_len(((n + chunks - 1) / chunks + cpu::kTileElements - 1) / cpu::kTileElements *
                  cpu::kTileElements),
        pool(on) {}
  int64_t begin(int64_t c) const { return std::min(n, c * chunk_len); }
  template <typename Fn>
  void operator()(int64_t count, Fn&& fn) const {
    if (pool) {
      pool->ParallelFor(count, [&](int64_t c, int) { fn(c); });
    } else {
      for (int64_t c = 0; c < count; ++c) fn(c);
    }
  }

  const int64_t n;
  const int64_t chunks;
  const int64_t chunk_len;
  ThreadPool* const pool;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const CpuBackendOptions& options)
      : options_(options),
        pool_(options.threads > 0
                  ? options.threads
                  : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))),
        scratch_(static_cast<size_t>(pool_.size())) {}

  std::string name() const override { return "cpu"; }
  MemorySpace memory_space() const override { return MemorySpace::kHost; }

  void Sample(const Batch& batch) override {
    ValidateRows(batch.rows, batch.num_rows);
    // Large rows one at a time, each split over the pool; small rows across the pool. With
    // at least two large rows per thread, rows alone keep every thread busy, and splitting
    // would only add the serial parts of each row (measured at B = 32, N = 1e6, 2 threads:
    // docs/decisions.md K2).
    int64_t large = 0, out_feature_bytes = 0;
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      large += batch.rows[r].length >= options_.split_row_elements;
      out_feature_bytes += batch.rows[r].num_samples * batch.rows[r].feature_row_bytes;
    }
    const RowStores stores =
        options_.streaming_output_bytes >= 0 && out_feature_bytes >= options_.streaming_output_bytes
            ? RowStores::kStreaming
            : RowStores::kCached;
    const bool split = pool_.size() > 1 && large < 2 * pool_.size();
    std::vector<int64_t> small;
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (split && batch.rows[r].length >= options_.split_row_elements) {
        SampleRow(batch, batch.rows[r], stores, &scratch_[0], &pool_);
      } else {
        small.push_back(r);
      }
    }
    pool_.ParallelFor(static_cast<int64_t>(small.size()), [&](int64_t j, int worker) {
      SampleRow(batch, batch.rows[small[j]], stores, &scratch_[worker], nullptr);
    });
  }

 private:
  // Samples one row; with `pool`, its passes are split over the pool's threads.
  void SampleRow(const Batch& batch, const RowDesc& row, RowStores stores, Scratch* s,
                 ThreadPool* pool) {
    if (row.class_table >= 0) {
      cpu::ClassPathOptions options;
      options.candidate_sigmas = options_.candidate_sigmas;
      options.candidate_slack = options_.candidate_slack;
      cpu::SampleClassRow(batch, row, stores, options, &s->classes, pool);
      return;
    }
    const RowSplit split(row.length, pool);
    const uint8_t* label_bytes = batch.labels + row.label_offset;
    // 1. Class counts, per chunk (the chunk counts size the filter's output regions).
    const Counts total = CountClasses(row, label_bytes, split, s);
    const Quotas quotas =
        ComputeQuotas(total.pos, total.neg, row.num_samples, row.target, row.fill);
    // 2. Candidates below the class bounds, in index order.
    uint64_t pos_used = 0, neg_used = 0;
    const Counts found =
        FindCandidates(row, label_bytes, split, total, quotas, s, &pos_used, &neg_used);
    // 3. Exact selection: the two classes select independently (in parallel when the row is
    // split).
    split(2, [&](int64_t cls) {
      if (cls == 0) {
        SelectSmallest(s->pos_runs, found.pos, quotas.pos, pos_used, &s->tmp, &s->sel_pos);
      } else {
        SelectSmallest(s->neg_runs, found.neg, quotas.neg, neg_used, &s->tmp_neg, &s->sel_neg);
      }
    });
    // 4. Order keys of the selected set, then sort by (v, i).
    const int64_t m = quotas.pos + quotas.neg;
    if (pool != nullptr && m >= kMaxRangeSortItems) {
      OrderAndSortByBuckets(row, quotas, split, s);
    } else if (pool != nullptr && m >= kMinRangeSortItems) {
      OrderAndSortByRanges(row, quotas, split, s);
    } else {
      OrderKeys(row, quotas, split, s);
      SortItemsSerial(s->items.data(), m, &s->tmp);
    }
    // 5. Outputs: indices, labels and feature rows of the selection, then padding.
    batch.out_num_positive[&row - batch.rows] = static_cast<int32_t>(quotas.pos);
    batch.out_num_negative[&row - batch.rows] = static_cast<int32_t>(quotas.neg);
    WriteOutputs(batch, row, stores, s, m, split.chunks, split);
  }

  // Counts each chunk's positives and negatives into s->chunk_counts; returns the totals.
  static Counts CountClasses(const RowDesc& row, const uint8_t* label_bytes, const RowSplit& split,
                             Scratch* s) {
    std::vector<Counts>& chunk_counts = s->chunk_counts;
    chunk_counts.assign(static_cast<size_t>(split.chunks), Counts{});
    split(split.chunks, [&](int64_t c) {
      DispatchLabels(row.label_dtype, label_bytes, [&](const auto* labels) {
        chunk_counts[c] = CountRange(labels, split.begin(c), split.begin(c + 1), row.positive_label,
                                     row.negative_label);
      });
    });
    Counts total;
    for (const auto& c : chunk_counts) {
      total.pos += c.pos;
      total.neg += c.neg;
    }
    return total;
  }

  // Leaves in s->pos_runs / s->neg_runs, in index order, the candidates below each class's bound,
  // and in *pos_used / *neg_used the bounds that kept them. A class whose bound kept fewer
  // candidates than its quota (rare) reruns without a bound, so that the selection stays exact; the
  // other class's candidates come out the same again. Keys matter only when a class keeps part of
  // itself.
  Counts FindCandidates(const RowDesc& row, const uint8_t* label_bytes, const RowSplit& split,
                        const Counts& total, const Quotas& quotas, Scratch* s, uint64_t* pos_used,
                        uint64_t* neg_used) const {
    const bool need_keys =
        (quotas.pos > 0 && quotas.pos < total.pos) || (quotas.neg > 0 && quotas.neg < total.neg);
    *pos_used =
        CandidateBound(total.pos, quotas.pos, options_.candidate_sigmas, options_.candidate_slack);
    *neg_used =
        CandidateBound(total.neg, quotas.neg, options_.candidate_sigmas, options_.candidate_slack);
    Counts found = Filter(row, label_bytes, split, *pos_used, *neg_used, need_keys, s);
    if (found.pos < quotas.pos || found.neg < quotas.neg) {
      if (found.pos < quotas.pos) *pos_used = kKeepAll;
      if (found.neg < quotas.neg) *neg_used = kKeepAll;
      found = Filter(row, label_bytes, split, *pos_used, *neg_used, need_keys, s);
    }
    return found;
  }

  // One filter pass: each chunk writes its candidates into its own region of s->pos / s->neg
  // (sized by the chunk counts); the regions, in chunk order, are the class's runs.
  static Counts Filter(const RowDesc& row, const uint8_t* label_bytes, const RowSplit& split,
                       uint64_t pos_bound, uint64_t neg_bound, bool need_keys, Scratch* s) {
    const int64_t chunks = split.chunks;
    std::vector<int64_t>& pos_at = s->pos_at;
    std::vector<int64_t>& neg_at = s->neg_at;
    pos_at.assign(static_cast<size_t>(chunks + 1), 0);
    neg_at.assign(static_cast<size_t>(chunks + 1), 0);
    for (int64_t c = 0; c < chunks; ++c) {
      pos_at[c + 1] = pos_at[c] + s->chunk_counts[c].pos + cpu::kFilterSlack;
      neg_at[c + 1] = neg_at[c] + s->chunk_counts[c].neg + cpu::kFilterSlack;
    }
    if (static_cast<int64_t>(s->pos.size()) < pos_at[chunks]) s->pos.resize(pos_at[chunks]);
    if (static_cast<int64_t>(s->neg.size()) < neg_at[chunks]) s->neg.resize(neg_at[chunks]);
    std::vector<Counts>& got = s->got;
    got.assign(static_cast<size_t>(chunks), Counts{});
    split(chunks, [&](int64_t c) {
      DispatchLabels(row.label_dtype, label_bytes, [&](const auto* labels) {
        got[c] = FilterRange(labels, split.begin(c), split.begin(c + 1), row, pos_bound, neg_bound,
                             need_keys, s->pos.data() + pos_at[c], s->neg.data() + neg_at[c]);
      });
    });
    // Each chunk's region is a run of candidates, in index order run after run.
    Counts found;
    s->pos_runs.clear();
    s->neg_runs.clear();
    for (int64_t c = 0; c < chunks; ++c) {
      s->pos_runs.emplace_back(s->pos.data() + pos_at[c], got[c].pos);
      s->neg_runs.emplace_back(s->neg.data() + neg_at[c], got[c].neg);
      found.pos += got[c].pos;
      found.neg += got[c].neg;
    }
    return found;
  }

  // s->items[0, m): the order keys of the selected set. Each item carries
  // v << 32 | i << 1 | class: the low word orders like the index (the tie-break), and the
  // outputs need neither a lookup table nor a second read of the labels. Positives fill items
  // [0, m_pos), negatives the rest.
  static void OrderKeys(const RowDesc& row, const Quotas& quotas, const RowSplit& split,
                        Scratch* s) {
    const int64_t m = quotas.pos + quotas.neg;
    if (static_cast<int64_t>(s->items.size()) < m) s->items.resize(m);
    const int64_t key_chunks = (m + cpu::kTileElements - 1) / cpu::kTileElements;
    const int64_t per_task = std::max<int64_t>(1, key_chunks / split.chunks + 1);
    split((key_chunks + per_task - 1) / per_task, [&](int64_t t) {
      const int64_t begin = t * per_task * cpu::kTileElements;
      const int64_t end = std::min(m, (t + 1) * per_task * cpu::kTileElements);
      ForEachOrderKey(row, quotas, *s, begin, end,
                      [&](int64_t j, uint64_t item) { s->items[j] = item; });
    });
  }

  // Calls fn(j, item) for the selection's positions j in [begin, end): positives first
  // ([0, m_pos), s.sel_pos), then negatives (s.sel_neg). item = v << 32 | i << 1 | class for
  // the element's index i and order key v. A key tile never straddles the classes' boundary:
  // KeysOfElements reads one index array.
  template <typename Fn>
  static void ForEachOrderKey(const RowDesc& row, const Quotas& quotas, const Scratch& s,
                              int64_t begin, int64_t end, Fn&& fn) {
    alignas(64) uint32_t v[cpu::kTileElements];
    for (int64_t j = begin; j < end;) {
      const bool neg = j >= quotas.pos;
      const int n = static_cast<int>(
          std::min<int64_t>(cpu::kTileElements, (neg ? end : std::min(end, quotas.pos)) - j));
      const uint32_t* sel = neg ? s.sel_neg.data() + (j - quotas.pos) : s.sel_pos.data() + j;
      cpu::KeysOfElements(row.seed, row.row_in_request, kOrderStream, sel, n, v);
      for (int q = 0; q < n; ++q) {
        fn(j + q, PackKey(v[q], (uint64_t{sel[q]} << 1) | uint64_t{neg}));
      }
      j += n;
    }
  }

  // s->items[0, m): OrderKeys's items sorted as SortItemsSerial does, in one pool round for
  // a split row. Its R tasks are value ranges (R the pool size rounded up to a
  // power of two; range r holds the items whose top log2(R) bits of v equal r, so ties never
  // cross a range). Each task generates the order keys of the whole selection, keeps its
  // range's items (about m / R), sorts them alone and stores them after the ranges below
  // it, whose sizes it has counted on the way. Generating every key R times costs less than
  // what it saves: a second pool round, and reading items another thread wrote (B = 1 x
  // 1e5, K = 1e4, 2 threads: order keys + sort 63 us as two rounds, docs/decisions.md K2).
  static void OrderAndSortByRanges(const RowDesc& row, const Quotas& quotas, const RowSplit& split,
                                   Scratch* s) {
    const int64_t m = quotas.pos + quotas.neg;
    int range_bits = 0;
    while ((1 << range_bits) < split.pool->size()) ++range_bits;
    if (static_cast<int64_t>(s->items.size()) < m) s->items.resize(m);
    uint64_t* out = s->items.data();
    split(int64_t{1} << range_bits, [&](int64_t range) {
      std::vector<uint64_t>& mine = RangeScratch();
      if (static_cast<int64_t>(mine.size()) < m) mine.resize(m);
      int64_t kept = 0, below = 0;
      ForEachOrderKey(row, quotas, *s, 0, m, [&](int64_t, uint64_t item) {
        const int64_t r = range_bits == 0 ? 0 : static_cast<int64_t>(item >> (64 - range_bits));
        mine[kept] = item;
        kept += r == range;
        below += r < range;
      });
      SortItemsSerial(mine.data(), kept, &BucketScratch(), range_bits);
      std::memcpy(out + below, mine.data(), static_cast<size_t>(kept) * sizeof(uint64_t));
    });
  }

  // s->items[0, m): OrderKeys's items sorted as SortItemsSerial does, for a split row with
  // many selected items, in two pool rounds that each read the other thread's data
  // once. Round 1: each task makes the items of its share of the selection and orders them
  // by the top 8 bits of v (a stable counting pass) into its own part of s->tmp, counting
  // each bucket. Round 2: each task takes a range of buckets, copies every task's run of
  // each bucket together into s->items and sorts the bucket alone; ties never cross
  // buckets. It replaced order keys, a histogram pass, a scatter pass and the bucket sorts
  // as four rounds, each reading what the other thread wrote (B = 1 x 1e6, K = 1e5, 2
  // threads: 0.61 ms, docs/decisions.md K2).
  static void OrderAndSortByBuckets(const RowDesc& row, const Quotas& quotas, const RowSplit& split,
                                    Scratch* s) {
    constexpr int kBits = 8, kBuckets = 1 << kBits;
    const int64_t m = quotas.pos + quotas.neg;
    const int64_t tasks = split.chunks;
    const int64_t per = (m + tasks - 1) / tasks;
    if (static_cast<int64_t>(s->items.size()) < m) s->items.resize(m);
    if (static_cast<int64_t>(s->tmp.size()) < m) s->tmp.resize(m);
    std::vector<int64_t>& count = s->bucket_count;  // [task][bucket]: run length
    std::vector<int64_t>& run = s->bucket_start;    // [task][bucket]: run start in s->tmp
    count.assign(static_cast<size_t>(tasks * kBuckets), 0);
    run.assign(static_cast<size_t>(tasks * kBuckets), 0);
    uint64_t* runs = s->tmp.data();
    split(tasks, [&](int64_t t) {
      const int64_t begin = std::min(m, t * per), end = std::min(m, (t + 1) * per);
      std::vector<uint64_t>& mine = RangeScratch();
      if (static_cast<int64_t>(mine.size()) < end - begin) mine.resize(end - begin);
      int64_t* c = count.data() + t * kBuckets;
      ForEachOrderKey(row, quotas, *s, begin, end, [&](int64_t j, uint64_t item) {
        mine[j - begin] = item;
        ++c[item >> (64 - kBits)];
      });
      int64_t* r = run.data() + t * kBuckets;
      int64_t at = begin;
      for (int b = 0; b < kBuckets; ++b) {
        r[b] = at;
        at += c[b];
      }
      std::vector<int64_t> fill(r, r + kBuckets);
      for (int64_t j = 0; j < end - begin; ++j) runs[fill[mine[j] >> (64 - kBits)]++] = mine[j];
    });
    std::vector<int64_t> start(kBuckets + 1, 0);
    for (int b = 0; b < kBuckets; ++b) {
      start[b + 1] = start[b];
      for (int64_t t = 0; t < tasks; ++t) start[b + 1] += count[t * kBuckets + b];
    }
    uint64_t* out = s->items.data();
    split(tasks, [&](int64_t t) {
      for (int64_t b = t * kBuckets / tasks; b < (t + 1) * kBuckets / tasks; ++b) {
        uint64_t* dst = out + start[b];
        for (int64_t u = 0; u < tasks; ++u) {
          const int64_t n = count[u * kBuckets + b];
          std::memcpy(dst, runs + run[u * kBuckets + b], static_cast<size_t>(n) * sizeof(uint64_t));
          dst += n;
        }
        SortItemsSerial(out + start[b], start[b + 1] - start[b], &BucketScratch(), kBits);
      }
    });
  }

  // items[slot] is v << 32 | i << 1 | class of the slot's element.
  static void WriteOutputs(const Batch& batch, const RowDesc& row, RowStores stores, Scratch* s,
                           int64_t m, int64_t chunks, const RowSplit& parallel) {
    const int64_t k = row.num_samples;
    const size_t item = DTypeSize(row.label_dtype);
    const int64_t fbytes = row.feature_row_bytes;
    int64_t* out_idx = batch.out_indices + row.out_slot;
    uint8_t* out_lab = batch.out_labels + row.out_label_offset;
    uint8_t* out_feat = batch.out_features + row.out_feature_offset;
    const uint8_t* in_feat = batch.features + row.feature_offset;
    const int64_t pos = row.positive_label, neg = row.negative_label;
    const int64_t pad = Traits(row.label_dtype).padding_label;
    const int64_t per = (k + chunks - 1) / chunks;
    parallel(chunks, [&](int64_t c) {
      const int64_t begin = std::min(k, c * per), end = std::min(k, (c + 1) * per);
      WriteSelected(item, s->items.data(), begin, std::min(end, m), out_idx, out_lab, pos, neg);
      for (int64_t slot = std::max(begin, m); slot < end; ++slot) {
        out_idx[slot] = -1;
        StoreLabel(out_lab + slot * item, item, pad);
      }
      // Feature rows in slot order, straight from the indices just written (padding slots
      // get zero rows). With the prefetch 64 rows ahead this measured as fast as an
      // index-ordered sweep into scattered slots, which needed an inverse permutation
      // whose random writes bounced cache lines between threads (docs/decisions.md K4).
      if (fbytes > 0) {
        GatherRows(out_idx + begin, nullptr, end - begin, fbytes, in_feat,
                   out_feat + begin * fbytes, stores);
      }
    });
  }

  const CpuBackendOptions options_;
  ThreadPool pool_;
  std::vector<Scratch> scratch_;
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options) {
  return std::make_unique<CpuBackend>(options);
}

std::unique_ptr<Backend> MakeCpuBackend(int threads) {
  CpuBackendOptions options;
  options.threads = threads;
  return MakeCpuBackend(options);
}

}  // namespace gpusampler::kernels
