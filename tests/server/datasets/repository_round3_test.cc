// Issue 31 (hostile and careless clients, round 3), the repository's half: the leftover
// cleaner keeps committed datasets whose names contain ".dataset.tmp-", a listing that fails
// deletes nothing, and locking is per dataset (a load blocks no other dataset, no miss of an
// unknown name and no re-scan).
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>
#include <map>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "datasets/datasets.hpp"
#include "datasets/repository.hpp"
#include "datasets/repository_util.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/kernels/device.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

struct Counts {
  std::atomic<int> ok{0}, error{0}, scan_failures{0};
};

std::unique_ptr<DatasetRegistry> OpenRepo(const std::string& dir, int64_t budget, Counts* counts,
                                          std::vector<int> devices = {},
                                          DeviceMemory* memory = nullptr) {
  auto registry = std::make_unique<DatasetRegistry>(budget, devices);
  if (memory) registry->SetDeviceMemory(*memory);
  auto repo = std::make_unique<Repository>(
      dir, Limits(), registry.get(),
      Repository::Hooks{[counts](bool ok) { ++(ok ? counts->ok : counts->error); }, nullptr,
                        [counts] { ++counts->scan_failures; }});
  Repository* r = repo.get();
  registry->AttachRepository(std::move(repo));
  EXPECT_TRUE(r->Open().ok());
  return registry;
}

// Uploads `labels` as `name` through the registry (CommitUpload: NAME.dataset).
Status Commit(DatasetRegistry* registry, const std::string& name, const v1::Tensor& labels) {
  DatasetBuilder builder(registry, Limits());
  v1::DatasetChunk chunk;
  chunk.set_name(name);
  *chunk.mutable_labels() = labels;
  GPUSAMPLER_RETURN_IF_ERROR(builder.Add(chunk));
  std::shared_ptr<const Dataset> stored;
  return builder.Commit(&stored);
}

void MakeOld(const std::string& path) {
  struct timeval times[2];
  gettimeofday(&times[0], nullptr);
  times[0].tv_sec -= 2 * 3600;
  times[1] = times[0];
  ASSERT_EQ(utimes(path.c_str(), times), 0) << path << ": " << std::strerror(errno);
}

TEST(RepositoryRound3Test, OnlyTheExactUploadLeftoverPatternIsALeftover) {
  struct Case {
    const char* file;
    bool leftover;
  };
  for (const Case& c : {
           Case{"x.dataset.tmp-1-00000000000000aa", true},
           Case{"a.b.dataset.tmp-4294967295-0123456789abcdef", true},
           Case{"keep.dataset.tmp-1-abc", false},                    // a valid dataset name
           Case{"keep.dataset.tmp-1-abc.dataset", false},            // its committed file
           Case{"keep.dataset.tmp-1-abc.labels.npy", false},         // hand-written
           Case{"k.dataset.tmp-2-00000000000000ab.dataset", false},  // committed
           Case{"x.dataset.tmp-1-00000000000000AA", false},          // upper case
           Case{"x.dataset.tmp-1-00000000000000a", false},           // 15 digits
           Case{"x.dataset.tmp-1-00000000000000aaa", false},         // 17 digits
           Case{"x.dataset.tmp--00000000000000aa", false},           // no pid
           Case{".dataset.tmp-1-00000000000000aa", false},           // no name
           Case{"x y.dataset.tmp-1-00000000000000aa", false},        // not a valid name
           Case{"x.dataset.tmp-1-00000000000000aa.tmp", false},      // something after
       }) {
    EXPECT_EQ(Repository::IsLeftover(c.file), c.leftover) << c.file;
  }
}

