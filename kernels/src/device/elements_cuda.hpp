// The CUDA side of elements.hpp (cuda/elements.cu; in a build without CUDA, elements.cc's
// stand-ins throw Error(kUnavailable)).
#pragma once

#include <cstddef>

#include "gpusampler/kernels/elements.hpp"

namespace gpusampler::kernels::detail {

void ElementsStepCuda(int device, const ElementsStepArgs& args, ElementsStepOut* out);
void ElementsCopyToHostCuda(int device, void* dst, const void* src, size_t bytes);

}  // namespace gpusampler::kernels::detail
