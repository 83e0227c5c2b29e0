// gpusampler::client against the real gpusampler-server (CPU backend, port 0): golden
// samples, streaming sessions and their window, errors, deadlines and retries. A frozen
// server has its suite in frozen_server_test.cc.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "client_server_util.hpp"
#include "gpusampler/client/client.hpp"
#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

// One server for the whole binary.
class ServerEnvironment : public ::testing::Environment {
 public:
  static std::string target;
  static int metrics_port;

  void SetUp() override {
    SpawnServer(::testing::TempDir() + "/gpusampler_client_server_test." + std::to_string(getpid()),
                &pid_, &target, &metrics_port);
  }
  void TearDown() override { StopServer(pid_); }

 private:
  pid_t pid_ = -1;
};
std::string ServerEnvironment::target;
int ServerEnvironment::metrics_port = 0;
::testing::Environment* const kServer = ::testing::AddGlobalTestEnvironment(new ServerEnvironment);

ClientOptions Options() {
  ClientOptions o;
  o.targets = {ServerEnvironment::target};
  return o;
}

TEST(ClientServer, GoldenSamples) {
  Client client(Options());
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/golden_samples.jsonl");
  std::string line;
  int cases = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    const auto rows = j["labels"].get<std::vector<std::vector<int64_t>>>();
    std::vector<int64_t> flat;
    for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    v1::SampleRequest request;
    *request.mutable_labels() =
        MakeTensor(flat, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
    const auto& spec = j["spec"];
    request.mutable_spec()->set_num_samples(spec["num_samples"].get<int64_t>());
    request.mutable_spec()->set_positive_fraction(spec["positive_fraction"].get<double>());
    request.mutable_spec()->set_positive_label(spec["positive_label"].get<int64_t>());
    request.mutable_spec()->set_negative_label(spec["negative_label"].get<int64_t>());
    v1::FillPolicy fill;
    ASSERT_TRUE(v1::FillPolicy_Parse(spec["fill_policy"].get<std::string>(), &fill));
    request.mutable_spec()->set_fill_policy(fill);
    request.set_seed(j["seed"].get<uint64_t>());
    v1::SampleResponse response;
    grpc::Status status = client.Sample(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<int64_t> want;
    for (const auto& r : j["indices"].get<std::vector<std::vector<int64_t>>>()) {
      want.insert(want.end(), r.begin(), r.end());
    }
    const std::string name = j["name"].get<std::string>();
    EXPECT_EQ(TensorValues<int64_t>(response.indices()), want) << name;
    EXPECT_EQ(TensorValues<int32_t>(response.num_positive()),
              j["num_positive"].get<std::vector<int32_t>>())
        << name;
    EXPECT_EQ(TensorValues<int32_t>(response.num_negative()),
              j["num_negative"].get<std::vector<int32_t>>())
        << name;
    EXPECT_EQ(response.seed(), j["seed"].get<uint64_t>()) << name;
    ++cases;
  }
  EXPECT_EQ(cases, 13);
}

TEST(ClientServer, HealthAndInfo) {
  Client client(Options());
  std::string serving;
  ASSERT_TRUE(client.CheckHealth(&serving).ok());
  EXPECT_EQ(serving, "SERVING");
  v1::ServerInfo info;
  ASSERT_TRUE(client.GetServerInfo(&info).ok());
  EXPECT_EQ(info.backend(), "cpu");
  EXPECT_GT(info.limits().max_num_samples(), 0);
}

TEST(ClientServer, SessionRunKeepsOrderAndMatchesUnary) {
  Client client(Options());
  auto session = client.OpenSession(3);
  int sent = 0;
  std::vector<v1::SampleResponse> responses;
  grpc::Status status = session->Run(
      [&](v1::SampleRequest* r) {
        if (sent == 25) return false;
        *r = Request(2, 64 + sent, 5, 100 + sent);
        r->set_request_id("r" + std::to_string(sent++));
        // The window: never more than 3 sent and unanswered.
        EXPECT_LE(session->InFlight(), 3);
        return true;
      },
      [&](v1::SampleResponse&& r) { responses.push_back(std::move(r)); });
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(responses.size(), 25u);
  for (int i = 0; i < 25; ++i) {
    EXPECT_EQ(responses[i].request_id(), "r" + std::to_string(i));
    v1::SampleResponse unary;
    ASSERT_TRUE(client.Sample(Request(2, 64 + i, 5, 100 + i), &unary).ok());
    EXPECT_EQ(responses[i].indices().data(), unary.indices().data()) << i;
  }
}

TEST(ClientServer, SessionSingleThreadedWindow) {
  Client client(Options());
  auto session = client.OpenSession(2);
  v1::SampleResponse response;
  int received = 0;
  for (int i = 0; i < 10; ++i) {
    if (session->InFlight() == session->window()) {
      ASSERT_TRUE(session->Receive(&response));
      ++received;
    }
    ASSERT_TRUE(session->Send(Request(1, 50, 4, i)));
    EXPECT_EQ(session->InFlight(), i + 1 - received);
  }
  session->CloseSend();
  while (session->Receive(&response)) ++received;
  EXPECT_EQ(received, 10);
  EXPECT_TRUE(session->Finish().ok());
}

// A session closed before any request (a bench worker whose budget ran out) ends at once,
// OK, with no responses: the corked call never started, so nothing may wait on it.
TEST(ClientServer, EmptySessionEndsAtOnce) {
  Client client(Options());
  auto session = client.OpenSession(2);
  int responses = 0;
  const grpc::Status status = session->Run([](v1::SampleRequest*) { return false; },
                                           [&](v1::SampleResponse&&) { ++responses; });
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(responses, 0);
  auto single = client.OpenSession(2);
  single->CloseSend();
  v1::SampleResponse response;
  EXPECT_FALSE(single->Receive(&response));
  EXPECT_TRUE(single->Finish().ok());
}

TEST(ClientServer, SendBlocksWhileTheWindowIsFull) {
  Client client(Options());
  auto session = client.OpenSession(2);
  ASSERT_TRUE(session->Send(Request(1, 50, 4, 1)));
  ASSERT_TRUE(session->Send(Request(1, 50, 4, 2)));
  std::atomic<bool> third_sent{false};
  std::thread sender([&] {
    EXPECT_TRUE(session->Send(Request(1, 50, 4, 3)));
    third_sent = true;
    session->CloseSend();
  });
  // The server answers within milliseconds, but a response counts only once received.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(third_sent);
  v1::SampleResponse response;
  ASSERT_TRUE(session->Receive(&response));
  sender.join();
  EXPECT_TRUE(third_sent);
  int rest = 0;
  while (session->Receive(&response)) ++rest;
  EXPECT_EQ(rest, 2);
  EXPECT_TRUE(session->Finish().ok());
}

TEST(ClientServer, StreamFailsAfterEarlierResponses) {
  Client client(Options());
  auto session = client.OpenSession(8);
  int n = 0, received = 0;
  grpc::Status status = session->Run(
      [&](v1::SampleRequest* r) {
        if (n == 5) return false;
        *r = Request(1, 40, n == 3 ? 0 : 4, n);  // the fourth asks for K = 0
        ++n;
        return true;
      },
      [&](v1::SampleResponse&&) { ++received; });
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("num_samples"), std::string::npos);
  EXPECT_EQ(received, 3);
}

