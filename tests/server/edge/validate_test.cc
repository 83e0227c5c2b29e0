// Every row of SPEC section 3 that validation owns: the status code, and a message that
// names the field and the numbers.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "edge/validate.hpp"
#include "test_util.hpp"

namespace gpusampler::server::testing {
namespace {

struct Case {
  std::string name;
  std::function<void(v1::SampleRequest*)> mutate;
  grpc::StatusCode code;
  std::string message;  // a substring the message must contain
};

v1::SampleRequest Base() {
  RequestSpec r;
  r.rows = {RandomRow(100, 1), RandomRow(100, 2)};
  r.num_samples = 10;
  r.feature_dim = 4;
  return MakeRequest(r);
}

void SetInt64s(v1::Tensor* t, std::vector<int64_t> shape, std::vector<int64_t> values) {
  t->set_dtype(v1::DTYPE_INT64);
  t->mutable_shape()->Assign(shape.begin(), shape.end());
  t->set_data(std::string(reinterpret_cast<const char*>(values.data()), values.size() * 8));
}

// Limits small enough to reach with small requests.
ServerConfig LimitsConfig() {
  ServerConfig c = TestConfig();
  c.limits.max_message_bytes = 1 << 20;
  c.limits.max_rows = 8;
  c.limits.max_elements = 5000;
  c.limits.max_row_elements = 3000;
  c.limits.max_num_samples = 500;
  return c;
}

const grpc::StatusCode kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
const grpc::StatusCode kExhausted = grpc::StatusCode::RESOURCE_EXHAUSTED;

// The call's `grpc-retry-pushback-ms` trailer, "" when absent.
std::string PushbackOf(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  const auto it = md.find("grpc-retry-pushback-ms");
  return it == md.end() ? "" : std::string(it->second.data(), it->second.size());
}

std::vector<Case> Cases() {
  return {
      {"labels dtype unspecified",
       [](auto* r) { r->mutable_labels()->set_dtype(v1::DTYPE_UNSPECIFIED); }, kInvalid,
       "labels.dtype is DTYPE_UNSPECIFIED"},
      {"labels dtype unknown",
       [](auto* r) { r->mutable_labels()->set_dtype(static_cast<v1::DType>(42)); }, kInvalid,
       "labels.dtype 42 is not a known DType"},
      {"labels dtype float", [](auto* r) { r->mutable_labels()->set_dtype(v1::DTYPE_FLOAT64); },
       kInvalid, "labels.dtype FLOAT64 is not an integer or BOOL dtype"},
      {"labels data short", [](auto* r) { r->mutable_labels()->mutable_data()->resize(1592); },
       kInvalid, "labels.data has 1592 bytes, expected 1600 = prod(shape [2, 100]) * 8 (INT64)"},
      {"labels negative dim", [](auto* r) { r->mutable_labels()->set_shape(0, -2); }, kInvalid,
       "labels.shape[0] = -2 is negative"},
      {"labels rank 3",
       [](auto* r) {
         r->mutable_labels()->set_shape(1, 50);
         r->mutable_labels()->add_shape(2);
       },
       kInvalid, "labels.shape [2, 50, 2] must be [N] or [B, N]"},
      {"labels rank 0",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->mutable_data()->resize(8);
       },
       kInvalid, "labels.shape [] must be [N] or [B, N]"},
      {"bool not 0/1",
       [](auto* r) {
         auto* l = r->mutable_labels();
         l->set_dtype(v1::DTYPE_BOOL);
         l->set_data(std::string(200, '\1'));
         (*l->mutable_data())[7] = 2;
       },
       kInvalid, "labels.data[7] = 2 is not a BOOL (0 or 1)"},
      {"positive label not representable",
       [](auto* r) {
         auto* l = r->mutable_labels();
         l->set_dtype(v1::DTYPE_INT8);
         l->set_data(std::string(200, '\0'));
         r->mutable_spec()->set_positive_label(300);
       },
       kInvalid, "spec.positive_label = 300 is not representable in labels dtype INT8"},
      {"negative label not representable in bool",
       [](auto* r) {
         auto* l = r->mutable_labels();
         l->set_dtype(v1::DTYPE_BOOL);
         l->set_data(std::string(200, '\0'));
         r->mutable_spec()->set_negative_label(-1);
       },
       kInvalid, "spec.negative_label = -1 is not representable in labels dtype BOOL"},
      {"num_samples 0", [](auto* r) { r->mutable_spec()->set_num_samples(0); }, kInvalid,
       "spec.num_samples = 0, must be >= 1"},
      {"num_samples negative", [](auto* r) { r->mutable_spec()->set_num_samples(-5); }, kInvalid,
       "spec.num_samples = -5, must be >= 1"},
      {"fraction above 1", [](auto* r) { r->mutable_spec()->set_positive_fraction(1.5); }, kInvalid,
       "spec.positive_fraction = 1.5"},
      // The exact value, not a rounded "1" (issue 31).
      {"fraction just above 1",
       [](auto* r) { r->mutable_spec()->set_positive_fraction(1.0000001); }, kInvalid,
       "spec.positive_fraction = 1.0000001 is outside [0, 1]"},
      {"fraction a hair above 1",
       [](auto* r) { r->mutable_spec()->set_positive_fraction(1.0000000000000002); }, kInvalid,
       "spec.positive_fraction = 1.0000000000000002 is outside [0, 1]"},
      {"fraction negative", [](auto* r) { r->mutable_spec()->set_positive_fraction(-0.1); },
       kInvalid, "spec.positive_fraction = -0.1"},
      {"fraction NaN",
       [](auto* r) {
         r->mutable_spec()->set_positive_fraction(std::numeric_limits<double>::quiet_NaN());
       },
       kInvalid, "spec.positive_fraction = nan is outside [0, 1]"},
      {"equal labels",
       [](auto* r) {
         r->mutable_spec()->set_positive_label(3);
         r->mutable_spec()->set_negative_label(3);
       },
       kInvalid, "spec.positive_label and spec.negative_label are both 3"},
      {"unknown fill policy",
       [](auto* r) { r->mutable_spec()->set_fill_policy(static_cast<v1::FillPolicy>(9)); },
       kInvalid, "spec.fill_policy 9 is not a known FillPolicy"},
      {"row_splits with 2-d labels",
       [](auto* r) {
         SetInt64s(r->mutable_row_splits(), {3}, {0, 100, 200});
       },
       kInvalid, "labels.shape [2, 100] must be [total] when row_splits is given"},
      {"row_splits dtype",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {3}, {0, 100, 200});
         r->mutable_row_splits()->set_dtype(v1::DTYPE_INT32);
       },
       kInvalid, "row_splits.dtype must be DTYPE_INT64, got DTYPE_INT32"},
      {"row_splits not starting at 0",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {3}, {5, 100, 200});
       },
       kInvalid, "row_splits[0] = 5, must be 0"},
      {"row_splits decreasing",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {4}, {0, 120, 80, 200});
       },
       kInvalid, "row_splits[2] = 80 < row_splits[1] = 120"},
      {"row_splits wrong total",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {3}, {0, 100, 199});
       },
       kInvalid, "row_splits[2] = 199, must equal the 200 labels elements"},
      {"row_splits empty",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {0}, {});
       },
       kInvalid, "row_splits.shape [0] must be [B+1]"},
      {"row_splits data size",
       [](auto* r) {
         r->mutable_labels()->clear_shape();
         r->mutable_labels()->add_shape(200);
         r->clear_features();
         SetInt64s(r->mutable_row_splits(), {3}, {0, 100});
       },
       kInvalid, "row_splits.data has 16 bytes, expected 24"},
      {"features leading dims", [](auto* r) { r->mutable_features()->set_shape(1, 99); }, kInvalid,
       "features.shape [2, 99, 4] must start with the labels' shape [2, 100]"},
      {"features size", [](auto* r) { r->mutable_features()->mutable_data()->resize(10); },
       kInvalid,
       "features.data has 10 bytes, expected 3200 = prod(shape [2, 100, 4]) * 4 (FLOAT32)"},
      {"features dtype unspecified",
       [](auto* r) { r->mutable_features()->set_dtype(v1::DTYPE_UNSPECIFIED); }, kInvalid,
       "features.dtype is DTYPE_UNSPECIFIED"},
      // Limits: RESOURCE_EXHAUSTED.
      {"num_samples over limit", [](auto* r) { r->mutable_spec()->set_num_samples(501); },
       kExhausted, "spec.num_samples = 501 exceeds max_num_samples = 500 (--max-num-samples)"},
      {"rows over limit",
       [](auto* r) {
         r->clear_features();
         auto* l = r->mutable_labels();
         l->set_shape(0, 9);
         l->set_shape(1, 10);
         l->mutable_data()->resize(9 * 10 * 8);
       },
       kExhausted, "labels has 9 rows, over max_rows = 8 (--max-rows)"},
      {"ragged rows over limit",
       [](auto* r) {
         r->clear_features();
         auto* l = r->mutable_labels();
         l->clear_shape();
         l->add_shape(9);
         l->mutable_data()->resize(9 * 8);
         SetInt64s(r->mutable_row_splits(), {10}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
       },
       kExhausted, "row_splits has 9 rows, over max_rows = 8 (--max-rows)"},
      {"elements over limit",
       [](auto* r) {
         r->clear_features();
         auto* l = r->mutable_labels();
         l->set_shape(0, 2);
         l->set_shape(1, 2501);
         l->mutable_data()->resize(5002 * 8);
       },
       kExhausted, "labels has 5002 elements, over max_elements = 5000 (--max-elements)"},
      {"row elements over limit",
       [](auto* r) {
         r->clear_features();
         auto* l = r->mutable_labels();
         l->clear_shape();
         l->add_shape(3001);
         l->mutable_data()->resize(3001 * 8);
       },
       kExhausted,
       "labels row 0 has 3001 elements, over max_row_elements = 3000 (--max-row-elements)"},
      {"response over limit",
       [](auto* r) {
         r->mutable_spec()->set_num_samples(500);
         auto* f = r->mutable_features();
         f->set_shape(2, 300);
         f->mutable_data()->resize(2 * 100 * 300 * 4);
         f->set_dtype(v1::DTYPE_FLOAT32);
       },
       kExhausted,
       "response would have 1217040 bytes (B 2 * K 500 * (8 + 8 + 1200) + request_id 0 + "
       "framing), over "
       "max_message_bytes = 1048576 (--max-message-bytes)"},
      {"shape overflow",
       [](auto* r) {
         auto* l = r->mutable_labels();
         l->set_shape(0, int64_t{1} << 40);
         l->set_shape(1, int64_t{1} << 40);
       },
       kExhausted, "labels.shape [1099511627776, 1099511627776] has more elements than"},
  };
}

