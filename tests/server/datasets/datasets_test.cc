// Resident datasets (SPEC section 5): chunked atomic upload, replace and delete while in
// use, the equivalence with inline requests (golden cases included), --dataset-dir, the
// byte budget, and every error of the section.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "datasets/datasets.hpp"
#include "gpusampler/client/npy.hpp"
#include "gpusampler/kernels/device.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

v1::Tensor Int64Tensor(const std::vector<int64_t>& v) {
  v1::Tensor t;
  t.set_dtype(v1::DTYPE_INT64);
  t.add_shape(static_cast<int64_t>(v.size()));
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * 8));
  return t;
}

// A ragged dataset: labels in {-1, 0, 1}, FLOAT32 features [total, dim] with FeatureValue's
// pattern (element i of the whole dataset as "row 0").
struct HostDataset {
  std::vector<std::vector<int64_t>> rows;
  int64_t dim = 0;

  std::vector<int64_t> Splits() const {
    std::vector<int64_t> s = {0};
    for (const auto& r : rows) s.push_back(s.back() + static_cast<int64_t>(r.size()));
    return s;
  }
  std::vector<int64_t> Flat() const {
    std::vector<int64_t> f;
    for (const auto& r : rows) f.insert(f.end(), r.begin(), r.end());
    return f;
  }
  // The features of elements [begin, end) of the whole dataset.
  v1::Tensor Features(int64_t begin, int64_t end) const {
    v1::Tensor t;
    t.set_dtype(v1::DTYPE_FLOAT32);
    t.add_shape(end - begin);
    t.add_shape(dim);
    std::string* data = t.mutable_data();
    for (int64_t i = begin; i < end; ++i) {
      for (int64_t d = 0; d < dim; ++d) {
        const float v = FeatureValue(0, i, d);
        data->append(reinterpret_cast<const char*>(&v), 4);
      }
    }
    return t;
  }
  // Chunks of about `per` elements each; the first names the dataset.
  std::vector<v1::DatasetChunk> Chunks(const std::string& name, int64_t per, bool ragged,
                                       bool replace = false) const {
    const std::vector<int64_t> flat = Flat();
    const int64_t total = static_cast<int64_t>(flat.size());
    std::vector<v1::DatasetChunk> out;
    for (int64_t at = 0; at < total || out.empty(); at += per) {
      const int64_t end = std::min(total, at + per);
      v1::DatasetChunk c;
      if (out.empty()) {
        c.set_name(name);
        c.set_replace(replace);
        if (ragged) *c.mutable_row_splits() = Int64Tensor(Splits());
      }
      *c.mutable_labels() =
          Int64Tensor(std::vector<int64_t>(flat.begin() + at, flat.begin() + end));
      if (dim > 0) *c.mutable_features() = Features(at, end);
      out.push_back(std::move(c));
    }
    return out;
  }
  // The inline request equivalent to sampling dataset rows `ids` with `return_features`.
  v1::SampleRequest Inline(const std::vector<int64_t>& ids, bool features, uint64_t seed,
                           int64_t k) const {
    const std::vector<int64_t> splits = Splits();
    v1::SampleRequest req;
    req.mutable_spec()->set_num_samples(k);
    req.set_seed(seed);
    std::vector<int64_t> labels, rs = {0};
    v1::Tensor feat;
    feat.set_dtype(v1::DTYPE_FLOAT32);
    for (int64_t id : ids) {
      labels.insert(labels.end(), rows[id].begin(), rows[id].end());
      rs.push_back(static_cast<int64_t>(labels.size()));
      if (features) {
        const v1::Tensor part = Features(splits[id], splits[id + 1]);
        feat.mutable_data()->append(part.data());
      }
    }
    *req.mutable_labels() = Int64Tensor(labels);
    *req.mutable_row_splits() = Int64Tensor(rs);
    if (features) {
      feat.add_shape(static_cast<int64_t>(labels.size()));
      feat.add_shape(dim);
      *req.mutable_features() = feat;
    }
    return req;
  }
};

HostDataset RandomDataset(int64_t rows, int64_t max_len, int64_t dim, uint64_t seed) {
  std::mt19937_64 gen(seed);
  HostDataset ds;
  ds.dim = dim;
  for (int64_t r = 0; r < rows; ++r) {
    ds.rows.push_back(RandomRow(static_cast<int64_t>(gen() % (max_len + 1)), gen()));
  }
  return ds;
}

grpc::Status Upload(v1::Sampler::Stub* stub, const std::vector<v1::DatasetChunk>& chunks,
                    v1::DatasetInfo* info, grpc::ClientContext* ctx = nullptr) {
  grpc::ClientContext own;
  if (ctx == nullptr) ctx = &own;
  auto writer = stub->CreateDataset(ctx, info);
  for (const auto& c : chunks) {
    if (!writer->Write(c)) break;
  }
  writer->WritesDone();
  return writer->Finish();
}

std::vector<std::string> Names(v1::Sampler::Stub* stub) {
  grpc::ClientContext ctx;
  v1::ListDatasetsResponse resp;
  EXPECT_TRUE(stub->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp).ok());
  std::vector<std::string> out;
  for (const auto& d : resp.datasets()) out.push_back(d.name());
  return out;
}

grpc::Status Sample(v1::Sampler::Stub* stub, const v1::SampleRequest& req,
                    v1::SampleResponse* resp) {
  grpc::ClientContext ctx;
  return stub->Sample(&ctx, req, resp);
}

v1::SampleRequest DatasetRequest(const std::string& name, std::vector<int64_t> rows, bool with_rows,
                                 bool features, uint64_t seed, int64_t k) {
  v1::SampleRequest req;
  req.set_dataset(name);
  req.mutable_spec()->set_num_samples(k);
  req.set_seed(seed);
  if (with_rows) *req.mutable_rows() = Int64Tensor(rows);
  req.set_return_features(features);
  return req;
}

