// gpusampler-cli's class syntax (ParseClassFlag, ParseFillOrderFlag): each item on the wire,
// and every malformed form refused with a message naming it.
#include <gtest/gtest.h>

#include <string>

#include "gpusampler/client/client.hpp"

namespace gpusampler::client {
namespace {

TEST(ClassFlag, ReadsRangesSharesAndSelections) {
  v1::ClassSpec c;
  ASSERT_EQ(ParseClassFlag("labels=1:80/-5:-3/7,fraction=0.25", &c), "");
  ASSERT_EQ(c.labels_size(), 3);
  EXPECT_EQ(c.labels(0).lo(), 1);
  EXPECT_EQ(c.labels(0).hi(), 80);
  EXPECT_EQ(c.labels(1).lo(), -5);
  EXPECT_EQ(c.labels(1).hi(), -3);
  EXPECT_EQ(c.labels(2).lo(), 7);
  EXPECT_EQ(c.labels(2).hi(), 7);
  EXPECT_EQ(c.share_case(), v1::ClassSpec::kFraction);
  EXPECT_EQ(c.fraction(), 0.25);
  EXPECT_EQ(c.selection(), v1::SELECTION_UNSPECIFIED);
  EXPECT_FALSE(c.has_hard_fraction());

  ASSERT_EQ(ParseClassFlag("labels=0:0,rest,selection=mixed,hard_fraction=0.5", &c), "");
  EXPECT_EQ(c.share_case(), v1::ClassSpec::kRest);
  EXPECT_TRUE(c.rest());
  EXPECT_EQ(c.selection(), v1::SELECTION_MIXED);
  EXPECT_EQ(c.hard_fraction(), 0.5);

  ASSERT_EQ(ParseClassFlag("count=0,labels=-1,selection=weighted", &c), "");
  EXPECT_EQ(c.share_case(), v1::ClassSpec::kCount);
  EXPECT_EQ(c.count(), 0);
  EXPECT_EQ(c.labels(0).lo(), -1);
  EXPECT_EQ(c.selection(), v1::SELECTION_WEIGHTED);
  ASSERT_EQ(ParseClassFlag("labels=2,rest=true,selection=hardest", &c), "");
  EXPECT_EQ(c.selection(), v1::SELECTION_HARDEST);
}

TEST(ClassFlag, RefusesMalformedClasses) {
  const std::pair<const char*, const char*> cases[] = {
      {"fraction=0.5", "labels=... is required"},
      {"labels=1", "exactly one of count=N, fraction=F and rest (got 0)"},
      {"labels=1,count=2,rest", "(got 2)"},
      {"labels=1:x,rest", "labels: '1:x'"},
      {"labels=,rest", "labels: ''"},
      {"labels=1,count=2.5", "count: '2.5'"},
      {"labels=1,fraction=half", "fraction: 'half'"},
      {"labels=1,rest,selection=random", "selection: 'random'"},
      {"labels=1,rest,colour=red", "unknown key 'colour'"},
      {"labels=1,rest,hard_fraction", "'hard_fraction' is not KEY=VALUE"},
  };
  for (const auto& [text, words] : cases) {
    v1::ClassSpec c;
    const std::string error = ParseClassFlag(text, &c);
    EXPECT_NE(error.find(words), std::string::npos) << text << ": " << error;
    EXPECT_NE(error.find(text), std::string::npos) << error;
  }
}

TEST(FillOrderFlag, ReadsIndices) {
  v1::SamplingSpec spec;
  ASSERT_EQ(ParseFillOrderFlag("1,0,3", &spec), "");
  ASSERT_EQ(spec.fill_order_size(), 3);
  EXPECT_EQ(spec.fill_order(0), 1);
  EXPECT_EQ(spec.fill_order(2), 3);
  ASSERT_EQ(ParseFillOrderFlag("", &spec), "");
  EXPECT_EQ(spec.fill_order_size(), 0);
  EXPECT_NE(ParseFillOrderFlag("1,,0", &spec).find("'' is not a class index"), std::string::npos);
  EXPECT_NE(ParseFillOrderFlag("4294967296", &spec).find("not a class index"), std::string::npos);
}

}  // namespace
}  // namespace gpusampler::client
