// The channel set-up the client asks of gRPC: service config JSON and target grouping.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

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

}  // namespace
}  // namespace gpusampler::client
