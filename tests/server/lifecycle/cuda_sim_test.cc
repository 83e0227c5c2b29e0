// The cuda-sim device (issue 8): `--device cuda-sim` runs host workers whose backend is the
// CUDA pipeline run on the host (kernels' MakeCudaSimBackend). These tests hold whatever
// GPUSAMPLER_TEST_DEVICE says: the device is parsed and named consistently, and a cuda-sim
// server answers byte for byte what a CPU server answers, fused launches included.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

TEST(CudaSimTest, ParseDeviceSelectsCudaSimOnlyByName) {
  DeviceSelection sel;
  std::string error;
  ASSERT_TRUE(ParseDevice("cuda-sim", 0, &sel, &error)) << error;
  EXPECT_TRUE(sel.cuda_sim);
  EXPECT_TRUE(sel.cuda_devices.empty());
  // Present GPUs change nothing: cuda-sim never means a real device.
  ASSERT_TRUE(ParseDevice("cuda-sim", 2, &sel, &error)) << error;
  EXPECT_TRUE(sel.cuda_sim);
  EXPECT_TRUE(sel.cuda_devices.empty());
  // auto never picks cuda-sim: CPU without a GPU, the GPUs with them.
  for (int count : {0, 1}) {
    ASSERT_TRUE(ParseDevice("auto", count, &sel, &error)) << error;
    EXPECT_FALSE(sel.cuda_sim) << count;
    EXPECT_EQ(sel.cuda_devices.size(), static_cast<size_t>(count));
  }
  ASSERT_TRUE(ParseDevice("cpu", 0, &sel, &error));
  EXPECT_FALSE(sel.cuda_sim);
  for (const char* bad : {"cuda_sim", "cudasim", "cuda-sim:0", "sim", "CUDA-SIM"}) {
    EXPECT_FALSE(ParseDevice(bad, 0, &sel, &error)) << bad;
  }
  EXPECT_FALSE(ParseDevice("tpu", 0, &sel, &error));
  EXPECT_NE(error.find("expected auto, cpu, cuda, cuda:0,1 or cuda-sim"), std::string::npos)
      << error;
}

ServerConfig SimConfig(const std::string& device) {
  ServerConfig c = TestConfig();
  c.device = device;
  return c;
}

