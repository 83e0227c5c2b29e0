// edge/regions: shared-memory regions (SPEC section 9) through an in-process server: an
// answer's bytes in the region equal the inline answer's, unregistering a region that a
// queued request uses fails that request CANCELLED (its mapping outlives the unregister), a
// truncated object fails FAILED_PRECONDITION without SIGBUS, and the layout helpers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <string>
#include <thread>

#include "edge/regions.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

// A POSIX shm object of `size` bytes, mapped here too (the client's side); removed at the end.
class ShmObject {
 public:
  explicit ShmObject(size_t size)
      : key_("/gpusampler-test-" + std::to_string(getpid()) + "-" + std::to_string(++count_)),
        size_(size) {
    fd_ = shm_open(key_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    EXPECT_GE(fd_, 0);
    EXPECT_EQ(ftruncate(fd_, static_cast<off_t>(size)), 0);
    map_ = static_cast<uint8_t*>(mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0));
    EXPECT_NE(map_, MAP_FAILED);
  }
  ~ShmObject() {
    munmap(map_, size_);
    close(fd_);
    shm_unlink(key_.c_str());
  }
  const std::string& key() const { return key_; }
  const uint8_t* data() const { return map_; }
  void Truncate(off_t size) { EXPECT_EQ(ftruncate(fd_, size), 0); }

 private:
  static inline int count_ = 0;
  std::string key_;
  size_t size_;
  int fd_ = -1;
  uint8_t* map_ = nullptr;
};

ServerConfig ShmConfig() {
  ServerConfig c = TestConfig();
  c.allow_shared_memory = true;
  return c;
}

grpc::Status Register(v1::Sampler::Stub* stub, const std::string& name, const std::string& key,
                      int64_t size) {
  grpc::ClientContext ctx;
  v1::RegisterRegionRequest r;
  r.set_name(name);
  r.set_shm_key(key);
  r.set_byte_size(size);
  v1::RegionInfo info;
  return stub->RegisterRegion(&ctx, r, &info);
}

v1::SampleRequest FeatureRequest(const std::string& region, int64_t offset) {
  RequestSpec spec;
  spec.rows = {RandomRow(3000, 1), RandomRow(3000, 2)};
  spec.num_samples = 64;
  spec.feature_dim = 5;
  v1::SampleRequest r = MakeRequest(spec);
  if (!region.empty()) {
    r.mutable_output_region()->set_name(region);
    r.mutable_output_region()->set_offset(offset);
  }
  return r;
}

TEST(RegionsTest, RegionBytesEqualTheInlineAnswer) {
  auto t = StartServer(ShmConfig());
  ShmObject shm(1 << 20);
  ASSERT_TRUE(Register(t.stub.get(), "r", shm.key(), 1 << 20).ok());
  v1::SampleResponse inline_answer, region_answer;
  grpc::ClientContext a, b;
  ASSERT_TRUE(t.stub->Sample(&a, FeatureRequest("", 0), &inline_answer).ok());
  ASSERT_TRUE(t.stub->Sample(&b, FeatureRequest("r", 768), &region_answer).ok());
  std::array<int64_t, 6> starts{};
  const int64_t end = RegionLayout(inline_answer, &starts);
  const v1::Tensor* tensors[] = {&inline_answer.indices(),      &inline_answer.labels(),
                                 &inline_answer.features(),     &inline_answer.num_positive(),
                                 &inline_answer.num_negative(), nullptr};
  const v1::Tensor* empty[] = {&region_answer.indices(),      &region_answer.labels(),
                               &region_answer.features(),     &region_answer.num_positive(),
                               &region_answer.num_negative(), nullptr};
  EXPECT_EQ(starts[5], -1);  // no classes: no num_per_class
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(starts[i] % kRegionAlignment, 0);
    EXPECT_TRUE(empty[i]->data().empty());
    EXPECT_EQ(empty[i]->dtype(), tensors[i]->dtype());
    const std::string& want = tensors[i]->data();
    EXPECT_EQ(std::memcmp(shm.data() + 768 + starts[i], want.data(), want.size()), 0) << i;
  }
  EXPECT_GT(end, static_cast<int64_t>(inline_answer.features().data().size()));
  EXPECT_EQ(region_answer.seed(), inline_answer.seed());
}

TEST(RegionsTest, UnregisterWhileQueuedFailsThatRequestCancelled) {
  auto t = StartServer(ShmConfig());
  ShmObject shm(1 << 20);
  ASSERT_TRUE(Register(t.stub.get(), "r", shm.key(), 1 << 20).ok());
  t.server->scheduler().SetPausedForTesting(true);
  auto call = StartSample(t.stub.get(), FeatureRequest("r", 0));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  grpc::ClientContext ctx;
  v1::UnregisterRegionRequest u;
  u.set_name("r");
  v1::UnregisterRegionResponse ur;
  ASSERT_TRUE(t.stub->UnregisterRegion(&ctx, u, &ur).ok());
  t.server->scheduler().SetPausedForTesting(false);
  const grpc::Status s = call->status.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::CANCELLED) << s.error_message();
  EXPECT_NE(s.error_message().find("unregistered"), std::string::npos) << s.error_message();
  // The server keeps serving, and the name is free again.
  grpc::ClientContext again;
  v1::SampleResponse resp;
  EXPECT_TRUE(t.stub->Sample(&again, FeatureRequest("", 0), &resp).ok());
  EXPECT_TRUE(Register(t.stub.get(), "r", shm.key(), 4096).ok());
}

