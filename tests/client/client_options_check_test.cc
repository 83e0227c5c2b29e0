// ClientOptions checked before use: out-of-range options refused naming the field, the
// session window and call timeouts.
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