TEST(CudaSimTest, InfoMetricsResponsesAndDatasetsNameCudaSim) {
  auto t = StartServer(SimConfig("cuda-sim"));
  grpc::ClientContext ictx;
  v1::ServerInfo info;
  ASSERT_TRUE(t.stub->GetServerInfo(&ictx, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.backend(), "cuda-sim");
  EXPECT_EQ(t.server->backend(), "cuda-sim");
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).id(), "cuda-sim");
  EXPECT_EQ(info.devices(0).name(), "cuda-sim");
  EXPECT_GT(info.devices(0).memory_bytes(), 0);  // host memory, like the CPU

  RequestSpec r;
  r.rows = {RandomRow(500, 1), RandomRow(500, 2)};
  r.num_samples = 16;
  grpc::ClientContext sctx;
  v1::SampleResponse resp;
  ASSERT_TRUE(t.stub->Sample(&sctx, MakeRequest(r), &resp).ok());
  EXPECT_EQ(resp.device(), "cuda-sim");

  // A resident dataset is kept in host memory and listed under the workers' device.
  v1::DatasetChunk chunk;
  chunk.set_name("sim");
  chunk.mutable_labels()->set_dtype(v1::DTYPE_INT64);
  const std::vector<int64_t> labels = RandomRow(300, 3);
  chunk.mutable_labels()->add_shape(static_cast<int64_t>(labels.size()));
  chunk.mutable_labels()->set_data(
      std::string(reinterpret_cast<const char*>(labels.data()), labels.size() * sizeof(int64_t)));
  v1::DatasetInfo ds;
  {
    grpc::ClientContext ctx;
    auto writer = t.stub->CreateDataset(&ctx, &ds);
    ASSERT_TRUE(writer->Write(chunk));
    ASSERT_TRUE(writer->WritesDone());
    const grpc::Status s = writer->Finish();
    ASSERT_TRUE(s.ok()) << s.error_message();
  }
  EXPECT_EQ(std::vector<std::string>(ds.devices().begin(), ds.devices().end()),
            std::vector<std::string>{"cuda-sim"});
  {
    v1::SampleRequest req;
    req.set_dataset("sim");
    req.set_seed(5);
    req.mutable_spec()->set_num_samples(20);
    grpc::ClientContext ctx;
    v1::SampleResponse from_dataset;
    ASSERT_TRUE(t.stub->Sample(&ctx, req, &from_dataset).ok());
    RequestSpec inline_spec;
    inline_spec.rows = {labels};
    inline_spec.num_samples = 20;
    inline_spec.seed = 5;
    inline_spec.one_dim = true;
    grpc::ClientContext ctx2;
    v1::SampleResponse from_inline;
    ASSERT_TRUE(t.stub->Sample(&ctx2, MakeRequest(inline_spec), &from_inline).ok());
    EXPECT_EQ(from_dataset.indices().data(), from_inline.indices().data());
    EXPECT_EQ(from_dataset.device(), "cuda-sim");
  }

  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // one metrics update
  const std::string scrape = HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_NE(scrape.find("gpusampler_sampled_rows_total{device=\"cuda-sim\"}"), std::string::npos)
      << scrape;
  EXPECT_TRUE(WaitFor([&] {
    return HttpGet(t.server->metrics_port(), "/metrics")
               .find("gpusampler_dataset_bytes{device=\"cuda-sim\"} 2400") != std::string::npos;
  })) << HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_NE(scrape.find("gpusampler_build_info{backend=\"cuda-sim\""), std::string::npos);
  EXPECT_NE(scrape.find("cuda_driver=\"none\""), std::string::npos);
  EXPECT_EQ(scrape.find("gpusampler_gpu_utilization_ratio"), std::string::npos);
}

// ---- cuda-sim answers the CPU's bytes ----

// Label values the dtype can hold, so that positives, negatives and ignored labels all occur.
std::vector<int64_t> RandomLabels(int64_t n, v1::DType dtype, std::mt19937_64& gen) {
  std::vector<int64_t> row(static_cast<size_t>(n));
  for (auto& v : row) {
    const uint64_t x = gen() % 8;
    switch (dtype) {
      case v1::DTYPE_BOOL:
        v = static_cast<int64_t>(x & 1);
        break;
      case v1::DTYPE_UINT8:
        v = static_cast<int64_t>(x % 3);  // 2: neither class
        break;
      default:
        v = static_cast<int64_t>(x % 4) - 1;  // -1 and 2: neither class
    }
  }
  // Sometimes a row with (almost) no positives, so the fill policies matter.
  if (gen() % 4 == 0) {
    for (auto& v : row) {
      if (v == 1 && gen() % 16 != 0) v = 0;
    }
  }
  return row;
}

