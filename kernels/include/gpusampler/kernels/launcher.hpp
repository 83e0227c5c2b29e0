// A launch context for the CUDA backend, one per stream: it owns the backend (its stream and
// device arena), the pinned staging and device buffers of a launch, and the launch's
// asynchronous completion with a time limit. Its caller is kernels::StagedLaunch
// (staged_launch.hpp), which lays out the staging, enqueues the launch in Launch() and carves
// the outputs after it returns; the server, the bench and the tests use StagedLaunch.
//
// Memory is sized once, explicitly (Reserve), at start-up from the configured limits; a
// launch that needs more calls Reserve between launches, never while one is in flight.
// Not thread-safe: one caller at a time. Plain C++ over device.hpp: in a build without CUDA
// the constructor throws Error(kUnavailable).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "gpusampler/kernels/backend.hpp"

namespace gpusampler::kernels {

struct LaunchSizes {
  int64_t rows = 0;      // rows of one launch (the arena's row arrays)
  int64_t elements = 0;  // label elements
  int64_t slots = 0;     // output slots
  size_t in_bytes = 0;   // staged inputs (rows, labels, tables)
  size_t out_bytes = 0;  // staged outputs
  // (row, class) pairs of the launch's class rows (sum of num_classes; SPEC section 7): the
  // class path's per-pair tables. Counted, not assumed: a worst case of 256 classes per row
  // would reserve about 1 KB per row and class.
  int64_t class_pairs = 0;
};

class CudaLauncher {
 public:
  // A backend with its own stream on `device`. `timeout`: how long Launch waits for the
  // device before it declares a device fault. Throws Error(kUnavailable) without a device.
  CudaLauncher(int device, std::chrono::milliseconds timeout);
  ~CudaLauncher();
  CudaLauncher(const CudaLauncher&) = delete;
  CudaLauncher& operator=(const CudaLauncher&) = delete;

  Backend& backend() { return *backend_; }
  void* stream() const { return backend_->stream(); }
  int device() const { return device_; }
  const std::string& name() const { return name_; }

  // Grows staging (pinned), device buffers and the backend's arena to hold a launch of
  // `sizes`; does nothing when they already do. Allocating synchronizes the device: call it
  // at start-up and between launches only. Throws Error(kOutOfMemory).
  void Reserve(const LaunchSizes& sizes);
  bool Holds(const LaunchSizes& sizes) const;

  // Pinned staging and device buffers, valid until the next Reserve that grows them.
  uint8_t* h_in() const { return h_in_; }
  uint8_t* h_out() const { return h_out_; }
  uint8_t* d_in() const { return d_in_; }
  uint8_t* d_out() const { return d_out_; }

  // Runs `enqueue` (which enqueues the launch's copies and kernels on stream(), using the
  // buffers above), then waits for all of it. Blocks the calling thread (never a gRPC one)
  // for at most the timeout. Throws what `enqueue` throws (after the stream has drained, so
  // that no enqueued copy still reads the staging), or Error(kDeviceFault) when the stream
  // hit a sticky error or did not finish in time; after a timeout every later Launch throws
  // kDeviceFault at once, since queued work may still write the buffers.
  void Launch(const std::function<void()>& enqueue);
  bool faulted() const { return faulted_; }

 private:
  void Release() noexcept;
  void GrowPair(size_t want, uint8_t** host, uint8_t** device, size_t* capacity);

  std::unique_ptr<Backend> backend_;
  int device_;
  std::string name_;
  std::chrono::milliseconds timeout_;
  bool faulted_ = false;
  LaunchSizes capacity_;
  uint8_t* h_in_ = nullptr;
  uint8_t* h_out_ = nullptr;
  uint8_t* d_in_ = nullptr;
  uint8_t* d_out_ = nullptr;
};

}  // namespace gpusampler::kernels
