// elements.hpp: the host reference, the cuda-sim device's run (the slot body over a grid of
// host "threads", through cuda-sim device memory like the CUDA run's buffers) and the
// dispatch to the CUDA run (cuda/elements.cu).
#include "gpusampler/kernels/elements.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

#include "device/elements_cuda.hpp"
#include "gpusampler/kernels/device.hpp"
#include "gpusampler/kernels/types.hpp"

namespace gpusampler::kernels {
namespace {

int NumClasses(const ElementsStepArgs& a) { return static_cast<int>(a.classes.size()); }

void Resize(const ElementsStepArgs& a, ElementsStepOut* out) {
  const size_t slots = static_cast<size_t>(a.slots);
  out->indices.assign(slots, 0);
  out->labels.assign(a.labels ? slots * a.label_bytes : 0, 0);
  out->features.assign(a.features ? slots * a.feature_row_bytes : 0, 0);
}

struct DeviceFree {
  void operator()(void* p) const noexcept { kernels::DeviceFree(p); }
};

// The cuda-sim run: the step's class table and outputs in cuda-sim device memory, the slot
// body run for every (block, thread) of the grid the CUDA run launches, then the copy back.
void ElementsStepSim(const ElementsStepArgs& a, ElementsStepOut* out) {
  const size_t slots = static_cast<size_t>(a.slots);
  const size_t table = a.classes.size() * sizeof(ElementsClass);
  const size_t idx = slots * sizeof(int64_t);
  const size_t lab = a.labels ? slots * a.label_bytes : 0;
  const size_t fea = a.features ? slots * a.feature_row_bytes : 0;
  std::unique_ptr<uint8_t, DeviceFree> buf(
      static_cast<uint8_t*>(DeviceAlloc(kSimDevice, table + idx + lab + fea + 8)));
  uint8_t* p = buf.get();
  CopyToDevice(kSimDevice, p, a.classes.data(), table);
  auto* classes = reinterpret_cast<const ElementsClass*>(p);
  auto* indices = reinterpret_cast<int64_t*>(p + table);  // table is a multiple of 8
  uint8_t* labels = p + table + idx;
  uint8_t* features = labels + lab;
  constexpr int64_t kThreads = 256;
  const int64_t blocks = (a.slots + kThreads - 1) / kThreads;
  for (int64_t b = 0; b < blocks; ++b) {
    // A GPU overlaps its threads' memory misses; one host thread does not. Prefetching the
    // block's member reads first lets them overlap here too (no effect on the outputs).
    for (int64_t s = b * kThreads; s < std::min(a.slots, (b + 1) * kThreads); ++s) {
      int c = 0;
      const uint64_t j = ElementsSlotPosition(classes, NumClasses(a), a.key, a.g, s, &c);
      __builtin_prefetch(classes[c].members + j);
    }
    for (int64_t t = 0; t < kThreads; ++t) {
      const int64_t s = b * kThreads + t;
      if (s >= a.slots) break;
      ElementsSlot(classes, NumClasses(a), a.key, a.g, a.labels, a.label_bytes, a.features,
                   a.feature_row_bytes, s, indices, labels, features);
    }
  }
  // cuda-sim device memory is host memory: the copy back is a memcpy.
  std::memcpy(out->indices.data(), indices, idx);
  if (lab > 0) std::memcpy(out->labels.data(), labels, lab);
  if (fea > 0) std::memcpy(out->features.data(), features, fea);
}

}  // namespace

void ElementsStepHost(const ElementsStepArgs& a, ElementsStepOut* out) {
  Resize(a, out);
  const ElementsClass* classes = a.classes.data();
  // Three phases, so that the cache misses of a large row overlap instead of waiting one
  // behind each Feistel evaluation: positions (compute only), members, then the gather.
  std::vector<const uint32_t*> at(static_cast<size_t>(a.slots));
  for (int64_t s = 0; s < a.slots; ++s) {
    int c = 0;
    const uint64_t j = ElementsSlotPosition(classes, NumClasses(a), a.key, a.g, s, &c);
    at[static_cast<size_t>(s)] = classes[c].members + j;
  }
  for (const uint32_t* p : at) __builtin_prefetch(p);  // in one burst, after the compute
  for (int64_t s = 0; s < a.slots; ++s) {
    const uint64_t i = *at[static_cast<size_t>(s)];
    out->indices[static_cast<size_t>(s)] = static_cast<int64_t>(i);
    if (a.labels) __builtin_prefetch(a.labels + i * a.label_bytes);
    if (a.features) __builtin_prefetch(a.features + i * a.feature_row_bytes);
  }
  for (int64_t s = 0; s < a.slots; ++s) {
    const size_t slot = static_cast<size_t>(s);
    const size_t i = static_cast<size_t>(out->indices[slot]);
    if (a.labels) {
      std::memcpy(&out->labels[slot * a.label_bytes], a.labels + i * a.label_bytes, a.label_bytes);
    }
    if (a.features) {
      std::memcpy(&out->features[slot * a.feature_row_bytes], a.features + i * a.feature_row_bytes,
                  a.feature_row_bytes);
    }
  }
}

void ElementsStepOnDevice(int device, const ElementsStepArgs& args, ElementsStepOut* out) {
  Resize(args, out);
  if (args.slots == 0) return;
  if (device == kSimDevice) return ElementsStepSim(args, out);
  detail::ElementsStepCuda(device, args, out);
}

void ElementsCopyToHost(int device, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  if (device == kSimDevice) {
    std::memcpy(dst, src, bytes);  // cuda-sim device memory is host memory
    return;
  }
  detail::ElementsCopyToHostCuda(device, dst, src, bytes);
}

#ifndef GPUSAMPLER_WITH_CUDA
namespace detail {
void ElementsStepCuda(int device, const ElementsStepArgs&, ElementsStepOut*) {
  throw Error(Error::Code::kUnavailable,
              "ELEMENTS step on CUDA device " + std::to_string(device) +
                  ": this build has no CUDA backend (-DGPUSAMPLER_CUDA=OFF)");
}
void ElementsCopyToHostCuda(int device, void*, const void*, size_t) {
  throw Error(Error::Code::kUnavailable,
              "copy from CUDA device " + std::to_string(device) +
                  ": this build has no CUDA backend (-DGPUSAMPLER_CUDA=OFF)");
}
}  // namespace detail
#endif

}  // namespace gpusampler::kernels