// Random requests: every label dtype, 1-D, [B, N] and ragged rows (empty rows included), K
// below and above N, features on some, every fill policy, odd fractions and labels, and a
// few long rows (several blocks per row on the CUDA pipeline).
std::vector<v1::SampleRequest> RandomRequests(uint64_t seed, int count) {
  std::mt19937_64 gen(seed);
  const v1::DType dtypes[] = {v1::DTYPE_BOOL,  v1::DTYPE_INT8,  v1::DTYPE_UINT8,
                              v1::DTYPE_INT16, v1::DTYPE_INT32, v1::DTYPE_INT64};
  const v1::FillPolicy fills[] = {v1::FILL_POLICY_UNSPECIFIED, v1::FILL_POLICY_BOTH,
                                  v1::FILL_POLICY_NEGATIVES_ONLY, v1::FILL_POLICY_NONE};
  std::vector<v1::SampleRequest> out;
  for (int i = 0; i < count; ++i) {
    RequestSpec spec;
    spec.dtype = dtypes[gen() % 6];
    spec.fill = fills[gen() % 4];
    spec.seed = gen();
    spec.request_id = "req-" + std::to_string(i);
    const int shape = static_cast<int>(gen() % 3);  // 0: [N], 1: [B, N], 2: ragged
    const bool long_rows = i % 16 == 5;
    const int64_t b = shape == 0 ? 1 : 1 + static_cast<int64_t>(gen() % (long_rows ? 2 : 6));
    const int64_t base_n = long_rows ? 40000 + static_cast<int64_t>(gen() % 40000)
                                     : static_cast<int64_t>(gen() % 1500);
    for (int64_t r = 0; r < b; ++r) {
      const int64_t n =
          shape == 2 ? (gen() % 5 == 0 ? 0 : static_cast<int64_t>(gen() % (base_n + 1))) : base_n;
      spec.rows.push_back(RandomLabels(n, spec.dtype, gen));
    }
    spec.one_dim = shape == 0;
    spec.ragged = shape == 2;
    const int64_t k_choices[] = {1, 7, 64, 200, 1000};
    spec.num_samples = k_choices[gen() % 5];
    if (long_rows) spec.num_samples = 4096;
    if (gen() % 3 != 0) spec.positive_fraction = static_cast<double>(gen() % 101) / 100.0;
    if (spec.dtype != v1::DTYPE_BOOL && spec.dtype != v1::DTYPE_UINT8 && gen() % 4 == 0) {
      spec.positive_label = 2;   // the labels' "neither" value becomes the positive class
      spec.negative_label = -1;  // and the padding label the negative class
    }
    if (gen() % 3 == 0 && !long_rows) spec.feature_dim = 1 + static_cast<int64_t>(gen() % 5);
    out.push_back(MakeRequest(spec));
  }
  return out;
}

struct Pair {
  TestServer cpu, sim;
};

// A CPU and a cuda-sim server, each with `workers` workers (cuda-sim: one sim backend each,
// --cpu-workers as on the CPU).
Pair StartPair(int workers) {
  ServerConfig c = TestConfig();
  c.cpu_workers = workers;
  c.max_batch_rows = 256;
  c.max_batch_delay_us = 2000;
  Pair p;
  c.device = "cpu";
  p.cpu = StartServer(c);
  c.device = "cuda-sim";
  p.sim = StartServer(c);
  return p;
}

// Everything but where and how long it ran.
std::string Comparable(v1::SampleResponse r) {
  r.clear_device();
  r.clear_timing();
  return r.SerializeAsString();
}

void ExpectSameBytes(const v1::SampleResponse& cpu, const v1::SampleResponse& sim,
                     const std::string& what) {
  EXPECT_EQ(cpu.request_id(), sim.request_id()) << what;
  EXPECT_EQ(cpu.indices().data(), sim.indices().data()) << what << ": indices differ";
  EXPECT_EQ(cpu.labels().data(), sim.labels().data()) << what << ": labels differ";
  EXPECT_EQ(cpu.features().data(), sim.features().data()) << what << ": features differ";
  EXPECT_EQ(cpu.num_positive().data(), sim.num_positive().data()) << what << ": num_positive";
  EXPECT_EQ(cpu.num_negative().data(), sim.num_negative().data()) << what << ": num_negative";
  EXPECT_EQ(cpu.seed(), sim.seed()) << what;
  EXPECT_EQ(Comparable(cpu), Comparable(sim)) << what << ": responses differ";
  EXPECT_EQ(cpu.device(), "cpu") << what;
  EXPECT_EQ(sim.device(), "cuda-sim") << what;
}

