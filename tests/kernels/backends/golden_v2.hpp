// golden_v2.jsonl (an independent implementation of SPEC section 7): its cases, with classes,
// fill orders and scores, loaded as test cases, and the check of a result against them.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace gpusampler::kernels::testing {

struct GoldenV2 {
  std::string name;
  Case c;
  std::vector<std::vector<int64_t>> indices;
  std::vector<std::vector<int32_t>> num_per_class;
};

inline Selection ParseSelection(const std::string& s) {
  if (s == "SELECTION_WEIGHTED") return Selection::kWeighted;
  if (s == "SELECTION_HARDEST") return Selection::kHardest;
  if (s == "SELECTION_MIXED") return Selection::kMixed;
  return Selection::kUniform;
}

// A class spec in the wire's JSON form (as golden_v2.jsonl writes it).
inline ClassSpec ParseClass(const nlohmann::json& j) {
  ClassSpec c;
  for (const auto& r : j.at("labels")) {
    c.labels.push_back({r.at("lo").get<int64_t>(), r.at("hi").get<int64_t>()});
  }
  if (j.contains("count")) {
    c.share = Share::kCount;
    c.count = j.at("count").get<int64_t>();
  } else if (j.contains("fraction")) {
    c.share = Share::kFraction;
    c.fraction = j.at("fraction").get<double>();
  } else if (j.value("rest", false)) {
    c.share = Share::kRest;
  }
  c.selection = ParseSelection(j.value("selection", std::string("SELECTION_UNIFORM")));
  if (j.contains("hard_fraction")) {
    c.has_hard_fraction = true;
    c.hard_fraction = j.at("hard_fraction").get<double>();
  }
  return c;
}

inline std::vector<GoldenV2> LoadGoldenV2() {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/golden_v2.jsonl");
  std::vector<GoldenV2> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line);
    GoldenV2 g;
    g.name = j.at("name").get<std::string>();
    g.c.spec.num_samples = j.at("num_samples").get<int64_t>();
    for (const auto& cls : j.at("classes")) g.c.spec.classes.push_back(ParseClass(cls));
    g.c.spec.fill_order = j.at("fill_order").get<std::vector<int32_t>>();
    g.c.seed = j.at("seed").get<uint64_t>();
    g.c.rows = j.at("labels").get<std::vector<std::vector<int64_t>>>();
    if (j.contains("scores")) {
      for (const auto& row : j.at("scores")) {
        std::vector<float> s;
        // NaN is written as null.
        for (const auto& x : row) {
          s.push_back(x.is_null() ? std::numeric_limits<float>::quiet_NaN() : x.get<float>());
        }
        g.c.scores.push_back(std::move(s));
      }
    }
    g.indices = j.at("indices").get<std::vector<std::vector<int64_t>>>();
    g.num_per_class = j.at("num_per_class").get<std::vector<std::vector<int32_t>>>();
    out.push_back(std::move(g));
  }
  return out;
}

// num_positive / num_negative of a class request: m_0 / m_1 with two classes, m_0 / 0 with one,
// 0 / 0 with more.
inline void ExpectMatchesV2(const GoldenV2& g, const Result& got, const std::string& where) {
  EXPECT_EQ(got.indices, g.indices) << g.name << " on " << where;
  EXPECT_EQ(got.num_per_class, g.num_per_class) << g.name << " on " << where;
  for (size_t r = 0; r < g.indices.size() && r < got.labels.size(); ++r) {
    const auto& m = g.num_per_class[r];
    const int32_t pos = m.size() <= 2 ? m[0] : 0;
    const int32_t neg = m.size() == 2 ? m[1] : 0;
    EXPECT_EQ(got.num_positive[r], pos) << g.name << " row " << r << " on " << where;
    EXPECT_EQ(got.num_negative[r], neg) << g.name << " row " << r << " on " << where;
    for (size_t s = 0; s < g.indices[r].size(); ++s) {
      const int64_t i = g.indices[r][s];
      const int64_t want = i < 0 ? -1 : g.c.rows[r][static_cast<size_t>(i)];
      ASSERT_EQ(got.labels[r][s], want)
          << g.name << " row " << r << " slot " << s << " on " << where;
    }
  }
}

}  // namespace gpusampler::kernels::testing
