// gpusampler-cpu-forms: per-element cost of the instruction forms the CPU backend could use
// in its AVX-512 / AVX2 paths, and of each instruction-set version of its bulk functions, on
// the machine it runs on. It is the measurement behind the choices in cpu_select.cc
// (docs/decisions.md K3): forms that are fast on one x86 family and slow on the other
// (memory-destination compress, masked stores, gathers, mask-to-GPR + popcnt chains).
//
//   gpusampler-cpu-forms [--reps R] [--json]
//
// Every number is the best of R repetitions (default 31) of a loop over L1-resident data,
// in nanoseconds per element; the median is printed beside it. The machine's load matters:
// run it on an idle core, or read the best-of column.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#endif

#include "cpu/filter_tiles.hpp"
#include "cpu/isa.hpp"
#include "cpu/key_tiles.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gk = gpusampler::kernels;
namespace cpu = gpusampler::kernels::cpu;

namespace {

struct Result {
  std::string name;
  double best_ns = 0, median_ns = 0;
};

int g_reps = 31;
std::vector<Result> g_results;
volatile uint64_t g_sink;

// Times `body` (which handles `elements` elements per call) R times, each run repeating it
// until about 0.5 ms have passed; keeps the best and the median per element.
void Measure(const std::string& name, int64_t elements, const std::function<uint64_t()>& body) {
  using Clock = std::chrono::steady_clock;
  int64_t calls = 1;
  for (;;) {  // calibrate
    const auto t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) g_sink = g_sink + body();
    if (std::chrono::duration<double>(Clock::now() - t0).count() > 5e-4) break;
    calls *= 2;
  }
  std::vector<double> ns;
  for (int r = 0; r < g_reps; ++r) {
    const auto t0 = Clock::now();
    for (int64_t c = 0; c < calls; ++c) g_sink = g_sink + body();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    ns.push_back(s * 1e9 / static_cast<double>(calls * elements));
  }
  std::sort(ns.begin(), ns.end());
  g_results.push_back({name, ns.front(), ns[ns.size() / 2]});
}

constexpr int kGroup = 4096;  // elements per body call (L1-resident inputs, L1/L2 outputs)

struct Data {
  std::vector<uint64_t> packed;  // kGroup packed keys
  std::vector<uint8_t> mask8;    // kGroup / 8 masks of a taken lane set (~half taken)
  std::vector<int64_t> labels64;
  std::vector<int8_t> labels8;
  std::vector<uint32_t> keys;
  std::vector<uint64_t> out;
  std::vector<uint32_t> index;  // random indices below kGroup (gather)
};

Data MakeData() {
  std::mt19937_64 gen(7);
  Data d;
  d.packed.resize(kGroup);
  d.keys.resize(kGroup);
  d.labels64.resize(kGroup);
  d.labels8.resize(kGroup);
  d.index.resize(kGroup);
  for (int j = 0; j < kGroup; ++j) {
    d.keys[j] = static_cast<uint32_t>(gen());
    d.packed[j] = gk::PackKey(d.keys[j], static_cast<uint64_t>(j));
    d.labels64[j] = static_cast<int64_t>(gen() & 1);
    d.labels8[j] = static_cast<int8_t>(d.labels64[j]);
    d.index[j] = static_cast<uint32_t>(gen() % kGroup);
  }
  for (int g = 0; g < kGroup / 8; ++g) d.mask8.push_back(static_cast<uint8_t>(gen()));
  d.out.resize(kGroup + 64);
  return d;
}

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

// --- compress of 8 packed keys under a mask, at a moving output position ---
__attribute__((target("avx512f,popcnt"), noinline)) uint64_t CompressMemory(const Data& d,
                                                                            uint64_t* out) {
  int64_t p = 0;
  for (int g = 0; g < kGroup / 8; ++g) {
    const __m512i v = _mm512_loadu_si512(d.packed.data() + 8 * g);
    const __mmask8 m = d.mask8[g];
    _mm512_mask_compressstoreu_epi64(out + p, m, v);
    p += _mm_popcnt_u32(m);
  }
  return static_cast<uint64_t>(p);
}

__attribute__((target("avx512f,popcnt"), noinline)) uint64_t CompressRegisterStore(const Data& d,
                                                                                   uint64_t* out) {
  int64_t p = 0;
  for (int g = 0; g < kGroup / 8; ++g) {
    const __m512i v = _mm512_loadu_si512(d.packed.data() + 8 * g);
    const __mmask8 m = d.mask8[g];
    _mm512_storeu_si512(out + p, _mm512_maskz_compress_epi64(m, v));
    p += _mm_popcnt_u32(m);
  }
  return static_cast<uint64_t>(p);
}

