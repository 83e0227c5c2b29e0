// A small, strict reader and writer for NumPy .npy files (format versions 1.0, 2.0 and
// 3.0), limited to what the wire format carries: C order, little-endian (or one-byte)
// elements of the dtypes in gpusampler::v1::DType other than bfloat16, which .npy cannot
// name. Anything else (Fortran order, big-endian, object or structured dtypes, a size
// that does not match the header) is an error, never a silent conversion.
//
// Every function returns "" on success, else a message naming the problem.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gpusampler/v1/sampler.pb.h"

namespace gpusampler::common {

// Reads `path` into `tensor`.
std::string ReadNpy(const std::string& path, v1::Tensor* tensor);
// Parses the bytes of a whole .npy file.
std::string ParseNpy(const std::string& bytes, v1::Tensor* tensor);
// Writes `tensor` to `path` as a version 1.0 .npy file.
std::string WriteNpy(const std::string& path, const v1::Tensor& tensor);
// The bytes of a .npy file holding `tensor`, or "" with `error` set.
std::string SerializeNpy(const v1::Tensor& tensor, std::string* error);

// The steps of ParseNpy, for a reader that fetches a file's parts itself (the server's
// repository reads headers without reading the data).

// The first bytes of a file (magic, version, header length): at most this many are needed.
inline constexpr size_t kNpyPreambleBytes = 12;

// Where a file's header dict lies, from its first bytes (`start`: at least the magic, the
// version and the length field).
struct NpyPreamble {
  size_t header_start = 0;  // the dict's first byte
  size_t header_len = 0;    // the dict's length; the data starts at header_start + header_len
};
std::string ParseNpyPreamble(std::string_view start, NpyPreamble* out);

// What a header dict says: a supported dtype, C order, and the data bytes it needs.
struct NpyHeader {
  std::string descr;  // as the file spells it
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
  int64_t payload_bytes = 0;  // element size times the elements' count
};
std::string ParseNpyHeader(std::string_view dict, NpyHeader* out);

// The wire dtype of a .npy descriptor ("<i8", "|b1", also "<b1" for one-byte dtypes), or
// DTYPE_UNSPECIFIED for one the wire cannot carry.
v1::DType DTypeFromNpyDescr(std::string_view descr);

// A version 1.0 header (magic to the closing '\n') for an array of `descr` and `shape`, padded
// so that the data after it starts on a 64-byte boundary.
std::string NpyHeaderBytes(std::string_view descr, const std::vector<int64_t>& shape);

// Checks that a bool array's bytes are all 0 or 1.
std::string CheckNpyBools(std::string_view data);

}  // namespace gpusampler::common
