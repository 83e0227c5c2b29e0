// Helpers of the class path's stages (classes_keys.hpp, classes_select.hpp): a tile's row,
// the 96-bit (key, i) comparisons of the radix select, and the rounds' digit positions.
// See pipeline/README.md.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pipeline/block_helpers.hpp"
#include "pipeline/params.hpp"

namespace gpusampler::kernels::pipeline {

// A class tile's row (the class path's LargeRowState is Params::large, see BindClasses).
struct ClassTile {
  RowDesc row;
  int64_t begin = 0;  // the tile's elements [begin, end) of the row
  int64_t end = 0;
  int64_t base = 0;  // the row's first element in class_keys / class_codes
  int32_t l = 0;     // class row
  int32_t first_pair = 0;
  int32_t open = 0;
  int32_t pad = 0;
};

// By thread 0 of tile `block`; the caller stores it to shared memory. `open` (the row's open
// pairs) only once ClassQuota has written it.
template <class B>
GPUSAMPLER_HD ClassTile LoadClassTile(B& b, const Params& p, int64_t block, bool open) {
  ClassTile tile;
  tile.l = LargeOfTile(b, p, block, false);
  const LargeRowState* st = p.large + tile.l;
  tile.row = b.Load(p.rows + b.Load(&st->row));
  tile.begin = (block - b.Load(&st->first_tile)) * p.tile_elements;
  tile.end = tile.begin + p.tile_elements < tile.row.length ? tile.begin + p.tile_elements
                                                            : tile.row.length;
  tile.base = b.Load(&st->cand_base);
  tile.first_pair = b.Load(&st->first_pair);
  tile.open = open ? b.Load(&st->open) : 0;
  return tile;
}

// The parts of a compiled class table (classes.hpp's layout), addressed without reading it.
struct ClassTablePtrs {
  const ClassTableHeader* header;
  const ClassRange* ranges;
  const ClassEntry* classes;
  const int32_t* fill;
};
template <class B>
GPUSAMPLER_HD ClassTablePtrs ClassTableOf(B& b, const Params& p, const RowDesc& row,
                                          int32_t* num_ranges) {
  ClassTablePtrs t;
  const uint8_t* base = p.class_tables + row.class_table;
  t.header = reinterpret_cast<const ClassTableHeader*>(base);
  *num_ranges = b.Load(&t.header->num_ranges);
  t.ranges = reinterpret_cast<const ClassRange*>(base + sizeof(ClassTableHeader));
  t.classes = reinterpret_cast<const ClassEntry*>(t.ranges + *num_ranges);
  t.fill = reinterpret_cast<const int32_t*>(t.classes + row.num_classes);
  return t;
}

// A pair's prefix as the tile stages read it (shared memory, one per class of the row).
struct ClassPrefix {
  uint64_t pk;
  uint32_t pi;
  int32_t lo;
  int32_t active;  // ClassHist: the select is open; ClassCollect: mode
  int32_t selection;
};

// x's bits [bit, 64), shifted down (0 for bit 64).
GPUSAMPLER_HD uint64_t Above64(uint64_t x, int bit) { return bit >= 64 ? 0 : x >> bit; }

// Whether (k, i) and (pk, pi) agree on bits [bit, 96) of (k << 32 | i).
GPUSAMPLER_HD bool AgreeAbove(uint64_t k, uint32_t i, uint64_t pk, uint32_t pi, int bit) {
  if (bit >= 32) return Above64(k, bit - 32) == Above64(pk, bit - 32);
  return k == pk && (i >> bit) == (pi >> bit);
}

// Whether bits [lo, 96) of (k, i) are at most those of (pk, pi): the selection test.
GPUSAMPLER_HD bool AtOrBelow(uint64_t k, uint32_t i, uint64_t pk, uint32_t pi, int lo) {
  if (lo >= 32) return Above64(k, lo - 32) <= Above64(pk, lo - 32);
  return k < pk || (k == pk && (i >> lo) <= (pi >> lo));
}

// The 8-bit digit of (k, i) at bits [lo, lo + 8).
GPUSAMPLER_HD int DigitAt(uint64_t k, uint32_t i, int lo) {
  return static_cast<int>((lo >= 32 ? k >> (lo - 32) : uint64_t{i} >> lo) & 0xFF);
}

// The top bit (exclusive) of round r's digit: eight rounds over the key, then the index's
// `index_digits` digits.
GPUSAMPLER_HD int ClassRoundHi(int r, int index_digits) {
  return r < kClassKeyRounds ? 96 - 8 * r : 8 * index_digits - 8 * (r - kClassKeyRounds);
}

}  // namespace gpusampler::kernels::pipeline