__attribute__((target("avx512f,popcnt"), noinline)) uint64_t CompressRegisterMaskedStore(
    const Data& d, uint64_t* out) {
  int64_t p = 0;
  for (int g = 0; g < kGroup / 8; ++g) {
    const __m512i v = _mm512_loadu_si512(d.packed.data() + 8 * g);
    const __mmask8 m = d.mask8[g];
    const unsigned c = _mm_popcnt_u32(m);
    _mm512_mask_storeu_epi64(out + p, static_cast<__mmask8>((1u << c) - 1),
                             _mm512_maskz_compress_epi64(m, v));
    p += c;
  }
  return static_cast<uint64_t>(p);
}

__attribute__((target("avx2,popcnt"), noinline)) uint64_t CompressAvx2Table(const Data& d,
                                                                            uint64_t* out) {
  int64_t p = 0;
  for (int g = 0; g < kGroup / 4; ++g) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d.packed.data() + 4 * g));
    const unsigned m = (d.mask8[g / 2] >> (4 * (g & 1))) & 0xF;
    const __m256i perm =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(cpu::kCompressTable.perm[m]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + p), _mm256_permutevar8x32_epi32(v, perm));
    p += _mm_popcnt_u32(m);
  }
  return static_cast<uint64_t>(p);
}

__attribute__((noinline)) uint64_t CompressScalar(const Data& d, uint64_t* out) {
  int64_t p = 0;
  for (int j = 0; j < kGroup; ++j) {
    out[p] = d.packed[j];
    p += (d.mask8[j / 8] >> (j & 7)) & 1;
  }
  return static_cast<uint64_t>(p);
}

// --- counting matches: mask to GPR + popcnt, or a masked vector subtract ---
__attribute__((target("avx512f,popcnt"), noinline)) uint64_t CountKmovPopcnt(const Data& d) {
  const __m512i pos = _mm512_set1_epi64(1), neg = _mm512_set1_epi64(0);
  int64_t p = 0, q = 0;
  for (int j = 0; j < kGroup; j += 8) {
    const __m512i lab = _mm512_loadu_si512(d.labels64.data() + j);
    p += _mm_popcnt_u32(_mm512_cmpeq_epi64_mask(lab, pos));
    q += _mm_popcnt_u32(_mm512_cmpeq_epi64_mask(lab, neg));
  }
  return static_cast<uint64_t>(p * 3 + q);
}

__attribute__((target("avx512f"), noinline)) uint64_t CountMaskSub(const Data& d) {
  const __m512i pos = _mm512_set1_epi64(1), neg = _mm512_set1_epi64(0);
  const __m512i minus_one = _mm512_set1_epi64(-1);
  __m512i ap = _mm512_setzero_si512(), aq = _mm512_setzero_si512();
  for (int j = 0; j < kGroup; j += 8) {
    const __m512i lab = _mm512_loadu_si512(d.labels64.data() + j);
    ap = _mm512_mask_sub_epi64(ap, _mm512_cmpeq_epi64_mask(lab, pos), ap, minus_one);
    aq = _mm512_mask_sub_epi64(aq, _mm512_cmpeq_epi64_mask(lab, neg), aq, minus_one);
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(ap) * 3 + _mm512_reduce_add_epi64(aq));
}

// --- the tail store of 16 order keys: masked store, or a register spill + memcpy ---
__attribute__((target("avx512f"), noinline)) uint64_t TailMaskedStore(const Data& d,
                                                                      uint32_t* out) {
  for (int g = 0; g < kGroup / 16; ++g) {
    const __m512i v = _mm512_loadu_si512(d.keys.data() + 16 * g);
    const int left = 1 + (g & 15);
    _mm512_mask_storeu_epi32(out + 16 * g, static_cast<__mmask16>((1u << left) - 1), v);
  }
  return out[7];
}

__attribute__((target("avx512f"), noinline)) uint64_t TailSpillCopy(const Data& d, uint32_t* out) {
  for (int g = 0; g < kGroup / 16; ++g) {
    const __m512i v = _mm512_loadu_si512(d.keys.data() + 16 * g);
    const int left = 1 + (g & 15);
    alignas(64) uint32_t tmp[16];
    _mm512_store_si512(tmp, v);
    std::memcpy(out + 16 * g, tmp, static_cast<size_t>(left) * sizeof(uint32_t));
  }
  return out[7];
}

