// The GPU sampling pipeline (SPEC section 1), written once for two executors: the CUDA
// device (cuda/pipeline_exec.cuh: each body runs as a __global__ kernel, one CUDA block per
// block index) and the host-run "cuda-sim" device (sim/sim_block.hpp: the blocks run one after
// the other, the threads of a block one phase at a time between barriers). The same bodies,
// the same buffers, the same launch sequence; only the Block (barriers, shared memory, block
// sort, atomics, counted global loads and stores) and the Exec (launch) differ.
//
// Rules for a body, so that both executors agree:
//   - Work happens inside b.Threads(f): f(t) for every thread t, then a barrier. Code outside
//     a phase runs on every thread on the device and once on the host, so it only reads
//     shared or uniform values and computes locals; it has no side effects.
//   - A thread's state that lives across phases is in b.Mine(items, t) (registers on the
//     device, a per-thread slice on the host). Block-wide sorts take such arrays.
//   - Every global memory access goes through b.Load / b.Store / b.GlobalAdd (feature rows:
//     b.LoadFeature / b.StoreFeature), and every shared one through b.SLoad / b.SStore /
//     b.SharedAdd (on b.SharedAs<T>()): the simulator counts both (LaunchStats::bytes_*,
//     smem_bytes; block sorts at cub's traffic), faults on a misaligned global access, on a
//     read of launch scratch this launch has not written, and on a shared-memory race (two
//     threads of one phase on one byte, one of them storing plainly).
//   - A bounded step that finds more than it was sized for calls b.Fail(p.error, code):
//     the device ORs the code into the arena's error word (the host turns a nonzero word
//     into INTERNAL) and the body skips the overflowing writes; cuda-sim throws INTERNAL.
//
// Nothing is read back to the host; every grid size is host-known from the row descriptors
// (Enqueue) or the size class (EnqueueSmallClass).
//
// The stages (grid, file, what each reads and writes) and the small sort are described in
// pipeline/README.md; each stage has its own header, the shared types are in params.hpp.
#pragma once

#include <cstdint>

#include "pipeline/boundary.hpp"
#include "pipeline/bucket_sort.hpp"
#include "pipeline/classes_keys.hpp"
#include "pipeline/classes_select.hpp"
#include "pipeline/fused.hpp"
#include "pipeline/params.hpp"
#include "pipeline/pass1.hpp"
#include "pipeline/pass2.hpp"
#include "pipeline/prepare.hpp"
#include "pipeline/scatter.hpp"
#include "pipeline/threshold.hpp"

namespace gpusampler::kernels::pipeline {

// The large binary rows' stages.
template <class Exec>
void EnqueueLarge(Exec& exec, const Shape& shape, const Layout& layout, uint8_t* arena, Params p) {
  Bind(shape, layout, arena, &p);
  PrepareBody prepare{p, reinterpret_cast<uint64_t*>(arena + layout.zero_begin),
                      static_cast<int64_t>((layout.zero_end - layout.zero_begin) / 8),
                      shape.prepare_blocks};
  exec.Launch(prepare, shape.prepare_blocks);
  exec.Launch(Pass1Body{p}, shape.num_tiles);
  exec.Launch(ThresholdBody{p}, shape.num_large);
  exec.Launch(Pass2Body{p}, shape.num_tiles);
  exec.Launch(BoundaryBody{p}, int64_t{2} * shape.num_large);
  if (shape.num_slot_tiles > 0) {
    exec.Launch(ScatterBody{p}, shape.num_slot_tiles);
    exec.Launch(BucketSortBody{p}, int64_t{shape.num_large} << shape.order_bits);
  }
}

// The class rows' stages (after the binary ones: their arrays alias). Two phases of radix
// select rounds (phase 1 only selects for MIXED classes; its blocks exit early elsewhere),
// then Scatter and BucketSort over the class rows' selected keys.
template <class Exec>
void EnqueueClasses(Exec& exec, const Shape& shape, const Layout& layout, uint8_t* arena,
                    Params p) {
  BindClasses(shape, layout, arena, &p);
  PrepareBody prepare{p, reinterpret_cast<uint64_t*>(arena + layout.class_zero_begin),
                      static_cast<int64_t>((layout.class_zero_end - layout.class_zero_begin) / 8),
                      shape.class_prepare_blocks, /*classes=*/true};
  exec.Launch(prepare, shape.class_prepare_blocks);
  exec.Launch(ClassKeysBody{p}, shape.class_tiles);
  exec.Launch(ClassQuotaBody{p}, shape.num_class_rows);
  const int rounds = kClassKeyRounds + shape.class_index_digits;
  for (int phase = 0; phase < kClassPhases; ++phase) {
    if (phase > 0) exec.Launch(ClassPhaseBody{p}, shape.num_class_rows);
    for (int r = 0; r < rounds; ++r) {
      const int32_t hi = ClassRoundHi(r, shape.class_index_digits);
      exec.Launch(ClassHistBody{p, hi}, shape.class_tiles);
      exec.Launch(ClassPickBody{p, hi}, shape.num_class_rows);
    }
    exec.Launch(ClassCollectBody{p, phase, phase + 1 < kClassPhases}, shape.class_tiles);
  }
  if (shape.class_slot_tiles > 0) {
    exec.Launch(ScatterBody{p}, shape.class_slot_tiles);
    exec.Launch(BucketSortBody{p}, int64_t{shape.num_class_rows} << shape.class_order_bits);
  }
}

// The launch sequence, for either executor:
//   exec.Launch(body, blocks)           one kernel of `blocks` blocks of kThreads threads
template <class Exec>
void Enqueue(Exec& exec, const Shape& shape, const Layout& layout, uint8_t* arena,
             const Params& base) {
  Params p = base;
  exec.Scratch(arena + layout.scratch, layout.bytes - layout.scratch);
  p.num_rows = shape.num_rows;
  p.small_max = shape.small_max;
  p.tile_elements = shape.tile_elements;
  if (shape.num_small > 0) exec.Launch(FusedBody{p}, shape.num_rows);
  if (shape.num_large > 0) EnqueueLarge(exec, shape, layout, arena, p);
  if (shape.num_class_rows > 0) EnqueueClasses(exec, shape, layout, arena, p);
}

}  // namespace gpusampler::kernels::pipeline
