// CudaLauncher (launcher.hpp) over device.hpp: no CUDA headers here, so one source serves
// builds with and without the CUDA backend.
#include "gpusampler/kernels/launcher.hpp"

#include <algorithm>

#include "gpusampler/kernels/completion.hpp"
#include "gpusampler/kernels/device.hpp"

namespace gpusampler::kernels {
namespace {

size_t GrowBytes(size_t have, size_t want) {
  return want <= have ? have : std::max(want, std::max<size_t>(have * 2, 4096));
}

}  // namespace

CudaLauncher::CudaLauncher(int device, std::chrono::milliseconds timeout)
    : backend_(MakeCudaBackend(device)),
      device_(device),
      name_(backend_->name()),
      timeout_(std::max(timeout, std::chrono::milliseconds(1))) {}

// The backend (its stream) goes first: work still queued after a timeout may read or write
// the staging and device buffers. A sim stream runs it all before it is destroyed (sim::Free
// does not wait as cudaFree / cudaFreeHost do); a CUDA stream is destroyed at once and the
// frees below wait for the device.
CudaLauncher::~CudaLauncher() {
  backend_.reset();
  Release();
}

void CudaLauncher::Release() noexcept {
  PinnedFree(h_in_);
  PinnedFree(h_out_);
  DeviceFree(d_in_);
  DeviceFree(d_out_);
  h_in_ = h_out_ = d_in_ = d_out_ = nullptr;
  capacity_ = LaunchSizes{};
}

bool CudaLauncher::Holds(const LaunchSizes& sizes) const {
  return sizes.in_bytes <= capacity_.in_bytes && sizes.out_bytes <= capacity_.out_bytes &&
         sizes.rows <= capacity_.rows && sizes.elements <= capacity_.elements &&
         sizes.slots <= capacity_.slots && sizes.class_pairs <= capacity_.class_pairs;
}

// A pinned buffer and its device twin, grown together to hold `want` bytes.
void CudaLauncher::GrowPair(size_t want, uint8_t** host, uint8_t** device, size_t* capacity) {
  if (want <= *capacity) return;
  const size_t bytes = GrowBytes(*capacity, want);
  // Free first so that the old and new blocks are never both held.
  PinnedFree(*host);
  DeviceFree(*device);
  *host = *device = nullptr;
  *capacity = 0;
  *host = static_cast<uint8_t*>(PinnedAllocOn(device_, bytes));
  *device = static_cast<uint8_t*>(DeviceAlloc(device_, bytes));
  *capacity = bytes;
}

void CudaLauncher::Reserve(const LaunchSizes& sizes) {
  if (Holds(sizes)) return;
  BindThreadToDevice(device_);
  GrowPair(sizes.in_bytes, &h_in_, &d_in_, &capacity_.in_bytes);
  GrowPair(sizes.out_bytes, &h_out_, &d_out_, &capacity_.out_bytes);
  // The backend reserves for the bounding shape of everything held so far: its arena's size is
  // not monotone in each dimension alone (the per-large-row tables scale with
  // min(rows, elements / 4097)), so reserving only this call's sizes could leave a shape that
  // Holds() accepts but the arena does not, and the launch would then grow under capture.
  const int64_t rows = std::max(capacity_.rows, sizes.rows);
  const int64_t elements = std::max(capacity_.elements, sizes.elements);
  const int64_t slots = std::max(capacity_.slots, sizes.slots);
  const int64_t pairs = std::max(capacity_.class_pairs, sizes.class_pairs);
  if (rows > 0) backend_->Reserve(rows, elements, slots, pairs);
  capacity_.rows = rows;
  capacity_.elements = elements;
  capacity_.slots = slots;
  capacity_.class_pairs = pairs;
}

void CudaLauncher::Launch(const std::function<void()>& enqueue) {
  if (faulted_) {
    throw Error(Error::Code::kDeviceFault,
                name_ + ": an earlier launch timed out; the device is not used");
  }
  // Every CUDA call of this thread then targets this device: none creates a context on
  // another GPU (the default current device is 0).
  BindThreadToDevice(device_);
  // One per launch, its state shared with the callback: a callback arriving after a
  // timeout touches only that state (completion.hpp).
  const Completion completion;
  try {
    enqueue();
    EnqueueHostCallback(stream(), completion.Callback());
  } catch (...) {
    // Work already enqueued may still read the staging buffers; the next launch must not
    // overwrite them under it.
    try {
      StreamSynchronize(stream());
    } catch (const Error&) {
    }
    throw;
  }
  std::string error;
  if (!completion.WaitFor(timeout_, &error)) {
    // A hung kernel or a lost device: waiting forever would hold the drain and the health
    // check with it. The caller's device fault makes the server stop serving this device.
    faulted_ = true;
    throw Error(Error::Code::kDeviceFault, name_ + ": launch not complete after " +
                                               std::to_string(timeout_.count()) +
                                               " ms (--device-timeout-ms)");
  }
  if (!error.empty()) throw Error(Error::Code::kDeviceFault, error);
}

}  // namespace gpusampler::kernels
