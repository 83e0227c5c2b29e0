// The dataset repository (SPEC section 6) below the service: commits, read your writes
// between two in-process replicas, LRU eviction of unused datasets, polls picking up
// replacements and deletions, damaged files, and the budget's retry pushback. The
// multi-process scenarios (SIGKILL mid-upload, convergence times) are in
// tests/python/test_repository.py; the hostile-client findings in the dataset code are in
// dataset_hostile_client_test.cc.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
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

TEST(RepositoryTest, AnUploadCommitsOneFileAndAnotherReplicaServesItOnItsFirstRequest) {
  const std::string dir = TempDir();
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  config.dataset_poll_seconds = 0;  // B learns of the dataset from the request alone
  auto a = StartServer(config);
  auto b = StartServer(config);
  const v1::Tensor labels = Labels(5000, 3);
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(a.stub.get(), "x", labels, false, &info).ok());
  // One committed file; no temporary one left.
  EXPECT_EQ(Files(dir), (std::set<std::string>{"x.dataset"}));

  v1::SampleResponse from_a, from_b, inline_answer;
  grpc::ClientContext c1, c2, c3;
  ASSERT_TRUE(a.stub->Sample(&c1, ByName("x"), &from_a).ok());
  const grpc::Status s = b.stub->Sample(&c2, ByName("x"), &from_b);
  ASSERT_TRUE(s.ok()) << s.error_message();
  v1::SampleRequest inl = ByName("");
  *inl.mutable_labels() = labels;
  ASSERT_TRUE(b.stub->Sample(&c3, inl, &inline_answer).ok());
  EXPECT_EQ(from_b.indices().data(), inline_answer.indices().data());
  EXPECT_EQ(from_b.indices().data(), from_a.indices().data());
  EXPECT_EQ(from_b.dataset_sha256(), info.sha256());
  EXPECT_EQ(from_a.dataset_sha256(), info.sha256());
  EXPECT_TRUE(inline_answer.dataset_sha256().empty());

  // The name is taken on every replica: B never held it in memory before the request, and a
  // new upload of it without replace through B is ALREADY_EXISTS.
  v1::DatasetInfo again;
  EXPECT_EQ(Upload(b.stub.get(), "x", labels, false, &again).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // ServerInfo says the replicas share a repository.
  grpc::ClientContext ic;
  v1::ServerInfo si;
  ASSERT_TRUE(b.stub->GetServerInfo(&ic, v1::GetServerInfoRequest(), &si).ok());
  EXPECT_TRUE(si.dataset_repository());

  // Deletion through B removes it from the repository (NOT_FOUND for a replica that never
  // loaded it), and a second deletion is NOT_FOUND.
  grpc::ClientContext dc, dc2;
  v1::DeleteDatasetRequest del;
  del.set_name("x");
  v1::DeleteDatasetResponse dresp;
  ASSERT_TRUE(b.stub->DeleteDataset(&dc, del, &dresp).ok());
  EXPECT_TRUE(Files(dir).empty());
  EXPECT_EQ(b.stub->DeleteDataset(&dc2, del, &dresp).error_code(), grpc::StatusCode::NOT_FOUND);
  auto late = StartServer(config);
  grpc::ClientContext c4;
  EXPECT_EQ(late.stub->Sample(&c4, ByName("x"), &from_b).error_code(), grpc::StatusCode::NOT_FOUND);
}

struct Counts {
  int ok = 0, error = 0, evicted = 0;
};

// A registry with a repository on `dir`, as the server builds it.
std::unique_ptr<DatasetRegistry> OpenRepository(const std::string& dir, int64_t budget,
                                                Counts* counts) {
  std::vector<int> devices;
  if (TestDevice() == "cuda-sim") devices = {kernels::kSimDevice};
  auto registry = std::make_unique<DatasetRegistry>(budget, devices);
  registry->SetEvictionHook([counts] { ++counts->evicted; });
  auto repo = std::make_unique<Repository>(
      dir, Limits(), registry.get(),
      Repository::Hooks{[counts](bool ok) { ++(ok ? counts->ok : counts->error); }, nullptr});
  Repository* r = repo.get();
  registry->AttachRepository(std::move(repo));
  EXPECT_TRUE(r->Open().ok());
  return registry;
}