// The response fields that carry results (timing and device aside), as bytes.
void ExpectSameAnswer(const v1::SampleResponse& a, const v1::SampleResponse& b,
                      const std::string& where) {
  for (const auto& [x, y, name] : {std::tuple<const v1::Tensor*, const v1::Tensor*, const char*>{
                                       &a.indices(), &b.indices(), "indices"},
                                   {&a.labels(), &b.labels(), "labels"},
                                   {&a.features(), &b.features(), "features"},
                                   {&a.num_positive(), &b.num_positive(), "num_positive"},
                                   {&a.num_negative(), &b.num_negative(), "num_negative"}}) {
    EXPECT_EQ(x->SerializeAsString(), y->SerializeAsString()) << name << " differ: " << where;
  }
  EXPECT_EQ(a.seed(), b.seed()) << where;
}

TEST(DatasetTest, ChunkedUploadEqualsInlineRowsInAnyOrder) {
  auto t = StartServer(TestConfig());
  const HostDataset host = RandomDataset(9, 3000, 3, 7);
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("pool", 1000, /*ragged=*/true), &info).ok());
  EXPECT_EQ(info.name(), "pool");
  EXPECT_EQ(info.num_rows(), 9);
  EXPECT_EQ(info.num_elements(), host.Splits().back());
  EXPECT_EQ(info.label_dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(info.feature_dtype(), v1::DTYPE_FLOAT32);
  ASSERT_EQ(info.feature_shape_size(), 1);
  EXPECT_EQ(info.feature_shape(0), 3);
  EXPECT_EQ(info.bytes(), host.Splits().back() * (8 + 12) + 10 * 8);
  ASSERT_EQ(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0), TestDeviceId());  // where the copy is kept: the workers' device
  // sha256 over the label bytes, then the feature bytes.
  Sha256 want;
  const std::vector<int64_t> flat = host.Flat();
  want.Update(reinterpret_cast<const uint8_t*>(flat.data()), flat.size() * 8);
  const std::string feat = host.Features(0, host.Splits().back()).data();
  want.Update(reinterpret_cast<const uint8_t*>(feat.data()), feat.size());
  EXPECT_EQ(info.sha256(), want.HexDigest());

  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{4, 0, 8}, std::vector<int64_t>{3, 3}, std::vector<int64_t>{}}) {
    for (bool features : {false, true}) {
      v1::SampleResponse got, want_resp;
      ASSERT_TRUE(
          Sample(t.stub.get(), DatasetRequest("pool", ids, true, features, 99, 50), &got).ok());
      ASSERT_TRUE(Sample(t.stub.get(), host.Inline(ids, features, 99, 50), &want_resp).ok());
      ExpectSameAnswer(got, want_resp, "rows of size " + std::to_string(ids.size()));
      ASSERT_EQ(got.indices().shape_size(), 2);
      EXPECT_EQ(got.indices().shape(0), static_cast<int64_t>(ids.size()));
      if (features) {
        ASSERT_EQ(got.features().shape_size(), 3);
        EXPECT_EQ(got.features().shape(2), 3);
      }
    }
  }
  // Without rows: every row, [B, K].
  v1::SampleResponse all, all_inline;
  ASSERT_TRUE(Sample(t.stub.get(), DatasetRequest("pool", {}, false, true, 5, 20), &all).ok());
  ASSERT_TRUE(
      Sample(t.stub.get(), host.Inline({0, 1, 2, 3, 4, 5, 6, 7, 8}, true, 5, 20), &all_inline)
          .ok());
  ExpectSameAnswer(all, all_inline, "all rows");
}

TEST(DatasetTest, GoldenCasesThroughADataset) {
  auto t = StartServer(TestConfig());
  for (const Golden& g : LoadGolden()) {
    HostDataset host;
    host.rows = g.request.rows;
    v1::DatasetInfo info;
    const std::string name = "golden-" + g.name;
    ASSERT_TRUE(Upload(t.stub.get(), host.Chunks(name, 7, /*ragged=*/true), &info).ok()) << name;
    v1::SampleRequest req =
        DatasetRequest(name, {}, false, false, *g.request.seed, g.request.num_samples);
    v1::SamplingSpec* spec = req.mutable_spec();
    if (g.request.positive_fraction) spec->set_positive_fraction(*g.request.positive_fraction);
    if (g.request.positive_label) spec->set_positive_label(*g.request.positive_label);
    if (g.request.negative_label) spec->set_negative_label(*g.request.negative_label);
    spec->set_fill_policy(g.request.fill);
    req.set_request_id(g.name);
    v1::SampleResponse resp;
    ASSERT_TRUE(Sample(t.stub.get(), req, &resp).ok()) << name;
    ExpectGolden(g, resp, "dataset " + name);
  }
}

// The CPU gather reads whole feature rows from the stored bytes: they start on a cache line,
// so a 64-byte row is one line (a plain vector of this size starts 16 bytes past one).
// Checked for uploads whose chunks grow the buffers in steps of 1, 777 and 5000 elements.
TEST(DatasetTest, StoredLabelsAndFeaturesStartOnACacheLineAndKeepEveryByte) {
  DatasetRegistry registry(int64_t{1} << 30);
  const HostDataset host = RandomDataset(7, 3000, 16, 21);
  const std::vector<int64_t> flat = host.Flat();
  const v1::Tensor features = host.Features(0, static_cast<int64_t>(flat.size()));
  for (const int64_t per : {int64_t{1}, int64_t{777}, int64_t{5000}}) {
    DatasetBuilder builder(&registry, Limits());
    for (const v1::DatasetChunk& c : host.Chunks("aligned" + std::to_string(per), per, true)) {
      ASSERT_TRUE(builder.Add(c).ok()) << per;
    }
    std::shared_ptr<const Dataset> stored;
    ASSERT_TRUE(builder.Commit(&stored).ok()) << per;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(stored->labels.data()) % 64, 0u) << per;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(stored->features.data()) % 64, 0u) << per;
    ASSERT_EQ(stored->labels.size(), flat.size() * 8) << per;
    EXPECT_EQ(std::memcmp(stored->labels.data(), flat.data(), flat.size() * 8), 0) << per;
    ASSERT_EQ(stored->features.size(), features.data().size()) << per;
    EXPECT_EQ(std::memcmp(stored->features.data(), features.data().data(), features.data().size()),
              0)
        << per;
  }
}

