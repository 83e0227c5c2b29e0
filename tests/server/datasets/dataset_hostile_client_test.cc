// Findings of the hostile-client review that live in the dataset code (SPEC section 3): a bad
// later chunk, a stalled upload holding the budget, special files in the dataset directory.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "datasets/datasets.hpp"
#include "datasets/repository.hpp"
#include "datasets/repository_util.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/kernels/device.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// Finding 3: a later chunk that does not parse was taken for the end of the stream, and the
// chunks before it were committed with OK.
TEST(DatasetHostileClientTest, ABadLaterChunkIsInvalidArgumentAndKeepsNothing) {
  const std::string dir = TempDir();
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  grpc::internal::RpcMethod method("/gpusampler.v1.Sampler/CreateDataset",
                                   grpc::internal::RpcMethod::CLIENT_STREAMING);
  grpc::ClientContext ctx;
  grpc::ByteBuffer response;
  std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
      grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(t.channel.get(), method, &ctx,
                                                                    &response));
  v1::DatasetChunk first;
  first.set_name("half");
  *first.mutable_labels() = Labels(100, 1);
  const std::string good = first.SerializeAsString(), bad = "\xff\xff\xff\xff";
  for (const std::string* bytes : {&good, &bad}) {
    grpc::Slice slice(*bytes);
    writer->Write(grpc::ByteBuffer(&slice, 1));
  }
  writer->WritesDone();
  const grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("chunk 1 does not parse"), std::string::npos)
      << s.error_message();
  EXPECT_TRUE(Files(dir).empty());
  grpc::ClientContext lc;
  v1::ListDatasetsResponse list;
  ASSERT_TRUE(t.stub->ListDatasets(&lc, v1::ListDatasetsRequest(), &list).ok());
  EXPECT_EQ(list.datasets_size(), 0);
}

// Finding 9: a stalled upload held the dataset budget indefinitely, and others were told
// "do not retry".
TEST(DatasetHostileClientTest, AStalledUploadEndsAfterTheIdleTimeoutAndFreesItsReservation) {
  ServerConfig config = TestConfig();
  config.upload_idle_timeout_ms = 2000;
  config.max_dataset_bytes = 10000;
  auto t = StartServer(config);
  grpc::ClientContext ctx;
  v1::DatasetInfo info;
  auto stalled = t.stub->CreateDataset(&ctx, &info);
  v1::DatasetChunk chunk;
  chunk.set_name("stalled");
  *chunk.mutable_labels() = Labels(1000, 2);  // 8000 of the 10000 bytes
  ASSERT_TRUE(stalled->Write(chunk));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the server reserves it
  // Meanwhile, held by an upload in progress only: a positive pushback.
  v1::DatasetInfo other;
  grpc::ClientContext octx;
  auto writer = t.stub->CreateDataset(&octx, &other);
  chunk.set_name("other");
  writer->Write(chunk);
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  const auto& trailers = octx.GetServerTrailingMetadata();
  const auto pushback = trailers.find("grpc-retry-pushback-ms");
  ASSERT_NE(pushback, trailers.end());
  EXPECT_GT(std::stoll(std::string(pushback->second.data(), pushback->second.size())), 0);
  // The stalled upload sends nothing more: it ends DEADLINE_EXCEEDED, keeping nothing.
  s = stalled->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_NE(s.error_message().find("--upload-idle-timeout-ms"), std::string::npos)
      << s.error_message();
  // The budget is free again.
  grpc::ClientContext actx;
  v1::DatasetInfo again;
  auto retry = t.stub->CreateDataset(&actx, &again);
  retry->Write(chunk);
  retry->WritesDone();
  EXPECT_TRUE(retry->Finish().ok());
}

// Finding 10: a directory named X.labels.npy aborted the server, a link to /dev/zero read
// until it ran out of memory, a FIFO hung start-up, and a sparse file was read whole before
// the budget check.
TEST(DatasetHostileClientTest, DatasetDirSpecialFilesAreSkippedAndTheServerStarts) {
  const std::string dir = TempDir();
  ASSERT_EQ(mkdir((dir + "/adir.labels.npy").c_str(), 0755), 0);
  ASSERT_EQ(symlink("/dev/zero", (dir + "/zero.labels.npy").c_str()), 0);
  ASSERT_EQ(mkfifo((dir + "/fifo.labels.npy").c_str(), 0644), 0);
  { std::ofstream f(dir + "/sparse.labels.npy"); }
  ASSERT_EQ(truncate((dir + "/sparse.labels.npy").c_str(), int64_t{3} << 29), 0);
  WritePlain(dir, "good", Labels(500, 4));
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  grpc::ClientContext c;
  v1::SampleResponse r;
  EXPECT_TRUE(t.stub->Sample(&c, ByName("good"), &r).ok());
  const std::string metrics = HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("gpusampler_dataset_loads_total{result=\"error\"} 4"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpusampler_dataset_loads_total{result=\"ok\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace gpusampler::server::testing
