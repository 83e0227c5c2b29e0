#include "core/tensor_check.hpp"

#include <cctype>
#include <cstring>

namespace gpusampler::server {

using kernels::DType;

std::string ShapeString(const google::protobuf::RepeatedField<int64_t>& shape) {
  std::string s = "[";
  for (int i = 0; i < shape.size() && i < kMaxRank; ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() > kMaxRank) s += ", ... (" + std::to_string(shape.size()) + " dims)";
  return s + "]";
}

std::string UpperDTypeName(DType dtype) {
  std::string out(kernels::Traits(dtype).name);
  for (auto& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

namespace {

Status CheckDType(const v1::Tensor& t, const std::string& name) {
  const int dtype_value = static_cast<int>(t.dtype());
  if (dtype_value == 0) return InvalidArgument(name + ".dtype is DTYPE_UNSPECIFIED");
  if (kernels::DTypeSize(static_cast<DType>(dtype_value)) == 0) {
    return InvalidArgument(name + ".dtype " + std::to_string(dtype_value) +
                           " is not a known DType");
  }
  return Status::Ok();
}

// prod(shape) into `*elements`: no negative dim, at most max_message_bytes elements.
Status CheckDims(const v1::Tensor& t, const std::string& name, const Limits& limits,
                 int64_t* elements) {
  if (t.shape_size() > kMaxRank) {
    return InvalidArgument(name + ".shape has " + std::to_string(t.shape_size()) +
                           " dims, over the " + std::to_string(kMaxRank) + " allowed");
  }
  int64_t n = 1;
  for (int i = 0; i < t.shape_size(); ++i) {
    const int64_t d = t.shape(i);
    if (d < 0) {
      return InvalidArgument(name + ".shape[" + std::to_string(i) + "] = " + std::to_string(d) +
                             " is negative (shape " + ShapeString(t.shape()) + ")");
    }
    if (__builtin_mul_overflow(n, d, &n) || n > limits.max_message_bytes) {
      return LimitExceeded(name + ".shape " + ShapeString(t.shape()) +
                           " has more elements than max_message_bytes = " +
                           std::to_string(limits.max_message_bytes) + " (--max-message-bytes)");
    }
  }
  *elements = n;
  return Status::Ok();
}

}  // namespace

Status CheckTensorData(const v1::Tensor& t, const std::string& name, const Limits& limits,
                       int64_t* elements) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckDType(t, name));
  int64_t n = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckDims(t, name, limits, &n));
  const DType dtype = static_cast<DType>(static_cast<int>(t.dtype()));
  const size_t item = kernels::DTypeSize(dtype);
  int64_t want = 0;
  if (__builtin_mul_overflow(n, static_cast<int64_t>(item), &want)) {
    return InvalidArgument(name + ".shape " + ShapeString(t.shape()) + " times " +
                           std::to_string(item) + " bytes per element overflows int64");
  }
  const int64_t have = static_cast<int64_t>(t.data().size());
  if (have != want) {
    return InvalidArgument(name + ".data has " + std::to_string(have) + " bytes, expected " +
                           std::to_string(want) + " = prod(shape " + ShapeString(t.shape()) +
                           ") * " + std::to_string(item) + " (" + UpperDTypeName(dtype) + ")");
  }
  *elements = n;
  return Status::Ok();
}

Status ParseRowSplits(const v1::Tensor& splits, const Limits& limits, bool check_max_rows,
                      std::vector<int64_t>* out) {
  if (splits.dtype() != v1::DTYPE_INT64) {
    return InvalidArgument("row_splits.dtype must be DTYPE_INT64, got " +
                           v1::DType_Name(splits.dtype()));
  }
  if (splits.shape_size() != 1 || splits.shape(0) < 1) {
    return InvalidArgument("row_splits.shape " + ShapeString(splits.shape()) +
                           " must be [B+1] with B >= 0");
  }
  int64_t n = 0;
  GPUSAMPLER_RETURN_IF_ERROR(CheckTensorData(splits, "row_splits", limits, &n));
  if (check_max_rows && n - 1 > limits.max_rows) {
    return LimitExceeded("row_splits has " + std::to_string(n - 1) + " rows, over max_rows = " +
                         std::to_string(limits.max_rows) + " (--max-rows)");
  }
  // Copied out: the bytes of a protobuf string need not be 8-byte aligned.
  out->resize(static_cast<size_t>(n));
  std::memcpy(out->data(), splits.data().data(), static_cast<size_t>(n) * sizeof(int64_t));
  return CheckRowSplitsOrder(*out);
}

Status CheckRowSplitsOrder(const std::vector<int64_t>& v) {
  if (v[0] != 0) {
    return InvalidArgument("row_splits[0] = " + std::to_string(v[0]) + ", must be 0");
  }
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] < v[i - 1]) {
      return InvalidArgument("row_splits[" + std::to_string(i) + "] = " + std::to_string(v[i]) +
                             " < row_splits[" + std::to_string(i - 1) +
                             "] = " + std::to_string(v[i - 1]) + " (must be non-decreasing)");
    }
  }
  return Status::Ok();
}

Status CheckBoolLabels(const uint8_t* bytes, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (bytes[i] > 1) {
      return InvalidArgument("labels.data[" + std::to_string(i) +
                             "] = " + std::to_string(bytes[i]) + " is not a BOOL (0 or 1)");
    }
  }
  return Status::Ok();
}

}  // namespace gpusampler::server