// A device that faults while a dataset is copied to it (issue 27) is UNAVAILABLE, never
// RESOURCE_EXHAUSTED, whether the fault comes from the allocation or the copy; only a device
// out of memory is RESOURCE_EXHAUSTED. Nothing of the failed upload stays behind.
TEST(DatasetTest, ADeviceFaultWhilePlacingIsUnavailableNeverResourceExhausted) {
  using K = kernels::Error::Code;
  struct Case {
    K thrown;
    bool in_copy;  // else in the allocation
    Code want;
  };
  for (const Case& c : {Case{K::kDeviceFault, true, Code::kUnavailable},
                        Case{K::kDeviceFault, false, Code::kUnavailable},
                        Case{K::kOutOfMemory, true, Code::kResourceExhausted},
                        Case{K::kOutOfMemory, false, Code::kResourceExhausted}}) {
    SCOPED_TRACE(std::string(c.in_copy ? "copy" : "alloc") + " throws " +
                 std::to_string(static_cast<int>(c.thrown)));
    DatasetRegistry registry(int64_t{1} << 30, {kernels::kSimDevice});
    int copies = 0;
    DeviceMemory memory;
    memory.alloc = [&](int device, size_t bytes) -> void* {
      if (!c.in_copy) throw kernels::Error(c.thrown, "test: injected in DeviceAlloc");
      return kernels::DeviceAlloc(device, bytes);
    };
    memory.copy = [&](int device, void* dst, const void* src, size_t bytes) {
      ++copies;
      if (c.in_copy) throw kernels::Error(c.thrown, "test: injected in CopyToDevice");
      kernels::CopyToDevice(device, dst, src, bytes);
    };
    registry.SetDeviceMemory(std::move(memory));
    const HostDataset host = RandomDataset(3, 500, 2, 5);
    std::shared_ptr<const Dataset> stored;
    Status status;
    {
      DatasetBuilder builder(&registry, Limits());
      for (const v1::DatasetChunk& chunk : host.Chunks("faulty", 200, /*ragged=*/true)) {
        ASSERT_TRUE(builder.Add(chunk).ok());
      }
      status = builder.Commit(&stored);
    }
    EXPECT_EQ(status.code(), c.want) << status.message();
    EXPECT_NE(status.message().find("test: injected"), std::string::npos) << status.message();
    EXPECT_EQ(copies, c.in_copy ? 1 : 0);  // no retry: nothing was evicted to retry for
    EXPECT_EQ(stored, nullptr);
    EXPECT_EQ(registry.count(), 0);
    EXPECT_EQ(registry.bytes(), 0);
  }
}

TEST(DatasetTest, WithoutRowSplitsTheDatasetAnswersLikeOneDimLabels) {
  auto t = StartServer(TestConfig());
  HostDataset host;
  host.rows = {RandomRow(5000, 3)};
  host.dim = 2;
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("flat", 1234, /*ragged=*/false), &info).ok());
  EXPECT_EQ(info.num_rows(), 1);
  EXPECT_EQ(info.bytes(), 5000 * (8 + 8));  // no row_splits stored
  v1::SampleResponse got;
  ASSERT_TRUE(Sample(t.stub.get(), DatasetRequest("flat", {}, false, true, 3, 64), &got).ok());
  ASSERT_EQ(got.indices().shape_size(), 1);
  EXPECT_EQ(got.indices().shape(0), 64);
  ASSERT_EQ(got.features().shape_size(), 2);
  // The same bytes as inline [N] labels with [N, 2] features.
  v1::SampleRequest inl = host.Inline({0}, true, 3, 64);
  inl.clear_row_splits();
  inl.mutable_features()->clear_shape();
  inl.mutable_features()->add_shape(5000);
  inl.mutable_features()->add_shape(2);
  v1::SampleResponse want;
  ASSERT_TRUE(Sample(t.stub.get(), inl, &want).ok());
  ExpectSameAnswer(got, want, "one-dim");
  // rows = [0] gives the batch dim back: [1, K].
  ASSERT_TRUE(Sample(t.stub.get(), DatasetRequest("flat", {0}, true, false, 3, 64), &got).ok());
  EXPECT_EQ(got.indices().shape_size(), 2);
}

TEST(DatasetTest, DatasetRequestsAreBatchedWithOthers) {
  ServerConfig config = TestConfig();
  config.max_batch_rows = 64;
  auto t = StartServer(config);
  const HostDataset host = RandomDataset(4, 500, 0, 11);
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("b", 300, true), &info).ok());
  t.server->scheduler().SetPausedForTesting(true);
  auto a = StartSample(t.stub.get(), DatasetRequest("b", {2, 1}, true, false, 1, 30));
  auto b = StartSample(t.stub.get(), host.Inline({0, 3}, false, 2, 30));
  auto c = StartSample(t.stub.get(), DatasetRequest("b", {3}, true, false, 3, 30));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 3; }));
  t.server->scheduler().SetPausedForTesting(false);
  for (auto* call : {a.get(), b.get(), c.get()}) ASSERT_TRUE(call->status.get().ok());
  EXPECT_EQ(a->response.timing().batch_rows(), 5);  // fused: 2 + 2 + 1 rows
  v1::SampleResponse want;
  ASSERT_TRUE(Sample(t.stub.get(), host.Inline({2, 1}, false, 1, 30), &want).ok());
  ExpectSameAnswer(a->response, want, "fused dataset request");
  ASSERT_TRUE(Sample(t.stub.get(), host.Inline({3}, false, 3, 30), &want).ok());
  ExpectSameAnswer(c->response, want, "fused dataset request");
}

