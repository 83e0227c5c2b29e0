// Epochs (SPEC section 8), the server's arithmetic without gRPC: the EpochSpec checks, ROWS
// and ELEMENTS steps against epochs_golden.jsonl (an independent implementation), the
// coverage properties of ELEMENTS with the binary spec and with classes, and the member
// lists' share of the dataset budget.
#include "datasets/epochs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "datasets/datasets.hpp"
#include "edge/validate.hpp"
#include "gpusampler/kernels/philox.hpp"

namespace gpusampler::server {
namespace {

std::vector<nlohmann::json> Golden(const std::string& mode) {
  std::ifstream in(std::string(GPUSAMPLER_TEST_DATA) + "/epochs_golden.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    if (j.at("mode") == mode) out.push_back(std::move(j));
  }
  return out;
}

Epoch EpochOf(const nlohmann::json& g, int64_t step) {
  Epoch e;
  e.shuffle_seed = g.at("shuffle_seed").get<uint64_t>();
  e.epoch = g.at("epoch").get<uint32_t>();
  e.world_size = g.at("world_size").get<int64_t>();
  e.rank = g.at("rank").get<int64_t>();
  e.step = step;
  e.mode = g.at("mode") == "EPOCH_MODE_ROWS" ? EpochMode::kRows : EpochMode::kElements;
  e.rows_per_step = g.value("rows_per_step", int64_t{1});
  e.drop_last = g.value("drop_last", false);
  return e;
}

v1::EpochSpec ValidSpec() {
  v1::EpochSpec s;
  s.set_mode(v1::EPOCH_MODE_ROWS);
  s.set_world_size(3);
  s.set_rank(2);
  s.set_step(0);
  s.set_rows_per_step(1);
  return s;
}

TEST(EpochsTest, ParseNamesTheField) {
  Epoch e;
  EXPECT_TRUE(ParseEpoch(ValidSpec(), &e).ok());
  EXPECT_EQ(e.world_size, 3);
  struct Bad {
    const char* field;
    void (*edit)(v1::EpochSpec*);
  };
  const Bad bad[] = {
      {"epoch.mode", [](v1::EpochSpec* s) { s->set_mode(v1::EPOCH_MODE_UNSPECIFIED); }},
      {"epoch.world_size", [](v1::EpochSpec* s) { s->set_world_size(0); }},
      {"epoch.rank", [](v1::EpochSpec* s) { s->set_rank(3); }},
      {"epoch.rank", [](v1::EpochSpec* s) { s->set_rank(-1); }},
      {"epoch.step", [](v1::EpochSpec* s) { s->set_step(-1); }},
      {"epoch.rows_per_step", [](v1::EpochSpec* s) { s->set_rows_per_step(0); }},
  };
  for (const Bad& b : bad) {
    v1::EpochSpec s = ValidSpec();
    b.edit(&s);
    const Status st = ParseEpoch(s, &e);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << b.field;
    EXPECT_NE(st.message().find(b.field), std::string::npos) << st.message();
  }
  v1::EpochSpec elements = ValidSpec();
  elements.set_mode(v1::EPOCH_MODE_ELEMENTS);
  elements.set_rows_per_step(0);  // not ROWS: unused
  EXPECT_TRUE(ParseEpoch(elements, &e).ok());
}

TEST(EpochsTest, RowsGolden) {
  const auto cases = Golden("EPOCH_MODE_ROWS");
  ASSERT_EQ(cases.size(), 19u);
  for (const auto& g : cases) {
    const auto want = g.at("rows_by_step").get<std::vector<std::vector<int64_t>>>();
    for (size_t t = 0; t < want.size(); ++t) {
      std::vector<int64_t> rows;
      int64_t steps = 0;
      ASSERT_TRUE(RowsEpochStep(EpochOf(g, static_cast<int64_t>(t)),
                                g.at("num_rows").get<int64_t>(), &rows, &steps)
                      .ok());
      EXPECT_EQ(rows, want[t]) << g.dump().substr(0, 200) << " step " << t;
      EXPECT_EQ(steps, g.at("epoch_steps").get<int64_t>());
    }
    std::vector<int64_t> rows;
    int64_t steps = 0;
    const Status past = RowsEpochStep(EpochOf(g, static_cast<int64_t>(want.size())),
                                      g.at("num_rows").get<int64_t>(), &rows, &steps);
    EXPECT_EQ(past.code(), Code::kOutOfRange);
    EXPECT_NE(past.message().find("epoch_steps = " + std::to_string(want.size())),
              std::string::npos)
        << past.message();
  }
}

// DistributedSampler's counts, for a table of sizes around the world size.
TEST(EpochsTest, RowsCountsAndCoverage) {
  for (int64_t b : {0, 1, 2, 7, 8, 9, 100}) {
    for (int64_t w : {1, 3, 8}) {
      for (bool drop : {false, true}) {
        const int64_t num =
            (drop && b % w != 0) ? (b < w ? 0 : (b - w + w - 1) / w) : (b + w - 1) / w;
        std::multiset<int64_t> all;
        for (int64_t r = 0; r < w; ++r) {
          Epoch e;
          e.world_size = w;
          e.rank = r;
          e.rows_per_step = 3;
          e.drop_last = drop;
          int64_t steps = -1;
          std::vector<int64_t> rows;
          for (e.step = 0;; ++e.step) {
            if (!RowsEpochStep(e, b, &rows, &steps).ok()) break;
            all.insert(rows.begin(), rows.end());
          }
          EXPECT_EQ(steps, (num + 2) / 3);
        }
        EXPECT_EQ(static_cast<int64_t>(all.size()), num * w) << b << " " << w;
        // Every row at least once without drop_last, at most once with it.
        for (int64_t row = 0; row < b; ++row) {
          if (drop) {
            EXPECT_LE(all.count(row), 1u);
          } else {
            EXPECT_GE(all.count(row), 1u);
          }
        }
      }
    }
  }
}

kernels::SamplingSpec BinarySpec(const nlohmann::json& g) {
  kernels::SamplingSpec s;
  s.num_samples = g.at("num_samples").get<int64_t>();
  s.positive_fraction = g.at("positive_fraction").get<double>();
  return s;
}

TEST(EpochsTest, ElementsGolden) {
  const auto cases = Golden("EPOCH_MODE_ELEMENTS");
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& g : cases) {
    const auto labels = g.at("labels").get<std::vector<int64_t>>();
    const kernels::SamplingSpec spec = BinarySpec(g);
    const auto members =
        BuildClassMembers(reinterpret_cast<const uint8_t*>(labels.data()), kernels::DType::kInt64,
                          static_cast<int64_t>(labels.size()), spec);
    const auto& steps = g.at("steps");
    for (size_t t = 0; t < steps.size(); ++t) {
      ElementsStep out;
      ASSERT_TRUE(
          ElementsEpochStep(EpochOf(g, static_cast<int64_t>(t)), spec, *members, &out).ok());
      OrderBySeed(g.at("seed").get<uint64_t>(), &out.selected);
      std::vector<int64_t> got = out.selected;
      got.resize(static_cast<size_t>(spec.num_samples), -1);
      EXPECT_EQ(got, steps[t].at("indices").get<std::vector<int64_t>>()) << "step " << t;
      EXPECT_EQ(out.quotas, steps[t].at("num_per_class").get<std::vector<int64_t>>());
      EXPECT_EQ(out.epoch_steps, g.at("epoch_steps").get<int64_t>());
    }
    ElementsStep past;
    EXPECT_EQ(
        ElementsEpochStep(EpochOf(g, static_cast<int64_t>(steps.size())), spec, *members, &past)
            .code(),
        Code::kOutOfRange);
  }
}

kernels::ClassSpec Class(int64_t lo, int64_t hi, kernels::Share share, int64_t count = 0,
                         double fraction = 0.0) {
  kernels::ClassSpec c;
  c.labels = {{lo, hi}};
  c.share = share;
  c.count = count;
  c.fraction = fraction;
  return c;
}

// The binary spec written as classes (section 7: positives `fraction f`, negatives `rest`,
// fill [1, 0]) gives the binary spec's steps.
TEST(EpochsTest, ElementsClassesWrittenAsBinaryMatchBinary) {
  const auto g = Golden("EPOCH_MODE_ELEMENTS").at(1);
  const auto labels = g.at("labels").get<std::vector<int64_t>>();
  const kernels::SamplingSpec binary = BinarySpec(g);
  kernels::SamplingSpec classes;
  classes.num_samples = binary.num_samples;
  classes.classes = {Class(1, 1, kernels::Share::kFraction, 0, 0.5),
                     Class(0, 0, kernels::Share::kRest)};
  classes.fill_order = {1, 0};
  const auto* bytes = reinterpret_cast<const uint8_t*>(labels.data());
  const int64_t n = static_cast<int64_t>(labels.size());
  const auto a = BuildClassMembers(bytes, kernels::DType::kInt64, n, binary);
  const auto b = BuildClassMembers(bytes, kernels::DType::kInt64, n, classes);
  EXPECT_EQ(a->members, b->members);
  EXPECT_NE(MembershipKey(binary), MembershipKey(classes));
  for (int64_t t = 0; t < g.at("epoch_steps").get<int64_t>(); ++t) {
    ElementsStep x, y;
    ASSERT_TRUE(ElementsEpochStep(EpochOf(g, t), binary, *a, &x).ok());
    ASSERT_TRUE(ElementsEpochStep(EpochOf(g, t), classes, *b, &y).ok());
    EXPECT_EQ(x.selected, y.selected);
    EXPECT_EQ(x.quotas, y.quotas);
  }
}

// Three classes: the class that sets G gives each member exactly once per epoch (sizes
// chosen so that every pass is whole and W divides G), the others once per pass, and no
// step holds an element twice.
TEST(EpochsTest, ElementsThreeClassesCoverage) {
  std::vector<int32_t> labels;
  for (int i = 0; i < 600; ++i) labels.push_back(i % 3 == 0 ? 7 : (i % 3 == 1 ? 20 : 35));
  for (int i = 0; i < 300; ++i) labels.push_back(20);  // class 1: 500 members
  for (int i = 0; i < 40; ++i) labels.push_back(-5);   // in no class
  kernels::SamplingSpec spec;
  spec.num_samples = 24;
  spec.classes = {Class(0, 9, kernels::Share::kCount, 4), Class(10, 29, kernels::Share::kCount, 10),
                  Class(30, 39, kernels::Share::kRest)};  // counts 200, 500, 200; m = 4, 10, 10
  const auto members =
      BuildClassMembers(reinterpret_cast<const uint8_t*>(labels.data()), kernels::DType::kInt32,
                        static_cast<int64_t>(labels.size()), spec);
  ASSERT_EQ(members->members[0].size(), 200u);
  ASSERT_EQ(members->members[1].size(), 500u);
  ASSERT_EQ(members->members[2].size(), 200u);
  Epoch e;
  e.mode = EpochMode::kElements;
  e.world_size = 5;  // G = max(50, 50, 20) = 50: 10 steps per rank
  e.shuffle_seed = 31;
  std::map<int64_t, int> seen;
  for (e.rank = 0; e.rank < e.world_size; ++e.rank) {
    for (e.step = 0; e.step < 10; ++e.step) {
      ElementsStep out;
      ASSERT_TRUE(ElementsEpochStep(e, spec, *members, &out).ok());
      EXPECT_EQ(out.epoch_steps, 10);
      EXPECT_EQ(out.quotas, (std::vector<int64_t>{4, 10, 10}));
      std::set<int64_t> step(out.selected.begin(), out.selected.end());
      EXPECT_EQ(step.size(), out.selected.size()) << "an element twice in one step";
      for (int64_t i : out.selected) ++seen[i];
    }
  }
  for (int64_t i = 0; i < static_cast<int64_t>(labels.size()); ++i) {
    const int32_t l = labels[static_cast<size_t>(i)];
    const int want = l < 0 ? 0 : (l < 10 ? 1 : (l < 30 ? 1 : 2));  // class 2 twice: 2.5 passes
    if (l >= 30) {
      EXPECT_GE(seen[i], 2) << i;
      EXPECT_LE(seen[i], 3) << i;
    } else {
      EXPECT_EQ(seen[i], want) << i << " label " << l;
    }
  }
}

TEST(EpochsTest, ElementsRefusesRankedSelections) {
  kernels::SamplingSpec spec;
  spec.num_samples = 4;
  spec.classes = {Class(0, 0, kernels::Share::kRest)};
  EXPECT_TRUE(CheckElementsSpec(spec).ok());
  spec.classes[0].selection = kernels::Selection::kHardest;
  const Status st = CheckElementsSpec(spec);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("spec.classes[0].selection"), std::string::npos);
}