// Sends every request to `server` at once and returns the answers in request order.
std::vector<v1::SampleResponse> SendAll(TestServer& t, const std::vector<v1::SampleRequest>& reqs,
                                        bool hold_until_queued) {
  if (hold_until_queued) t.server->scheduler().SetPausedForTesting(true);
  std::vector<std::unique_ptr<AsyncCall>> calls;
  for (const auto& r : reqs) calls.push_back(StartSample(t.stub.get(), r, std::chrono::minutes(2)));
  if (hold_until_queued) {
    // Everything queued, then released: the workers take fused batches of many requests.
    EXPECT_TRUE(WaitFor(
        [&] { return t.server->scheduler().queue_depth() == static_cast<int64_t>(reqs.size()); },
        std::chrono::seconds(60)))
        << t.server->scheduler().queue_depth();
    t.server->scheduler().SetPausedForTesting(false);
  }
  std::vector<v1::SampleResponse> out;
  for (size_t i = 0; i < calls.size(); ++i) {
    const grpc::Status s = calls[i]->status.get();
    EXPECT_TRUE(s.ok()) << i << ": " << s.error_message();
    out.push_back(calls[i]->response);
  }
  return out;
}

TEST(CudaSimTest, SameBytesAsCpuForRandomFusedRequests) {
  Pair p = StartPair(1);
  const std::vector<v1::SampleRequest> reqs = RandomRequests(20240801, 48);
  const int64_t cpu_launches = p.cpu.server->scheduler().launches();
  const int64_t sim_launches = p.sim.server->scheduler().launches();
  const auto cpu = SendAll(p.cpu, reqs, true);
  const auto sim = SendAll(p.sim, reqs, true);
  ASSERT_EQ(cpu.size(), reqs.size());
  ASSERT_EQ(sim.size(), reqs.size());
  // The requests shared launches (several requests, dtypes and K per launch).
  const int64_t sim_ran = p.sim.server->scheduler().launches() - sim_launches;
  const int64_t cpu_ran = p.cpu.server->scheduler().launches() - cpu_launches;
  EXPECT_LT(sim_ran, static_cast<int64_t>(reqs.size()) / 4) << sim_ran;
  EXPECT_LT(cpu_ran, static_cast<int64_t>(reqs.size()) / 4) << cpu_ran;
  int padded = 0, with_features = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ExpectSameBytes(cpu[i], sim[i], reqs[i].request_id());
    const auto idx = Values<int64_t>(cpu[i].indices());
    padded += std::count(idx.begin(), idx.end(), -1) > 0;
    with_features += !cpu[i].features().data().empty();
  }
  // The requests did cover padding and features.
  EXPECT_GT(padded, 0);
  EXPECT_GT(with_features, 0);
}

TEST(CudaSimTest, SameBytesAsCpuForConcurrentClients) {
  Pair p = StartPair(2);  // two sim workers, two backends running at once
  const std::vector<v1::SampleRequest> reqs = RandomRequests(77, 32);
  // Four client threads each sending their share as it comes: whatever fusion arises.
  auto run = [&](TestServer& t) {
    std::vector<v1::SampleResponse> out(reqs.size());
    std::vector<std::thread> threads;
    for (size_t c = 0; c < 4; ++c) {
      threads.emplace_back([&, c] {
        std::vector<std::pair<size_t, std::unique_ptr<AsyncCall>>> calls;
        for (size_t i = c; i < reqs.size(); i += 4) {
          calls.emplace_back(i, StartSample(t.stub.get(), reqs[i], std::chrono::minutes(2)));
        }
        for (auto& [i, call] : calls) {
          const grpc::Status s = call->status.get();
          EXPECT_TRUE(s.ok()) << i << ": " << s.error_message();
          out[i] = call->response;
        }
      });
    }
    for (auto& th : threads) th.join();
    return out;
  };
  const auto cpu = run(p.cpu);
  const auto sim = run(p.sim);
  for (size_t i = 0; i < reqs.size(); ++i) ExpectSameBytes(cpu[i], sim[i], reqs[i].request_id());
  // And one request alone (the worker's direct path, no staging) answers the same bytes.
  for (size_t i : {size_t{0}, size_t{5}}) {
    grpc::ClientContext c1, c2;
    v1::SampleResponse a, b;
    ASSERT_TRUE(p.cpu.stub->Sample(&c1, reqs[i], &a).ok());
    ASSERT_TRUE(p.sim.stub->Sample(&c2, reqs[i], &b).ok());
    ExpectSameBytes(a, b, "alone " + reqs[i].request_id());
    ExpectSameBytes(cpu[i], b, "alone vs fused " + reqs[i].request_id());
  }
}