TEST(ValidationTest, EverySpecRowGetsItsStatusAndAPreciseMessage) {
  auto t = StartServer(LimitsConfig());
  {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, Base(), &resp);
    ASSERT_TRUE(s.ok()) << "the base request must be valid: " << s.error_message();
  }
  const int64_t launches = t.server->scheduler().launches();
  for (const auto& c : Cases()) {
    v1::SampleRequest req = Base();
    c.mutate(&req);
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos)
        << c.name << ": got \"" << s.error_message() << "\", want \"" << c.message << "\"";
    // A limit error tells gRPC's retry policy not to retry; bad input carries no pushback.
    EXPECT_EQ(PushbackOf(ctx), c.code == kExhausted ? "-1" : "") << c.name;
  }
  // Refused at the edge: nothing reached a worker.
  EXPECT_EQ(t.server->scheduler().launches(), launches);
  // And the server keeps serving.
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_TRUE(t.stub->Sample(&ctx, Base(), &resp).ok());
}

TEST(ValidationTest, RequestOverMaxMessageBytesNamesTheFlagAndIsNotRetried) {
  auto t = StartServer(LimitsConfig());
  RequestSpec r;
  r.rows = {RandomRow(2000, 1)};
  r.feature_dim = 200;  // 1.6 MB of features > 1 MiB, below the transport's 2 MiB
  const v1::SampleRequest request = MakeRequest(r);
  for (bool stream : {false, true}) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    grpc::Status s;
    if (stream) {
      auto call = t.stub->SampleStream(&ctx);
      call->Write(request);
      call->WritesDone();
      EXPECT_FALSE(call->Read(&resp));
      s = call->Finish();
    } else {
      s = t.stub->Sample(&ctx, request, &resp);
    }
    EXPECT_EQ(s.error_code(), kExhausted) << s.error_message();
    EXPECT_NE(s.error_message().find("request has " + std::to_string(request.ByteSizeLong()) +
                                     " bytes, over max_message_bytes = 1048576 "
                                     "(--max-message-bytes)"),
              std::string::npos)
        << s.error_message();
    EXPECT_EQ(PushbackOf(ctx), "-1");
  }
  EXPECT_EQ(t.server->scheduler().launches(), 0);
}