TEST(RepositoryTest, MemoryIsACacheThatEvictsTheLeastRecentlySampledUnusedDataset) {
  const std::string dir = TempDir();
  for (const char* name : {"a", "b", "c"}) WritePlain(dir, name, Labels(100, name[0]));
  Counts counts;
  // Room for two datasets of 800 bytes.
  auto registry = OpenRepository(dir, 2000, &counts);
  EXPECT_EQ(counts.ok, 2);  // a and b at start; c does not fit and loads on demand
  EXPECT_EQ(registry->count(), 2);
  Status status;
  ASSERT_TRUE(registry->Acquire("a", &status));
  ASSERT_TRUE(registry->Acquire("b", &status));
  // c evicts a, the least recently sampled.
  auto c = registry->Acquire("c", &status);
  ASSERT_TRUE(c) << status.message();
  EXPECT_EQ(counts.evicted, 1);
  EXPECT_EQ(registry->Find("a"), nullptr);
  // b and c in use by accepted requests: a cannot load, and the refusal is transient.
  auto b = registry->Acquire("b", &status);
  auto a = registry->Acquire("a", &status);
  EXPECT_EQ(a, nullptr);
  EXPECT_EQ(status.code(), Code::kResourceExhausted);
  EXPECT_GT(status.retry_pushback_ms(), 0);
  EXPECT_NE(status.message().find("--max-dataset-bytes"), std::string::npos);
  // Once c's request is answered, c (now the least recently sampled unused one) goes.
  c.reset();
  a = registry->Acquire("a", &status);
  ASSERT_TRUE(a) << status.message();
  EXPECT_EQ(registry->Find("c"), nullptr);
  EXPECT_NE(registry->Find("b"), nullptr);
  EXPECT_EQ(counts.evicted, 2);
  EXPECT_LE(registry->bytes(), 2000);
  EXPECT_EQ(counts.error, 0);
}

// A load that cannot fit even after every unused dataset went evicts none of them: a client
// retrying a refused large miss must not empty the cache that others sample (issue 31's
// load storm: a refused 512 MiB miss, retried, evicted the churn datasets each time).
TEST(RepositoryTest, ALoadThatCannotFitEvictsNothing) {
  const std::string dir = TempDir();
  for (const char* name : {"a", "b"}) WritePlain(dir, name, Labels(100, name[0]));  // 800 B
  WritePlain(dir, "big", Labels(200, 'z'));                                         // 1600 B
  Counts counts;
  auto registry = OpenRepository(dir, 2000, &counts);
  ASSERT_EQ(registry->count(), 2);  // a and b; big does not fit beside them
  Status status;
  auto a = registry->Acquire("a", &status);  // held by a request
  ASSERT_TRUE(a);
  // 400 free + b's 800 < 1600: refused, transient, and b is still resident.
  EXPECT_EQ(registry->Acquire("big", &status), nullptr);
  EXPECT_EQ(status.code(), Code::kResourceExhausted);
  EXPECT_GT(status.retry_pushback_ms(), 0);
  EXPECT_EQ(counts.evicted, 0);
  EXPECT_NE(registry->Find("b"), nullptr);
  EXPECT_EQ(registry->bytes(), 1600);
  // Once a is answered, both go for big (400 + 800 + 800 >= 1600).
  a.reset();
  auto big = registry->Acquire("big", &status);
  ASSERT_TRUE(big) << status.message();
  EXPECT_EQ(counts.evicted, 2);
  EXPECT_EQ(registry->Find("a"), nullptr);
  EXPECT_EQ(registry->Find("b"), nullptr);
  EXPECT_EQ(registry->bytes(), 1600);
}

// The eviction order against a plain model of least-recent use, over many datasets and a
// random access pattern with some datasets held by requests (issue 31: eviction walks an
// LRU index instead of scanning every dataset per victim).
TEST(RepositoryTest, EvictionFollowsLeastRecentUseOverManyDatasets) {
  const std::string dir = TempDir();
  constexpr int kNames = 120, kResident = 24;
  auto name_of = [](int i) { return "d" + std::to_string(1000 + i); };
  for (int i = 0; i < kNames; ++i) WritePlain(dir, name_of(i), Labels(100, i));
  Counts counts;
  auto registry = OpenRepository(dir, kResident * 800 + 100, &counts);
  auto resident = [&] {
    std::set<std::string> names;
    for (const auto& ds : registry->List()) names.insert(ds->name);
    return names;
  };
  // Touch what loaded at start in a known order: that is the model's order.
  std::vector<std::string> order;  // least recently used first
  for (const std::string& name : resident()) {
    Status status;
    ASSERT_TRUE(registry->Acquire(name, &status)) << status.message();
    order.push_back(name);
  }
  ASSERT_EQ(order.size(), static_cast<size_t>(kResident));
  std::mt19937 rng(7);
  std::vector<std::shared_ptr<const Dataset>> held;
  for (int step = 0; step < 1500; ++step) {
    const std::string name = name_of(static_cast<int>(rng() % kNames));
    auto at = std::find(order.begin(), order.end(), name);
    if (at != order.end()) {
      order.erase(at);
    } else {  // a miss: the least recently used that no request holds makes room
      auto victim = std::find_if(order.begin(), order.end(), [&](const std::string& n) {
        return std::none_of(held.begin(), held.end(),
                            [&](const auto& ds) { return ds->name == n; });
      });
      ASSERT_NE(victim, order.end());
      order.erase(victim);
    }
    order.push_back(name);
    Status status;
    auto ds = registry->Acquire(name, &status);
    ASSERT_TRUE(ds) << "step " << step << ": " << status.message();
    if (rng() % 4 == 0) held.push_back(ds);
    if (held.size() > 5) held.erase(held.begin() + static_cast<long>(rng() % held.size()));
    ASSERT_EQ(resident(), std::set<std::string>(order.begin(), order.end())) << "step " << step;
  }
  EXPECT_GT(counts.evicted, 500);
  EXPECT_LE(registry->bytes(), kResident * 800 + 100);
}

