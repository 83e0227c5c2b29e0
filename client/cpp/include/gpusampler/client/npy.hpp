// A small, strict reader and writer for NumPy .npy files (format versions 1.0, 2.0 and
// 3.0), limited to what the wire format carries: C order, little-endian (or one-byte)
// elements of the dtypes in gpusampler::v1::DType other than bfloat16, which .npy cannot
// name. Anything else (Fortran order, big-endian, object or structured dtypes, a size
// that does not match the header) is an error, never a silent conversion.
#pragma once

#include <string>

#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::client {

// Reads `path` into `tensor`. Returns "" on success, else a message naming the problem.
std::string ReadNpy(const std::string& path, v1::Tensor* tensor);
// Parses the bytes of a whole .npy file. Same contract as ReadNpy.
std::string ParseNpy(const std::string& bytes, v1::Tensor* tensor);
// Writes `tensor` to `path` as a version 1.0 .npy file. Returns "" or an error message.
std::string WriteNpy(const std::string& path, const v1::Tensor& tensor);
// The bytes of a .npy file holding `tensor`, or "" with `error` set.
std::string SerializeNpy(const v1::Tensor& tensor, std::string* error);

}  // namespace gpusampler::client