TEST(ValidationTest, TransportLimitIsAQuarterAboveTheFlag) {
  EXPECT_EQ(TransportMessageLimit(1 << 20), 2 << 20);  // at least 1 MiB of margin
  EXPECT_EQ(TransportMessageLimit(64 << 20), 80 << 20);
  EXPECT_EQ(TransportMessageLimit(std::numeric_limits<int>::max()),
            std::numeric_limits<int>::max());
  EXPECT_EQ(TransportMessageLimit(std::numeric_limits<int>::max() - 5),
            std::numeric_limits<int>::max());
}

// Labels INT64 [0] with features FLOAT32 [0, d1, d2] and no data: the shape passes the element
// count (0), so only checked arithmetic on the feature row and the response size stops it.
v1::SampleRequest HugeFeatureRowRequest(int64_t d1, int64_t d2, int64_t k) {
  v1::SampleRequest req;
  req.mutable_spec()->set_num_samples(k);
  req.set_seed(1);
  req.mutable_labels()->set_dtype(v1::DTYPE_INT64);
  req.mutable_labels()->add_shape(0);
  auto* f = req.mutable_features();
  f->set_dtype(v1::DTYPE_FLOAT32);
  f->add_shape(0);
  f->add_shape(d1);
  f->add_shape(d2);
  return req;
}