// The AVX2 form of the same tail (8 keys): vpmaskmovd, or a spill + memcpy.
__attribute__((target("avx2"), noinline)) uint64_t TailAvx2MaskMov(const Data& d, uint32_t* out) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int g = 0; g < kGroup / 8; ++g) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d.keys.data() + 8 * g));
    const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(1 + (g & 7)), lanes);
    _mm256_maskstore_epi32(reinterpret_cast<int*>(out + 8 * g), mask, v);
  }
  return out[7];
}

__attribute__((target("avx2"), noinline)) uint64_t TailAvx2SpillCopy(const Data& d, uint32_t* out) {
  for (int g = 0; g < kGroup / 8; ++g) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(d.keys.data() + 8 * g));
    alignas(32) uint32_t tmp[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), v);
    std::memcpy(out + 8 * g, tmp, static_cast<size_t>(1 + (g & 7)) * sizeof(uint32_t));
  }
  return out[7];
}

// --- 16 random 32-bit loads: a gather instruction, or scalar loads ---
__attribute__((target("avx512f"), noinline)) uint64_t GatherInstruction(const Data& d,
                                                                        uint32_t* out) {
  for (int g = 0; g < kGroup / 16; ++g) {
    const __m512i idx = _mm512_loadu_si512(d.index.data() + 16 * g);
    _mm512_storeu_si512(out + 16 * g, _mm512_i32gather_epi32(idx, d.keys.data(), 4));
  }
  return out[5];
}

__attribute__((noinline)) uint64_t GatherScalar(const Data& d, uint32_t* out) {
  for (int j = 0; j < kGroup; ++j) out[j] = d.keys[d.index[j]];
  return out[5];
}
#endif  // x86-64 GCC

void MeasureForms(Data& d) {
#if defined(__x86_64__) && defined(__GNUC__)
  uint64_t* out = d.out.data();
  std::vector<uint32_t> out32(kGroup + 64);
  if (cpu::IsaSupported(cpu::Isa::kAvx512)) {
    Measure("compress: vpcompressq to memory (_mm512_mask_compressstoreu_epi64)", kGroup,
            [&] { return CompressMemory(d, out); });
    Measure("compress: vpcompressq to register + vmovdqu64 store", kGroup,
            [&] { return CompressRegisterStore(d, out); });
    Measure("compress: vpcompressq to register + masked store", kGroup,
            [&] { return CompressRegisterMaskedStore(d, out); });
  }
  if (cpu::IsaSupported(cpu::Isa::kAvx2)) {
    Measure("compress: AVX2 vpermd table + store", kGroup,
            [&] { return CompressAvx2Table(d, out); });
  }
  Measure("compress: scalar branch-free", kGroup, [&] { return CompressScalar(d, out); });
  if (cpu::IsaSupported(cpu::Isa::kAvx512)) {
    Measure("count: vpcmpq to k + kmov + popcnt", kGroup, [&] { return CountKmovPopcnt(d); });
    Measure("count: vpcmpq to k + masked vpsubq accumulate", kGroup,
            [&] { return CountMaskSub(d); });
    Measure("tail store of 1..16 keys: masked vmovdqu32", kGroup,
            [&] { return TailMaskedStore(d, out32.data()); });
    Measure("tail store of 1..16 keys: register spill + memcpy", kGroup,
            [&] { return TailSpillCopy(d, out32.data()); });
    Measure("16 random loads: vpgatherdd", kGroup,
            [&] { return GatherInstruction(d, out32.data()); });
  }
  if (cpu::IsaSupported(cpu::Isa::kAvx2)) {
    Measure("tail store of 1..8 keys: AVX2 vpmaskmovd", kGroup,
            [&] { return TailAvx2MaskMov(d, out32.data()); });
    Measure("tail store of 1..8 keys: AVX2 register spill + memcpy", kGroup,
            [&] { return TailAvx2SpillCopy(d, out32.data()); });
  }
  Measure("16 random loads: scalar", kGroup, [&] { return GatherScalar(d, out32.data()); });
#else
  (void)d;
#endif
}