TEST(EpochsTest, OrderBySeedSortsByOrderKeyThenIndex) {
  std::vector<int64_t> s = {900, 3, 77, 12, 5000, 1};
  OrderBySeed(42, &s);
  for (size_t j = 1; j < s.size(); ++j) {
    const uint32_t a = kernels::ElementKey(42, 0, kernels::kOrderStream, s[j - 1]);
    const uint32_t b = kernels::ElementKey(42, 0, kernels::kOrderStream, s[j]);
    EXPECT_TRUE(a < b || (a == b && s[j - 1] < s[j]));
  }
}

// The member lists are built once per (version, membership) and charged to the registry's
// budget; they leave it with the dataset.
TEST(EpochsTest, MemberListsCountTowardTheBudget) {
  DatasetRegistry registry(/*max_bytes=*/10000);
  auto ds = std::make_shared<Dataset>();
  ds->name = "d";
  ds->label_dtype = kernels::DType::kInt8;
  ds->labels = kernels::HostBytes(1000);
  for (size_t i = 0; i < 1000; ++i) ds->labels.data()[i] = static_cast<uint8_t>(i % 2);
  ds->row_splits = {0, 1000};
  ds->bytes = 1000;
  ASSERT_TRUE(registry.Reserve(1000).ok());
  ASSERT_TRUE(registry.Commit(ds, false).ok());
  EXPECT_EQ(registry.bytes(), 1000);
  kernels::SamplingSpec spec;
  spec.num_samples = 4;
  const std::string key = MembershipKey(spec);
  std::shared_ptr<const ClassMembers> used;
  ASSERT_TRUE(registry
                  .KeepEpochLists(*ds, key,
                                  BuildClassMembers(ds->labels.data(), ds->label_dtype, 1000, spec),
                                  &used)
                  .ok());
  EXPECT_EQ(used->bytes(), 4000);
  EXPECT_EQ(registry.bytes(), 5000);
  EXPECT_EQ(ds->epoch_index.Find(key), used);
  // A second build of the same key adds nothing.
  std::shared_ptr<const ClassMembers> again;
  ASSERT_TRUE(registry
                  .KeepEpochLists(*ds, key,
                                  BuildClassMembers(ds->labels.data(), ds->label_dtype, 1000, spec),
                                  &again)
                  .ok());
  EXPECT_EQ(again, used);
  EXPECT_EQ(registry.bytes(), 5000);
  // Another membership that does not fit: RESOURCE_EXHAUSTED naming the flag, nothing kept.
  kernels::SamplingSpec other = spec;
  other.negative_label = 2;
  auto big = std::make_shared<ClassMembers>();
  big->members = {std::vector<uint32_t>(1500), {}};
  const Status full = registry.KeepEpochLists(*ds, MembershipKey(other), big, &again);
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("--max-dataset-bytes"), std::string::npos);
  EXPECT_EQ(registry.bytes(), 5000);
  EXPECT_TRUE(registry.Delete("d"));
  EXPECT_EQ(registry.bytes(), 0);
}

