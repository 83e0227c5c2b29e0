// The channel targets the client asks of gRPC: IP literals of one family grouped.
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