// Requests over two resident datasets (rows named out of order, features returned: on
// cuda-sim the kernels read the device copies in place and write the feature rows) fused with
// inline requests (labels staged, features gathered on the host): the same bytes as the CPU.
TEST(CudaSimTest, SameBytesAsCpuForResidentDatasetsFusedWithInlineRequests) {
  Pair p = StartPair(1);
  auto int64_tensor = [](const std::vector<int64_t>& v) {
    v1::Tensor t;
    t.set_dtype(v1::DTYPE_INT64);
    t.add_shape(static_cast<int64_t>(v.size()));
    t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8));
    return t;
  };
  std::mt19937_64 gen(4242);
  for (const std::string name : {"alpha", "beta"}) {
    const int64_t dim = name == "alpha" ? 3 : 5;
    std::vector<int64_t> splits = {0}, labels;
    for (int r = 0; r < 12; ++r) {
      const std::vector<int64_t> row =
          RandomRow(static_cast<int64_t>(gen() % 6000), gen());  // some rows above 4096
      labels.insert(labels.end(), row.begin(), row.end());
      splits.push_back(static_cast<int64_t>(labels.size()));
    }
    v1::DatasetChunk chunk;
    chunk.set_name(name);
    *chunk.mutable_row_splits() = int64_tensor(splits);
    *chunk.mutable_labels() = int64_tensor(labels);
    v1::Tensor* f = chunk.mutable_features();
    f->set_dtype(v1::DTYPE_FLOAT32);
    f->add_shape(static_cast<int64_t>(labels.size()));
    f->add_shape(dim);
    for (size_t i = 0; i < labels.size() * static_cast<size_t>(dim); ++i) {
      const float v = static_cast<float>(gen() % 1000) / 8.0f;
      f->mutable_data()->append(reinterpret_cast<const char*>(&v), 4);
    }
    for (TestServer* t : {&p.cpu, &p.sim}) {
      grpc::ClientContext ctx;
      v1::DatasetInfo info;
      auto writer = t->stub->CreateDataset(&ctx, &info);
      ASSERT_TRUE(writer->Write(chunk));
      writer->WritesDone();
      const grpc::Status s = writer->Finish();
      ASSERT_TRUE(s.ok()) << name << ": " << s.error_message();
    }
  }
  std::vector<v1::SampleRequest> reqs = RandomRequests(99, 8);
  for (int i = 0; i < 8; ++i) {
    v1::SampleRequest req;
    req.set_request_id("dataset-" + std::to_string(i));
    req.set_dataset(i % 2 == 0 ? "alpha" : "beta");
    req.mutable_spec()->set_num_samples(1 + static_cast<int64_t>(gen() % 600));
    req.set_seed(gen());
    std::vector<int64_t> rows;
    for (int r = 0; r < 1 + i % 4; ++r) rows.push_back(static_cast<int64_t>(gen() % 12));
    std::reverse(rows.begin(), rows.end());
    *req.mutable_rows() = int64_tensor(rows);
    req.set_return_features(i % 3 != 2);
    reqs.push_back(req);
  }
  const auto cpu = SendAll(p.cpu, reqs, true);
  const auto sim = SendAll(p.sim, reqs, true);
  ASSERT_EQ(cpu.size(), reqs.size());
  ASSERT_EQ(sim.size(), reqs.size());
  int with_features = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    ExpectSameBytes(cpu[i], sim[i], reqs[i].request_id());
    with_features += !reqs[i].dataset().empty() && !cpu[i].features().data().empty();
  }
  EXPECT_GT(with_features, 0);
}

}  // namespace
}  // namespace gpusampler::server::testing
