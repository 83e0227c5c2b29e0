#include "gpusampler/common/npy.hpp"

#include <cctype>
#include <fstream>
#include <iterator>
#include <limits>
#include <utility>

#include "gpusampler/common/tensor.hpp"

namespace gpusampler::common {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;

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

uint32_t ReadLe(std::string_view bytes, size_t offset, int width) {
  uint32_t value = 0;
  for (int i = width - 1; i >= 0; --i) {
    value = (value << 8) | static_cast<unsigned char>(bytes[offset + i]);
  }
  return value;
}

}  // namespace

v1::DType DTypeFromNpyDescr(std::string_view descr) {
  for (int v = 1; v < v1::DType_ARRAYSIZE; ++v) {
    const auto dtype = static_cast<v1::DType>(v);
    const kernels::DTypeTraits traits = Traits(dtype);
    const std::string_view spelled = traits.npy_descr;
    if (spelled.empty()) continue;
    if (descr == spelled) return dtype;
    // One-byte dtypes carry no byte order ('|'); '<' is accepted for them too. Big-endian
    // ('>') and native ('=') are rejected.
    if (traits.size == 1 && descr.size() == spelled.size() && descr[0] == '<' &&
        descr.substr(1) == spelled.substr(1)) {
      return dtype;
    }
  }
  return v1::DTYPE_UNSPECIFIED;
}

std::string ParseNpyPreamble(std::string_view bytes, NpyPreamble* out) {
  if (bytes.size() < kMagicSize + 4 || bytes.substr(0, kMagicSize) != kMagic) {
    return "not a .npy file (bad magic)";
  }
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (minor != 0 || major < 1 || major > 3) {
    return "unsupported .npy version " + std::to_string(major) + "." + std::to_string(minor);
  }
  const int len_width = major == 1 ? 2 : 4;
  out->header_start = 8 + len_width;
  if (bytes.size() < out->header_start) return "truncated .npy header";
  out->header_len = ReadLe(bytes, 8, len_width);
  return "";
}

std::string ParseNpyHeader(std::string_view dict, NpyHeader* out) {
  bool fortran_order = false;
  std::string error = HeaderParser(dict).Parse(&out->descr, &fortran_order, &out->shape);
  if (!error.empty()) return ".npy header: " + error;
  if (fortran_order) return "Fortran-order .npy is unsupported; save a C-order array";
  out->dtype = DTypeFromNpyDescr(out->descr);
  if (out->dtype == v1::DTYPE_UNSPECIFIED) {
    return "unsupported .npy dtype '" + out->descr +
           "' (need little-endian bool, int8/16/32/64, uint8 or float16/32/64)";
  }
  out->payload_bytes = DTypeSize(out->dtype);
  for (int64_t d : out->shape) {
    if (__builtin_mul_overflow(out->payload_bytes, d, &out->payload_bytes)) {
      return ".npy shape overflows";
    }
  }
  return "";
}

std::string CheckNpyBools(std::string_view data) {
  for (char c : data) {
    if (c != 0 && c != 1) return ".npy bool array holds a byte other than 0 or 1";
  }
  return "";
}

std::string ParseNpy(const std::string& bytes, v1::Tensor* tensor) {
  NpyPreamble preamble;
  if (std::string error = ParseNpyPreamble(bytes, &preamble); !error.empty()) return error;
  const size_t data_start = preamble.header_start + preamble.header_len;
  if (bytes.size() < data_start) return "truncated .npy header";
  NpyHeader header;
  std::string error = ParseNpyHeader(
      std::string_view(bytes).substr(preamble.header_start, preamble.header_len), &header);
  if (!error.empty()) return error;
  const size_t payload = bytes.size() - data_start;
  if (payload != static_cast<uint64_t>(header.payload_bytes)) {
    return ".npy data is " + std::to_string(payload) + " bytes; shape and dtype need " +
           std::to_string(header.payload_bytes);
  }
  tensor->Clear();
  tensor->set_dtype(header.dtype);
  for (int64_t d : header.shape) tensor->add_shape(d);
  tensor->set_data(bytes.substr(data_start));
  return header.dtype == v1::DTYPE_BOOL ? CheckNpyBools(tensor->data()) : "";
}

std::string ReadNpy(const std::string& path, v1::Tensor* tensor) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return "cannot open " + path;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return "cannot read " + path;
  std::string error = ParseNpy(bytes, tensor);
  return error.empty() ? "" : path + ": " + error;
}

std::string NpyHeaderBytes(std::string_view descr, const std::vector<int64_t>& shape) {
  std::string text = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < shape.size(); ++i) {
    text += std::to_string(shape[i]) + (shape.size() == 1 ? "," : i + 1 < shape.size() ? ", " : "");
  }
  text += "), }";
  // Pad with spaces so the data starts on a 64-byte boundary; the header ends in '\n'.
  const size_t unpadded = kMagicSize + 2 + 2 + text.size() + 1;
  text.append((64 - unpadded % 64) % 64, ' ');
  text.push_back('\n');
  std::string out(kMagic, kMagicSize);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(text.size() & 0xff));
  out.push_back(static_cast<char>((text.size() >> 8) & 0xff));
  return out + text;
}

std::string SerializeNpy(const v1::Tensor& tensor, std::string* error) {
  const std::string_view descr = Traits(tensor.dtype()).npy_descr;
  if (descr.empty()) {
    *error = "dtype " + std::string(DTypeName(tensor.dtype())) + " has no .npy equivalent";
    return "";
  }
  if (static_cast<uint64_t>(NumElements(tensor)) * DTypeSize(tensor.dtype()) !=
      tensor.data().size()) {
    *error = "tensor data size does not match its shape";
    return "";
  }
  return NpyHeaderBytes(descr, {tensor.shape().begin(), tensor.shape().end()}) + tensor.data();
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

}  // namespace gpusampler::common
