#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "cuda/keys_cuda.hpp"
#include "cuda/pipeline_exec.cuh"
#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/philox.hpp"
#include "pipeline/key_probe.hpp"
#include "pipeline/pipeline.hpp"

namespace gpusampler::kernels {
namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e));
}

}  // namespace

bool CudaKeysAvailable() { return CudaDeviceCount() > 0; }

void CudaElementKeys(const std::vector<KeyQuery>& queries, std::vector<uint32_t>* u,
                     std::vector<uint32_t>* v) {
  // The pipeline's KeysBody through the device executor: u and v derived as every GPU
  // body derives them.
  const int n = static_cast<int>(queries.size());
  std::vector<pipeline::KeyProbe> probes;
  for (const auto& q : queries) probes.push_back(pipeline::KeyProbe{q.seed, q.row, q.i});
  pipeline::KeyProbe* d_q = nullptr;
  uint32_t *d_u = nullptr, *d_v = nullptr;
  Check(cudaMalloc(&d_q, n * sizeof(pipeline::KeyProbe)), "cudaMalloc");
  Check(cudaMalloc(&d_u, n * sizeof(uint32_t)), "cudaMalloc");
  Check(cudaMalloc(&d_v, n * sizeof(uint32_t)), "cudaMalloc");
  Check(cudaMemcpy(d_q, probes.data(), n * sizeof(pipeline::KeyProbe), cudaMemcpyHostToDevice),
        "copy");
  pipeline::CudaExec exec(nullptr);
  exec.Launch(pipeline::KeysBody{d_q, n, d_u, d_v},
              (n + pipeline::kThreads - 1) / pipeline::kThreads);
  Check(cudaDeviceSynchronize(), "kernel");
  u->resize(n);
  v->resize(n);
  Check(cudaMemcpy(u->data(), d_u, n * sizeof(uint32_t), cudaMemcpyDeviceToHost), "copy");
  Check(cudaMemcpy(v->data(), d_v, n * sizeof(uint32_t), cudaMemcpyDeviceToHost), "copy");
  cudaFree(d_q);
  cudaFree(d_u);
  cudaFree(d_v);
}

void CudaWeightedKeys(const std::vector<WeightedKeyQuery>& queries,
                      std::vector<WeightedKeyResult>* out) {
  const int n = static_cast<int>(queries.size());
  std::vector<pipeline::WeightedProbe> probes;
  for (const auto& q : queries) {
    probes.push_back(
        pipeline::WeightedProbe{q.seed, q.i, q.row, q.score, q.u, q.u2, q.given ? 1 : 0, 0});
  }
  pipeline::WeightedProbe* d_q = nullptr;
  pipeline::WeightedProbeOut* d_o = nullptr;
  Check(cudaMalloc(&d_q, n * sizeof(pipeline::WeightedProbe)), "cudaMalloc");
  Check(cudaMalloc(&d_o, n * sizeof(pipeline::WeightedProbeOut)), "cudaMalloc");
  Check(cudaMemcpy(d_q, probes.data(), n * sizeof(pipeline::WeightedProbe), cudaMemcpyHostToDevice),
        "copy");
  pipeline::CudaExec exec(nullptr);
  exec.Launch(pipeline::WeightedKeysBody{d_q, n, d_o},
              (n + pipeline::kThreads - 1) / pipeline::kThreads);
  Check(cudaDeviceSynchronize(), "kernel");
  std::vector<pipeline::WeightedProbeOut> o(n);
  Check(cudaMemcpy(o.data(), d_o, n * sizeof(pipeline::WeightedProbeOut), cudaMemcpyDeviceToHost),
        "copy");
  out->clear();
  for (const auto& x : o) out->push_back(WeightedKeyResult{x.u, x.u2, x.e_bits, x.key_bits});
  cudaFree(d_q);
  cudaFree(d_o);
}

}  // namespace gpusampler::kernels
