// golden_samples.jsonl (an independent implementation of SPEC section 1): its cases loaded as
// test cases, and the check of a result against a case's golden outputs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace gpusampler::kernels::testing {

struct Golden {
  std::string name;
  Case c;
  std::vector<std::vector<int64_t>> indices;
  std::vector<int32_t> num_positive, num_negative;
};

inline FillPolicy ParseFill(const std::string& s) {
  if (s == "FILL_POLICY_NEGATIVES_ONLY") return FillPolicy::kNegativesOnly;
  if (s == "FILL_POLICY_NONE") return FillPolicy::kNone;
  return FillPolicy::kBoth;
}

inline std::vector<Golden> LoadGolden() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/golden_samples.jsonl");
  std::vector<Golden> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    Golden g;
    g.name = j.at("name").get<std::string>();
    const auto& spec = j.at("spec");
    g.c.spec.num_samples = spec.at("num_samples").get<int64_t>();
    g.c.spec.positive_fraction = spec.value("positive_fraction", 0.5);
    g.c.spec.positive_label = spec.value("positive_label", int64_t{1});
    g.c.spec.negative_label = spec.value("negative_label", int64_t{0});
    g.c.spec.fill = ParseFill(spec.value("fill_policy", std::string("FILL_POLICY_BOTH")));
    g.c.seed = j.at("seed").get<uint64_t>();
    g.c.rows = j.at("labels").get<std::vector<std::vector<int64_t>>>();
    g.indices = j.at("indices").get<std::vector<std::vector<int64_t>>>();
    g.num_positive = j.at("num_positive").get<std::vector<int32_t>>();
    g.num_negative = j.at("num_negative").get<std::vector<int32_t>>();
    out.push_back(std::move(g));
  }
  return out;
}

inline void ExpectMatches(const Golden& g, const Result& got, const std::string& where) {
  EXPECT_EQ(got.indices, g.indices) << g.name << " on " << where;
  EXPECT_EQ(got.num_positive, g.num_positive) << g.name << " on " << where;
  EXPECT_EQ(got.num_negative, g.num_negative) << g.name << " on " << where;
  for (size_t r = 0; r < g.indices.size(); ++r) {
    for (size_t s = 0; s < g.indices[r].size(); ++s) {
      const int64_t i = g.indices[r][s];
      const int64_t want = i < 0 ? -1 : g.c.rows[r][i];
      ASSERT_EQ(got.labels[r][s], want) << g.name << " row " << r << " slot " << s;
    }
  }
}

}  // namespace gpusampler::kernels::testing