// The finding: three committed datasets named like leftovers were gone an hour
// after their commit. They survive a clean now; a real leftover still goes.
TEST(RepositoryRound3Test, CommittedDatasetsNamedLikeLeftoversSurviveTheCleaner) {
  const std::string dir = TempDir();
  Counts counts;
  auto registry = OpenRepo(dir, 1 << 20, &counts);
  const std::vector<std::string> names = {
      "keep.dataset.tmp-1-abc", "keep.dataset.tmp-2-00000000000000ab", "plain.dataset.tmp-3-x"};
  ASSERT_TRUE(Commit(registry.get(), names[0], Labels(100, 1)).ok());
  ASSERT_TRUE(Commit(registry.get(), names[1], Labels(100, 2)).ok());
  WritePlain(dir, names[2], Labels(100, 3));
  const std::string leftover = dir + "/y.dataset.tmp-1-00000000000000bb";
  { std::ofstream(leftover) << "GSDATA01 half-written"; }
  for (const std::string& f : Files(dir)) MakeOld(dir + "/" + f);  // all over an hour old

  EXPECT_EQ(registry->repository()->CleanLeftovers(Repository::kLeftoverAge), 1);
  registry->repository()->Poll();  // cleans again, loads the hand-written one
  const std::set<std::string> files = Files(dir);
  EXPECT_EQ(files.count("y.dataset.tmp-1-00000000000000bb"), 0u);
  EXPECT_EQ(files.count(names[0] + ".dataset"), 1u);
  EXPECT_EQ(files.count(names[1] + ".dataset"), 1u);
  EXPECT_EQ(files.count(names[2] + ".labels.npy"), 1u);
  for (const std::string& name : names) {
    Status status;
    EXPECT_TRUE(registry->Acquire(name, &status)) << name << ": " << status.message();
  }
  // A replica started now finds all three too.
  Counts late_counts;
  auto late = OpenRepo(dir, 1 << 20, &late_counts);
  EXPECT_EQ(late->count(), 3);
  EXPECT_EQ(late_counts.error, 0);
}

// Issue 31 item 3: "cannot list the directory" is not "every dataset was deleted".
TEST(RepositoryRound3Test, AFailedListingKeepsTheResidentDatasetsAndIsCounted) {
  const std::string dir = TempDir();
  WritePlain(dir, "a", Labels(100, 1));
  WritePlain(dir, "b", Labels(100, 2));
  Counts counts;
  auto registry = OpenRepo(dir, 1 << 20, &counts);
  ASSERT_EQ(registry->count(), 2);
  const std::string moved = dir + ".unmounted";
  ASSERT_EQ(rename(dir.c_str(), moved.c_str()), 0);  // opendir fails (ENOENT)
  registry->repository()->Poll();
  registry->repository()->Poll();
  EXPECT_EQ(registry->count(), 2);
  EXPECT_EQ(counts.scan_failures, 2);  // counted per failed listing (logged once)
  Status status;
  EXPECT_TRUE(registry->Acquire("a", &status));
  std::vector<v1::DatasetInfo> listed;
  const Status list = registry->repository()->ListNotResident(&listed);
  EXPECT_EQ(list.code(), Code::kUnavailable);
  EXPECT_NE(list.message().find("--dataset-dir"), std::string::npos) << list.message();
  EXPECT_EQ(counts.scan_failures, 3);

  ASSERT_EQ(rename(moved.c_str(), dir.c_str()), 0);
  ASSERT_EQ(unlink((dir + "/b.labels.npy").c_str()), 0);
  registry->repository()->Poll();  // listing works again: a real deletion is seen
  EXPECT_EQ(counts.scan_failures, 3);
  EXPECT_TRUE(registry->Find("a"));
  EXPECT_FALSE(registry->Find("b"));
  EXPECT_TRUE(registry->repository()->ListNotResident(&listed).ok());
}