TEST(RegionsTest, TruncatedObjectIsFailedPreconditionNotSigbus) {
  auto t = StartServer(ShmConfig());
  ShmObject shm(1 << 20);
  ASSERT_TRUE(Register(t.stub.get(), "r", shm.key(), 1 << 20).ok());
  shm.Truncate(1000);
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, FeatureRequest("r", 0), &resp);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << s.error_message();
  EXPECT_NE(s.error_message().find("now 1000 bytes"), std::string::npos) << s.error_message();
  EXPECT_EQ(s.error_message().find(shm.key()), std::string::npos);  // keys never in errors
  grpc::ClientContext again;
  EXPECT_TRUE(t.stub->Sample(&again, FeatureRequest("", 0), &resp).ok());
}

TEST(RegionsTest, CopyIntoAShrunkMappingIsCaughtNotSigbus) {
  RegionTable table(true, "/gpusampler");  // installs the guard
  ShmObject shm(1 << 16);
  uint8_t* map = const_cast<uint8_t*>(shm.data());
  std::string bytes(1 << 16, '\x5a');
  ASSERT_TRUE(GuardedCopy(map, bytes.data(), bytes.size()));
  EXPECT_EQ(map[100], 0x5a);
  shm.Truncate(0);  // the pages behind the mapping are gone: a plain store raises SIGBUS
  EXPECT_FALSE(GuardedCopy(map, bytes.data(), bytes.size()));
  EXPECT_FALSE(GuardedCopy(map + 4096, bytes.data(), 16));
  shm.Truncate(1 << 16);
  EXPECT_TRUE(GuardedCopy(map, bytes.data(), 16));  // and the thread is fine afterwards
}

// The CPU backend's gather threads write answers straight into regions, outside any
// GuardedCopy: a store from any thread into a truncated region's mapping gets private zero
// pages instead of SIGBUS, and poisons the region, so that this and later answers into it
// fail FAILED_PRECONDITION.
TEST(RegionsTest, StoreFromAnyThreadIntoATruncatedRegionPoisonsItNotTheProcess) {
  RegionTable table(true, "/gpusampler");
  ShmObject shm(1 << 16);
  v1::RegisterRegionRequest r;
  r.set_name("r");
  r.set_shm_key(shm.key());
  r.set_byte_size(1 << 16);
  v1::RegionInfo info;
  ASSERT_TRUE(table.Register("", r, &info).ok());
  v1::OutputRegion out;
  out.set_name("r");
  RegionLease lease;
  ASSERT_TRUE(table.Lease("", out, &lease).ok());
  ASSERT_TRUE(lease.region->guarded());
  EXPECT_FALSE(lease.region->poisoned());
  std::thread([&] { std::memset(lease.region->at(0), 0x11, 1 << 16); }).join();  // fine
  EXPECT_FALSE(lease.region->poisoned());
  EXPECT_EQ(shm.data()[4096], 0x11);
  shm.Truncate(4096);  // the client shrinks the object behind the server's back
  std::thread([&] { std::memset(lease.region->at(0), 0x22, 1 << 16); }).join();  // survives
  EXPECT_TRUE(lease.region->poisoned());
  EXPECT_EQ(shm.data()[100], 0x22);  // the page that still exists got the store
  RegionLease again;
  const Status s = table.Lease("", out, &again);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition) << s.message();
  EXPECT_NE(s.message().find("register it again"), std::string::npos) << s.message();
  // An answer already leased fails too.
  v1::SampleResponse resp;
  resp.mutable_indices()->set_data(std::string(8, '\1'));
  int64_t written = 0;
  EXPECT_EQ(WriteToRegion(lease, &resp, &written).code(), Code::kFailedPrecondition);
}

TEST(RegionsTest, RegisterStatuses) {
  ServerConfig off = TestConfig();
  auto t_off = StartServer(off);
  ShmObject shm(8192);
  grpc::Status s = Register(t_off.stub.get(), "r", shm.key(), 8192);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(s.error_message().find("--allow-shared-memory"), std::string::npos);

  auto t = StartServer(ShmConfig());
  s = Register(t.stub.get(), "r", "/elsewhere-1", 8192);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("--shm-key-prefix"), std::string::npos);
  EXPECT_EQ(s.error_message().find("elsewhere"), std::string::npos);
  s = Register(t.stub.get(), "r", "/gpusampler-absent-object", 8192);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  s = Register(t.stub.get(), "r", shm.key(), 8193);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("8192 bytes"), std::string::npos) << s.error_message();
  EXPECT_TRUE(Register(t.stub.get(), "r", shm.key(), 8192).ok());
  s = Register(t.stub.get(), "r", shm.key(), 8192);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::ALREADY_EXISTS);
  s = Register(t.stub.get(), "bad/name", shm.key(), 8192);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST(RegionsTest, RevokedTokensLoseTheirRegions) {
  RegionTable table(true, "/gpusampler");
  ShmObject shm(4096);
  v1::RegisterRegionRequest r;
  r.set_name("r");
  r.set_shm_key(shm.key());
  r.set_byte_size(4096);
  v1::RegionInfo info;
  ASSERT_TRUE(table.Register("token-a", r, &info).ok());
  ASSERT_TRUE(table.Register("token-b", r, &info).ok());
  v1::OutputRegion out;
  out.set_name("r");
  RegionLease lease;
  ASSERT_TRUE(table.Lease("token-a", out, &lease).ok());
  table.Revoke({"token-b"});
  EXPECT_EQ(table.size(), 1);
  EXPECT_EQ(table.Lease("token-a", out, &lease).code(), Code::kNotFound);
  // The lease taken before the revocation still holds the mapping, and fails CANCELLED.
  v1::SampleResponse resp;
  resp.mutable_indices()->set_data(std::string(8, '\1'));
  int64_t written = 0;
  EXPECT_EQ(WriteToRegion(lease, &resp, &written).code(), Code::kCancelled);
  table.Clear();
  EXPECT_EQ(table.size(), 0);
}

}  // namespace
}  // namespace gpusampler::server::testing
