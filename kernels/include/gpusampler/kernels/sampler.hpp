// gpusampler::kernels public API: plain structs describing a (possibly fused, ragged) batch
// of rows, and the backend interface that samples it exactly as SPEC section 1 defines.
// Compiles with a plain C++17 compiler; nothing here needs CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpusampler/kernels/dtype.hpp"
#include "gpusampler/kernels/quota.hpp"

namespace gpusampler::kernels {

// Bytes per element; 0 for kUnspecified or an out-of-range value.
size_t ItemSize(DType dtype);
// True for the dtypes labels may have: BOOL and the signed/unsigned integers.
bool IsLabelDType(DType dtype);
// Lower-case name ("int64", "bfloat16", ...); "unspecified" for anything else.
const char* DTypeName(DType dtype);
// Parses DTypeName's output; returns false when unknown.
bool ParseDType(const std::string& name, DType* out);
// The padding label of SPEC section 1: -1 for signed dtypes, 0 for UINT8 and BOOL.
int64_t PaddingLabel(DType dtype);
// Whether `value` is representable in the label dtype (BOOL: 0 or 1).
bool LabelRepresentable(DType dtype, int64_t value);

// Sampling parameters of one request (SPEC section 1).
struct SamplingSpec {
  int64_t num_samples = 0;  // K
  double positive_fraction = 0.5;
  int64_t positive_label = 1;
  int64_t negative_label = 0;
  FillPolicy fill = FillPolicy::kBoth;
};

// One row of a launch. Rows of different requests (any N, K, spec, dtype, feature width)
// may share a launch; every offset below is relative to the launch's buffers (Batch).
struct RowDesc {
  int64_t length = 0;       // N_r, elements in the row (< 2^31)
  int64_t num_samples = 0;  // K
  int64_t target = 0;       // floor(K * positive_fraction)
  int64_t positive_label = 1;
  int64_t negative_label = 0;
  uint64_t seed = 0;            // request seed S
  uint32_t row_in_request = 0;  // r: index of the row inside its own request
  FillPolicy fill = FillPolicy::kBoth;
  DType label_dtype = DType::kInt64;
  int64_t label_offset = 0;        // byte offset of the row's first label in Batch::labels
  int64_t feature_offset = 0;      // byte offset of the row's first feature row
  int64_t feature_row_bytes = 0;   // bytes of one element's feature row; 0 = labels only
  int64_t out_slot = 0;            // first of the row's K slots in Batch::out_indices
  int64_t out_label_offset = 0;    // byte offset into Batch::out_labels
  int64_t out_feature_offset = 0;  // byte offset into Batch::out_features
};

// A launch. Every pointer addresses memory the backend works on: host memory for the CPU
// backend, device memory for the CUDA backend (rows included).
struct Batch {
  const RowDesc* rows = nullptr;
  int64_t num_rows = 0;
  const uint8_t* labels = nullptr;
  const uint8_t* features = nullptr;  // may be null when no row has features
  int64_t* out_indices = nullptr;     // total_slots entries; -1 marks padding
  uint8_t* out_labels = nullptr;
  uint8_t* out_features = nullptr;
  int32_t* out_num_positive = nullptr;  // num_rows entries
  int32_t* out_num_negative = nullptr;
  // Host-known sizes (sums over rows), used to size scratch space without reading the
  // device; they are not data-dependent.
  int64_t total_elements = 0;  // sum of length
  int64_t total_slots = 0;     // sum of num_samples
  int64_t max_length = 0;      // largest length
  int64_t max_samples = 0;     // largest num_samples
  // A host copy of `rows`, when `rows` is device memory and the caller has one (FillSizes
  // sets it): the CUDA backend validates it with ValidateRows. Null: not validated there.
  const RowDesc* host_rows = nullptr;
};

// Builds row descriptors and buffer sizes for a batch made of requests. A helper for
// callers (server, tests, benchmarks) that assemble launches on the host.
class BatchBuilder {
 public:
  // Appends the `num_rows` rows of one request. `row_lengths[r]` are the rows' element
  // counts; labels of the rows are laid out back to back in `label_dtype`, features (if
  // `feature_row_bytes` > 0) likewise. Returns the index of the request's first row.
  int64_t AddRequest(const SamplingSpec& spec, uint64_t seed, DType label_dtype,
                     const std::vector<int64_t>& row_lengths, int64_t feature_row_bytes);

  const std::vector<RowDesc>& rows() const { return rows_; }
  int64_t label_bytes() const { return label_bytes_; }
  int64_t feature_bytes() const { return feature_bytes_; }
  int64_t total_slots() const { return total_slots_; }
  int64_t out_label_bytes() const { return out_label_bytes_; }
  int64_t out_feature_bytes() const { return out_feature_bytes_; }
  int64_t total_elements() const { return total_elements_; }
  int64_t max_length() const { return max_length_; }
  int64_t max_samples() const { return max_samples_; }

  // Fills the size fields and `rows`/`num_rows` of `batch` (rows point at this builder's
  // host vector; a device backend needs them copied first).
  void FillSizes(Batch* batch) const;

 private:
  std::vector<RowDesc> rows_;
  int64_t label_bytes_ = 0;
  int64_t feature_bytes_ = 0;
  int64_t total_slots_ = 0;
  int64_t out_label_bytes_ = 0;
  int64_t out_feature_bytes_ = 0;
  int64_t total_elements_ = 0;
  int64_t max_length_ = 0;
  int64_t max_samples_ = 0;
};

// Errors thrown by backends. The server converts them to a status in one place.
class Error : public std::runtime_error {
 public:
  enum class Code { kInvalidArgument, kOutOfMemory, kDeviceFault, kUnavailable, kInternal };
  Error(Code code, const std::string& what) : std::runtime_error(what), code_(code) {}
  Code code() const { return code_; }

 private:
  Code code_;
};

enum class MemorySpace { kHost, kDevice };

// What one Sample() call moved, as counted by the cuda-sim device (the CUDA pipeline run on
// the host): kernel launches, global-memory bytes that the kernels read and wrote for the
// sampling (labels, keys, counters, indices, output labels), feature-row bytes copied to the
// output apart from those (the payload: K rows per row, whatever N is), and Philox calls.
// A model of the GPU's work, not a timing.
struct LaunchStats {
  int64_t launches = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t feature_bytes = 0;   // feature rows read + written
  int64_t label_elements = 0;  // Batch::total_elements
  int64_t philox_calls = 0;
  // Shared-memory bytes (cuda-sim): every shared load and store of a thread, atomics as a
  // load and a store, block sorts by cub's traffic; a uniform read outside a phase counts
  // once per thread.
  int64_t smem_bytes = 0;
  double smem_bytes_per_element() const {
    return label_elements > 0
               ? static_cast<double>(smem_bytes) / static_cast<double>(label_elements)
               : 0.0;
  }
  // (bytes_read + bytes_written) / label_elements, features excluded; 0 for an empty launch.
  double bytes_per_element() const {
    return label_elements > 0 ? static_cast<double>(bytes_read + bytes_written) /
                                    static_cast<double>(label_elements)
                              : 0.0;
  }
};

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
  virtual void Reserve(int64_t /*num_rows*/, int64_t /*total_elements*/, int64_t /*total_slots*/) {}
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
};

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
