// .npy reading and writing for client code: the shared implementation in
// gpusampler/common/npy.hpp, under the client's namespace.
#pragma once

#include "gpusampler/common/npy.hpp"

namespace gpusampler::client {

using common::ParseNpy;
using common::ReadNpy;
using common::SerializeNpy;
using common::WriteNpy;

}  // namespace gpusampler::client
