// Workers: each owns one kernels::StagedLaunch over one backend (a CPU thread pool, or one
// CUDA device and stream), which owns the staging buffers of its launches. A worker runs one
// fused launch at a time, on the scheduler thread that owns it; it is not thread-safe and
// need not be.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/job.hpp"
#include "core/status.hpp"
#include "gpusampler/kernels/sampler.hpp"

namespace gpusampler::server {

class Worker {
 public:
  virtual ~Worker() = default;
  // "cpu" or "cuda:N": the device label of metrics and responses.
  virtual const std::string& device() const = 0;
  // Samples every job's rows fused into one launch (kernels::StagedLaunch) and writes each
  // job's response tensors, seed and device (not its timing, not `done`). Features in the
  // launch's memory (host memory; a resident dataset's device copy) are written by the
  // sampling; a request's own bytes on a CUDA worker are gathered on the host from the
  // returned indices. Blocks this (non-gRPC) thread until the outputs are on the host; a
  // CUDA worker learns that from a stream host callback.
  // Throws kernels::Error (kOutOfMemory, kDeviceFault, ...).
  virtual void Run(const std::vector<Job*>& jobs) = 0;
};

// A worker over a backend whose memory space is the host (the CPU backend, or a test
// double).
std::unique_ptr<Worker> MakeHostWorker(std::unique_ptr<kernels::Backend> backend,
                                       std::string device);

struct CudaWorkerOptions {
  // How long a launch may take before the worker gives up on the device: Run throws
  // kDeviceFault (the server stops serving) and the worker refuses later launches.
  int64_t device_timeout_ms = 60000;
  // The launch sizes that staging, device buffers and scratch are sized for at start-up;
  // launches within them allocate nothing. A larger launch grows them once (deliberately,
  // between launches) and trims the device's memory pool.
  int64_t reserve_rows = 4096;
  int64_t reserve_elements = int64_t{1} << 20;  // label elements (staged as up to 8 bytes)
  int64_t reserve_slots = int64_t{1} << 18;     // output slots
};

// A worker with its own CUDA backend (stream) on `device`, its pinned staging and device
// buffers sized from `options`. Throws kernels::Error when the device is unusable.
std::unique_ptr<Worker> MakeCudaWorker(int device, const CudaWorkerOptions& options = {});

// The one warm-up of a worker, run by the scheduler before any worker serves (Scheduler::
// Start), so that the first client pays no lazy initialisation: one launch with a row longer
// than 4096 elements (the radix-select stages) and a short one (the fused kernel), so that
// every kernel of the pipeline is loaded (CUDA loads modules lazily), the arena is in use and
// the launch's graph is instantiated, and a CPU worker's thread pool has started.
// Synchronous. UNAVAILABLE when the device fails, INTERNAL otherwise.
Status WarmUp(Worker* worker);

}  // namespace gpusampler::server
