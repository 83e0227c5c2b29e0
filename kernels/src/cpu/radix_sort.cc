#include "cpu/radix_sort.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace gpusampler::kernels::cpu {
namespace {

constexpr int64_t kSmallSortMax = 16384;
constexpr int64_t kMediumSortMax = 256 * kSmallSortMax / 4;  // buckets of 4k items on average

// Per-thread digit counters of the small-n path of SortByHighWord (two digits of at most
// 11 bits).
std::vector<uint32_t>& DigitCounts() {
  thread_local std::vector<uint32_t> counts(2 << 11);
  return counts;
}

// Small n (<= kSmallSortMax): two stable counting passes (LSD) on the 2d bits below the
// shared top bits, d chosen so that 2^(2d) is well above n^2 (n = 1e3: 16 bits, n = 1e4: 20
// bits); keys are uniform, so only about n^2 / 2^(2d+1) pairs (8 for n = 1e3, 48 for 1e4) are
// left out of order, and one insertion sort on the whole word finishes with almost no
// mispredicted branch. The earlier single pass into ~n buckets left ~n/4 pairs out of order,
// one mispredicted branch each, and summed ~n counters: 10-25% slower (n = 1e3 .. 1.6e4,
// best of 300, Zen 4: 3.2-3.5 vs 2.75 ns per item at n = 1e3).
void SortSmall(uint64_t* items, int64_t n, uint64_t* mid, int equal_top_bits) {
  int lg = 0;
  while ((int64_t{1} << lg) < n) ++lg;
  const int d = std::clamp((lg + 6) / 2, 6, 11);
  const int top_shift = 64 - equal_top_bits - d;
  const int low_shift = std::max(0, top_shift - d);
  const uint64_t mask = (uint64_t{1} << d) - 1;
  std::vector<uint32_t>& count_buf = DigitCounts();
  uint32_t* c_low = count_buf.data();
  uint32_t* c_top = count_buf.data() + (size_t{1} << d);
  std::fill(count_buf.begin(), count_buf.begin() + (int64_t{2} << d), 0u);
  for (int64_t j = 0; j < n; ++j) {
    ++c_low[(items[j] >> low_shift) & mask];
    ++c_top[(items[j] >> top_shift) & mask];
  }
  uint32_t sum_low = 0, sum_top = 0;
  for (int b = 0; b < (1 << d); ++b) {
    const uint32_t l = c_low[b], t = c_top[b];
    c_low[b] = sum_low;
    c_top[b] = sum_top;
    sum_low += l;
    sum_top += t;
  }
  for (int64_t j = 0; j < n; ++j) mid[c_low[(items[j] >> low_shift) & mask]++] = items[j];
  for (int64_t j = 0; j < n; ++j) items[c_top[(mid[j] >> top_shift) & mask]++] = mid[j];
  for (int64_t j = 1; j < n; ++j) {
    const uint64_t x = items[j];
    int64_t at = j;
    while (at > 0 && items[at - 1] > x) {
      items[at] = items[at - 1];
      --at;
    }
    items[at] = x;
  }
}

// Medium n (up to 256 small sorts): one pass scatters the items into 256 buckets by the 8
// bits below the shared top bits, then each bucket (a few thousand items, in L1 or L2) is
// sorted by SortSmall. Against the three-pass radix sort below, B = 32 x 1e6 (1e5 items a
// row) on one thread took 153 ms against 157-160 ms (docs/decisions.md K2).
void SortMedium(uint64_t* items, int64_t n, uint64_t* tmp, int equal_top_bits) {
  constexpr int kBits = 8, kBuckets = 1 << kBits;
  const int shift = 64 - equal_top_bits - kBits;
  int64_t start[kBuckets + 1] = {};
  for (int64_t j = 0; j < n; ++j) ++start[((items[j] >> shift) & (kBuckets - 1)) + 1];
  for (int b = 0; b < kBuckets; ++b) start[b + 1] += start[b];
  int64_t at[kBuckets];
  std::copy(start, start + kBuckets, at);
  for (int64_t j = 0; j < n; ++j) tmp[at[(items[j] >> shift) & (kBuckets - 1)]++] = items[j];
  for (int b = 0; b < kBuckets; ++b) {
    const int64_t size = start[b + 1] - start[b];
    uint64_t* bucket = tmp + start[b];
    if (size < 32) {
      std::sort(bucket, bucket + size);
    } else if (size <= kSmallSortMax) {
      SortSmall(bucket, size, items + start[b], equal_top_bits + kBits);
    } else {
      std::sort(bucket, bucket + size);  // not for uniform keys: a bucket holds ~n / 256
    }
  }
  std::memcpy(items, tmp, static_cast<size_t>(n) * sizeof(uint64_t));
}

// Large n: LSD radix sort, digits of 11, 11 and 10 bits over bits 32..63; each pass is stable.
void SortLarge(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp) {
  constexpr int kShifts[3] = {32, 43, 54};
  constexpr int kBits[3] = {11, 11, 10};
  uint64_t* src = items;
  uint64_t* dst = tmp->data();
  std::vector<int64_t> count(1 << 11);
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const uint64_t mask = (uint64_t{1} << kBits[pass]) - 1;
    std::fill(count.begin(), count.end(), 0);
    for (int64_t j = 0; j < n; ++j) ++count[(src[j] >> shift) & mask];
    int64_t sum = 0;
    for (auto& c : count) {
      const int64_t here = c;
      c = sum;
      sum += here;
    }
    for (int64_t j = 0; j < n; ++j) dst[count[(src[j] >> shift) & mask]++] = src[j];
    std::swap(src, dst);
  }
  // Three passes leave the result in tmp.
  std::memcpy(items, src, static_cast<size_t>(n) * sizeof(uint64_t));
}

}  // namespace

void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp, int equal_top_bits) {
  if (n < 2) return;
  if (static_cast<int64_t>(tmp->size()) < n) tmp->resize(n);
  if (n < 32) {
    // Tiny: a comparison sort on the whole word gives the same order (low words are
    // distinct, already the tie-break).
    std::sort(items, items + n);
  } else if (n <= kSmallSortMax) {
    SortSmall(items, n, tmp->data(), equal_top_bits);
  } else if (n <= kMediumSortMax && equal_top_bits <= 16) {
    SortMedium(items, n, tmp->data(), equal_top_bits);
  } else {
    SortLarge(items, n, tmp);
  }
}

}  // namespace gpusampler::kernels::cpu
