#include "gpusampler/client/npy.hpp"

#include <cctype>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "gpusampler/client/tensor.hpp"

namespace gpusampler::client {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

struct DescrEntry {
  const char* descr;
  v1::DType dtype;
};
// The spellings NumPy writes for the wire dtypes. One-byte types carry no byte order
// ('|'); '<' is accepted for them too. Big-endian ('>') and native ('=') are rejected.
constexpr DescrEntry kDescrs[] = {
    {"|b1", v1::DTYPE_BOOL},    {"<b1", v1::DTYPE_BOOL},    {"|i1", v1::DTYPE_INT8},
    {"<i1", v1::DTYPE_INT8},    {"|u1", v1::DTYPE_UINT8},   {"<u1", v1::DTYPE_UINT8},
    {"<i2", v1::DTYPE_INT16},   {"<i4", v1::DTYPE_INT32},   {"<i8", v1::DTYPE_INT64},
    {"<f2", v1::DTYPE_FLOAT16}, {"<f4", v1::DTYPE_FLOAT32}, {"<f8", v1::DTYPE_FLOAT64},
};

// Parser for the header: a Python dict literal with the keys descr, fortran_order, shape.
class HeaderParser {
 public:
  explicit HeaderParser(std::string_view text) : text_(text) {}

  std::string Parse(std::string* descr, bool* fortran_order, std::vector<int64_t>* shape) {
    bool have_descr = false, have_order = false, have_shape = false;
    SkipSpace();
    if (!Consume('{')) return "header is not a dict";
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::string key;
      if (!ParseString(&key)) return "bad key in header";
      SkipSpace();
      if (!Consume(':')) return "missing ':' after '" + key + "'";
      SkipSpace();
      if (key == "descr") {
        if (!ParseString(descr)) return "descr is not a string (structured dtypes are unsupported)";
        have_descr = true;
      } else if (key == "fortran_order") {
        if (text_.substr(pos_, 4) == "True") {
          *fortran_order = true;
          pos_ += 4;
        } else if (text_.substr(pos_, 5) == "False") {
          *fortran_order = false;
          pos_ += 5;
        } else {
          return "fortran_order is not True or False";
        }
        have_order = true;
      } else if (key == "shape") {
        std::string error = ParseShape(shape);
        if (!error.empty()) return error;
        have_shape = true;
      } else {
        return "unexpected header key '" + key + "'";
      }
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume('}')) break;
      return "expected ',' or '}' in header";
    }
    SkipSpace();
    if (pos_ != text_.size()) return "trailing bytes after header dict";
    if (!have_descr || !have_order || !have_shape) {
      return "header lacks one of descr, fortran_order, shape";
    }
    return "";
  }

 private:
  void SkipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool Consume(char c) {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool ParseString(std::string* out) {
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) return false;
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string_view::npos) return false;
    *out = std::string(text_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return true;
  }
  std::string ParseShape(std::vector<int64_t>* shape) {
    shape->clear();
    if (!Consume('(')) return "shape is not a tuple";
    while (true) {
      SkipSpace();
      if (Consume(')')) return "";
      if (pos_ >= text_.size() || !std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        return "shape holds a non-integer";
      }
      int64_t value = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        int digit = text_[pos_++] - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) {
          return "shape dimension overflows int64";
        }
        value = value * 10 + digit;
      }
      // NumPy writes "3L" in files from Python 2.
      Consume('L');
      shape->push_back(value);
      SkipSpace();
      if (Consume(',')) continue;
      SkipSpace();
      if (Consume(')')) return "";
      return "expected ',' or ')' in shape";
    }
  }

  std::string_view text_;
  size_t pos_ = 0;
};

uint32_t ReadLe(const std::string& bytes, size_t offset, int width) {
  uint32_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return value;
}

}  // namespace

