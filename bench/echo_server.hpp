// A bare gRPC echo of gpusampler.v1.Sampler for the service benchmark: Sample answers at
// once with a response of exactly the bytes the real service would send for the request
// (indices, labels, counts and features of the right sizes), without sampling. The
// difference between it and gpusampler-server is what the service itself costs. Not part
// of the product. Thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>

#include "gpusampler/v1/sampler.grpc.pb.h"

namespace gpusampler::bench {

class EchoService final : public v1::Sampler::CallbackService {
 public:
  grpc::ServerUnaryReactor* Sample(grpc::CallbackServerContext* context,
                                   const v1::SampleRequest* request,
                                   v1::SampleResponse* response) override;
};

// Starts an echo server on 127.0.0.1:0; `*port` receives the bound port.
std::unique_ptr<grpc::Server> StartEchoServer(EchoService* service, int* port);

}  // namespace gpusampler::bench
