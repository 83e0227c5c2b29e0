// The CUDA error path (cuda/error.cuh), which needs no device: a failed call's error is also
// the thread's last error, and a non-sticky one (out of memory) must be cleared before the
// throw, or the next launch check on that thread (the request the server reruns alone after
// out-of-memory) reports it again. A sticky error cannot be cleared and is not touched.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>

#include "cuda/error.cuh"

namespace gpusampler::kernels::detail {
namespace {

int g_clears = 0;
cudaError_t RecordClear() {
  ++g_clears;
  return cudaSuccess;
}

Error Thrown(cudaError_t status) {
  try {
    ThrowCudaError(status, "cudaMallocAsync(&arena, bytes, stream_)", "f.cu", 7, &RecordClear);
  } catch (const Error& e) {
    return e;
  }
  return Error(Error::Code::kInternal, "nothing thrown");
}

TEST(CudaErrorTest, NonStickyErrorsAreClearedBeforeTheThrow) {
  for (cudaError_t status : {cudaErrorMemoryAllocation, cudaErrorInvalidValue,
                             cudaErrorInvalidConfiguration, cudaErrorNotReady}) {
    SCOPED_TRACE(cudaGetErrorName(status));
    g_clears = 0;
    const Error e = Thrown(status);
    EXPECT_EQ(g_clears, 1);
    EXPECT_EQ(e.code(), status == cudaErrorMemoryAllocation ? Error::Code::kOutOfMemory
                                                            : Error::Code::kInternal);
    EXPECT_NE(std::string(e.what()).find("f.cu:7: cudaMallocAsync"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find(cudaGetErrorName(status)), std::string::npos);
  }
}

TEST(CudaErrorTest, StickyErrorsAreDeviceFaultsAndLeftAlone) {
  for (cudaError_t status : {cudaErrorIllegalAddress, cudaErrorLaunchFailure, cudaErrorAssert,
                             cudaErrorECCUncorrectable}) {
    SCOPED_TRACE(cudaGetErrorName(status));
    g_clears = 0;
    EXPECT_EQ(Thrown(status).code(), Error::Code::kDeviceFault);
    EXPECT_EQ(g_clears, 0);
  }
}

// The one sticky list names each error as the runtime does (stream callbacks report these
// names without calling CUDA), and classifies each as a device fault.
TEST(CudaErrorTest, TheStickyListNamesEachErrorAsTheRuntimeDoes) {
  for (const StickyCudaError& sticky : kStickyCudaErrors) {
    EXPECT_STREQ(sticky.name, cudaGetErrorName(sticky.status));
    EXPECT_TRUE(IsStickyCudaError(sticky.status)) << sticky.name;
    EXPECT_EQ(CudaErrorCode(sticky.status), Error::Code::kDeviceFault) << sticky.name;
  }
  EXPECT_FALSE(IsStickyCudaError(cudaErrorMemoryAllocation));
  EXPECT_FALSE(IsStickyCudaError(cudaSuccess));
}

}  // namespace
}  // namespace gpusampler::kernels::detail