// At the edge (ValidateRequest, as the server runs it): an ELEMENTS step refuses a class
// that is not UNIFORM and `scores` sent with the request, each naming the field; a ROWS
// step takes both (it is a `rows` request).
TEST(EpochsTest, EdgeRefusesRankedSelectionsAndSentScoresInElements) {
  DatasetRegistry registry(int64_t{1} << 20);
  DatasetBuilder builder(&registry, Limits());
  v1::DatasetChunk chunk;
  chunk.set_name("d");
  const std::vector<int64_t> labels = {0, 1, 2, 1, 0, 2, 1, 0};
  chunk.mutable_labels()->set_dtype(v1::DTYPE_INT64);
  chunk.mutable_labels()->add_shape(8);
  chunk.mutable_labels()->set_data(labels.data(), labels.size() * 8);
  ASSERT_TRUE(builder.Add(chunk).ok());
  std::shared_ptr<const Dataset> stored;
  ASSERT_TRUE(builder.Commit(&stored).ok());
  auto request = [](v1::Selection selection, bool scores, v1::EpochMode mode) {
    v1::SampleRequest req;
    req.set_dataset("d");
    v1::SamplingSpec* spec = req.mutable_spec();
    spec->set_num_samples(4);
    for (int64_t c = 0; c < 3; ++c) {
      v1::ClassSpec* cls = spec->add_classes();
      v1::LabelRange* r = cls->add_labels();
      r->set_lo(c);
      r->set_hi(c);
      if (c < 2) {
        cls->set_count(1);
      } else {
        cls->set_rest(true);
        cls->set_selection(selection);
      }
    }
    if (scores) {
      const std::vector<float> s(8, 1.0f);
      req.mutable_scores()->set_dtype(v1::DTYPE_FLOAT32);
      req.mutable_scores()->add_shape(8);
      req.mutable_scores()->set_data(s.data(), s.size() * sizeof(float));
    }
    v1::EpochSpec* e = req.mutable_epoch();
    e->set_mode(mode);
    e->set_world_size(1);
    e->set_rows_per_step(1);
    return req;
  };
  Job ok;
  Status s = ValidateRequest(request(v1::SELECTION_UNIFORM, false, v1::EPOCH_MODE_ELEMENTS),
                             Limits(), &ok, &registry);
  EXPECT_TRUE(s.ok()) << s.message();
  for (const v1::Selection sel : {v1::SELECTION_WEIGHTED, v1::SELECTION_HARDEST}) {
    Job job;
    s = ValidateRequest(request(sel, true, v1::EPOCH_MODE_ELEMENTS), Limits(), &job, &registry);
    EXPECT_EQ(s.code(), Code::kInvalidArgument);
    EXPECT_NE(s.message().find("spec.classes[2].selection"), std::string::npos) << s.message();
  }
  Job sent;
  s = ValidateRequest(request(v1::SELECTION_UNIFORM, true, v1::EPOCH_MODE_ELEMENTS), Limits(),
                      &sent, &registry);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("scores", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("EPOCH_MODE_ELEMENTS"), std::string::npos) << s.message();
  Job rows;
  s = ValidateRequest(request(v1::SELECTION_WEIGHTED, true, v1::EPOCH_MODE_ROWS), Limits(), &rows,
                      &registry);
  EXPECT_TRUE(s.ok()) << s.message();
  EXPECT_NE(rows.scores, nullptr);
}

}  // namespace
}  // namespace gpusampler::server