TEST(DatasetTest, DeleteAndReplaceNeverBreakAcceptedRequests) {
  auto t = StartServer(TestConfig());
  const HostDataset old_data = RandomDataset(3, 2000, 2, 21);
  const HostDataset new_data = RandomDataset(3, 2000, 2, 22);
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), old_data.Chunks("d", 999, true), &info).ok());
  t.server->scheduler().SetPausedForTesting(true);
  auto before = StartSample(t.stub.get(), DatasetRequest("d", {2, 0}, true, true, 8, 40));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 1; }));
  // Replace, then delete, while the request waits in the queue.
  ASSERT_TRUE(Upload(t.stub.get(), new_data.Chunks("d", 999, true, /*replace=*/true), &info).ok());
  auto middle = StartSample(t.stub.get(), DatasetRequest("d", {2, 0}, true, true, 8, 40));
  ASSERT_TRUE(WaitFor([&] { return t.server->scheduler().queue_depth() == 2; }));
  grpc::ClientContext dctx;
  v1::DeleteDatasetResponse dresp;
  v1::DeleteDatasetRequest del;
  del.set_name("d");
  ASSERT_TRUE(t.stub->DeleteDataset(&dctx, del, &dresp).ok());
  EXPECT_TRUE(Names(t.stub.get()).empty());
  t.server->scheduler().SetPausedForTesting(false);
  ASSERT_TRUE(before->status.get().ok());
  ASSERT_TRUE(middle->status.get().ok());
  v1::SampleResponse want;
  ASSERT_TRUE(Sample(t.stub.get(), old_data.Inline({2, 0}, true, 8, 40), &want).ok());
  ExpectSameAnswer(before->response, want, "accepted before the replace");
  ASSERT_TRUE(Sample(t.stub.get(), new_data.Inline({2, 0}, true, 8, 40), &want).ok());
  ExpectSameAnswer(middle->response, want, "accepted after the replace");
  // Gone now.
  v1::SampleResponse resp;
  EXPECT_EQ(Sample(t.stub.get(), DatasetRequest("d", {0}, true, false, 1, 4), &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST(DatasetTest, FailedOrCancelledUploadsLeaveNothing) {
  ServerConfig config = TestConfig();
  auto t = StartServer(config);
  const HostDataset host = RandomDataset(3, 800, 1, 31);
  // Fails at the third chunk (dtype change): nothing is kept, the name stays free.
  std::vector<v1::DatasetChunk> chunks = host.Chunks("atomic", 300, true);
  ASSERT_GE(chunks.size(), 3u);
  chunks[2].mutable_labels()->set_dtype(v1::DTYPE_INT32);
  chunks[2].mutable_labels()->mutable_data()->resize(chunks[2].labels().data().size() / 2);
  v1::DatasetInfo info;
  EXPECT_EQ(Upload(t.stub.get(), chunks, &info).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(Names(t.stub.get()).empty());
  // Cancelled half-way.
  {
    grpc::ClientContext ctx;
    auto writer = t.stub->CreateDataset(&ctx, &info);
    ASSERT_TRUE(writer->Write(host.Chunks("atomic", 300, true)[0]));
    ctx.TryCancel();
    EXPECT_FALSE(writer->Finish().ok());
  }
  EXPECT_TRUE(Names(t.stub.get()).empty());
  // The budget is whole again, and the name is free.
  ASSERT_TRUE(WaitFor([&] {
    return HttpGet(t.server->metrics_port(), "/metrics")
               .find("gpusampler_dataset_bytes{device=\"" + TestDeviceId() + "\"} 0") !=
           std::string::npos;
  }));
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("atomic", 300, true), &info).ok());
  EXPECT_EQ(Names(t.stub.get()), std::vector<std::string>{"atomic"});
  const std::string metrics = HttpGet(t.server->metrics_port(), "/metrics");
  EXPECT_NE(metrics.find("gpusampler_datasets 1"), std::string::npos) << metrics;
  // Each upload counted once, with its own status.
  EXPECT_NE(metrics.find(
                "gpusampler_requests_total{code=\"INVALID_ARGUMENT\",method=\"CreateDataset\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpusampler_requests_total{code=\"OK\",method=\"CreateDataset\"} 1"),
            std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("gpusampler_dataset_bytes{device=\"" + TestDeviceId() + "\"} " +
                         std::to_string(info.bytes())),
            std::string::npos)
      << metrics;
}

TEST(DatasetTest, BudgetCountsUploadsAndReplacedDatasets) {
  ServerConfig config = TestConfig();
  config.max_dataset_bytes = 100000;
  auto t = StartServer(config);
  HostDataset host;
  host.rows = {RandomRow(5000, 1)};  // 40000 label bytes
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("one", 5000, false), &info).ok());
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("two", 5000, false), &info).ok());
  // A third does not fit (80000 + 40000 > 100000); nor does replacing one while it stands.
  for (const auto& chunks :
       {host.Chunks("three", 5000, false), host.Chunks("one", 5000, false, /*replace=*/true)}) {
    grpc::ClientContext ctx;
    const grpc::Status s = Upload(t.stub.get(), chunks, &info, &ctx);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(s.error_message().find("--max-dataset-bytes"), std::string::npos)
        << s.error_message();
    const auto& md = ctx.GetServerTrailingMetadata();
    const auto it = md.find("grpc-retry-pushback-ms");
    ASSERT_NE(it, md.end());
    EXPECT_EQ(std::string(it->second.data(), it->second.size()), "-1");
  }
  // After a delete it fits.
  grpc::ClientContext dctx;
  v1::DeleteDatasetRequest del;
  del.set_name("two");
  v1::DeleteDatasetResponse dresp;
  ASSERT_TRUE(t.stub->DeleteDataset(&dctx, del, &dresp).ok());
  EXPECT_TRUE(Upload(t.stub.get(), host.Chunks("three", 5000, false), &info).ok());
}

struct ErrorCase {
  const char* what;
  std::function<grpc::Status(v1::Sampler::Stub*)> call;
  grpc::StatusCode code;
  const char* names;  // a word the message must contain
};

