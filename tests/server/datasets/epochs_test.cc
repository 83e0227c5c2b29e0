// Epochs (SPEC section 8), the server's arithmetic without gRPC: the EpochSpec checks, ROWS
// and ELEMENTS steps against epochs_golden.jsonl (an independent implementation), the
// coverage properties of ELEMENTS with the binary spec and with classes, and the member
// lists' share of the dataset budget.
#include "datasets/epochs.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "datasets/datasets.hpp"
#include "edge/validate.hpp"
#include "gpusampler/kernels/device.hpp"
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
  ds->row_length = 1000;  // one row of 1000 elements
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

// A one-row dataset "d" of int16 labels (1, 0 and ignored 7) with FLOAT32 features [n, 3],
// committed to `registry` (placed on its devices, if any).
std::shared_ptr<const Dataset> ElementsDataset(DatasetRegistry* registry, int64_t n) {
  DatasetBuilder builder(registry, Limits());
  v1::DatasetChunk chunk;
  chunk.set_name("d");
  std::vector<int16_t> labels(static_cast<size_t>(n));
  std::vector<float> features(static_cast<size_t>(n) * 3);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t r = kernels::Philox4x32({{static_cast<uint32_t>(i), 0, 0, 0}}, 5, 6).v[0];
    labels[static_cast<size_t>(i)] = r % 10 == 0 ? 1 : (r % 10 == 1 ? 7 : 0);
    for (int d = 0; d < 3; ++d) features[static_cast<size_t>(i * 3 + d)] = float(r % 1000) + d;
  }
  chunk.mutable_labels()->set_dtype(v1::DTYPE_INT16);
  chunk.mutable_labels()->add_shape(n);
  chunk.mutable_labels()->set_data(labels.data(), labels.size() * 2);
  chunk.mutable_features()->set_dtype(v1::DTYPE_FLOAT32);
  chunk.mutable_features()->add_shape(n);
  chunk.mutable_features()->add_shape(3);
  chunk.mutable_features()->set_data(features.data(), features.size() * 4);
  EXPECT_TRUE(builder.Add(chunk).ok());
  std::shared_ptr<const Dataset> stored;
  EXPECT_TRUE(builder.Commit(&stored).ok());
  return stored;
}

v1::SampleRequest ElementsRequest(int64_t world, int64_t rank, int64_t step) {
  v1::SampleRequest req;
  req.set_dataset("d");
  req.set_return_features(true);
  req.mutable_spec()->set_num_samples(64);
  req.mutable_spec()->set_positive_fraction(0.25);
  req.set_seed(11);
  v1::EpochSpec* e = req.mutable_epoch();
  e->set_mode(v1::EPOCH_MODE_ELEMENTS);
  e->set_world_size(world);
  e->set_rank(rank);
  e->set_step(step);
  e->set_epoch(3);
  e->set_shuffle_seed(0xfeedULL << 32 | 77);
  return req;
}

// One ELEMENTS step of `registry`'s "d" through the edge's validation and AnswerElementsStep.
Status AnswerStep(DatasetRegistry* registry, const v1::SampleRequest& req,
                  v1::SampleResponse* response) {
  Job job;
  GPUSAMPLER_RETURN_IF_ERROR(ValidateRequest(req, Limits(), &job, registry));
  Epoch epoch;
  GPUSAMPLER_RETURN_IF_ERROR(ParseEpoch(req.epoch(), &epoch));
  return AnswerElementsStep(registry, epoch, job, response);
}

