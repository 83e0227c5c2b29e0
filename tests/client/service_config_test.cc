// The service config JSON the client asks of gRPC: round robin and the retry policy.
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

}  // namespace
}  // namespace gpusampler::client
