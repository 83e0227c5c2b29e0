// The CPU backend's candidate filter and class count over label tiles, one version per
// instruction set (isa.hpp). Not part of the public API.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu/isa.hpp"
#include "cpu/key_tiles.hpp"
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

}  // namespace gpusampler::kernels::cpu
