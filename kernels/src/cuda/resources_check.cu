// The kernels whose occupancy the planner assumes (params.hpp: kResidentBlocks, one wave of
// 4 blocks per SM on 132 SMs), instantiated alone for the build-time resource check
// (check_resources.cmake): ptxas -v reports their registers, spills and shared memory.
// Not linked into anything.
#include "cuda/pipeline_exec.cuh"

namespace gpusampler::kernels::pipeline {

template __global__ void RunBody<Pass1Body>(Pass1Body);
template __global__ void RunBody<Pass2Body>(Pass2Body);

}  // namespace gpusampler::kernels::pipeline
