// core/status: the one mapping of an exception to a Status (FromCurrentException), table by
// table, and GPUSAMPLER_RETURN_IF_ERROR returning the first error.
#include "core/status.hpp"

#include <gtest/gtest.h>

#include <new>
#include <stdexcept>
#include <string>

namespace gpusampler::server::testing {
namespace {

template <typename E>
Status Mapped(const E& exception, bool* device_fault = nullptr) {
  try {
    throw exception;
  } catch (...) {
    return FromCurrentException("ctx", device_fault);
  }
}

TEST(StatusTest, EveryExceptionMapsToItsOneCode) {
  using K = kernels::Error::Code;
  struct Case {
    K code;
    Code want;
    bool device_fault;
  };
  for (const Case& c : {Case{K::kInvalidArgument, Code::kInvalidArgument, false},
                        Case{K::kOutOfMemory, Code::kResourceExhausted, false},
                        Case{K::kDeviceFault, Code::kUnavailable, true},
                        Case{K::kUnavailable, Code::kUnavailable, false},
                        Case{K::kInternal, Code::kInternal, false}}) {
    bool device_fault = !c.device_fault;
    const Status s = Mapped(kernels::Error(c.code, "boom"), &device_fault);
    EXPECT_EQ(s.code(), c.want) << s.message();
    EXPECT_EQ(device_fault, c.device_fault) << s.message();
    EXPECT_EQ(s.message().rfind("ctx: ", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("boom"), std::string::npos) << s.message();
    EXPECT_EQ(s.retry_pushback_ms(), kNoPushback);
  }
  EXPECT_EQ(Mapped(std::bad_alloc()).code(), Code::kResourceExhausted);
  const Status other = Mapped(std::runtime_error("odd"));
  EXPECT_EQ(other.code(), Code::kInternal);
  EXPECT_EQ(other.message(), "ctx: odd");
  EXPECT_EQ(Mapped(42).code(), Code::kInternal);
  try {
    throw std::logic_error("bare");
  } catch (...) {
    EXPECT_EQ(FromCurrentException().message(), "bare");  // no context, no prefix
  }
}

Status Step(bool fail, int* ran) {
  ++*ran;
  return fail ? InvalidArgument("step " + std::to_string(*ran)) : Status::Ok();
}

Status Steps(bool fail_second, int* ran) {
  GPUSAMPLER_RETURN_IF_ERROR(Step(false, ran));
  GPUSAMPLER_RETURN_IF_ERROR(Step(fail_second, ran));
  GPUSAMPLER_RETURN_IF_ERROR(Step(true, ran));
  return Status::Ok();
}

TEST(StatusTest, ReturnIfErrorReturnsTheFirstErrorAndEvaluatesOnce) {
  int ran = 0;
  Status s = Steps(/*fail_second=*/true, &ran);
  EXPECT_EQ(ran, 2);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "step 2");
  ran = 0;
  s = Steps(/*fail_second=*/false, &ran);
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(s.message(), "step 3");
}

}  // namespace
}  // namespace gpusampler::server::testing
