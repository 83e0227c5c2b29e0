// The CPU backend's class path (SPEC section 7): rows with a compiled class table. Not part of
// the public API; cpu_backend.cc sends every row with class_table >= 0 here.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/isa.hpp"
#include "cpu/thread_pool.hpp"
#include "gpusampler/kernels/gather.hpp"
#include "gpusampler/kernels/host_buffer.hpp"
#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels::cpu {

// One class-path candidate: the selection key and the element's index. Keys compare with the
// index as the tie-break, so (key, index) is a strict order.
struct ClassCandidate {
  uint64_t key;
  uint32_t index;
  uint32_t pad;
};

// Reusable buffers of the class path, one per thread that samples rows; grown, never shrunk.
struct ClassScratch {
  // The three large ones are sized for the whole row and never read before written:
  // ScratchVector leaves them unwritten when they grow (host_buffer.hpp).
  ScratchVector<uint8_t> codes;        // the class-code pass's codes (1 or 2 bytes each)
  std::vector<int64_t> chunk_counts;   // [chunk][lane][C + 1]: elements per code
  std::vector<int64_t> chunk_found;    // [chunk][lane][C]: candidates the chunk's lane kept
  std::vector<int64_t> region;         // [C][chunk][lane]: first candidate slot (cand or packed)
  ScratchVector<ClassCandidate> cand;  // WEIGHTED and ranked candidates, by class, chunk, lane
  ScratchVector<uint64_t> packed;      // UNIFORM, HARDEST and keep-all candidates, likewise
  std::vector<uint32_t> selected;      // indices of the selection, class after class
  std::vector<uint64_t> items, tmp;    // v << 32 | i of the selection; sort scratch
  // Per class of the row: members n, quotas m, first selection slot, candidate bound, mode.
  std::vector<int64_t> n, m, first, found;
  std::vector<uint64_t> bound;
  std::vector<uint8_t> mode;
  std::vector<int16_t> lut;  // class + 1 of a window of label values (classes.cc LabelLut)
  // HARDEST and WEIGHTED bounds: the sampled members and their keys.
  std::vector<uint32_t> sample_index;
  std::vector<uint64_t> sample_keys;
};

// Options of the class path: CpuBackendOptions' candidate margins, and the instruction set of
// the key tiles (tests force each one; every ISA gives the same bytes).
struct ClassPathOptions {
  double candidate_sigmas = 4.0;
  double candidate_slack = 16.0;
  Isa isa = ActiveIsa();
};

// Samples `row` (class_table >= 0) of `batch` into its output slots, counts and
// out_num_per_class. With `pool`, the row's passes are split over the pool's threads (the
// caller must not be inside a ParallelFor of that pool); without, everything runs on the
// calling thread. Deterministic: the bytes do not depend on the split or the ISA.
void SampleClassRow(const Batch& batch, const RowDesc& row, RowStores stores,
                    const ClassPathOptions& options, ClassScratch* s, ThreadPool* pool);

// The candidate pass's WEIGHTED prefilter (classes.cc), exposed for its tests: writes to `out`
// the indices first + j of the members (codes[j] == wcode, j < n <= 256) that may have a key
// E / w at most `bound` given u alone (a superset of those that do), returns how many; -1 when
// `isa` has no prefilter (portable keys every member).
int WeightedPrefilter(Isa isa, const uint8_t* codes, uint8_t wcode, const uint32_t* u,
                      const float* w, int n, double bound, uint32_t first, uint32_t* out);

}  // namespace gpusampler::kernels::cpu