TEST(DatasetTest, EveryErrorOfTheSectionHasItsStatusAndNamesTheField) {
  auto t = StartServer(TestConfig());
  const HostDataset host = RandomDataset(3, 300, 2, 41);
  HostDataset nofeat = host;
  nofeat.dim = 0;
  v1::DatasetInfo info;
  ASSERT_TRUE(Upload(t.stub.get(), host.Chunks("f", 200, true), &info).ok());
  ASSERT_TRUE(Upload(t.stub.get(), nofeat.Chunks("nf", 200, true), &info).ok());
  auto upload = [](std::vector<v1::DatasetChunk> chunks) {
    return [chunks](v1::Sampler::Stub* stub) {
      v1::DatasetInfo i;
      return Upload(stub, chunks, &i);
    };
  };
  auto sample = [](v1::SampleRequest req) {
    return [req](v1::Sampler::Stub* stub) {
      v1::SampleResponse r;
      return Sample(stub, req, &r);
    };
  };
  auto with = [&](auto edit) {
    std::vector<v1::DatasetChunk> c = host.Chunks("new", 200, true);
    edit(&c);
    return upload(c);
  };
  v1::SampleRequest with_labels = DatasetRequest("f", {0}, true, false, 1, 4);
  *with_labels.mutable_labels() = Int64Tensor({0, 1});
  v1::SampleRequest with_features = DatasetRequest("f", {0}, true, false, 1, 4);
  *with_features.mutable_features() = host.Features(0, 2);
  v1::SampleRequest with_splits = DatasetRequest("f", {0}, true, false, 1, 4);
  *with_splits.mutable_row_splits() = Int64Tensor({0, 2});
  v1::SampleRequest inline_rows = host.Inline({0}, false, 1, 4);
  *inline_rows.mutable_rows() = Int64Tensor({0});
  v1::SampleRequest inline_feat = host.Inline({0}, false, 1, 4);
  inline_feat.set_return_features(true);
  v1::SampleRequest int32_rows = DatasetRequest("f", {0}, true, false, 1, 4);
  int32_rows.mutable_rows()->set_dtype(v1::DTYPE_INT32);
  int32_rows.mutable_rows()->set_data(std::string(4, '\0'));

  const std::vector<ErrorCase> cases = {
      {"unknown dataset", sample(DatasetRequest("nope", {0}, true, false, 1, 4)),
       grpc::StatusCode::NOT_FOUND, "nope"},
      {"dataset with labels", sample(with_labels), grpc::StatusCode::INVALID_ARGUMENT, "labels"},
      {"dataset with features", sample(with_features), grpc::StatusCode::INVALID_ARGUMENT,
       "features"},
      {"dataset with row_splits", sample(with_splits), grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits"},
      {"row id too large", sample(DatasetRequest("f", {0, 3}, true, false, 1, 4)),
       grpc::StatusCode::INVALID_ARGUMENT, "rows[1] = 3"},
      {"negative row id", sample(DatasetRequest("f", {-1}, true, false, 1, 4)),
       grpc::StatusCode::INVALID_ARGUMENT, "rows[0] = -1"},
      {"rows not INT64", sample(int32_rows), grpc::StatusCode::INVALID_ARGUMENT, "rows.dtype"},
      {"return_features without stored features",
       sample(DatasetRequest("nf", {0}, true, true, 1, 4)), grpc::StatusCode::INVALID_ARGUMENT,
       "return_features"},
      {"rows on an inline request", sample(inline_rows), grpc::StatusCode::INVALID_ARGUMENT,
       "rows"},
      {"return_features on an inline request", sample(inline_feat),
       grpc::StatusCode::INVALID_ARGUMENT, "return_features"},
      {"existing name", upload(host.Chunks("f", 200, true)), grpc::StatusCode::ALREADY_EXISTS,
       "'f'"},
      {"bad name", upload(host.Chunks("bad name!", 200, true)), grpc::StatusCode::INVALID_ARGUMENT,
       "name"},
      {"empty stream", upload({}), grpc::StatusCode::INVALID_ARGUMENT, "empty"},
      {"label dtype change", with([](auto* c) {
         (*c)[1].mutable_labels()->set_dtype(v1::DTYPE_INT32);
         (*c)[1].mutable_labels()->mutable_data()->resize((*c)[1].labels().data().size() / 2);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "labels.dtype"},
      {"feature shape change", with([](auto* c) {
         v1::Tensor* f = (*c)[1].mutable_features();
         f->set_shape(1, 1);
         f->add_shape(2);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "features"},
      {"features in some chunks only", with([](auto* c) { (*c)[1].clear_features(); }),
       grpc::StatusCode::INVALID_ARGUMENT, "features"},
      {"name on a later chunk", with([](auto* c) { (*c)[1].set_name("x"); }),
       grpc::StatusCode::INVALID_ARGUMENT, "name"},
      {"replace on a later chunk", with([](auto* c) { (*c)[1].set_replace(true); }),
       grpc::StatusCode::INVALID_ARGUMENT, "replace"},
      {"row_splits on a later chunk",
       with([](auto* c) { *(*c)[1].mutable_row_splits() = Int64Tensor({0}); }),
       grpc::StatusCode::INVALID_ARGUMENT, "row_splits"},
      {"row_splits total mismatch", with([&](auto* c) {
         std::vector<int64_t> s = host.Splits();
         s.back() += 1;
         *(*c)[0].mutable_row_splits() = Int64Tensor(s);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "row_splits"},
      {"2-D labels chunk", with([](auto* c) {
         v1::Tensor* l = (*c)[0].mutable_labels();
         const int64_t n = l->shape(0);
         l->set_shape(0, 1);
         l->add_shape(n);
       }),
       grpc::StatusCode::INVALID_ARGUMENT, "labels.shape"},
  };
  for (const ErrorCase& c : cases) {
    const grpc::Status s = c.call(t.stub.get());
    EXPECT_EQ(s.error_code(), c.code) << c.what << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.names), std::string::npos)
        << c.what << ": " << s.error_message();
  }
  // Nothing of the failed uploads was kept, and the server still answers.
  std::vector<std::string> names = Names(t.stub.get());
  EXPECT_EQ(names, (std::vector<std::string>{"f", "nf"}));
  v1::SampleResponse resp;
  EXPECT_TRUE(Sample(t.stub.get(), DatasetRequest("f", {1}, true, true, 1, 4), &resp).ok());
  // Deleting an unknown name.
  grpc::ClientContext dctx;
  v1::DeleteDatasetRequest del;
  del.set_name("nope");
  v1::DeleteDatasetResponse dresp;
  EXPECT_EQ(t.stub->DeleteDataset(&dctx, del, &dresp).error_code(), grpc::StatusCode::NOT_FOUND);
}

std::string TempDir() {
  char tmpl[] = "/tmp/gpusampler-datasets-XXXXXX";
  return mkdtemp(tmpl);
}

TEST(DatasetTest, DatasetDirIsLoadedBeforeServing) {
  const std::string dir = TempDir();
  const HostDataset host = RandomDataset(4, 700, 3, 51);
  ASSERT_EQ(client::WriteNpy(dir + "/pre.labels.npy", Int64Tensor(host.Flat())), "");
  ASSERT_EQ(client::WriteNpy(dir + "/pre.features.npy", host.Features(0, host.Splits().back())),
            "");
  ASSERT_EQ(client::WriteNpy(dir + "/pre.row_splits.npy", Int64Tensor(host.Splits())), "");
  ASSERT_EQ(client::WriteNpy(dir + "/flat.labels.npy", Int64Tensor(host.Flat())), "");
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  EXPECT_EQ(Names(t.stub.get()), (std::vector<std::string>{"flat", "pre"}));
  v1::SampleResponse got, want;
  ASSERT_TRUE(Sample(t.stub.get(), DatasetRequest("pre", {3, 1}, true, true, 4, 33), &got).ok());
  ASSERT_TRUE(Sample(t.stub.get(), host.Inline({3, 1}, true, 4, 33), &want).ok());
  ExpectSameAnswer(got, want, "preloaded");
  t.server->Shutdown();

  // A bad file no longer fails start-up (SPEC section 5): it is logged, counted and skipped,
  // and the good datasets are served.
  std::FILE* f = std::fopen((dir + "/broken.labels.npy").c_str(), "w");
  std::fputs("not an npy file", f);
  std::fclose(f);
  auto t2 = StartServer(config);
  EXPECT_EQ(Names(t2.stub.get()), (std::vector<std::string>{"flat", "pre"}));
  ASSERT_TRUE(Sample(t2.stub.get(), DatasetRequest("pre", {3, 1}, true, true, 4, 33), &got).ok());
  ExpectSameAnswer(got, want, "preloaded next to a bad file");
  v1::SampleResponse none;
  const grpc::Status s =
      Sample(t2.stub.get(), DatasetRequest("broken", {0}, false, true, 1, 4), &none);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_NE(s.error_message().find("broken.labels.npy"), std::string::npos) << s.error_message();
}

// ---- Fixed-length rows: a 2-D NAME.labels.npy [B, N], held as a stride ----

// `host` (rows of one length N) as 2-D files: labels [B, N], features [B, N, dim].
void WriteFixedRows(const std::string& dir, const std::string& name, const HostDataset& host) {
  const int64_t b = static_cast<int64_t>(host.rows.size());
  const int64_t n = static_cast<int64_t>(host.rows[0].size());
  v1::Tensor labels = Int64Tensor(host.Flat());
  labels.clear_shape();
  labels.add_shape(b);
  labels.add_shape(n);
  ASSERT_EQ(client::WriteNpy(dir + "/" + name + ".labels.npy", labels), "");
  v1::Tensor features = host.Features(0, b * n);
  features.clear_shape();
  for (int64_t d : {b, n, host.dim}) features.add_shape(d);
  ASSERT_EQ(client::WriteNpy(dir + "/" + name + ".features.npy", features), "");
}

HostDataset FixedDataset(int64_t rows, int64_t n, int64_t dim, uint64_t seed) {
  HostDataset ds;
  ds.dim = dim;
  for (int64_t r = 0; r < rows; ++r) ds.rows.push_back(RandomRow(n, seed * 1000 + r));
  return ds;
}

v1::DatasetInfo InfoOf(v1::Sampler::Stub* stub, const std::string& name) {
  grpc::ClientContext ctx;
  v1::ListDatasetsResponse resp;
  EXPECT_TRUE(stub->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp).ok());
  for (const auto& d : resp.datasets()) {
    if (d.name() == name) return d;
  }
  ADD_FAILURE() << "no dataset " << name;
  return {};
}

// The accessors of the three row shapes, and the builder's checks of a fixed shape.
// Issue 31 item 1: a load reserves its whole size before it reads (Prepay), so smaller
// uploads cannot take the room meanwhile, and Store gives back what the chunks did not use.
TEST(DatasetTest, PrepaidRoomIsHeldForTheLoadAndTheRestGivenBackAtStore) {
  DatasetRegistry registry(1000);
  v1::DatasetChunk chunk;
  chunk.set_name("big");
  *chunk.mutable_labels() = Int64Tensor(std::vector<int64_t>(100, 1));  // 800 bytes
  v1::DatasetChunk small;
  small.set_name("small");
  *small.mutable_labels() = Int64Tensor(std::vector<int64_t>(25, 1));  // 200 bytes
  std::shared_ptr<const Dataset> stored;
  {
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Prepay(900).ok());
    EXPECT_EQ(builder.reserved(), 900);
    {  // 900 + 200 > 1000: the prepaid room is not free
      DatasetBuilder other(&registry, Limits());
      EXPECT_EQ(other.Add(small).code(), Code::kResourceExhausted);
    }
    ASSERT_TRUE(builder.Add(chunk).ok());
    EXPECT_EQ(builder.reserved(), 900);  // drawn from the prepaid bytes, nothing more
    ASSERT_TRUE(builder.Commit(&stored).ok());
  }
  EXPECT_EQ(registry.bytes(), 800);  // the 100 bytes left over were given back
  DatasetBuilder other(&registry, Limits());
  EXPECT_TRUE(other.Add(small).ok());  // 800 + 200 fits
  {                                    // chunks beyond the prepaid bytes reserve the difference
    DatasetRegistry r2(1000);
    DatasetBuilder b(&r2, Limits());
    ASSERT_TRUE(b.Prepay(300).ok());
    ASSERT_TRUE(b.Add(chunk).ok());
    EXPECT_EQ(b.reserved(), 800);
    EXPECT_EQ(b.Prepay(201).code(), Code::kResourceExhausted);  // 1001 > 1000
  }
  {  // a builder that never stores gives everything back
    DatasetRegistry r3(1000);
    {
      DatasetBuilder b(&r3, Limits());
      ASSERT_TRUE(b.Prepay(1000).ok());
    }
    DatasetBuilder b(&r3, Limits());
    EXPECT_TRUE(b.Prepay(1000).ok());
  }
}

TEST(DatasetTest, FixedRowsAreAStrideTheBuilderChecks) {
  DatasetRegistry registry(1 << 20);
  v1::DatasetChunk chunk;
  chunk.set_name("fix");
  *chunk.mutable_labels() = Int64Tensor(std::vector<int64_t>(12, 1));
  {
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Add(chunk).ok());
    ASSERT_TRUE(builder.SetFixedRows(3, 4).ok());
    ASSERT_TRUE(builder.Seal().ok());
    const Dataset& ds = *builder.dataset();
    EXPECT_EQ(ds.num_rows(), 3);
    EXPECT_EQ(ds.num_elements(), 12);
    EXPECT_EQ(ds.row_begin(0), 0);
    EXPECT_EQ(ds.row_begin(2), 8);
    EXPECT_EQ(ds.row_end(2), 12);
    EXPECT_TRUE(ds.row_splits.empty());  // nothing O(B) is stored
    EXPECT_TRUE(ds.has_batch_dim());
    EXPECT_FALSE(ds.has_row_splits());
    EXPECT_EQ(ds.bytes, 12 * 8);  // labels only: no row_splits held, none counted
  }
  {  // [3, 5] is 15 elements, not the 12 sent
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Add(chunk).ok());
    ASSERT_TRUE(builder.SetFixedRows(3, 5).ok());
    const Status s = builder.Seal();
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("labels are [3, 5] but the chunks carried 12"), std::string::npos)
        << s.message();
  }
  {  // overflowing B * N
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Add(chunk).ok());
    ASSERT_TRUE(builder.SetFixedRows(int64_t{1} << 62, 8).ok());
    EXPECT_EQ(builder.Seal().code(), Code::kInvalidArgument);
  }
  {  // a fixed shape and row_splits both
    v1::DatasetChunk ragged = chunk;
    *ragged.mutable_row_splits() = Int64Tensor({0, 5, 12});
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Add(ragged).ok());
    const Status s = builder.SetFixedRows(3, 4);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("row_splits"), std::string::npos) << s.message();
    ASSERT_TRUE(builder.Seal().ok());
    EXPECT_EQ(builder.dataset()->num_rows(), 2);
    EXPECT_EQ(builder.dataset()->row_begin(1), 5);
    EXPECT_EQ(builder.dataset()->row_end(1), 12);
    EXPECT_EQ(builder.dataset()->bytes, 12 * 8 + 3 * 8);
  }
  {  // one row: 1-D labels, answered without a batch dim
    DatasetBuilder builder(&registry, Limits());
    ASSERT_TRUE(builder.Add(chunk).ok());
    ASSERT_TRUE(builder.Seal().ok());
    EXPECT_EQ(builder.dataset()->num_rows(), 1);
    EXPECT_EQ(builder.dataset()->row_end(0), 12);
    EXPECT_FALSE(builder.dataset()->has_batch_dim());
  }
  EXPECT_EQ(registry.bytes(), 0);  // nothing committed, every reservation released
}

