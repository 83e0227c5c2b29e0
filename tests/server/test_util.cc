#include "test_util.hpp"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"

namespace gpusampler::server::testing {

std::string TestDevice() {
  const char* env = std::getenv("GPUSAMPLER_TEST_DEVICE");
  return env && *env ? env : "cpu";
}

bool TestOnCpu() { return TestDevice() == "cpu"; }

bool TestOnHost() { return TestDevice() == "cpu" || TestDevice() == "cuda-sim"; }

std::string TestBackend() {
  const std::string d = TestDevice();
  return d == "cpu" || d == "cuda-sim" ? d : "cuda";
}

std::string TestDeviceId() {
  const std::string d = TestDevice();
  if (d == "cpu" || d == "cuda-sim") return d;
  if (d.rfind("cuda:", 0) == 0) return "cuda:" + d.substr(5, d.find(',') - 5);
  return "cuda:0";  // auto / cuda: every device, the first is 0
}

ServerConfig TestConfig() {
  ServerConfig c;
  c.address = "127.0.0.1:0";
  c.metrics_address = "127.0.0.1:0";
  c.device = TestDevice();
  c.cpu_workers = 1;
  c.cpu_express_elements = 0;  // one worker, as the queueing tests expect; express tests set it
  c.cpu_threads = 2;
  c.streams_per_device = 1;
  c.shutdown_grace_seconds = 10;
  return c;
}

TestServer StartServer(const ServerConfig& config, BackendFactory factory) {
  TestServer t;
  ServerConfig c = config;
  if (factory) c.device = "cpu";  // test backends run on the host
  t.server = std::make_unique<Server>(c, std::move(factory));
  const Status s = t.server->Start();
  EXPECT_TRUE(s.ok()) << s.message();
  t.channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(t.server->grpc_port()),
                                  grpc::InsecureChannelCredentials());
  t.stub = v1::Sampler::NewStub(t.channel);
  return t;
}

float FeatureValue(int64_t r, int64_t i, int64_t d) {
  return static_cast<float>(r * 100000 + i * 16 + d);
}

namespace {

template <typename T>
void Append(std::string* out, int64_t v) {
  const T x = static_cast<T>(v);
  out->append(reinterpret_cast<const char*>(&x), sizeof(T));
}

void AppendLabel(std::string* out, v1::DType dtype, int64_t v) {
  switch (dtype) {
    case v1::DTYPE_BOOL:
    case v1::DTYPE_UINT8:
      return Append<uint8_t>(out, v);
    case v1::DTYPE_INT8:
      return Append<int8_t>(out, v);
    case v1::DTYPE_INT16:
      return Append<int16_t>(out, v);
    case v1::DTYPE_INT32:
      return Append<int32_t>(out, v);
    default:
      return Append<int64_t>(out, v);
  }
}

}  // namespace

v1::SampleRequest MakeRequest(const RequestSpec& spec) {
  v1::SampleRequest req;
  req.set_request_id(spec.request_id);
  auto* s = req.mutable_spec();
  s->set_num_samples(spec.num_samples);
  if (spec.positive_fraction) s->set_positive_fraction(*spec.positive_fraction);
  if (spec.positive_label) s->set_positive_label(*spec.positive_label);
  if (spec.negative_label) s->set_negative_label(*spec.negative_label);
  s->set_fill_policy(spec.fill);
  if (spec.seed) req.set_seed(*spec.seed);
  auto* labels = req.mutable_labels();
  labels->set_dtype(spec.dtype);
  int64_t total = 0;
  std::string data;
  for (const auto& row : spec.rows) {
    for (int64_t v : row) AppendLabel(&data, spec.dtype, v);
    total += static_cast<int64_t>(row.size());
  }
  labels->set_data(data);
  if (spec.ragged) {
    labels->add_shape(total);
    auto* splits = req.mutable_row_splits();
    splits->set_dtype(v1::DTYPE_INT64);
    splits->add_shape(static_cast<int64_t>(spec.rows.size()) + 1);
    std::string sd;
    int64_t off = 0;
    Append<int64_t>(&sd, 0);
    for (const auto& row : spec.rows) {
      off += static_cast<int64_t>(row.size());
      Append<int64_t>(&sd, off);
    }
    splits->set_data(sd);
  } else if (spec.one_dim) {
    labels->add_shape(static_cast<int64_t>(spec.rows.at(0).size()));
  } else {
    labels->add_shape(static_cast<int64_t>(spec.rows.size()));
    labels->add_shape(spec.rows.empty() ? 0 : static_cast<int64_t>(spec.rows[0].size()));
  }
  if (spec.feature_dim > 0) {
    auto* f = req.mutable_features();
    f->set_dtype(v1::DTYPE_FLOAT32);
    for (int64_t d : labels->shape()) f->add_shape(d);
    f->add_shape(spec.feature_dim);
    std::string fd;
    for (size_t r = 0; r < spec.rows.size(); ++r) {
      for (size_t i = 0; i < spec.rows[r].size(); ++i) {
        for (int64_t d = 0; d < spec.feature_dim; ++d) {
          const float v = FeatureValue(static_cast<int64_t>(r), static_cast<int64_t>(i), d);
          fd.append(reinterpret_cast<const char*>(&v), sizeof(v));
        }
      }
    }
    f->set_data(fd);
  }
  return req;
}

