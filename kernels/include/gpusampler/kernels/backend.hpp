// gpusampler::kernels public API, the backend interface: a Backend samples a Batch exactly as
// SPEC section 1 defines; the factories make the CPU, cuda-sim and CUDA backends; ValidateRows
// is the row check they all apply. Compiles with a plain C++17 compiler.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels {

// A sampling backend bound to one execution resource (a CPU thread pool, or one CUDA
// device and stream). Not thread-safe: one caller at a time (a server worker owns one).
class Backend {
 public:
  virtual ~Backend() = default;

  // "cpu" or "cuda:N".
  virtual std::string name() const = 0;
  // Where Batch pointers must live.
  virtual MemorySpace memory_space() const = 0;

  // Samples every row of `batch`. CPU: runs to completion before returning (on the
  // backend's threads). CUDA: enqueues on the backend's stream and returns at once; it
  // never synchronizes and reads nothing data-dependent back to the host, so the whole
  // call can be captured into a CUDA graph. Scratch space is owned by the backend and
  // grown geometrically from the host-known sizes in `batch`.
  // Throws Error (kInvalidArgument, kOutOfMemory, kDeviceFault).
  virtual void Sample(const Batch& batch) = 0;

  // The backend's stream as an opaque cudaStream_t (nullptr for CPU).
  virtual void* stream() const { return nullptr; }

  // Grows the backend's scratch space (CUDA: the device arena) to hold a launch of these
  // host-known sizes, so that Sample() then allocates nothing: the explicit, deliberate
  // growth, done at warm-up or between launches, never during stream capture. Stream-ordered
  // on the backend's stream; does not synchronize. Throws Error(kInvalidArgument) while a
  // captured graph refers to the scratch space (see ReleaseGraphs), kOutOfMemory when the
  // device is full. CPU: no-op.
  // `total_class_pairs`: the (row, class) pairs of the class rows (sum of num_classes; SPEC
  // section 7), whose per-pair tables the arena holds too.
  virtual void Reserve(int64_t /*num_rows*/, int64_t /*total_elements*/, int64_t /*total_slots*/,
                       int64_t /*total_class_pairs*/ = 0) {}
  // Tells the backend that every CUDA graph captured from its Sample() has been destroyed.
  // Until then its scratch space never moves (growth is refused), so a graph can never
  // replay into freed memory. CPU: no-op.
  virtual void ReleaseGraphs() {}
  // The counts of the last Sample() call, for backends that keep them (cuda-sim); false
  // for the others.
  virtual bool last_launch_stats(LaunchStats* /*stats*/) const { return false; }
  // The error word of the launch that the last Sample() enqueued, in the backend's memory: its
  // kernels OR a code into it when a bounded step overflows (the results are then not to be
  // used). The caller downloads it with the outputs and resets it to zero (stream-ordered);
  // null when the launch keeps none (CPU; cuda-sim, which faults at once; fused rows only).
  virtual uint32_t* error_flags() { return nullptr; }
  // The launch of a size class (pipeline::EnqueueSmallClass) when every row of `batch` is
  // small (at most kSmallRowMax elements) and binary: the fused kernel over `class_rows` >=
  // batch.num_rows blocks, which reads the row count from `sizes` (a pipeline::LaunchSizes in
  // the backend's memory) when it runs, so that one capture serves every batch of the class.
  // Same results as Sample(batch). Returns false, enqueueing nothing, for other batches or
  // where unsupported (CPU); throws what Sample throws.
  virtual bool SampleSmallClass(const Batch& /*batch*/, int32_t /*class_rows*/,
                                const void* /*sizes*/) {
    return false;
  }
};

// Whether every row is small and binary, so that SampleSmallClass takes the batch.
bool AllSmallBinaryRows(const RowDesc* rows, int64_t num_rows, int64_t small_max);

// The row checks of SPEC section 1 that every backend applies before sampling, so that an
// invalid row fails the same way (Error(kInvalidArgument), same message) on every backend
// instead of being clamped silently on one of them. `index` names the row in the message.
// `rows` must be host memory: the CUDA backend checks Batch::host_rows.
void ValidateRow(const RowDesc& row, int64_t index);
void ValidateRows(const RowDesc* rows, int64_t num_rows);

struct CpuBackendOptions {
  int threads = 0;                                // worker threads; 0 = hardware concurrency
  int64_t split_row_elements = int64_t{1} << 15;  // rows this long are split over threads
  // Candidate bound margin (see CandidateBound); only tests change these, to force the
  // exact-selection rerun.
  double candidate_sigmas = 4.0;
  double candidate_slack = 16.0;
  // A batch whose output feature rows come to at least this many bytes writes them with
  // non-temporal stores (gather.hpp RowStores::kStreaming): more than a core's cache holds,
  // so a reader finds them in DRAM either way, and the stores skip reading every output line
  // first. 0: always; negative: never.
  int64_t streaming_output_bytes = int64_t{4} << 20;
};

// A CPU backend using `threads` worker threads (0 = hardware concurrency). Rows are spread
// across threads; a row larger than a threshold is also split across threads.
std::unique_ptr<Backend> MakeCpuBackend(int threads);
std::unique_ptr<Backend> MakeCpuBackend(const CpuBackendOptions& options);

// The "cuda-sim" device: the CUDA backend's pipeline (the same kernel bodies, buffers and
// launch sequence) run on the host, block by block, one thread phase at a time between
// barriers. Host memory, like the CPU backend; slow but exact, in every build, so the GPU
// pipeline's logic is tested without a GPU. Keeps LaunchStats for each Sample().
std::unique_ptr<Backend> MakeCudaSimBackend();

// Whether this build includes the CUDA backend.
bool CudaCompiled();
// Number of usable CUDA devices (0 when not compiled, no driver, or no device).
int CudaDeviceCount();
// Why CudaDeviceCount() is 0, in words an operator can act on: no CUDA backend in this build,
// the CUDA runtime's error (a driver too old for the toolkit, with both versions; no driver;
// no device), and CUDA_VISIBLE_DEVICES when it is set. Empty when devices are usable.
std::string CudaUnavailableReason();
// A CUDA backend on `device` with its own non-blocking stream. Throws Error(kUnavailable)
// when CUDA is not compiled in or the device is absent.
std::unique_ptr<Backend> MakeCudaBackend(int device);

}  // namespace gpusampler::kernels
