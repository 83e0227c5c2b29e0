// Options of the cuda-sim device that only tests change.
#pragma once

#include <memory>

#include "gpusampler/kernels/backend.hpp"

namespace gpusampler::kernels {

struct CudaSimOptions {
  // Keys one block sorts at once (the device's is 4096). Lower values force the paths that
  // a real launch takes only for huge rows: the boundary's histogram rounds and the bucket
  // sort's large-bucket ranking.
  int block_capacity = 4096;
  // Rows up to this long take the fused one-block kernel (the device's is 4096); 0 sends
  // every row through the large-row stages.
  int64_t small_row_max = 4096;
};

std::unique_ptr<Backend> MakeCudaSimBackend(const CudaSimOptions& options);

}  // namespace gpusampler::kernels
