// Helpers for gpusampler::v1::Tensor (element sizes, names and typed construction): the shared
// views in gpusampler/common/tensor.hpp, under the client's namespace.
#pragma once

#include "gpusampler/common/tensor.hpp"

namespace gpusampler::client {

using common::DTypeName;
using common::DTypeOf;
using common::DTypeSize;
using common::MakeTensor;
using common::NumElements;
using common::TensorValues;

}  // namespace gpusampler::client