// A 2-D labels file [B, N] (with features [B, N, dim]) loads as B rows of N elements, and
// sampling it (all rows, named rows, a ROWS epoch step) equals the same rows inline and the
// same rows stored with row_splits.
TEST(DatasetTest, A2DLabelsFileIsFixedLengthRowsEqualToTheSameRowsInline) {
  const std::string dir = TempDir();
  const HostDataset host = FixedDataset(6, 50, 3, 61);
  WriteFixedRows(dir, "fix", host);
  ASSERT_EQ(client::WriteNpy(dir + "/rag.labels.npy", Int64Tensor(host.Flat())), "");
  ASSERT_EQ(client::WriteNpy(dir + "/rag.features.npy", host.Features(0, 300)), "");
  ASSERT_EQ(client::WriteNpy(dir + "/rag.row_splits.npy", Int64Tensor(host.Splits())), "");
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  const v1::DatasetInfo info = InfoOf(t.stub.get(), "fix");
  EXPECT_EQ(info.num_rows(), 6);
  EXPECT_EQ(info.num_elements(), 300);
  EXPECT_EQ(info.bytes(), 300 * 8 + 300 * 3 * 4);  // no row_splits held
  EXPECT_EQ(std::vector<int64_t>(info.feature_shape().begin(), info.feature_shape().end()),
            std::vector<int64_t>{3});
  EXPECT_EQ(InfoOf(t.stub.get(), "rag").bytes(), info.bytes() + 7 * 8);
  EXPECT_EQ(InfoOf(t.stub.get(), "rag").sha256(), info.sha256());  // the same bytes

  const std::vector<int64_t> all = {0, 1, 2, 3, 4, 5};
  for (const auto& [ids, with_rows] :
       {std::pair<std::vector<int64_t>, bool>{all, false}, {{4, 1, 4}, true}, {{5}, true}}) {
    v1::SampleResponse got, rag, want;
    ASSERT_TRUE(
        Sample(t.stub.get(), DatasetRequest("fix", ids, with_rows, true, 8, 20), &got).ok());
    ASSERT_TRUE(
        Sample(t.stub.get(), DatasetRequest("rag", ids, with_rows, true, 8, 20), &rag).ok());
    ASSERT_TRUE(Sample(t.stub.get(), host.Inline(ids, true, 8, 20), &want).ok());
    ExpectSameAnswer(got, want, "fixed rows vs inline, " + std::to_string(ids.size()) + " rows");
    ExpectSameAnswer(got, rag, "fixed rows vs row_splits, " + std::to_string(ids.size()) + " rows");
    EXPECT_EQ(got.indices().shape_size(), 2);  // [B', K]: a batch dim, as with row_splits
  }
  // A ROWS epoch step is the `rows` request of its rows.
  v1::SampleRequest step = DatasetRequest("fix", {}, false, false, 8, 20);
  step.mutable_epoch()->set_mode(v1::EPOCH_MODE_ROWS);
  step.mutable_epoch()->set_world_size(2);
  step.mutable_epoch()->set_rank(1);
  step.mutable_epoch()->set_rows_per_step(2);
  step.mutable_epoch()->set_shuffle_seed(5);
  v1::SampleResponse a, b;
  ASSERT_TRUE(Sample(t.stub.get(), step, &a).ok());
  step.set_dataset("rag");
  ASSERT_TRUE(Sample(t.stub.get(), step, &b).ok());
  ExpectSameAnswer(a, b, "a ROWS step, fixed rows vs row_splits");
  EXPECT_EQ(a.epoch_steps(), 2);  // ceil(ceil(6 / 2) / 2)
}