TEST(ClientServer, CallbackExceptionsCancelTheCallAndReachTheCaller) {
  Client client(Options());
  {
    auto session = client.OpenSession(4);
    int sent = 0;
    EXPECT_THROW(session->Run(
                     [&](v1::SampleRequest* r) {
                       if (sent == 50) return false;
                       *r = Request(1, 40, 4, sent++);
                       return true;
                     },
                     [&](v1::SampleResponse&&) { throw std::runtime_error("trainer failed"); }),
                 std::runtime_error);
  }
  {
    auto session = client.OpenSession(4);
    int sent = 0;
    EXPECT_THROW(session->Run(
                     [&](v1::SampleRequest* r) {
                       if (sent == 2) throw std::runtime_error("loader failed");
                       *r = Request(1, 40, 4, sent++);
                       return true;
                     },
                     [&](v1::SampleResponse&&) {}),
                 std::runtime_error);
  }
  // The client and server are still usable.
  v1::SampleResponse response;
  EXPECT_TRUE(client.Sample(Request(1, 40, 4, 9), &response).ok());
}

TEST(ClientServer, DeadlineAndUnavailable) {
  Client client(Options());
  v1::SampleResponse response;
  CallOptions call;
  call.timeout = std::chrono::milliseconds(1);
  v1::SampleRequest big = Request(64, 20000, 512, 1);
  EXPECT_EQ(client.Sample(big, &response, call).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);

  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), len), 0);
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  close(fd);  // nothing listens on this port now
  ClientOptions o;
  o.targets = {"127.0.0.1:" + std::to_string(ntohs(addr.sin_port))};
  o.retry.max_attempts = 2;
  Client dead(o);
  EXPECT_EQ(dead.Sample(Request(1, 10, 2, 1), &response).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// Sum of gpusampler_requests_total{method="Sample",code=CODE} from the metrics endpoint.
double RequestsTotal(const std::string& code) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(ServerEnvironment::metrics_port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  const std::string get = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  if (write(fd, get.data(), get.size()) != static_cast<ssize_t>(get.size())) return -1;
  std::string body;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) body.append(buf, n);
  close(fd);
  double total = 0;
  std::istringstream lines(body);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("gpusampler_requests_total{", 0) == 0 &&
        line.find("method=\"Sample\"") != std::string::npos &&
        line.find("code=\"" + code + "\"") != std::string::npos) {
      total += std::stod(line.substr(line.rfind(' ') + 1));
    }
  }
  return total;
}

