#include "echo_server.hpp"

#include "gpusampler/client/tensor.hpp"

namespace gpusampler::bench {
namespace {

size_t ItemSize(v1::DType d) { return static_cast<size_t>(client::DTypeSize(d)); }

void Fill(v1::Tensor* t, v1::DType dtype, std::vector<int64_t> shape, size_t bytes) {
  t->set_dtype(dtype);
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  t->mutable_data()->assign(bytes, '\1');
}

}  // namespace

grpc::ServerUnaryReactor* EchoService::Sample(grpc::CallbackServerContext* context,
                                              const v1::SampleRequest* request,
                                              v1::SampleResponse* response) {
  // Same shapes as the real response: [B, K] (labels [B, N] without row_splits).
  const auto& labels = request->labels();
  const int64_t b = labels.shape_size() == 2 ? labels.shape(0) : 1;
  const int64_t k = request->spec().num_samples();
  const size_t slots = static_cast<size_t>(b * k);
  response->set_request_id(request->request_id());
  Fill(response->mutable_indices(), v1::DTYPE_INT64, {b, k}, slots * 8);
  Fill(response->mutable_labels(), labels.dtype(), {b, k}, slots * ItemSize(labels.dtype()));
  Fill(response->mutable_num_positive(), v1::DTYPE_INT32, {b}, static_cast<size_t>(b) * 4);
  Fill(response->mutable_num_negative(), v1::DTYPE_INT32, {b}, static_cast<size_t>(b) * 4);
  if (request->has_features()) {
    const auto& f = request->features();
    size_t row = ItemSize(f.dtype());
    std::vector<int64_t> shape = {b, k};
    for (int i = labels.shape_size(); i < f.shape_size(); ++i) {
      row *= static_cast<size_t>(f.shape(i));
      shape.push_back(f.shape(i));
    }
    Fill(response->mutable_features(), f.dtype(), shape, slots * row);
  }
  response->set_seed(request->has_seed() ? request->seed() : 1);
  response->set_device("echo");
  auto* reactor = context->DefaultReactor();
  reactor->Finish(grpc::Status::OK);
  return reactor;
}

std::unique_ptr<grpc::Server> StartEchoServer(EchoService* service, int* port) {
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), port);
  builder.RegisterService(service);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  return builder.BuildAndStart();
}

}  // namespace gpusampler::bench
