// elements.hpp: the device run of an ELEMENTS step (cuda-sim everywhere, CUDA device 0 where
// one is present) against the host reference, byte for byte, and the host reference against
// the arithmetic of SPEC section 8 written out here (positions of the class's pass).
#include "gpusampler/kernels/elements.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

// A row of `n` elements, members of class c where i % classes == c; labels of `label_bytes`
// and feature rows of `frow` random bytes.
struct Row {
  std::vector<std::vector<uint32_t>> members;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;
};

Row MakeRow(int64_t n, int classes, size_t label_bytes, size_t frow, uint32_t seed) {
  std::mt19937 rng(seed);
  Row r;
  r.members.resize(static_cast<size_t>(classes));
  for (int64_t i = 0; i < n; ++i) {
    r.members[static_cast<size_t>(i % classes)].push_back(static_cast<uint32_t>(i));
  }
  r.labels.resize(static_cast<size_t>(n) * label_bytes);
  for (auto& b : r.labels) b = static_cast<uint8_t>(rng());
  r.features.resize(static_cast<size_t>(n) * frow);
  for (auto& b : r.features) b = static_cast<uint8_t>(rng());
  return r;
}

// The step's args over `lists` (one pointer per class), quotas `m`.
ElementsStepArgs Args(const Row& r, const std::vector<const uint32_t*>& lists,
                      const std::vector<int64_t>& m, int64_t g, FeistelKey key) {
  ElementsStepArgs a;
  a.key = key;
  a.g = g;
  for (size_t c = 0; c < m.size(); ++c) {
    ElementsClass k;
    k.members = lists[c];
    k.n = r.members[c].size();
    k.m = m[c];
    k.pass_len = static_cast<int64_t>(k.n) / k.m * k.m;
    k.tag = static_cast<uint32_t>(c);
    k.first_slot = a.slots;
    a.slots += k.m;
    a.classes.push_back(k);
  }
  return a;
}

TEST(ElementsHostTest, SlotsAreTheClassPassPositions) {
  const Row r = MakeRow(1000, 3, 2, 0, 1);
  std::vector<const uint32_t*> lists;
  for (const auto& m : r.members) lists.push_back(m.data());
  const FeistelKey key{0x1234567890abcdefULL, 7};
  const std::vector<int64_t> m = {5, 11, 2};
  for (const int64_t g : {int64_t{0}, int64_t{29}, int64_t{31}}) {
    ElementsStepArgs a = Args(r, lists, m, g, key);
    a.labels = r.labels.data();
    a.label_bytes = 2;
    ElementsStepOut out;
    ElementsStepHost(a, &out);
    ASSERT_EQ(out.indices.size(), 18u);
    size_t s = 0;
    for (size_t c = 0; c < m.size(); ++c) {
      const uint64_t n = r.members[c].size();
      const int64_t pass = static_cast<int64_t>(n) / m[c] * m[c];
      std::set<int64_t> seen;
      for (int64_t q = g * m[c]; q < (g + 1) * m[c]; ++q, ++s) {
        const uint64_t j =
            FeistelPermute(key, n, static_cast<uint32_t>(c), static_cast<uint32_t>(q / pass),
                           static_cast<uint64_t>(q % pass));
        EXPECT_EQ(out.indices[s], r.members[c][j]) << "class " << c << " q " << q;
        EXPECT_EQ(out.indices[s] % 3, static_cast<int64_t>(c));
        EXPECT_TRUE(seen.insert(out.indices[s]).second) << "a member twice in one step";
        EXPECT_EQ(std::memcmp(&out.labels[s * 2], &r.labels[out.indices[s] * 2], 2), 0);
      }
    }
  }
}

// Copies `bytes` of `src` into new memory of `device`.
void* Upload(int device, const void* src, size_t bytes) {
  void* p = DeviceAlloc(device, bytes == 0 ? 1 : bytes);
  CopyToDevice(device, p, src, bytes);
  return p;
}

class ElementsOnDeviceTest : public ::testing::TestWithParam<int> {};

TEST_P(ElementsOnDeviceTest, MatchesTheHostReferenceByteForByte) {
  const int device = GetParam();
  if (device != kSimDevice && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  struct Case {
    int64_t n;
    int classes;
    size_t label_bytes, frow;
    std::vector<int64_t> m;
    bool with_labels;
  };
  const Case cases[] = {
      {2, 2, 1, 0, {1, 1}, true},
      {1000, 2, 8, 12, {100, 156}, true},
      {4097, 3, 4, 3, {300, 1, 7}, true},
      {50000, 2, 1, 0, {1, 255}, false},
      {70001, 4, 2, 64, {256, 256, 1, 300}, true},
  };
  uint32_t seed = 10;
  for (const Case& k : cases) {
    const Row r = MakeRow(k.n, k.classes, k.label_bytes, k.frow, ++seed);
    std::vector<const uint32_t*> host_lists, dev_lists;
    std::vector<void*> owned;
    for (const auto& m : r.members) {
      host_lists.push_back(m.data());
      owned.push_back(Upload(device, m.data(), m.size() * 4));
      dev_lists.push_back(static_cast<const uint32_t*>(owned.back()));
    }
    void* dl = Upload(device, r.labels.data(), r.labels.size());
    void* df = Upload(device, r.features.data(), r.features.size());
    owned.push_back(dl);
    owned.push_back(df);
    const FeistelKey key{seed * 0x9e3779b97f4a7c15ULL, seed};
    for (const int64_t g : {int64_t{0}, int64_t{1}, int64_t{5}}) {
      ElementsStepArgs h = Args(r, host_lists, k.m, g, key);
      ElementsStepArgs d = Args(r, dev_lists, k.m, g, key);
      if (k.with_labels) {
        h.labels = r.labels.data();
        d.labels = static_cast<const uint8_t*>(dl);
        h.label_bytes = d.label_bytes = k.label_bytes;
      }
      if (k.frow > 0) {
        h.features = r.features.data();
        d.features = static_cast<const uint8_t*>(df);
        h.feature_row_bytes = d.feature_row_bytes = k.frow;
      }
      ElementsStepOut want, got;
      ElementsStepHost(h, &want);
      ElementsStepOnDevice(device, d, &got);
      EXPECT_EQ(got.indices, want.indices) << "n " << k.n << " g " << g;
      EXPECT_EQ(got.labels, want.labels) << "n " << k.n << " g " << g;
      EXPECT_EQ(got.features, want.features) << "n " << k.n << " g " << g;
      EXPECT_EQ(got.labels.size(), k.with_labels ? h.slots * k.label_bytes : 0u);
    }
    for (void* p : owned) DeviceFree(p);
  }
}

TEST_P(ElementsOnDeviceTest, CopyToHostReadsDeviceMemory) {
  const int device = GetParam();
  if (device != kSimDevice && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<uint8_t> bytes(1001);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 7);
  void* p = Upload(device, bytes.data(), bytes.size());
  std::vector<uint8_t> back(bytes.size());
  ElementsCopyToHost(device, back.data(), p, back.size());
  DeviceFree(p);
  EXPECT_EQ(back, bytes);
}

INSTANTIATE_TEST_SUITE_P(Devices, ElementsOnDeviceTest, ::testing::Values(kSimDevice, 0),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return p.param == kSimDevice ? std::string("CudaSim")
                                                        : std::string("Cuda0");
                         });

}  // namespace
}  // namespace gpusampler::kernels
