// scheduling/scheduler's device errors (through a test backend): out of memory fails only
// its request, a fused launch's other errors are retried request by request, and a device
// fault sets NOT_SERVING, fails what is in flight and ends the process.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "gpusampler/client/client.hpp"
#include "gpusampler/kernels/sampler.hpp"
#include "scheduling/scheduler.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

v1::SampleRequest Small(int64_t k = 8, uint64_t seed = 1) {
  RequestSpec r;
  r.rows = {RandomRow(1000, seed)};
  r.num_samples = k;
  r.seed = seed;
  return MakeRequest(r);
}

// A CPU backend that fails on chosen K values: 777 runs out of memory, 778 does after
// 800 ms, 555 rejects its input (a non-device error), 666 faults.
class FaultyBackend final : public kernels::Backend {
 public:
  FaultyBackend() : cpu_(kernels::MakeCpuBackend(1)) {}
  std::string name() const override { return "cpu"; }
  kernels::MemorySpace memory_space() const override { return kernels::MemorySpace::kHost; }
  void Sample(const kernels::Batch& batch) override {
    for (int64_t r = 0; r < batch.num_rows; ++r) {
      if (batch.rows[r].num_samples == 778) {
        std::this_thread::sleep_for(std::chrono::milliseconds(800));
        throw kernels::Error(kernels::Error::Code::kOutOfMemory, "test: slow out of memory");
      }
      if (batch.rows[r].num_samples == 555) {
        throw kernels::Error(kernels::Error::Code::kInvalidArgument, "test: rejected");
      }
      if (batch.rows[r].num_samples == 777) {
        throw kernels::Error(kernels::Error::Code::kOutOfMemory, "test: out of memory");
      }
      if (batch.rows[r].num_samples == 666) {
        throw kernels::Error(kernels::Error::Code::kDeviceFault, "test: illegal address");
      }
    }
    cpu_->Sample(batch);
  }

 private:
  std::unique_ptr<kernels::Backend> cpu_;
};

BackendFactory Faulty() {
  return [](int) { return std::make_unique<FaultyBackend>(); };
}

TEST(DeviceErrorTest, OutOfMemoryFailsOnlyThatRequestAndServingGoesOn) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, Small(777), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("out of memory"), std::string::npos) << s.error_message();
  }
  // Fused with innocent requests: only the one that does not fit fails.
  t.server->scheduler().SetPausedForTesting(true);
  auto ok1 = StartSample(t.stub.get(), Small(8, 1));
  auto oom = StartSample(t.stub.get(), Small(777, 2));
  auto ok2 = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 3; }));
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_TRUE(ok1->status.get().ok());
  EXPECT_EQ(oom->status.get().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_TRUE(ok2->status.get().ok());
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_TRUE(t.stub->Sample(&ctx, Small(), &resp).ok());
}

TEST(DeviceErrorTest, AnyNonFaultErrorOfAFusedLaunchIsRetriedRequestByRequest) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  sched.SetPausedForTesting(true);
  auto ok1 = StartSample(t.stub.get(), Small(8, 1));
  auto bad = StartSample(t.stub.get(), Small(555, 2));
  auto ok2 = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 3; }));
  sched.SetPausedForTesting(false);
  EXPECT_TRUE(ok1->status.get().ok());
  const grpc::Status s = bad->status.get();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_TRUE(ok2->status.get().ok());
  EXPECT_EQ(ok1->response.timing().batch_rows(), 1);  // answered by its solo retry
  EXPECT_EQ(sched.launches() - launches, 4);          // the fused launch + 3 alone
  EXPECT_EQ(HealthStatus(t.channel), "SERVING");
}

TEST(DeviceErrorTest, SoloRetryDropsRequestsThatDiedDuringTheFusedLaunch) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config, Faulty());
  Scheduler& sched = t.server->scheduler();
  const int64_t launches = sched.launches();
  const int64_t dropped = sched.dropped();
  sched.SetPausedForTesting(true);
  auto slow_oom = StartSample(t.stub.get(), Small(778, 1));
  auto late = StartSample(t.stub.get(), Small(8, 2), std::chrono::milliseconds(400));
  auto cancelled = StartSample(t.stub.get(), Small(9, 3));
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 3; }));
  sched.SetPausedForTesting(false);  // all three alive at launch; the launch takes 800 ms
  ASSERT_TRUE(WaitFor([&] { return sched.queue_depth() == 0; }));
  cancelled->context.TryCancel();
  EXPECT_EQ(late->status.get().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_EQ(cancelled->status.get().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(slow_oom->status.get().error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  ASSERT_TRUE(sched.WaitIdle(Clock::now() + std::chrono::seconds(10)));
  // The fused launch and slow_oom's retry; no kernel for the dead two.
  EXPECT_EQ(sched.launches() - launches, 2);
  EXPECT_EQ(sched.dropped() - dropped, 2);
}

TEST(DeviceErrorTest, DeviceFaultSetsNotServingFailsInFlightAndRequestsExit) {
  auto t = StartServer(TestConfig(), Faulty());
  t.server->scheduler().SetPausedForTesting(true);
  auto fault = StartSample(t.stub.get(), Small(666));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  // Queued behind the faulting launch (fusion off would not matter: the queue is failed).
  auto behind = StartSample(t.stub.get(), Small(8));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 2; }));
  t.server->scheduler().SetPausedForTesting(false);
  EXPECT_EQ(fault->status.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(behind->status.get().error_code(), grpc::StatusCode::UNAVAILABLE);
  t.server->WaitForShutdownRequest();  // returns: the fault asked the process to exit
  EXPECT_TRUE(t.server->failed());
  EXPECT_EQ(HealthStatus(t.channel), "NOT_SERVING");
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_EQ(t.stub->Sample(&ctx, Small(), &resp).error_code(), grpc::StatusCode::UNAVAILABLE);
  t.server->Shutdown();
}

}  // namespace
}  // namespace gpusampler::server::testing
