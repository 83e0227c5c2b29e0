// Bulk key generation, the candidate filter and the sorting helpers of the CPU backend.
// Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "gpusampler/kernels/dtype.hpp"

namespace gpusampler::kernels::cpu {

// How every label dtype is widened to int64: LabelWordOf (dtype.hpp) gives the C++ type whose
// conversion to int64 is the table's widening. The loaders below take (sizeof, signedness) of
// that type, and every path (portable, AVX2, AVX-512) implements sign- and zero-extension at
// widths 1, 2, 4 and 8, the widths and rules LabelWord accepts.
// Calls fn(const LabelWordOf<dtype>* labels) and returns true; false (fn not called) when
// `dtype` is not a label dtype. The dispatch is dtype.hpp's WithLabelWord.
template <typename Fn>
bool WithLabelWords(DType dtype, const void* labels, Fn&& fn) {
  return WithLabelWord(dtype, [&](auto word) { fn(static_cast<const decltype(word)*>(labels)); });
}

// Elements per call of the tile generator: 64 Philox calls (four elements each).
inline constexpr int kTileElements = 256;

// Spare slots FilterTile needs past the last candidate it writes: its vector versions store
// whole registers (eight packed keys) at the write position, and only the first ones count.
inline constexpr int kFilterSlack = 8;

// vpermd patterns that move the taken 64-bit lanes of a 4-bit mask to the front, in order:
// the AVX2 filter's compress into a register (and the form the bench measures).
struct CompressTable {
  alignas(32) int32_t perm[16][8] = {};
  constexpr CompressTable() {
    for (int mask = 0; mask < 16; ++mask) {
      int at = 0;
      for (int lane = 0; lane < 4; ++lane) {
        if (mask & (1 << lane)) {
          perm[mask][2 * at] = 2 * lane;
          perm[mask][2 * at + 1] = 2 * lane + 1;
          ++at;
        }
      }
    }
  }
};
inline constexpr CompressTable kCompressTable;

// The instruction-set versions of the bulk functions below. Every version computes the same
// results; ActiveIsa() is the one the unqualified functions use.
enum class Isa : int { kPortable = 0, kAvx2 = 1, kAvx512 = 2 };
inline constexpr Isa kAllIsas[] = {Isa::kPortable, Isa::kAvx2, Isa::kAvx512};

const char* IsaName(Isa isa);  // "portable", "avx2", "avx512"
bool ParseIsa(const std::string& name, Isa* isa);
// Whether this CPU (and build) can run `isa`.
bool IsaSupported(Isa isa);

// The CPU as CPUID reports it: vendor string ("GenuineIntel", "AuthenticAMD", ...) and the
// display family and model (base + extended fields).
struct CpuId {
  std::string vendor;
  int family = 0;
  int model = 0;
};
CpuId DetectCpu();

// The version chosen for a CPU by default: the widest supported. (The per-family reasoning
// and its measurements are in docs/decisions.md K3: after the compress-to-register change,
// AVX-512 is the fastest version on both Intel Sapphire Rapids and AMD Zen 4.)
Isa DefaultIsa(const CpuId& cpu, bool has_avx2, bool has_avx512);

// The version in use, chosen once: GPUSAMPLER_PHILOX_ISA=portable|avx2|avx512 when set and
// supported, else DefaultIsa for this CPU. IsaChoice() says why, in words (for logs and the
// bench's JSON).
Isa ActiveIsa();
const char* IsaChoice();

// out[j] = ElementKey(seed, row, stream, first + j) for the kTileElements elements from
// `first` (a multiple of 4): N / 4 Philox calls for N elements.
void KeyTile(uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);
void KeyTile(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, uint64_t first,
             uint32_t out[kTileElements]);

// out[j] = ElementKey(seed, row, stream, indices[j]) for j < n: one call per element (the
// order keys of a selected set). Writes nothing past out[n - 1]. The 64-bit version takes
// any index (tests pin SPEC section 1's high block words with it).
void KeysOfElements(uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out);
void KeysOfElements(Isa isa, uint64_t seed, uint32_t row, uint32_t stream, const uint32_t* indices,
                    int64_t n, uint32_t* out);
void KeysOfElements64(uint64_t seed, uint32_t row, uint32_t stream, const uint64_t* indices,
                      int64_t n, uint32_t* out);

// The key generator's instruction set in use: IsaName(ActiveIsa()).
const char* KeyIsaName();

// Adds to *np / *nq the labels equal to pos_label / neg_label among the n labels at
// `labels` (dtype_size bytes each, signed or not; compared after widening to int64).
void CountLabels(int dtype_size, bool is_signed, const void* labels, int64_t n, int64_t pos_label,
                 int64_t neg_label, int64_t* np, int64_t* nq);
void CountLabels(Isa isa, int dtype_size, bool is_signed, const void* labels, int64_t n,
                 int64_t pos_label, int64_t neg_label, int64_t* np, int64_t* nq);

// The candidate filter on one full tile: for j < kTileElements, element first + j (label
// bytes at labels_tile) goes to pos_out[*np] (and *np grows) when its label equals pos_label
// and keys[j] < pos_bound (at most 2^32), to neg_out likewise; entries are
// PackKey(key, index), in index order. Labels compare after widening to int64. Each output
// needs kFilterSlack spare slots past its last candidate.
void FilterTile(int dtype_size, bool is_signed, const void* labels_tile, const uint32_t* keys,
                uint32_t first, int64_t pos_label, int64_t neg_label, uint64_t pos_bound,
                uint64_t neg_bound, uint64_t* pos_out, int64_t* np, uint64_t* neg_out, int64_t* nq);
void FilterTile(Isa isa, int dtype_size, bool is_signed, const void* labels_tile,
                const uint32_t* keys, uint32_t first, int64_t pos_label, int64_t neg_label,
                uint64_t pos_bound, uint64_t neg_bound, uint64_t* pos_out, int64_t* np,
                uint64_t* neg_out, int64_t* nq);

// Sorts items by their high 32 bits, stably (so items already ordered by their low 32 bits
// end up ordered by the whole 64-bit value). `tmp` is scratch. `equal_top_bits` (< 16) says
// how many top bits all items share (a bucket of an earlier pass), so that the small-n
// bucket pass looks below them.
void SortByHighWord(uint64_t* items, int64_t n, std::vector<uint64_t>* tmp, int equal_top_bits = 0);

}  // namespace gpusampler::kernels::cpu