// The backend's bulk functions, per instruction-set version.
void MeasureVersions(const Data& d) {
  std::mt19937_64 gen(3);
  std::vector<uint32_t> sel(1024);
  for (auto& s : sel) s = static_cast<uint32_t>(gen() % 1000000);
  std::sort(sel.begin(), sel.end());
  alignas(64) static uint32_t keys[cpu::kTileElements];
  std::vector<uint32_t> vkeys(sel.size());
  std::vector<uint64_t> pos(cpu::kTileElements + cpu::kFilterSlack),
      neg(cpu::kTileElements + cpu::kFilterSlack);
  for (cpu::Isa isa : cpu::kAllIsas) {
    if (!cpu::IsaSupported(isa)) continue;
    const std::string name = cpu::IsaName(isa);
    Measure(name + ": KeyTile (selection keys, 4 per Philox call)", cpu::kTileElements * 16, [&] {
      for (int t = 0; t < 16; ++t) cpu::KeyTile(isa, 42, 1, gk::kSelectionStream, 256u * t, keys);
      return uint64_t{keys[3]};
    });
    Measure(name + ": KeysOfElements (order keys, 1 call each)", static_cast<int64_t>(sel.size()),
            [&] {
              cpu::KeysOfElements(isa, 42, 1, gk::kOrderStream, sel.data(),
                                  static_cast<int64_t>(sel.size()), vkeys.data());
              return uint64_t{vkeys[5]};
            });
    Measure(name + ": FilterTile int64 labels, bounds keep ~1/5", kGroup, [&] {
      int64_t np = 0, nq = 0, total = 0;
      for (int t = 0; t < kGroup / cpu::kTileElements; ++t) {
        np = nq = 0;
        cpu::FilterTile(isa, 8, true, d.labels64.data() + t * cpu::kTileElements,
                        d.keys.data() + t * cpu::kTileElements, 256u * t, 1, 0, 0x33333333u,
                        0x33333333u, pos.data(), &np, neg.data(), &nq);
        total += np + nq;
      }
      return static_cast<uint64_t>(total);
    });
    Measure(name + ": FilterTile int64 labels, keep all", kGroup, [&] {
      int64_t np = 0, nq = 0, total = 0;
      for (int t = 0; t < kGroup / cpu::kTileElements; ++t) {
        np = nq = 0;
        cpu::FilterTile(isa, 8, true, d.labels64.data() + t * cpu::kTileElements,
                        d.keys.data() + t * cpu::kTileElements, 256u * t, 1, 0, uint64_t{1} << 32,
                        uint64_t{1} << 32, pos.data(), &np, neg.data(), &nq);
        total += np + nq;
      }
      return static_cast<uint64_t>(total);
    });
    Measure(name + ": CountLabels int64", kGroup, [&] {
      int64_t p = 0, q = 0;
      cpu::CountLabels(isa, 8, true, d.labels64.data(), kGroup, 1, 0, &p, &q);
      return static_cast<uint64_t>(p + 3 * q);
    });
    Measure(name + ": CountLabels int8", kGroup, [&] {
      int64_t p = 0, q = 0;
      cpu::CountLabels(isa, 1, true, d.labels8.data(), kGroup, 1, 0, &p, &q);
      return static_cast<uint64_t>(p + 3 * q);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--json") == 0) {
      json = true;
    } else if (std::strcmp(argv[a], "--reps") == 0 && a + 1 < argc) {
      g_reps = std::max(1, std::atoi(argv[++a]));
    } else {
      std::fprintf(stderr, "usage: gpusampler-cpu-forms [--reps R] [--json]\n");
      return 2;
    }
  }
  Data d = MakeData();
  MeasureForms(d);
  MeasureVersions(d);
  const cpu::CpuId id = cpu::DetectCpu();
  if (json) {
    for (const auto& r : g_results) {
      std::printf(
          "{\"form\": \"%s\", \"best_ns_per_element\": %.4f, \"median_ns_per_element\": %.4f, "
          "\"vendor\": \"%s\", \"family\": %d, \"model\": %d, \"active_isa\": \"%s\"}\n",
          r.name.c_str(), r.best_ns, r.median_ns, id.vendor.c_str(), id.family, id.model,
          cpu::KeyIsaName());
    }
    return 0;
  }
  std::printf("CPU: %s family 0x%x model 0x%x; active ISA %s (%s); best of %d\n", id.vendor.c_str(),
              id.family, id.model, cpu::KeyIsaName(), cpu::IsaChoice(), g_reps);
  std::printf("%-66s %10s %10s\n", "form", "best ns/el", "median");
  for (const auto& r : g_results) {
    std::printf("%-66s %10.3f %10.3f\n", r.name.c_str(), r.best_ns, r.median_ns);
  }
  return 0;
}
