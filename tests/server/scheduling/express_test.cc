// scheduling/scheduler's express worker (--cpu-express-elements): small requests are served
// while a large launch holds the other worker, an express worker never takes a large one, and
// it fuses small ones only up to its limit. Also FairQueue::NextWithin's turn order.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gpusampler/kernels/backend.hpp"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

constexpr int64_t kExpressElements = 2500;
constexpr int64_t kGateK = 777;  // a launch holding a row with this K waits for the gate

// The gate: launches with a kGateK row wait until it opens. Counts such launches begun.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  std::atomic<int> waiting{0};
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu);
      open = true;
    }
    cv.notify_all();
  }
};

// A CPU backend that counts its launches and, for a gated row, waits for the gate.
class GatedBackend final : public kernels::Backend {
 public:
  GatedBackend(Gate* gate, std::atomic<int>* launches)
      : gate_(gate), launches_(launches), cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    ++*launches_;
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (batch.rows[r].num_samples == kGateK) {
        ++gate_->waiting;
        std::unique_lock<std::mutex> lock(gate_->mu);
        gate_->cv.wait(lock, [this] { return gate_->open; });
        break;
      }
    }
    cpu_->Sample(batch);
  }

 private:
  Gate* gate_;
  std::atomic<int>* launches_;
  std::unique_ptr<kernels::Backend> cpu_;
};

v1::SampleRequest Request(int64_t n, int64_t k, uint64_t seed) {
  RequestSpec r;
  r.rows = {RandomRow(n, seed)};
  r.num_samples = k;
  r.seed = seed;
  return MakeRequest(r);
}

struct ExpressServer {
  Gate gate;
  std::atomic<int> regular_launches{0};
  std::atomic<int> express_launches{0};
  TestServer t;
  ExpressServer() {
    ServerConfig config = TestConfig();
    config.cpu_express_elements = kExpressElements;
    config.max_batch_rows = 1000;
    // Worker 0 is the regular one, worker 1 (= --cpu-workers) the express one.
    t = StartServer(config, [this](int index) {
      return std::make_unique<GatedBackend>(&gate,
                                            index == 0 ? &regular_launches : &express_launches);
    });
  }
  ~ExpressServer() { gate.Open(); }
};

TEST(ExpressTest, SmallRequestsAreServedWhileALargeLaunchRuns) {
  ExpressServer s;
  Scheduler& sched = s.t.server->scheduler();
  const int regular_before = s.regular_launches.load();
  const int express_before = s.express_launches.load();
  // A large request (over the express limit) takes the regular worker and holds it.
  auto large = StartSample(s.t.stub.get(), Request(10000, kGateK, 1));
  ASSERT_TRUE(WaitFor([&] { return s.gate.waiting.load() == 1; }));
  // Small requests are answered meanwhile, by the express worker, each exactly as a server
  // without one answers it.
  auto plain = StartServer(TestConfig());
  for (uint64_t seed = 2; seed < 6; ++seed) {
    const v1::SampleRequest req = Request(1000, 64, seed);
    grpc::ClientContext ctx;
    v1::SampleResponse got;
    ASSERT_TRUE(s.t.stub->Sample(&ctx, req, &got).ok());
    grpc::ClientContext ctx2;
    v1::SampleResponse want;
    ASSERT_TRUE(plain.stub->Sample(&ctx2, req, &want).ok());
    EXPECT_EQ(got.indices().data(), want.indices().data()) << "seed " << seed;
  }
  EXPECT_EQ(s.express_launches.load() - express_before, 4);
  // A second large request waits for the regular worker: the express one never takes it.
  auto large2 = StartSample(s.t.stub.get(), Request(3000, 64, 7));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 1; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(sched.queue_depth(), 1);
  EXPECT_EQ(s.express_launches.load() - express_before, 4);
  s.gate.Open();
  EXPECT_TRUE(large->status.get().ok());
  EXPECT_TRUE(large2->status.get().ok());
  EXPECT_EQ(s.regular_launches.load() - regular_before, 2);
}

TEST(ExpressTest, AnExpressWorkerFusesSmallRequestsUpToItsLimit) {
  ExpressServer s;
  Scheduler& sched = s.t.server->scheduler();
  auto large = StartSample(s.t.stub.get(), Request(10000, kGateK, 1));
  ASSERT_TRUE(WaitFor([&] { return s.gate.waiting.load() == 1; }));
  sched.SetPausedForTesting(true);
  std::vector<std::unique_ptr<AsyncCall>> small;
  for (uint64_t seed = 2; seed < 5; ++seed) {
    small.push_back(StartSample(s.t.stub.get(), Request(1000, 8, seed)));
    ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == static_cast<int64_t>(seed) - 1; }));
  }
  const int express_before = s.express_launches.load();
  sched.SetPausedForTesting(false);
  for (auto& c : small) ASSERT_TRUE(c->status.get().ok());
  // 1000 + 1000 fit in 2500 elements, the third does not: launches of 2 and 1 rows.
  EXPECT_EQ(small[0]->response.timing().batch_rows(), 2);
  EXPECT_EQ(small[1]->response.timing().batch_rows(), 2);
  EXPECT_EQ(small[2]->response.timing().batch_rows(), 1);
  EXPECT_EQ(s.express_launches.load() - express_before, 2);
  s.gate.Open();
  EXPECT_TRUE(large->status.get().ok());
}

std::shared_ptr<Job> QueuedJob(const std::string& connection, int64_t elements) {
  auto job = std::make_shared<Job>();
  job->connection = connection;
  job->row_offsets = {0, elements};
  return job;
}

TEST(ExpressTest, FairQueueFindsTheFirstConnectionWhoseNextJobIsSmall) {
  FairQueue q;
  q.push_back(QueuedJob("a", 5000));
  q.push_back(QueuedJob("a", 10));
  q.push_back(QueuedJob("b", 20));
  q.push_back(QueuedJob("c", 4000));
  q.push_back(QueuedJob("c", 30));
  EXPECT_EQ(q.NextWithin(0), 0u);  // no limit: the next turn
  // a's next job is large (its small one waits behind it: FIFO within a connection); b's is
  // the first small one.
  ASSERT_EQ(q.NextWithin(100), 1u);
  EXPECT_EQ(q.at(1)->num_elements(), 20);
  q.pop(1);
  EXPECT_EQ(q.size(), 4u);
  EXPECT_EQ(q.NextWithin(100), q.size_turns());  // a and c lead with large jobs
  // The regular order is unchanged: a, then c, then a's and c's small ones.
  std::vector<int64_t> order;
  for (const auto& job : q.TakeAll()) order.push_back(job->num_elements());
  EXPECT_EQ(order, (std::vector<int64_t>{5000, 4000, 10, 30}));
}

}  // namespace
}  // namespace gpusampler::server::testing
