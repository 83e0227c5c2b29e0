// SPEC section 7 at the edge, below gRPC: ValidateRequest turns classes, fill_order and
// scores into the Job the worker hands to the kernels (the ClassSpecs, and scores addressed
// like the labels: in place, stored with a dataset, or scattered for named dataset rows).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "datasets/datasets.hpp"
#include "edge/validate.hpp"

namespace gpusampler::server::testing {
namespace {

template <typename T>
v1::Tensor Tensor1(v1::DType dtype, const std::vector<T>& v) {
  v1::Tensor t;
  t.set_dtype(dtype);
  t.add_shape(static_cast<int64_t>(v.size()));
  t.set_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T)));
  return t;
}

v1::ClassSpec Class(int64_t lo, int64_t hi, v1::Selection selection) {
  v1::ClassSpec c;
  v1::LabelRange* r = c.add_labels();
  r->set_lo(lo);
  r->set_hi(hi);
  c.set_selection(selection);
  return c;
}

// Two classes: labels 1 (count 2, HARDEST) and 0 (rest, UNSPECIFIED = UNIFORM); fill [1, 0].
v1::SamplingSpec TwoClasses() {
  v1::SamplingSpec spec;
  spec.set_num_samples(4);
  v1::ClassSpec* one = spec.add_classes();
  *one = Class(1, 1, v1::SELECTION_HARDEST);
  one->set_count(2);
  v1::ClassSpec* zero = spec.add_classes();
  *zero = Class(0, 0, v1::SELECTION_UNSPECIFIED);
  zero->set_rest(true);
  spec.add_fill_order(1);
  spec.add_fill_order(0);
  return spec;
}

TEST(ClassesValidateTest, InlineClassesAndScoresBecomeTheJob) {
  v1::SampleRequest req;
  *req.mutable_spec() = TwoClasses();
  *req.mutable_labels() = Tensor1<int64_t>(v1::DTYPE_INT64, {0, 1, 1, 0, 1});
  const std::vector<float> scores = {0.5f, NAN, 2.0f, -1.0f, 0.0f};
  *req.mutable_scores() = Tensor1<float>(v1::DTYPE_FLOAT32, scores);
  Job job;
  const Status s = ValidateRequest(req, Limits(), &job);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_EQ(job.spec.classes.size(), 2u);
  EXPECT_EQ(job.spec.classes[0].share, kernels::Share::kCount);
  EXPECT_EQ(job.spec.classes[0].count, 2);
  EXPECT_EQ(job.spec.classes[0].selection, kernels::Selection::kHardest);
  EXPECT_EQ(job.spec.classes[1].share, kernels::Share::kRest);
  EXPECT_EQ(job.spec.classes[1].selection, kernels::Selection::kUniform);
  EXPECT_EQ(job.spec.fill_order, (std::vector<int32_t>{1, 0}));
  ASSERT_NE(job.scores, nullptr);
  EXPECT_EQ(std::memcmp(job.scores, scores.data(), 5 * sizeof(float)), 0);
  // The response has room for num_per_class: 4 bytes per row and class.
  int64_t with_classes = 0, without = 0;
  ASSERT_TRUE(ResponseBytes(job, 0, &with_classes));
  job.spec.classes.clear();
  ASSERT_TRUE(ResponseBytes(job, 0, &without));
  EXPECT_EQ(with_classes - without, 4 * 1 * 2);
}

class DatasetScoresTest : public ::testing::Test {
 protected:
  // Rows {0, 1, 1} {0} {1, 0}, stored scores 1..6.
  void SetUp() override {
    DatasetBuilder builder(&registry_, Limits());
    v1::DatasetChunk chunk;
    chunk.set_name("d");
    *chunk.mutable_labels() = Tensor1<int64_t>(v1::DTYPE_INT64, {0, 1, 1, 0, 1, 0});
    *chunk.mutable_row_splits() = Tensor1<int64_t>(v1::DTYPE_INT64, {0, 3, 4, 6});
    *chunk.mutable_scores() = Tensor1<float>(v1::DTYPE_FLOAT32, {1, 2, 3, 4, 5, 6});
    ASSERT_TRUE(builder.Add(chunk).ok());
    std::shared_ptr<const Dataset> stored;
    ASSERT_TRUE(builder.Commit(&stored).ok());
  }

  v1::SampleRequest Request(const std::vector<int64_t>& rows) const {
    v1::SampleRequest req;
    *req.mutable_spec() = TwoClasses();
    req.set_dataset("d");
    if (!rows.empty()) *req.mutable_rows() = Tensor1<int64_t>(v1::DTYPE_INT64, rows);
    return req;
  }

  DatasetRegistry registry_{int64_t{1} << 20};
};

TEST_F(DatasetScoresTest, StoredScoresAreReadWhereTheLabelsAre) {
  Job job;
  const Status s = ValidateRequest(Request({2, 0}), Limits(), &job, &registry_);
  ASSERT_TRUE(s.ok()) << s.message();
  ASSERT_NE(job.scores, nullptr);
  EXPECT_EQ(job.scores[job.row_start(0)], 5.0f);      // row 2, element 0
  EXPECT_EQ(job.scores[job.row_start(1) + 2], 3.0f);  // row 0, element 2
}

TEST_F(DatasetScoresTest, SentScoresWinAlignedWithTheNamedRows) {
  v1::SampleRequest req = Request({2, 0, 2});
  *req.mutable_scores() = Tensor1<float>(v1::DTYPE_FLOAT32, {10, 11, 20, 21, 22, 10, 11});
  Job job;
  const Status s = ValidateRequest(req, Limits(), &job, &registry_);
  ASSERT_TRUE(s.ok()) << s.message();
  const std::vector<std::vector<float>> want = {{10, 11}, {20, 21, 22}, {10, 11}};
  for (int64_t r = 0; r < 3; ++r) {
    for (size_t i = 0; i < want[r].size(); ++i) {
      EXPECT_EQ(job.scores[job.row_start(r) + static_cast<int64_t>(i)], want[r][i]) << r;
    }
  }
  // A row named twice must carry the same scores both times.
  *req.mutable_scores() = Tensor1<float>(v1::DTYPE_FLOAT32, {10, 11, 20, 21, 22, 10, 12});
  Job twice;
  const Status t = ValidateRequest(req, Limits(), &twice, &registry_);
  EXPECT_EQ(t.code(), Code::kInvalidArgument);
  EXPECT_NE(t.message().find("rows[2]"), std::string::npos) << t.message();
  EXPECT_NE(t.message().find("rows[0]"), std::string::npos) << t.message();
}

TEST_F(DatasetScoresTest, SentScoresForAllRowsAreUsedInPlace) {
  v1::SampleRequest req = Request({});
  const std::vector<float> sent = {6, 5, 4, 3, 2, 1};
  *req.mutable_scores() = Tensor1<float>(v1::DTYPE_FLOAT32, sent);
  Job job;
  const Status s = ValidateRequest(req, Limits(), &job, &registry_);
  ASSERT_TRUE(s.ok()) << s.message();
  EXPECT_EQ(std::memcmp(job.scores, sent.data(), sent.size() * sizeof(float)), 0);
}

}  // namespace
}  // namespace gpusampler::server::testing
