// libFuzzer target (clang, ASan + UBSan): bytes -> SampleRequest parse -> ValidateRequest
// -> for what validation accepts, a CPU sample through the host worker, checking that the
// response holds exactly what the response-size estimate allowed for. Limits are small so
// that each input runs in microseconds; validation is the same code at any limit.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/job.hpp"
#include "edge/validate.hpp"
#include "gpusampler/v1/sampler.pb.h"
#include "scheduling/worker.hpp"

namespace {

using namespace gpusampler;

server::Limits FuzzLimits() {
  server::Limits l;
  l.max_message_bytes = 1 << 20;
  l.max_rows = 64;
  l.max_elements = 1 << 16;
  l.max_row_elements = 1 << 16;
  l.max_num_samples = 1 << 12;
  return l;
}

server::Worker& CpuWorker() {
  static std::unique_ptr<server::Worker> worker =
      server::MakeHostWorker(kernels::MakeCpuBackend(1), "cpu");
  return *worker;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::SampleRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  static const server::Limits limits = FuzzLimits();
  server::Job job;
  const server::Status status = server::ValidateRequest(request, limits, &job);
  // Messages are built from client values: bounded whatever the input.
  if (status.message().size() > 4096) {
    std::fprintf(stderr, "error message of %zu bytes\n", status.message().size());
    std::abort();
  }
  if (!status.ok()) return 0;
  v1::SampleResponse response;
  response.set_request_id(request.request_id());
  job.response = &response;
  CpuWorker().Run({&job});
  int64_t estimate = 0;
  if (!server::ResponseBytes(job, request.request_id().size(), &estimate) ||
      static_cast<int64_t>(response.ByteSizeLong()) > estimate) {
    std::fprintf(stderr, "response of %zu bytes over its estimate %lld\n", response.ByteSizeLong(),
                 static_cast<long long>(estimate));
    std::abort();
  }
  return 0;
}