TEST(ValidationTest, OverflowingFeatureShapesAreRefusedAndServingGoesOn) {
  auto t = StartServer(TestConfig());
  struct Overflow {
    int64_t d1, d2, k;
    grpc::StatusCode code;
    std::string message;
  };
  const int64_t g = int64_t{1} << 30;
  const int64_t t40 = int64_t{1} << 40;
  for (const Overflow& c : std::vector<Overflow>{
           // The reported crash: a 2^62-byte feature row, K 8: the response size overflows.
           {g, g, 8, kInvalid, "response size (B 1 * K 8 * (8 + 8 + 4611686018427387904)"},
           // K 1: no overflow, just far over the limit.
           {g, g, 1, kExhausted, "response would have 4611686018427388952 bytes"},
           // The feature row itself overflows.
           {t40, t40, 1, kInvalid,
            "features.shape [0, 1099511627776, 1099511627776]: one feature row"},
       }) {
    grpc::ClientContext ctx;
    v1::SampleResponse resp;
    const grpc::Status s = t.stub->Sample(&ctx, HugeFeatureRowRequest(c.d1, c.d2, c.k), &resp);
    EXPECT_EQ(s.error_code(), c.code) << s.error_message();
    EXPECT_NE(s.error_message().find(c.message), std::string::npos) << s.error_message();
  }
  EXPECT_EQ(t.server->scheduler().launches(), 0);
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  EXPECT_TRUE(t.stub->Sample(&ctx, Base(), &resp).ok());
}

