// The C++ client's shared memory (SPEC section 9): a SharedRegion registered with a real
// server (--allow-shared-memory) gets the answer's bytes, equal to the inline answer's.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "client_server_util.hpp"
#include "gpusampler/client/client.hpp"

namespace gpusampler::client {
namespace {

TEST(SharedRegionTest, AnswerInTheRegionEqualsTheInlineAnswer) {
  pid_t pid = -1;
  std::string target;
  int metrics_port = 0;
  SpawnServer(::testing::TempDir() + "/gpusampler_shared_region_test." + std::to_string(getpid()),
              &pid, &target, &metrics_port, {"--allow-shared-memory"});
  ASSERT_GT(pid, 0);
  {
    ClientOptions options;
    options.targets = {target};
    Client client(options);
    SharedRegion region(1 << 20);
    ASSERT_TRUE(client.RegisterRegion("r", region).ok());
    const v1::SampleRequest inline_request = Request(3, 500, 64, 11);
    v1::SampleResponse inline_answer, region_answer;
    ASSERT_TRUE(client.Sample(inline_request, &inline_answer).ok());
    v1::SampleRequest into = inline_request;
    into.mutable_output_region()->set_name("r");
    into.mutable_output_region()->set_offset(4096);
    const grpc::Status s = client.Sample(into, &region_answer);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_TRUE(region_answer.indices().data().empty());
    const auto at = region.Tensors(region_answer, 4096);
    const v1::Tensor* want[] = {&inline_answer.indices(), &inline_answer.labels(), nullptr,
                                &inline_answer.num_positive(), &inline_answer.num_negative()};
    EXPECT_EQ(at[2], nullptr);  // labels-only: no features
    EXPECT_EQ(at[5], nullptr);
    for (int i : {0, 1, 3, 4}) {
      ASSERT_NE(at[i], nullptr) << i;
      EXPECT_EQ(std::memcmp(at[i], want[i]->data().data(), want[i]->data().size()), 0) << i;
    }
    EXPECT_TRUE(client.UnregisterRegion("r").ok());
    EXPECT_EQ(client.UnregisterRegion("r").error_code(), grpc::StatusCode::NOT_FOUND);
  }
  StopServer(pid);
}

}  // namespace
}  // namespace gpusampler::client