// A dataset on the cuda-sim device takes the device route (member lists in cuda-sim device
// memory, the ELEMENTS kernel), and answers byte for byte what the host route answers.
TEST(EpochsTest, ElementsOnTheSimDeviceEqualsTheHostRoute) {
  DatasetRegistry host(int64_t{1} << 24);
  DatasetRegistry sim(int64_t{1} << 24, {kernels::kSimDevice});
  const int64_t n = 20011;
  const auto hd = ElementsDataset(&host, n);
  const auto sd = ElementsDataset(&sim, n);
  ASSERT_TRUE(hd->device_copies.empty());
  ASSERT_EQ(sd->device_copies.size(), 1u);
  const int64_t world = 3;
  int64_t steps = -1;
  for (int64_t rank = 0; rank < world; ++rank) {
    for (int64_t step = 0; steps < 0 || step < steps; ++step) {
      v1::SampleResponse a, b;
      ASSERT_TRUE(AnswerStep(&host, ElementsRequest(world, rank, step), &a).ok());
      ASSERT_TRUE(AnswerStep(&sim, ElementsRequest(world, rank, step), &b).ok());
      steps = a.epoch_steps();
      EXPECT_EQ(a.indices().data(), b.indices().data()) << rank << " " << step;
      EXPECT_EQ(a.labels().data(), b.labels().data()) << rank << " " << step;
      EXPECT_EQ(a.features().data(), b.features().data()) << rank << " " << step;
      EXPECT_EQ(a.num_positive().data(), b.num_positive().data());
      EXPECT_EQ(a.num_negative().data(), b.num_negative().data());
      EXPECT_EQ(b.device(), "cuda-sim");
      EXPECT_EQ(a.epoch_steps(), b.epoch_steps());
    }
  }
  EXPECT_GT(steps, 5);
  Job job;
  ASSERT_TRUE(ValidateRequest(ElementsRequest(1, 0, 0), Limits(), &job, &sim).ok());
  const auto on_sim = sd->epoch_index.Find(MembershipKey(job.spec));
  const auto on_host = hd->epoch_index.Find(MembershipKey(job.spec));
  ASSERT_TRUE(on_sim && on_host);
  EXPECT_TRUE(on_sim->on_device());
  EXPECT_EQ(on_sim->device, kernels::kSimDevice);
  EXPECT_TRUE(on_sim->members.empty());  // moved to the device
  EXPECT_FALSE(on_host->on_device());
  EXPECT_EQ(on_sim->bytes(), on_host->bytes());
  // Charged to the budget and released with the dataset.
  EXPECT_EQ(sim.bytes(), sd->bytes + on_sim->bytes());
  EXPECT_TRUE(sim.Delete("d"));
  EXPECT_EQ(sim.bytes(), 0);
  // A step past the epoch is OUT_OF_RANGE on the device route too.
  DatasetRegistry sim2(int64_t{1} << 24, {kernels::kSimDevice});
  ElementsDataset(&sim2, n);
  v1::SampleResponse r;
  EXPECT_EQ(AnswerStep(&sim2, ElementsRequest(world, 0, steps), &r).code(), Code::kOutOfRange);
}

// The first ELEMENTS step of a version (ElementsListsBuilt false) is answered on the epoch
// thread, not the caller's; tasks run there in order, and a later step finds the lists built.
TEST(EpochsTest, FirstElementsStepRunsOnTheEpochThread) {
  DatasetRegistry registry(int64_t{1} << 24);
  ElementsDataset(&registry, 5000);
  Job job;
  const v1::SampleRequest req = ElementsRequest(1, 0, 0);
  ASSERT_TRUE(ValidateRequest(req, Limits(), &job, &registry).ok());
  EXPECT_FALSE(ElementsListsBuilt(job));
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  RunOffGrpcThread([released] { released.wait(); });  // holds the epoch thread
  std::promise<std::thread::id> ran_on;
  v1::SampleResponse response;
  Status status = Status::Ok();
  RunOffGrpcThread([&] {
    Epoch epoch;
    status = ParseEpoch(req.epoch(), &epoch);
    if (status.ok()) status = AnswerElementsStep(&registry, epoch, job, &response);
    ran_on.set_value(std::this_thread::get_id());
  });
  auto ran = ran_on.get_future();
  EXPECT_EQ(ran.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  EXPECT_FALSE(ElementsListsBuilt(job));  // queued behind the held task
  release.set_value();
  EXPECT_NE(ran.get(), std::this_thread::get_id());
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(ElementsListsBuilt(job));
  EXPECT_EQ(response.indices().data().size(), 64u * 8);
}

}  // namespace
}  // namespace gpusampler::server