TEST(RepositoryTest, APollReloadsAReplacedFileAndDropsADeletedOne) {
  const std::string dir = TempDir();
  WritePlain(dir, "p", Labels(300, 1));
  Counts counts;
  auto registry = OpenRepository(dir, 1 << 20, &counts);
  auto v1 = registry->Find("p");
  ASSERT_TRUE(v1);
  registry->repository()->Poll();  // unchanged: nothing reloads
  EXPECT_EQ(registry->Find("p"), v1);
  EXPECT_EQ(counts.ok, 1);
  WritePlain(dir, "p", Labels(300, 2));
  registry->repository()->Poll();  // seen once: a hand-written set may be mid-replacement
  EXPECT_EQ(registry->Find("p"), v1);
  registry->repository()->Poll();  // unchanged across two re-scans: loaded
  auto v2 = registry->Find("p");
  ASSERT_TRUE(v2);
  EXPECT_NE(v2->sha256, v1->sha256);
  // The old version stays valid for whoever holds it.
  EXPECT_EQ(v1->num_elements(), 300);
  ASSERT_EQ(unlink((dir + "/p.labels.npy").c_str()), 0);
  registry->repository()->Poll();
  EXPECT_EQ(registry->Find("p"), nullptr);
  Status status;
  EXPECT_EQ(registry->Acquire("p", &status), nullptr);
  EXPECT_EQ(status.code(), Code::kNotFound);
  EXPECT_EQ(counts.ok, 2);
}