std::string ParseNpy(const std::string& bytes, v1::Tensor* tensor) {
  if (bytes.size() < kMagicSize + 4 || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0) {
    return "not a .npy file (bad magic)";
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor);
  }
  const int len_width = major == 1 ? 2 : 4;
  const size_t header_start = 8 + len_width;
  if (bytes.size() < header_start) return "truncated .npy header";
  const size_t header_len = ReadLe(bytes, 8, len_width);
  if (bytes.size() < header_start + header_len) return "truncated .npy header";

  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
  std::string error = HeaderParser(std::string_view(bytes).substr(header_start, header_len))
                          .Parse(&descr, &fortran_order, &shape);
  if (!error.empty()) return ".npy header: " + error;
  if (fortran_order) return "Fortran-order .npy is unsupported; save a C-order array";
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  for (const DescrEntry& entry : kDescrs) {
    if (descr == entry.descr) dtype = entry.dtype;
  }
  if (dtype == v1::DTYPE_UNSPECIFIED) {
    return "unsupported .npy dtype '" + descr +
           "' (need little-endian bool, int8/16/32/64, uint8 or float16/32/64)";
  }

  const size_t item = DTypeSize(dtype);
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / item / static_cast<uint64_t>(d)) {
      return ".npy shape overflows";
    }
    count *= static_cast<uint64_t>(d);
  }
  const size_t payload = bytes.size() - header_start - header_len;
  if (payload != count * item) {
    return ".npy data is " + std::to_string(payload) + " bytes; shape and dtype need " +
           std::to_string(count * item);
  }
  tensor->Clear();
  tensor->set_dtype(dtype);
  for (int64_t d : shape) tensor->add_shape(d);
  tensor->set_data(bytes.substr(header_start + header_len));
  if (dtype == v1::DTYPE_BOOL) {
    for (char c : tensor->data()) {
      if (c != 0 && c != 1) return ".npy bool array holds a byte other than 0 or 1";
    }
  }
  return "";
}

std::string ReadNpy(const std::string& path, v1::Tensor* tensor) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return "cannot read " + path;
  std::string error = ParseNpy(bytes, tensor);
  return error.empty() ? "" : path + ": " + error;
}

std::string SerializeNpy(const v1::Tensor& tensor, std::string* error) {
  const char* descr = nullptr;
  switch (tensor.dtype()) {
    case v1::DTYPE_BOOL:
      descr = "|b1";
      break;
    case v1::DTYPE_INT8:
      descr = "|i1";
      break;
    case v1::DTYPE_UINT8:
      descr = "|u1";
      break;
    case v1::DTYPE_INT16:
      descr = "<i2";
      break;
    case v1::DTYPE_INT32:
      descr = "<i4";
      break;
    case v1::DTYPE_INT64:
      descr = "<i8";
      break;
    case v1::DTYPE_FLOAT16:
      descr = "<f2";
      break;
    case v1::DTYPE_FLOAT32:
      descr = "<f4";
      break;
    case v1::DTYPE_FLOAT64:
      descr = "<f8";
      break;
    default:
      *error = "dtype " + std::string(DTypeName(tensor.dtype())) + " has no .npy equivalent";
      return "";
  }
  if (static_cast<uint64_t>(NumElements(tensor)) * DTypeSize(tensor.dtype()) !=
      tensor.data().size()) {
    *error = "tensor data size does not match its shape";
    return "";
  }
  std::ostringstream header;
  header << "{'descr': '" << descr << "', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < tensor.shape_size(); ++i) {
    header << tensor.shape(i) << (tensor.shape_size() == 1 ? "," : "");
    if (i + 1 < tensor.shape_size()) header << ", ";
  }
  header << "), }";
  std::string text = header.str();
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends in '\n'.
  const size_t unpadded = kMagicSize + 2 + 2 + text.size() + 1;
  text.append((64 - unpadded % 64) % 64, ' ');
  text.push_back('\n');
  std::string out(kMagic, kMagicSize);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(text.size() & 0xff));
  out.push_back(static_cast<char>((text.size() >> 8) & 0xff));
  out += text;
  out += tensor.data();
  return out;
}

std::string WriteNpy(const std::string& path, const v1::Tensor& tensor) {
  std::string error;
  std::string bytes = SerializeNpy(tensor, &error);
  if (!error.empty()) return path + ": " + error;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return "cannot create " + path;
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return "cannot write " + path;
  return "";
}

}  // namespace gpusampler::client
