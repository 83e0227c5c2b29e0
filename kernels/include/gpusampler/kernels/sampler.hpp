// gpusampler::kernels public API in one include, for callers that want all of it (the server):
// the plain types (types.hpp), BatchBuilder (batch_builder.hpp) and the backend interface with
// its factories (backend.hpp). Code inside kernels/ includes the header it needs instead.
#pragma once

#include "gpusampler/kernels/backend.hpp"
#include "gpusampler/kernels/batch_builder.hpp"
#include "gpusampler/kernels/types.hpp"