TEST(ValidationTest, HugeRequestIdCountsTowardsTheResponseSize) {
  auto t = StartServer(LimitsConfig());
  v1::SampleRequest req = Base();
  req.mutable_spec()->set_num_samples(500);       // 32000 bytes of outputs
  req.set_request_id(std::string(1028576, 'x'));  // the request still fits in 1 MiB
  ASSERT_LT(req.ByteSizeLong(), size_t{1} << 20);
  grpc::ClientContext ctx;
  v1::SampleResponse resp;
  const grpc::Status s = t.stub->Sample(&ctx, req, &resp);
  EXPECT_EQ(s.error_code(), kExhausted) << s.error_message();
  EXPECT_NE(s.error_message().find("request_id 1028576"), std::string::npos) << s.error_message();
  EXPECT_NE(s.error_message().find("over max_message_bytes = 1048576"), std::string::npos);
  EXPECT_EQ(t.server->scheduler().launches(), 0);
}

TEST(ValidationTest, StreamRequestsAreValidatedToo) {
  auto t = StartServer(LimitsConfig());
  grpc::ClientContext ctx;
  auto stream = t.stub->SampleStream(&ctx);
  v1::SampleRequest req = Base();
  req.mutable_spec()->set_num_samples(501);
  stream->Write(req);
  stream->WritesDone();
  v1::SampleResponse resp;
  EXPECT_FALSE(stream->Read(&resp));
  const grpc::Status s = stream->Finish();
  EXPECT_EQ(s.error_code(), kExhausted);
  EXPECT_NE(s.error_message().find("max_num_samples = 500"), std::string::npos);
}

// Requests and dataset uploads parse row_splits with one function (ParseRowSplits): the same
// checks and words, --max-rows only for a request's rows.
TEST(ValidationTest, RowSplitsAreParsedOnceForRequestsAndUploads) {
  Limits limits;
  limits.max_rows = 2;
  struct Case {
    const char* name;
    std::vector<int64_t> shape, values;
    bool check_max_rows;
    grpc::StatusCode code;
    std::string message;  // a prefix of the status message; empty: OK
  };
  const Case cases[] = {
      {"ok", {3}, {0, 1, 3}, true, grpc::StatusCode::OK, ""},
      {"empty",
       {0},
       {},
       false,
       grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits.shape [0] must be [B+1] with B >= 0"},
      {"2-D",
       {1, 2},
       {0, 1},
       false,
       grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits.shape [1, 2] must be [B+1]"},
      {"data size",
       {3},
       {0, 1},
       false,
       grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits.data has 16 bytes, expected 24"},
      {"not from 0",
       {2},
       {1, 2},
       false,
       grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits[0] = 1, must be 0"},
      {"decreasing",
       {3},
       {0, 2, 1},
       false,
       grpc::StatusCode::INVALID_ARGUMENT,
       "row_splits[2] = 1 < row_splits[1] = 2"},
      {"request over max_rows",
       {4},
       {0, 1, 2, 3},
       true,
       grpc::StatusCode::RESOURCE_EXHAUSTED,
       "row_splits has 3 rows, over max_rows = 2 (--max-rows)"},
      {"dataset over max_rows", {4}, {0, 1, 2, 3}, false, grpc::StatusCode::OK, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    v1::Tensor t;
    SetInt64s(&t, c.shape, c.values);
    std::vector<int64_t> splits;
    const Status s = ParseRowSplits(t, limits, c.check_max_rows, &splits);
    EXPECT_EQ(static_cast<int>(s.code()), static_cast<int>(c.code)) << s.message();
    EXPECT_EQ(s.message().substr(0, c.message.size()), c.message);
    if (s.ok()) EXPECT_EQ(splits, c.values);
  }
  v1::Tensor int32_splits;
  SetInt64s(&int32_splits, {2}, {0, 1});
  int32_splits.set_dtype(v1::DTYPE_INT32);
  std::vector<int64_t> splits;
  EXPECT_EQ(ParseRowSplits(int32_splits, limits, false, &splits).message(),
            "row_splits.dtype must be DTYPE_INT64, got DTYPE_INT32");
}

}  // namespace
}  // namespace gpusampler::server::testing