TEST(RepositoryTest, ADamagedCommittedFileIsABadFileCountedOnce) {
  const std::string dir = TempDir();
  {
    Counts counts;
    auto registry = OpenRepository(dir, 1 << 20, &counts);
    DatasetBuilder builder(registry.get(), Limits());
    v1::DatasetChunk chunk;
    chunk.set_name("d");
    *chunk.mutable_labels() = Labels(1000, 5);
    ASSERT_TRUE(builder.Add(chunk).ok());
    std::shared_ptr<const Dataset> stored;
    ASSERT_TRUE(builder.Commit(&stored).ok());
    // The committing replica recorded the committed file's version: a poll keeps it.
    registry->repository()->Poll();
    EXPECT_EQ(registry->Find("d"), stored);
    EXPECT_EQ(counts.ok, 0);
  }
  // Flip one label byte (same size): the sha256 in the header no longer matches the data.
  {
    std::fstream f(dir + "/d.dataset", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    const char flip = 0x7f;
    f.write(&flip, 1);
  }
  Counts counts;
  auto registry = OpenRepository(dir, 1 << 20, &counts);
  EXPECT_EQ(counts.error, 1);
  Status status;
  EXPECT_EQ(registry->Acquire("d", &status), nullptr);
  EXPECT_EQ(status.code(), Code::kNotFound);
  EXPECT_NE(status.message().find("sha256"), std::string::npos) << status.message();
  registry->repository()->Poll();
  EXPECT_EQ(counts.error, 1);  // once per version of the file
}

// A newer file that does not load (here: truncated) leaves the good version serving, and the
// failure is counted once for that file; a good file after it replaces the version.
TEST(RepositoryTest, ATruncatedReplacementKeepsTheGoodVersionServing) {
  const std::string dir = TempDir();
  WritePlain(dir, "p", Labels(300, 1));
  Counts counts;
  auto registry = OpenRepository(dir, 1 << 20, &counts);
  auto good = registry->Find("p");
  ASSERT_TRUE(good);
  EXPECT_EQ(counts.ok, 1);
  {
    // The new version's bytes cut short (the .npy header says 300 elements, 100 follow).
    const std::string tmp = dir + "/.p.partial";
    ASSERT_EQ(client::WriteNpy(tmp, Labels(300, 2)), "");
    ASSERT_EQ(truncate(tmp.c_str(), 128 + 100 * 8), 0);
    ASSERT_EQ(rename(tmp.c_str(), (dir + "/p.labels.npy").c_str()), 0);
  }
  registry->repository()->Poll();  // seen once (a hand-written set settles over two)
  registry->repository()->Poll();
  EXPECT_EQ(counts.error, 1);
  EXPECT_EQ(registry->Find("p"), good) << "the good version must keep serving";
  Status status;
  auto held = registry->Acquire("p", &status);
  ASSERT_TRUE(held) << status.message();
  EXPECT_EQ(held->sha256, good->sha256);
  held.reset();
  registry->repository()->Poll();
  EXPECT_EQ(counts.error, 1);  // once per version of the file
  EXPECT_EQ(registry->Find("p"), good);
  WritePlain(dir, "p", Labels(300, 3));
  registry->repository()->Poll();
  registry->repository()->Poll();
  auto next = registry->Find("p");
  ASSERT_TRUE(next);
  EXPECT_NE(next->sha256, good->sha256);
  EXPECT_EQ(counts.ok, 2);
}

TEST(RepositoryTest, BudgetPushbackIsPositiveOnlyWhileUploadsInProgressHoldIt) {
  DatasetRegistry registry(1000);
  ASSERT_TRUE(registry.Reserve(600).ok());  // an upload in progress
  Status s = registry.Reserve(600);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_GT(s.retry_pushback_ms(), 0) << s.message();
  registry.Release(600);
  // A stored dataset holds it: retrying cannot succeed.
  DatasetBuilder builder(&registry, Limits());
  v1::DatasetChunk chunk;
  chunk.set_name("s");
  *chunk.mutable_labels() = Labels(75, 1);  // 600 bytes
  ASSERT_TRUE(builder.Add(chunk).ok());
  std::shared_ptr<const Dataset> stored;
  ASSERT_TRUE(builder.Commit(&stored).ok());
  s = registry.Reserve(600);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_EQ(s.retry_pushback_ms(), kDoNotRetry);
  // Larger than the whole budget: never.
  s = registry.Reserve(2000);
  EXPECT_EQ(s.retry_pushback_ms(), kDoNotRetry);
}

// Fixed-length rows committed to a container are written with 2-D labels [B, N] (and
// features [B, N, ...]) and load back as the same stride, no row_splits section.
TEST(RepositoryTest, FixedRowsCommittedToAContainerLoadBackAsFixedRows) {
  const std::string dir = TempDir();
  Counts counts;
  auto registry = OpenRepository(dir, 1 << 20, &counts);
  v1::DatasetChunk chunk;
  chunk.set_name("cf");
  *chunk.mutable_labels() = Labels(12, 5);
  v1::Tensor* f = chunk.mutable_features();
  f->set_dtype(v1::DTYPE_INT16);
  f->add_shape(12);
  f->add_shape(2);
  for (int i = 0; i < 24; ++i) f->mutable_data()->append({static_cast<char>(i), 0});
  DatasetBuilder builder(registry.get(), Limits());
  ASSERT_TRUE(builder.Add(chunk).ok());
  ASSERT_TRUE(builder.SetFixedRows(3, 4).ok());
  std::shared_ptr<const Dataset> stored;
  const Status s = builder.Commit(&stored);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(Files(dir), (std::set<std::string>{"cf.dataset"}));

  Counts other_counts;
  auto other = OpenRepository(dir, 1 << 20, &other_counts);
  EXPECT_EQ(other_counts.ok, 1);
  Status status;
  const auto loaded = other->Acquire("cf", &status);
  ASSERT_TRUE(loaded) << status.message();
  EXPECT_EQ(loaded->rows, Dataset::Rows::kFixed);
  EXPECT_EQ(loaded->num_rows(), 3);
  EXPECT_EQ(loaded->row_begin(2), 8);
  EXPECT_EQ(loaded->feature_shape, std::vector<int64_t>{2});
  EXPECT_TRUE(loaded->row_splits.empty());
  EXPECT_EQ(loaded->sha256, stored->sha256);
  EXPECT_EQ(loaded->bytes, 12 * 8 + 24 * 2);
}

}  // namespace
}  // namespace gpusampler::server::testing
