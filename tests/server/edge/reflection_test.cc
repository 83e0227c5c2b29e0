// Server reflection over gRPC (in-process server on port 0): it lists the sampler and
// health services.
#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <map>
#include <thread>

#include "gpusampler/kernels/sampler.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// grpc++_reflection already registers the reflection messages in the descriptor pool, so
// the test speaks the protocol through a generic stub with hand-encoded bytes.
TEST(ReflectionTest, ListsTheSamplerAndHealthServices) {
  ServerConfig config = TestConfig();
  config.reflection = true;  // off by default (--reflection)
  auto t = StartServer(config);
  grpc::GenericStub stub(t.channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto call =
      stub.PrepareCall(&ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag = nullptr;
  bool ok = false;
  auto step = [&](void* want) {
    ASSERT_TRUE(cq.Next(&tag, &ok));
    ASSERT_EQ(tag, want);
    ASSERT_TRUE(ok);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  step(reinterpret_cast<void*>(1));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  const char request[] = {0x3a, 0x00};
  grpc::Slice slice(request, sizeof(request));
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  step(reinterpret_cast<void*>(2));
  call->WritesDone(reinterpret_cast<void*>(3));
  step(reinterpret_cast<void*>(3));
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(4));
  step(reinterpret_cast<void*>(4));
  std::vector<grpc::Slice> slices;
  ASSERT_TRUE(in.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  EXPECT_NE(bytes.find("gpusampler.v1.Sampler"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(reinterpret_cast<void*>(5));
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

}  // namespace
}  // namespace gpusampler::server::testing