// A gate that a device copy waits on: holds one load in the middle (its name's lock held).
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, open = false;
  void Enter() {
    std::unique_lock<std::mutex> lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [this] { return open; });
  }
  bool WaitEntered() {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(30), [this] { return entered; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};

// Issue 31 item 1: a load held in the middle blocks no other dataset's load, no miss of a
// name the directory lacks, no re-scan; a second miss of its own name waits for it and
// does not load it again (single flight).
TEST(RepositoryRound3Test, ALoadInProgressBlocksNoOtherNameNorTheRescan) {
  const std::string dir = TempDir();
  Gate gate;
  DeviceMemory memory;
  memory.alloc = [](int device, size_t bytes) { return kernels::DeviceAlloc(device, bytes); };
  memory.copy = [&gate](int device, void* dst, const void* src, size_t bytes) {
    if (bytes == 40000) gate.Enter();
    kernels::CopyToDevice(device, dst, src, bytes);
  };
  Counts counts;
  auto registry = OpenRepo(dir, 1 << 20, &counts, {kernels::kSimDevice}, &memory);
  WritePlain(dir, "big", Labels(5000, 1));  // 40000 label bytes: the gated copy
  WritePlain(dir, "small", Labels(100, 2));
  const std::string tiny = "tiny";
  WritePlain(dir, tiny, Labels(10, 3));
  ASSERT_EQ(registry->count(), 0);

  Status big_status, again_status;
  std::shared_ptr<const Dataset> big, again;
  std::thread loader([&] { big = registry->Acquire("big", &big_status); });
  ASSERT_TRUE(gate.WaitEntered());
  std::thread second([&] { again = registry->Acquire("big", &again_status); });
  auto others = std::async(std::launch::async, [&] {
    Status status;
    EXPECT_FALSE(registry->Acquire("no-such-dataset", &status));
    EXPECT_EQ(status.code(), Code::kNotFound) << status.message();
    EXPECT_TRUE(registry->Acquire("small", &status)) << status.message();
    registry->repository()->Poll();  // skips the busy name, sees tiny
    registry->repository()->Poll();  // tiny unchanged across two re-scans: loaded (it fits)
    EXPECT_TRUE(registry->Find(tiny));
  });
  const bool finished = others.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_TRUE(finished) << "a load in progress blocked another name or the re-scan";
  gate.Open();
  others.wait();
  loader.join();
  second.join();
  ASSERT_TRUE(big) << big_status.message();
  ASSERT_TRUE(again) << again_status.message();
  EXPECT_EQ(big.get(), again.get());  // one load
  EXPECT_EQ(counts.ok, 3);            // big, small, tiny: each loaded once
  EXPECT_EQ(counts.error, 0);
}

// Item 9: a hand-written multi-file set replaced in the documented order (labels, then
// features) is never served torn: it reloads only once two re-scans saw all its files alike.
TEST(RepositoryRound3Test, AHandWrittenSetReplacedFileByFileIsNeverServedTorn) {
  const std::string dir = TempDir();
  auto features = [](float add) {
    v1::Tensor t;
    t.set_dtype(v1::DTYPE_FLOAT32);
    t.add_shape(100);
    t.add_shape(1);
    std::vector<float> v(100);
    for (int i = 0; i < 100; ++i) v[i] = static_cast<float>(i) + add;
    t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4));
    return t;
  };
  auto write_features = [&](float add) {
    const std::string tmp = dir + "/.t.features.partial";
    ASSERT_EQ(client::WriteNpy(tmp, features(add)), "");
    ASSERT_EQ(rename(tmp.c_str(), (dir + "/t.features.npy").c_str()), 0);
  };
  write_features(0);
  WritePlain(dir, "t", Labels(100, 1));
  Counts counts;
  auto registry = OpenRepo(dir, 1 << 20, &counts);
  auto v1 = registry->Find("t");
  ASSERT_TRUE(v1);
  Repository* repo = registry->repository();
  repo->Poll();
  WritePlain(dir, "t", Labels(100, 2));  // new labels, old features: torn on disk
  repo->Poll();
  EXPECT_EQ(registry->Find("t"), v1);
  write_features(0.5f);  // the set is whole again
  repo->Poll();
  EXPECT_EQ(registry->Find("t"), v1);  // changed since the last re-scan: not yet
  repo->Poll();
  auto v2 = registry->Find("t");
  ASSERT_TRUE(v2);
  ASSERT_NE(v2, v1);
  float first = 0;
  std::memcpy(&first, v2->features.data(), 4);
  if (!v2->features.empty()) EXPECT_EQ(first, 0.5f);  // the new features with the new labels
  EXPECT_EQ(counts.ok, 2);                            // v1 and v2: the torn version never loaded
}