// A 2-D labels file that is not loaded (no room beside another) is listed from its headers
// with the same rows, elements, bytes and feature shape it has once loaded.
TEST(DatasetTest, A2DLabelsFileIsListedFromItsHeadersAsFixedRows) {
  const std::string dir = TempDir();
  const HostDataset host = FixedDataset(6, 50, 3, 63);
  WriteFixedRows(dir, "a", host);
  WriteFixedRows(dir, "b", host);
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  config.max_dataset_bytes = 7000;  // one of the two (6000 bytes each) at a time
  auto t = StartServer(config);
  grpc::ClientContext ctx;
  v1::ListDatasetsResponse resp;
  ASSERT_TRUE(t.stub->ListDatasets(&ctx, v1::ListDatasetsRequest(), &resp).ok());
  ASSERT_EQ(resp.datasets_size(), 2);
  int listed_from_headers = 0;
  for (const v1::DatasetInfo& d : resp.datasets()) {
    listed_from_headers += d.devices().empty();
    EXPECT_EQ(d.num_rows(), 6) << d.name();
    EXPECT_EQ(d.num_elements(), 300) << d.name();
    EXPECT_EQ(d.bytes(), 6000) << d.name();
    EXPECT_EQ(std::vector<int64_t>(d.feature_shape().begin(), d.feature_shape().end()),
              std::vector<int64_t>{3})
        << d.name();
  }
  EXPECT_EQ(listed_from_headers, 1);
}