std::vector<int64_t> RandomRow(int64_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<int64_t> row(static_cast<size_t>(n));
  for (auto& v : row) v = static_cast<int64_t>(gen() % 3) - 1;
  return row;
}

std::vector<Golden> LoadGolden() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/golden_samples.jsonl");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    Golden g;
    g.name = j.at("name").get<std::string>();
    const auto& spec = j.at("spec");
    g.request.num_samples = spec.at("num_samples").get<int64_t>();
    g.request.positive_fraction = spec.value("positive_fraction", 0.5);
    g.request.positive_label = spec.value("positive_label", int64_t{1});
    g.request.negative_label = spec.value("negative_label", int64_t{0});
    v1::FillPolicy fill = v1::FILL_POLICY_BOTH;
    v1::FillPolicy_Parse(spec.value("fill_policy", std::string("FILL_POLICY_BOTH")), &fill);
    g.request.fill = fill;
    g.request.seed = j.at("seed").get<uint64_t>();
    g.request.rows = j.at("labels").get<std::vector<std::vector<int64_t>>>();
    g.request.request_id = g.name;
    g.indices = j.at("indices").get<std::vector<std::vector<int64_t>>>();
    g.num_positive = j.at("num_positive").get<std::vector<int32_t>>();
    g.num_negative = j.at("num_negative").get<std::vector<int32_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

void ExpectGolden(const Golden& g, const v1::SampleResponse& resp, const std::string& where) {
  const size_t b = g.indices.size();
  const int64_t k = g.request.num_samples;
  EXPECT_EQ(resp.request_id(), g.name) << where;
  ASSERT_EQ(resp.indices().dtype(), v1::DTYPE_INT64) << g.name << " " << where;
  ASSERT_EQ(resp.indices().shape_size(), 2) << g.name << " " << where;
  EXPECT_EQ(resp.indices().shape(0), static_cast<int64_t>(b));
  EXPECT_EQ(resp.indices().shape(1), k);
  const auto idx = Values<int64_t>(resp.indices());
  const auto labels = Values<int64_t>(resp.labels());
  ASSERT_EQ(idx.size(), b * static_cast<size_t>(k)) << g.name << " " << where;
  ASSERT_EQ(labels.size(), idx.size());
  for (size_t r = 0; r < b; ++r) {
    const std::vector<int64_t> got(idx.begin() + r * k, idx.begin() + (r + 1) * k);
    EXPECT_EQ(got, g.indices[r]) << g.name << " row " << r << " " << where;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t i = g.indices[r][s];
      EXPECT_EQ(labels[r * k + s], i < 0 ? -1 : g.request.rows[r][i]) << g.name << " " << where;
    }
  }
  EXPECT_EQ(Values<int32_t>(resp.num_positive()), g.num_positive) << g.name << " " << where;
  EXPECT_EQ(Values<int32_t>(resp.num_negative()), g.num_negative) << g.name << " " << where;
  EXPECT_EQ(resp.seed(), *g.request.seed) << where;
  if (TestOnHost()) {
    EXPECT_EQ(resp.device(), TestDeviceId()) << where;
  } else {
    EXPECT_EQ(resp.device().substr(0, 5), "cuda:") << where;
  }
}

std::unique_ptr<AsyncCall> StartSample(v1::Sampler::Stub* stub, v1::SampleRequest request,
                                       std::chrono::milliseconds timeout) {
  auto call = std::make_unique<AsyncCall>();
  call->request = std::move(request);
  call->context.set_deadline(std::chrono::system_clock::now() + timeout);
  AsyncCall* c = call.get();
  stub->async()->Sample(&c->context, &c->request, &c->response,
                        [c](grpc::Status s) { c->promise.set_value(std::move(s)); });
  return call;
}

std::string HealthStatus(const std::shared_ptr<grpc::Channel>& channel) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return "error " + std::to_string(s.error_code()) + ": " + s.error_message();
  return grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status());
}

std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req =
        "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    }
  }
  close(fd);
  const size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? "" : out.substr(body + 4);
}

}  // namespace gpusampler::server::testing