// Item 9: ListDatasets lists only what can be sampled: not sections whose element counts
// disagree, not a dataset over the budget, not a version that failed to load.
TEST(RepositoryRound3Test, ListingLeavesOutWhatCanNeverBeSampled) {
  const std::string dir = TempDir();
  Counts counts;
  auto registry = OpenRepo(dir, 4000, &counts);
  WritePlain(dir, "good", Labels(100, 1));      // 800 bytes
  WritePlain(dir, "too-big", Labels(1000, 2));  // 8000 bytes, over the 4000-byte budget
  WritePlain(dir, "mismatch", Labels(100, 3));
  {
    v1::Tensor f;
    f.set_dtype(v1::DTYPE_FLOAT32);
    f.add_shape(50);  // 50 feature rows for 100 labels
    f.set_data(std::string(200, '\0'));
    ASSERT_EQ(client::WriteNpy(dir + "/mismatch.features.npy", f), "");
  }
  WritePlain(dir, "damaged", Labels(100, 4));
  {
    v1::Tensor b;
    b.set_dtype(v1::DTYPE_BOOL);
    b.add_shape(4);
    b.set_data(std::string("\x01\x07\x00\x01", 4));  // 7 is not a bool
    const std::string tmp = dir + "/.damaged.partial";
    ASSERT_EQ(client::WriteNpy(tmp, b), "");
    ASSERT_EQ(rename(tmp.c_str(), (dir + "/damaged.labels.npy").c_str()), 0);
  }
  Status status;
  EXPECT_FALSE(registry->Acquire("damaged", &status));  // a bad file, now known
  std::vector<v1::DatasetInfo> listed;
  ASSERT_TRUE(registry->repository()->ListNotResident(&listed).ok());
  std::vector<std::string> names;
  for (const auto& info : listed) names.push_back(info.name());
  EXPECT_EQ(names, std::vector<std::string>{"good"});
}

// Issue 31 item 1: a listing keeps the descriptions of the files whose version did not
// change (100k datasets are not re-opened by every listing), and still sees every change:
// a replaced file, a deleted one, a new one, one that comes back within the budget.
TEST(RepositoryRound3Test, ListingSeesEveryChangeBetweenListings) {
  const std::string dir = TempDir();
  Counts counts;
  auto registry = OpenRepo(dir, 1 << 20, &counts);
  auto listing = [&] {
    std::vector<v1::DatasetInfo> listed;
    EXPECT_TRUE(registry->repository()->ListNotResident(&listed).ok());
    std::map<std::string, int64_t> elements;
    for (const auto& info : listed) elements[info.name()] = info.num_elements();
    return elements;
  };
  using Listed = std::map<std::string, int64_t>;
  WritePlain(dir, "a", Labels(100, 1));
  WritePlain(dir, "b", Labels(100, 2));
  EXPECT_EQ(listing(), (Listed{{"a", 100}, {"b", 100}}));
  EXPECT_EQ(listing(), (Listed{{"a", 100}, {"b", 100}}));  // unchanged files, kept
  WritePlain(dir, "a", Labels(300, 3));                    // a new version
  ASSERT_EQ(unlink((dir + "/b.labels.npy").c_str()), 0);
  WritePlain(dir, "c", Labels(7, 4));
  EXPECT_EQ(listing(), (Listed{{"a", 300}, {"c", 7}}));
  WritePlain(dir, "b", Labels(1 << 18, 5));  // 2 MiB, over the 1 MiB budget: never listed
  EXPECT_EQ(listing(), (Listed{{"a", 300}, {"c", 7}}));
  WritePlain(dir, "b", Labels(10, 6));
  EXPECT_EQ(listing(), (Listed{{"a", 300}, {"b", 10}, {"c", 7}}));
  Status status;
  ASSERT_TRUE(registry->Acquire("c", &status));  // resident now: listed by the registry
  EXPECT_EQ(listing(), (Listed{{"a", 300}, {"b", 10}}));
}

}  // namespace
}  // namespace gpusampler::server::testing
