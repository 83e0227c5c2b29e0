// Equal order keys: two selected elements with the same v must come out in index order
// (SPEC section 1 orders by the pair (v, i)). With K selected elements a row has about
// K^2 / 2^33 such pairs; the test finds a seed whose row has one, makes the lower index of
// the pair the row's only negative (the CPU backend lists positives before negatives, so a
// sort that kept input order on ties would put the pair the wrong way round), and checks
// every backend against the brute-force reference. Two rows: 10k selected (in a split row,
// the value-range sort) and 30k (> 16k: the radix-sort path), both short enough (< 2^15)
// that unsplit variants keep them whole.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "gpusampler/kernels/philox.hpp"
#include "test_util.hpp"

namespace gpusampler::kernels::testing {
namespace {

// The first seed from `start` whose row 0 of n elements has two equal order keys, and
// the pair's indices.
uint64_t SeedWithTie(int64_t n, uint64_t start, std::pair<int64_t, int64_t>* pair) {
  for (uint64_t seed = start;; ++seed) {
    std::vector<std::pair<uint32_t, int64_t>> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = {ElementKey(seed, 0, kOrderStream, i), i};
    std::sort(v.begin(), v.end());
    for (size_t j = 1; j < v.size(); ++j) {
      if (v[j].first == v[j - 1].first) {
        *pair = {v[j - 1].second, v[j].second};
        return seed;
      }
    }
  }
}

TEST(OrderTiesTest, EqualOrderKeysComeOutInIndexOrderOnEveryBackend) {
  for (const int64_t n : {int64_t{10000}, int64_t{30000}}) {
    SCOPED_TRACE(n);
    std::pair<int64_t, int64_t> tie;
    Case c;
    c.seed = SeedWithTie(n, 1, &tie);
    c.rows = {std::vector<int64_t>(n, 1)};          // every element selected: K = N below
    c.rows[0][static_cast<size_t>(tie.first)] = 0;  // the only negative
    c.spec.num_samples = n;
    c.spec.positive_fraction = 1.0;
    const Result want = Reference(c);
    // The tied pair sits next to each other, lower index first.
    const auto& idx = want.indices[0];
    const auto at = std::find(idx.begin(), idx.end(), tie.first) - idx.begin();
    ASSERT_LT(at + 1, static_cast<int64_t>(idx.size()));
    ASSERT_EQ(idx[at + 1], tie.second) << "seed " << c.seed;
    for (const std::string& backend : AllBackends()) {
      if (!BackendAvailable(backend)) continue;
      const Result got = RunOne(backend, c);
      EXPECT_EQ(got.indices, want.indices)
          << backend << " seed " << c.seed << " tie (" << tie.first << ", " << tie.second << ")";
    }
  }
}

}  // namespace
}  // namespace gpusampler::kernels::testing