// A dataset of 2^40 empty rows ([2^40, 0]: no bytes) costs nothing to hold, and every
// request on it stays O(its own rows): all rows are refused by --max-rows before any
// O(B) offsets exist (built first, they would be 8 TiB), while named rows and ROWS epoch
// steps are answered.
TEST(DatasetTest, AHugeFixedRowsDatasetIsRefusedWholeByTheRowLimitFirst) {
  const std::string dir = TempDir();
  const int64_t b = int64_t{1} << 40;
  v1::Tensor labels;
  labels.set_dtype(v1::DTYPE_INT8);
  labels.add_shape(b);
  labels.add_shape(0);
  ASSERT_EQ(client::WriteNpy(dir + "/huge.labels.npy", labels), "");
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  const v1::DatasetInfo info = InfoOf(t.stub.get(), "huge");
  EXPECT_EQ(info.num_rows(), b);
  EXPECT_EQ(info.num_elements(), 0);
  EXPECT_EQ(info.bytes(), 0);

  v1::SampleResponse resp;
  const grpc::Status whole =
      Sample(t.stub.get(), DatasetRequest("huge", {}, false, false, 1, 4), &resp);
  EXPECT_EQ(whole.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(whole.error_message().find("has 1099511627776 rows, over max_rows = 65536"),
            std::string::npos)
      << whole.error_message();

  ASSERT_TRUE(
      Sample(t.stub.get(), DatasetRequest("huge", {b - 1, 0}, true, false, 1, 4), &resp).ok());
  EXPECT_EQ(resp.indices().shape(0), 2);
  const grpc::Status past =
      Sample(t.stub.get(), DatasetRequest("huge", {b}, true, false, 1, 4), &resp);
  EXPECT_EQ(past.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(past.error_message().find("rows[0] = 1099511627776 is out of range [0, "
                                      "1099511627776)"),
            std::string::npos)
      << past.error_message();

  v1::SampleRequest step = DatasetRequest("huge", {}, false, false, 1, 4);
  step.mutable_epoch()->set_mode(v1::EPOCH_MODE_ROWS);
  step.mutable_epoch()->set_world_size(1);
  step.mutable_epoch()->set_rows_per_step(3);
  step.mutable_epoch()->set_step(12345);
  ASSERT_TRUE(Sample(t.stub.get(), step, &resp).ok());
  EXPECT_EQ(resp.epoch_steps(), (b + 2) / 3);
  EXPECT_EQ(resp.indices().shape(0), 3);
}

// A 2-D labels file whose companions do not match it is a bad file naming them (and the
// other datasets load).
TEST(DatasetTest, A2DLabelsFileWithMismatchedCompanionsIsABadFile) {
  const std::string dir = TempDir();
  const HostDataset host = FixedDataset(4, 10, 2, 62);
  WriteFixedRows(dir, "good", host);
  WriteFixedRows(dir, "split", host);  // and row_splits beside it
  ASSERT_EQ(client::WriteNpy(dir + "/split.row_splits.npy", Int64Tensor(host.Splits())), "");
  WriteFixedRows(dir, "feat", host);  // features [40, 2] instead of [4, 10, 2]
  ASSERT_EQ(client::WriteNpy(dir + "/feat.features.npy", host.Features(0, 40)), "");
  ServerConfig config = TestConfig();
  config.dataset_dir = dir;
  auto t = StartServer(config);
  EXPECT_EQ(Names(t.stub.get()), (std::vector<std::string>{"good"}));
  for (const auto& [name, names] :
       {std::pair<std::string, std::string>{"split", "split.row_splits.npy is given, but"},
        {"feat", "feat.features.npy has shape [40, 2], must be [4, 10, ...]"}}) {
    v1::SampleResponse resp;
    const grpc::Status s =
        Sample(t.stub.get(), DatasetRequest(name, {0}, true, false, 1, 4), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::NOT_FOUND) << name;
    EXPECT_NE(s.error_message().find(names), std::string::npos) << s.error_message();
  }
}

}  // namespace
}  // namespace gpusampler::server::testing