TEST(ClientServer, LimitErrorGetsOneAttemptWhateverMaxAttempts) {
  v1::ServerInfo info;
  ASSERT_TRUE(Client(Options()).GetServerInfo(&info).ok());
  for (int attempts : {1, 4}) {
    ClientOptions o = Options();
    o.retry.max_attempts = attempts;
    o.retry.initial_backoff_s = 0.01;
    o.retry.max_backoff_s = 0.02;
    Client client(o);
    const double before = RequestsTotal("RESOURCE_EXHAUSTED");
    ASSERT_GE(before, 0) << "metrics endpoint unreachable";
    v1::SampleResponse response;
    const grpc::Status status =
        client.Sample(Request(1, 10, info.limits().max_num_samples() + 1, 1), &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(status.error_message().find("(--max-num-samples)"), std::string::npos)
        << status.error_message();
    // The server's grpc-retry-pushback-ms: -1 stopped the channel's retry policy.
    EXPECT_EQ(RequestsTotal("RESOURCE_EXHAUSTED") - before, 1);
  }
}

TEST(ClientServer, RequestOverTheClientLimitFailsBeforeSending) {
  ClientOptions o = Options();
  o.max_send_message_bytes = 1000;
  Client client(o);
  v1::SampleResponse response;
  const grpc::Status status = client.Sample(Request(1, 1000, 4, 1), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(status.error_message().find("max_send_message_bytes = 1000"), std::string::npos)
      << status.error_message();
}

TEST(ClientServer, SlowConsumerIsNotAPerMessageDeadline) {
  ClientOptions o = Options();
  o.default_timeout = std::chrono::milliseconds(300);
  Client client(o);
  auto session = client.OpenSession(2);
  ASSERT_TRUE(session->Send(Request(1, 40, 4, 1)));
  v1::SampleResponse response;
  ASSERT_TRUE(session->Receive(&response));
  // Nothing in flight: idle time is not a deadline.
  std::this_thread::sleep_for(std::chrono::milliseconds(600));
  ASSERT_TRUE(session->Send(Request(1, 40, 4, 2)));
  ASSERT_TRUE(session->Receive(&response));
  session->CloseSend();
  EXPECT_FALSE(session->Receive(&response));
  EXPECT_TRUE(session->Finish().ok());
}

TEST(ClientServer, DatasetUploadInChunksSampleAndDelete) {
  Client client(Options());
  const v1::SampleRequest inline_request = Request(3, 2000, 40, 5);
  // The same labels as one flat dataset with row_splits; 4 KiB chunks (several messages).
  v1::Tensor labels = inline_request.labels();
  labels.clear_shape();
  labels.add_shape(6000);
  const v1::Tensor splits = MakeTensor(std::vector<int64_t>{0, 2000, 4000, 6000}, {4});
  v1::DatasetInfo info;
  ASSERT_TRUE(client
                  .CreateDataset("cpp-ds", labels, nullptr, &splits, /*replace=*/true, &info, {},
                                 /*chunk_bytes=*/4096)
                  .ok());
  EXPECT_EQ(info.num_rows(), 3);
  EXPECT_EQ(info.num_elements(), 6000);
  std::vector<v1::DatasetInfo> listed;
  ASSERT_TRUE(client.ListDatasets(&listed).ok());
  bool found = false;
  for (const auto& d : listed) found |= d.name() == "cpp-ds";
  EXPECT_TRUE(found);

  v1::SampleRequest by_name;
  by_name.set_dataset("cpp-ds");
  *by_name.mutable_spec() = inline_request.spec();
  by_name.set_seed(inline_request.seed());
  v1::SampleResponse got, want;
  ASSERT_TRUE(client.Sample(by_name, &got).ok());
  ASSERT_TRUE(client.Sample(inline_request, &want).ok());
  EXPECT_EQ(got.indices().SerializeAsString(), want.indices().SerializeAsString());
  EXPECT_EQ(got.num_positive().SerializeAsString(), want.num_positive().SerializeAsString());

  v1::DatasetInfo again;
  EXPECT_EQ(client.CreateDataset("cpp-ds", labels, nullptr, &splits, false, &again).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  ASSERT_TRUE(client.DeleteDataset("cpp-ds").ok());
  EXPECT_EQ(client.Sample(by_name, &got).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(client.DeleteDataset("cpp-ds").error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace gpusampler::client
