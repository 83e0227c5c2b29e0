// One ELEMENTS epoch step (SPEC section 8) where the dataset lives: for each of the step's K
// slots, the Feistel position of its class's pass, the member that position names, and that
// element's label and feature row. One thread per slot on a device; the host reference runs
// the same slot body in a loop, so both are bit-identical by construction.
//
// Slots are class-major: class c's m_c slots follow the earlier classes' (the caller orders
// them by (v, i) afterwards). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "gpusampler/kernels/feistel.hpp"
#include "gpusampler/kernels/macros.hpp"

namespace gpusampler::kernels {

// One class of the step: its member list (in the memory of whoever runs the step), its
// length n_c, quota m_c > 0 and pass length P_c = floor(n_c / m_c) * m_c.
struct ElementsClass {
  const uint32_t* members = nullptr;
  uint64_t n = 0;
  int64_t m = 0;
  int64_t pass_len = 0;
  uint32_t tag = 0;        // the class index c: the permutation's tag
  int64_t first_slot = 0;  // sum of the earlier classes' m
};

// The step: the permutation key, the group g = step * world_size + rank, the classes with
// m_c > 0 (a host array), and the row's labels and feature rows in the runner's memory
// (labels null: indices only; features null: none).
struct ElementsStepArgs {
  FeistelKey key;
  int64_t g = 0;
  std::vector<ElementsClass> classes;
  int64_t slots = 0;  // sum of the classes' m
  const uint8_t* labels = nullptr;
  size_t label_bytes = 0;  // one label's size
  const uint8_t* features = nullptr;
  size_t feature_row_bytes = 0;
};

// Host memory, class-major: indices [slots], labels [slots * label_bytes], features
// [slots * feature_row_bytes].
struct ElementsStepOut {
  std::vector<int64_t> indices;
  std::vector<uint8_t> labels;
  std::vector<uint8_t> features;
};

// The position in its class's member list that slot `s` (in [0, slots)) names, and the
// class (*c): q = g * m_c + (s - first_slot), pi(n_c, c, floor(q / P_c))(q mod P_c).
GPUSAMPLER_HD uint64_t ElementsSlotPosition(const ElementsClass* classes, int num_classes,
                                            FeistelKey key, int64_t g, int64_t s, int* c) {
  int k = 0;
  while (k + 1 < num_classes && s >= classes[k + 1].first_slot) ++k;
  *c = k;
  const ElementsClass& cl = classes[k];
  const int64_t q = g * cl.m + (s - cl.first_slot);
  return FeistelPermute(key, cl.n, cl.tag, static_cast<uint32_t>(q / cl.pass_len),
                        static_cast<uint64_t>(q % cl.pass_len));
}

// The member (element index) slot `s` names.
GPUSAMPLER_HD uint32_t ElementsSlotMember(const ElementsClass* classes, int num_classes,
                                          FeistelKey key, int64_t g, int64_t s) {
  int c = 0;
  const uint64_t j = ElementsSlotPosition(classes, num_classes, key, g, s, &c);
  return classes[c].members[j];
}

// Copies `bytes` bytes one at a time (rows start at any byte: no unaligned wide loads).
GPUSAMPLER_HD void ElementsCopyBytes(uint8_t* dst, const uint8_t* src, size_t bytes) {
  for (size_t b = 0; b < bytes; ++b) dst[b] = src[b];
}

// Slot `s`'s outputs: its element index, label and feature row.
GPUSAMPLER_HD void ElementsSlot(const ElementsClass* classes, int num_classes, FeistelKey key,
                                int64_t g, const uint8_t* labels, size_t label_bytes,
                                const uint8_t* features, size_t feature_row_bytes, int64_t s,
                                int64_t* out_indices, uint8_t* out_labels, uint8_t* out_features) {
  const uint64_t i = ElementsSlotMember(classes, num_classes, key, g, s);
  out_indices[s] = static_cast<int64_t>(i);
  const size_t slot = static_cast<size_t>(s);
  if (labels != nullptr) {
    ElementsCopyBytes(out_labels + slot * label_bytes, labels + i * label_bytes, label_bytes);
  }
  if (features != nullptr) {
    ElementsCopyBytes(out_features + slot * feature_row_bytes, features + i * feature_row_bytes,
                      feature_row_bytes);
  }
}

// The host reference: member lists, labels and features in host memory.
void ElementsStepHost(const ElementsStepArgs& args, ElementsStepOut* out);

// The step on `device` (kSimDevice, or a CUDA device): member lists, labels and features in
// that device's memory; `out` is host memory. Synchronous (the kernel and one copy back).
// Throws Error(kUnavailable) for a CUDA device in a build without CUDA, Error(kOutOfMemory)
// when the step's buffers cannot be allocated.
void ElementsStepOnDevice(int device, const ElementsStepArgs& args, ElementsStepOut* out);

// Blocking device-to-host copy from `device`'s memory (for the one-time member-list build of
// a dataset that lives on a device).
void ElementsCopyToHost(int device, void* dst, const void* src, size_t bytes);

}  // namespace gpusampler::kernels
