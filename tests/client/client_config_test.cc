// The channel set-up the client asks of gRPC: service config JSON and target grouping.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpusampler/client/client.hpp"

namespace gpusampler::client {
namespace {

TEST(ServiceConfig, RoundRobinAndRetryPolicy) {
  RetryPolicy retry;
  retry.max_attempts = 5;
  retry.initial_backoff_s = 0.025;
  retry.max_backoff_s = 1.5;
  const auto json = nlohmann::json::parse(BuildServiceConfigJson(retry));
  EXPECT_EQ(json["loadBalancingConfig"][0].contains("round_robin"), true);
  const auto& method = json["methodConfig"][0];
  EXPECT_EQ(method["name"][0]["service"], "gpusampler.v1.Sampler");
  const auto& policy = method["retryPolicy"];
  EXPECT_EQ(policy["maxAttempts"], 5);
  EXPECT_EQ(policy["initialBackoff"], "0.025000s");
  EXPECT_EQ(policy["maxBackoff"], "1.500000s");
  EXPECT_EQ(policy["backoffMultiplier"], 2.0);
  EXPECT_EQ(policy["retryableStatusCodes"],
            nlohmann::json::array({"UNAVAILABLE", "RESOURCE_EXHAUSTED"}));
}

TEST(ServiceConfig, NoRetryPolicyWhenDisabledOrSingleAttempt) {
  RetryPolicy retry;
  retry.enabled = false;
  EXPECT_FALSE(nlohmann::json::parse(BuildServiceConfigJson(retry))["methodConfig"][0].contains(
      "retryPolicy"));
  retry.enabled = true;
  retry.max_attempts = 1;
  EXPECT_FALSE(nlohmann::json::parse(BuildServiceConfigJson(retry))["methodConfig"][0].contains(
      "retryPolicy"));
}

TEST(ChannelTargets, GroupsIpLiteralsOfOneFamily) {
  using V = std::vector<std::string>;
  EXPECT_EQ(ChannelTargets(V{"10.0.0.1:1"}), V{"10.0.0.1:1"});
  EXPECT_EQ(ChannelTargets(V{"10.0.0.1:1", "10.0.0.2:2"}), V{"ipv4:10.0.0.1:1,10.0.0.2:2"});
  EXPECT_EQ(ChannelTargets(V{"[::1]:1", "[fe80::2]:2"}), V{"ipv6:[::1]:1,[fe80::2]:2"});
  EXPECT_EQ(ChannelTargets(V{"10.0.0.1:1", "[::1]:2"}), (V{"10.0.0.1:1", "[::1]:2"}));
  EXPECT_EQ(ChannelTargets(V{"a.example:1", "b.example:2"}), (V{"a.example:1", "b.example:2"}));
  EXPECT_EQ(ChannelTargets(V{"10.0.0.1", "10.0.0.2:2"}), (V{"10.0.0.1", "10.0.0.2:2"}));
}

TEST(ClientOptionsCheck, OutOfRangeOptionsAreRefusedNamingTheField) {
  const std::vector<std::pair<std::function<void(ClientOptions*)>, std::string>> cases = {
      {[](ClientOptions* o) { o->default_timeout = std::chrono::milliseconds(-1); },
       "default_timeout"},
      {[](ClientOptions* o) { o->retry.max_attempts = 6; }, "retry.max_attempts = 6"},
      {[](ClientOptions* o) { o->retry.max_attempts = 0; }, "retry.max_attempts = 0"},
      {[](ClientOptions* o) { o->retry.initial_backoff_s = 0; }, "retry.initial_backoff_s"},
      {[](ClientOptions* o) { o->max_send_message_bytes = 0; }, "max_send_message_bytes = 0"},
      {[](ClientOptions* o) { o->max_receive_message_bytes = -5; }, "max_receive_message_bytes"},
      {[](ClientOptions* o) { o->keepalive_time = std::chrono::milliseconds(-1); },
       "keepalive_time"},
      {[](ClientOptions* o) { o->keepalive_timeout = std::chrono::milliseconds(0); },
       "keepalive_timeout"},
      {[](ClientOptions* o) {
         o->targets = {"127.0.0.1:1", ""};
       },
       "empty target"},
  };
  for (const auto& [mutate, field] : cases) {
    ClientOptions o;
    o.targets = {"127.0.0.1:1"};
    mutate(&o);
    try {
      Client client(o);
      ADD_FAILURE() << "accepted: " << field;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

TEST(ClientOptionsCheck, SessionWindowAndCallTimeoutsAreChecked) {
  ClientOptions o;
  o.targets = {"127.0.0.1:1"};
  Client client(o);
  try {
    client.OpenSession(0);
    ADD_FAILURE() << "window 0 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("window = 0"), std::string::npos) << e.what();
  }
  CallOptions call;
  call.timeout = std::chrono::milliseconds(-3);
  v1::SampleResponse response;
  EXPECT_THROW(client.Sample(v1::SampleRequest(), &response, call), std::invalid_argument);
  call.timeout.reset();
  call.stream_timeout = std::chrono::milliseconds(-3);
  EXPECT_THROW(client.OpenSession(2, call), std::invalid_argument);
}

}  // namespace
}  // namespace gpusampler::client
