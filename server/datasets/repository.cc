#include "datasets/repository.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <iterator>
#include <random>
#include <set>

#include "core/thread_priority.hpp"
#include "gpusampler/common/npy.hpp"
#include "gpusampler/common/tensor.hpp"

namespace gpusampler::server {
namespace {

// Two container versions: 01 has three sections (labels, features, row_splits); 02, written
// only for a dataset with scores (SPEC section 7), adds a fourth, the scores, so that a file
// without scores stays readable by older servers.
constexpr char kContainerMagic[8] = {'G', 'S', 'D', 'A', 'T', 'A', '0', '1'};
constexpr char kContainerMagicScores[8] = {'G', 'S', 'D', 'A', 'T', 'A', '0', '2'};
constexpr size_t ContainerHeaderBytes(int sections) {
  return 8 + 64 + 8 * static_cast<size_t>(sections) + 4 + 4;  // magic, sha, lengths, dtype, pad
}
constexpr size_t kContainerHeader = ContainerHeaderBytes(3);
constexpr size_t kContainerHeaderMax = ContainerHeaderBytes(4);
const char* const kScoresSuffix = ".scores.npy";
constexpr int64_t kMaxNpyHeader = int64_t{1} << 20;
const char* const kContainerSuffix = ".dataset";
const char* const kLabelsSuffix = ".labels.npy";
const char* const kTmpMarker = ".dataset.tmp-";

std::string Errno() { return std::strerror(errno); }

// What a file cannot be read for: a bad (or unreadable) file. The caller names the file and
// decides what the client sees (Load: NOT_FOUND, counted once per version).
Status BadFile(std::string why) { return Status(Code::kFailedPrecondition, std::move(why)); }
// The same for a proto/common .npy check, which answers "" or why not.
Status NpyCheck(std::string why) { return why.empty() ? Status::Ok() : BadFile(std::move(why)); }
// `status` with `where` (a file, a section) before its message.
Status At(const std::string& where, const Status& status) {
  return status.ok() ? status : Status(status.code(), where + ": " + status.message());
}

// An open file descriptor, closed when it goes.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// "dev:ino:size:sec.nsec" of a file: its version. Formatted with to_chars into one buffer (the
// poller makes 100k of these per re-scan; five to_string temporaries each cost a third of it).
std::string Key(const struct stat& st) {
  char buf[128];  // five numbers of at most 20 digits and a sign, four separators
  char* p = buf;
  char* const end = buf + sizeof(buf);
  auto put = [&](auto v, char sep) {
    p = std::to_chars(p, end - 1, v).ptr;
    if (sep != 0) *p++ = sep;
  };
  put(static_cast<uint64_t>(st.st_dev), ':');
  put(static_cast<uint64_t>(st.st_ino), ':');
  put(static_cast<int64_t>(st.st_size), ':');
  put(static_cast<int64_t>(st.st_mtim.tv_sec), '.');
  put(static_cast<int64_t>(st.st_mtim.tv_nsec), 0);
  return std::string(buf, p);
}

// Opens `path` for reading when it is a regular file (or a link to one). A directory, FIFO,
// socket or device (or a link to one) is refused without reading from it: O_NONBLOCK keeps a
// FIFO without a writer from blocking the open.
Status OpenRegular(const std::string& path, Fd* fd, struct stat* st) {
  Fd f(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (f.get() < 0) return BadFile("cannot open: " + Errno());
  if (fstat(f.get(), st) != 0) return BadFile("cannot stat: " + Errno());
  if (!S_ISREG(st->st_mode)) {
    const char* what = S_ISDIR(st->st_mode)    ? "a directory"
                       : S_ISFIFO(st->st_mode) ? "a FIFO"
                       : S_ISCHR(st->st_mode)  ? "a character device"
                       : S_ISBLK(st->st_mode)  ? "a block device"
                       : S_ISSOCK(st->st_mode) ? "a socket"
                                               : "not a regular file";
    return BadFile(std::string("is ") + what + " (or a link to one); only regular files are read");
  }
  *fd = std::move(f);
  return Status::Ok();
}

Status ReadAt(int fd, int64_t offset, int64_t n, char* out) {
  while (n > 0) {
    const ssize_t got = pread(fd, out, static_cast<size_t>(std::min<int64_t>(n, 1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return BadFile("cannot read: " + Errno());
    if (got == 0) return BadFile("file ended early (truncated while being read?)");
    out += got;
    offset += got;
    n -= got;
  }
  return Status::Ok();
}

// RESOURCE_EXHAUSTED when the disk is full, else INTERNAL; the message is errno's.
Status WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t put = write(fd, p, std::min<size_t>(n, size_t{1} << 30));
    if (put < 0 && errno == EINTR) continue;
    if (put < 0)
      return Status(errno == ENOSPC ? Code::kResourceExhausted : Code::kInternal, Errno());
    p += put;
    n -= static_cast<size_t>(put);
  }
  return Status::Ok();
}

// One .npy array inside a file: where it is, and what its header says.
struct Section {
  std::string what;  // the file (and section) name, for messages
  int fd = -1;
  int64_t offset = 0, length = 0;
  int64_t header_bytes = 0, payload = 0;
  v1::DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<int64_t> shape;
};

// Reads the header of the .npy array at `s` (offset, length) and checks that the length
// matches it exactly: nothing but the header is read, so a huge or sparse file costs nothing.
Status Probe(Section* s) {
  char fixed[common::kNpyPreambleBytes];
  if (s->length < 10) return BadFile("not a .npy file (too short)");
  const int64_t fixed_len = std::min<int64_t>(sizeof(fixed), s->length);
  GPUSAMPLER_RETURN_IF_ERROR(ReadAt(s->fd, s->offset, fixed_len, fixed));
  common::NpyPreamble preamble;
  GPUSAMPLER_RETURN_IF_ERROR(
      NpyCheck(common::ParseNpyPreamble({fixed, static_cast<size_t>(fixed_len)}, &preamble)));
  const int64_t header_len = static_cast<int64_t>(preamble.header_len);
  const int64_t header_start = static_cast<int64_t>(preamble.header_start);
  if (header_len > kMaxNpyHeader || header_start + header_len > s->length) {
    return BadFile("bad .npy header length " + std::to_string(header_len));
  }
  std::string text(static_cast<size_t>(header_len), '\0');
  GPUSAMPLER_RETURN_IF_ERROR(ReadAt(s->fd, s->offset + header_start, header_len, text.data()));
  common::NpyHeader header;
  GPUSAMPLER_RETURN_IF_ERROR(NpyCheck(common::ParseNpyHeader(text, &header)));
  s->dtype = header.dtype;
  s->shape = std::move(header.shape);
  s->header_bytes = header_start + header_len;
  s->payload = header.payload_bytes;
  if (s->header_bytes + s->payload != s->length) {
    return BadFile("is " + std::to_string(s->length) + " bytes, but its header (" + header.descr +
                   ", " + std::to_string(s->shape.size()) + "-D) needs " +
                   std::to_string(s->header_bytes + s->payload));
  }
  return Status::Ok();
}

// Reads the data of a probed section straight into `tensor` (one copy of the bytes).
// A failure names the section (s.what).
Status ReadSection(const Section& s, v1::Tensor* tensor) {
  std::string data(static_cast<size_t>(s.payload), '\0');
  GPUSAMPLER_RETURN_IF_ERROR(
      At(s.what, ReadAt(s.fd, s.offset + s.header_bytes, s.payload, data.data())));
  if (s.dtype == v1::DTYPE_BOOL) {
    GPUSAMPLER_RETURN_IF_ERROR(At(s.what, NpyCheck(common::CheckNpyBools(data))));
  }
  tensor->Clear();
  tensor->set_dtype(s.dtype);
  for (int64_t d : s.shape) tensor->add_shape(d);
  tensor->set_data(std::move(data));
  return Status::Ok();
}

// A version 1.0 .npy header (magic to '\n') for `dtype` and `shape`; data starts 64-aligned.
std::string NpyHeader(v1::DType dtype, const std::vector<int64_t>& shape) {
  // BFLOAT16, which .npy cannot name, is stored as int16 (the container names its dtype).
  const v1::DType stored = dtype == v1::DTYPE_BFLOAT16 ? v1::DTYPE_INT16 : dtype;
  return common::NpyHeaderBytes(common::Traits(stored).npy_descr, shape);
}

void PutLe64(char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<char>(v >> (8 * i));
}
uint64_t GetLe64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// The files of one committed dataset, opened, with their headers checked.
struct Opened {
  std::vector<Fd> fds;
  Section labels, features, row_splits, scores;
  bool has_features = false, has_row_splits = false, has_scores = false;
  std::string sha256;                               // from a container; empty for plain files
  v1::DType feature_dtype = v1::DTYPE_UNSPECIFIED;  // a container's (BFLOAT16 stored as int16)
  std::string version;
  int64_t payload() const {
    return labels.payload + (has_features ? features.payload : 0) +
           (has_row_splits ? row_splits.payload : 0) + (has_scores ? scores.payload : 0);
  }
};

// Opens and probes NAME.dataset at `path`; a failure names the file (or its section).
Status OpenContainer(const std::string& path, Opened* o) {
  Fd fd;
  struct stat st;
  GPUSAMPLER_RETURN_IF_ERROR(At(path, OpenRegular(path, &fd, &st)));
  char head[kContainerHeaderMax];
  if (st.st_size < static_cast<off_t>(kContainerHeader)) return BadFile(path + ": too short");
  GPUSAMPLER_RETURN_IF_ERROR(At(path, ReadAt(fd.get(), 0, 8, head)));
  const bool v2 = std::memcmp(head, kContainerMagicScores, 8) == 0;
  if (!v2 && std::memcmp(head, kContainerMagic, 8) != 0) return BadFile(path + ": bad magic");
  const int num_sections = v2 ? 4 : 3;
  const size_t header_bytes = ContainerHeaderBytes(num_sections);
  if (st.st_size < static_cast<off_t>(header_bytes)) return BadFile(path + ": too short");
  GPUSAMPLER_RETURN_IF_ERROR(At(path, ReadAt(fd.get(), 0, header_bytes, head)));
  o->sha256.assign(head + 8, 64);
  uint64_t lens[4] = {0, 0, 0, 0};
  for (int i = 0; i < num_sections; ++i) lens[i] = GetLe64(head + 72 + 8 * i);
  const size_t dtype_at = 72 + 8 * static_cast<size_t>(num_sections);
  uint32_t fdtype = 0;
  for (int i = 3; i >= 0; --i) {
    fdtype = (fdtype << 8) | static_cast<unsigned char>(head[dtype_at + i]);
  }
  o->feature_dtype = static_cast<v1::DType>(fdtype);
  uint64_t total = header_bytes;
  for (uint64_t l : lens) {
    if (__builtin_add_overflow(total, l, &total)) return BadFile(path + ": bad section lengths");
  }
  if (total != static_cast<uint64_t>(st.st_size)) {
    return BadFile(path + ": is " + std::to_string(st.st_size) + " bytes, but its header needs " +
                   std::to_string(total));
  }
  int64_t offset = static_cast<int64_t>(header_bytes);
  Section* sections[4] = {&o->labels, &o->features, &o->row_splits, &o->scores};
  const char* names[4] = {"labels", "features", "row_splits", "scores"};
  for (int i = 0; i < num_sections; ++i) {
    if (i == 1) o->has_features = lens[1] > 0;
    if (i == 2) o->has_row_splits = lens[2] > 0;
    if (i == 3) o->has_scores = lens[3] > 0;
    if (lens[i] == 0) continue;
    Section& s = *sections[i];
    s.what = path + " (" + names[i] + ")";
    s.fd = fd.get();
    s.offset = offset;
    s.length = static_cast<int64_t>(lens[i]);
    offset += s.length;
    GPUSAMPLER_RETURN_IF_ERROR(At(s.what, Probe(&s)));
  }
  if (lens[0] == 0) return BadFile(path + ": no labels section");
  o->version = "c:" + Key(st);
  o->fds.push_back(std::move(fd));
  return Status::Ok();
}

// Opens and probes the plain files NAME.labels.npy [+ features, row_splits] under `base`
// (dir/NAME); a failure names the file.
Status OpenPlainFiles(const std::string& base, Opened* o) {
  o->version = "p:";
  const char* suffixes[4] = {kLabelsSuffix, ".features.npy", ".row_splits.npy", kScoresSuffix};
  Section* sections[4] = {&o->labels, &o->features, &o->row_splits, &o->scores};
  for (int i = 0; i < 4; ++i) {
    const std::string path = base + suffixes[i];
    struct stat st;
    if (i > 0 && stat(path.c_str(), &st) != 0 && errno == ENOENT) {
      o->version += "-|";
      continue;
    }
    Fd fd;
    GPUSAMPLER_RETURN_IF_ERROR(At(path, OpenRegular(path, &fd, &st)));
    Section& s = *sections[i];
    s.what = path;
    s.fd = fd.get();
    s.offset = 0;
    s.length = st.st_size;
    GPUSAMPLER_RETURN_IF_ERROR(At(path, Probe(&s)));
    if (i == 1) o->has_features = true;
    if (i == 2) o->has_row_splits = true;
    if (i == 3) o->has_scores = true;
    o->version += Key(st) + "|";
    o->fds.push_back(std::move(fd));
  }
  return Status::Ok();
}

// Opens and probes the files of `name`; a failure's message names the file.
Status OpenDataset(const std::string& dir, const std::string& name, bool container, Opened* o) {
  return container ? OpenContainer(dir + "/" + name + kContainerSuffix, o)
                   : OpenPlainFiles(dir + "/" + name, o);
}

// Reads the data of every section of `o` into `chunk`; a failure names the section.
Status ReadSections(const Opened& o, v1::DatasetChunk* chunk) {
  GPUSAMPLER_RETURN_IF_ERROR(ReadSection(o.labels, chunk->mutable_labels()));
  if (o.has_features) {
    GPUSAMPLER_RETURN_IF_ERROR(ReadSection(o.features, chunk->mutable_features()));
    if (o.feature_dtype == v1::DTYPE_BFLOAT16)
      chunk->mutable_features()->set_dtype(o.feature_dtype);
  }
  if (o.has_row_splits) {
    GPUSAMPLER_RETURN_IF_ERROR(ReadSection(o.row_splits, chunk->mutable_row_splits()));
  }
  if (o.has_scores) {
    GPUSAMPLER_RETURN_IF_ERROR(ReadSection(o.scores, chunk->mutable_scores()));
  }
  return Status::Ok();
}

// A load goes to the builder in pieces of about this many bytes (labels, features and scores
// of the same elements), into buffers reserved at their final size: it peaks near its size
// plus one piece, not at twice its size (issue 31 item 8).
constexpr int64_t kLoadPieceBytes = int64_t{8} << 20;

std::string ShapeText(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Labels [B, N]: B rows of N elements each, held as a stride (docs/datasets.md, "Row
// shapes"). Features are then [B, N, ...] and scores [B, N], as in an inline request with
// labels [B, N]; their leading `LeadDims` dims count elements. 1 for 1-D labels.
bool FixedRows(const Opened& o) { return o.labels.shape.size() == 2; }
size_t LeadDims(const Opened& o) { return FixedRows(o) ? 2 : 1; }

// The element count the labels' header says (B * N for [B, N]); -1 when it overflows.
int64_t Elements(const Opened& o) {
  if (!FixedRows(o)) return o.labels.shape.empty() ? 1 : o.labels.shape[0];
  int64_t n = 0;
  return __builtin_mul_overflow(o.labels.shape[0], o.labels.shape[1], &n) ? -1 : n;
}

// What is wrong with a set of 2-D labels [B, N] (fixed-length rows): row_splits beside
// them, features not [B, N, ...], scores not [B, N]. "" when nothing is.
std::string FixedRowsProblem(const Opened& o) {
  const std::vector<int64_t>& l = o.labels.shape;
  const std::string want = "[" + std::to_string(l[0]) + ", " + std::to_string(l[1]);
  if (Elements(o) < 0) return o.labels.what + ": shape " + ShapeText(l) + " overflows int64";
  if (o.has_row_splits) {
    return o.row_splits.what + " is given, but " + o.labels.what + " is 2-D " + ShapeText(l) +
           " (B rows of N elements each, which need no row_splits): give 1-D labels with "
           "row_splits, or 2-D labels alone";
  }
  if (o.has_features &&
      (o.features.shape.size() < 2 || o.features.shape[0] != l[0] || o.features.shape[1] != l[1])) {
    return o.features.what + " has shape " + ShapeText(o.features.shape) + ", must be " + want +
           ", ...] like the labels " + ShapeText(l);
  }
  if (o.has_scores && o.scores.shape != l) {
    return o.scores.what + " has shape " + ShapeText(o.scores.shape) + ", must be " + want +
           "] like the labels";
  }
  return "";
}

// Whether the sections' headers agree on the element count (1-D labels with features and
// scores of as many rows, or 2-D labels as FixedRowsProblem says): else the dataset can
// never load.
bool Consistent(const Opened& o) {
  if (FixedRows(o)) return FixedRowsProblem(o).empty();
  if (o.labels.shape.size() != 1) return false;
  const int64_t n = o.labels.shape[0];
  if (o.has_features && (o.features.shape.empty() || o.features.shape[0] != n)) return false;
  return !o.has_scores || (o.scores.shape.size() == 1 && o.scores.shape[0] == n);
}

// Whether the load can go in pieces of elements. (When it cannot, the builder's one-chunk
// check names what is wrong.)
bool PieceWise(const Opened& o) {
  if (!Consistent(o) || Elements(o) <= 0) return false;
  const int64_t n = Elements(o);
  return o.labels.payload % n == 0 && (!o.has_features || o.features.payload % n == 0);
}

// Reshapes the sections of 2-D labels [B, N] read whole into `chunk` as the builder takes
// them: labels [B * N], features [B * N, ...], scores [B * N] (the bytes are the same).
void FlattenRows(const Opened& o, v1::DatasetChunk* chunk) {
  const int64_t n = Elements(o);
  auto flatten = [n](v1::Tensor* t) {
    std::vector<int64_t> shape = {n};
    shape.insert(shape.end(), t->shape().begin() + std::min(2, t->shape_size()), t->shape().end());
    t->clear_shape();
    for (int64_t d : shape) t->add_shape(d);
  };
  flatten(chunk->mutable_labels());
  if (o.has_features) flatten(chunk->mutable_features());
  if (o.has_scores) flatten(chunk->mutable_scores());
}

// Reads elements [from, from + count) of the probed section `s` (`elem_bytes` each, its
// first `lead` dims counting elements) into `t`, shaped [count, the section's other dims...].
Status ReadPiece(const Section& s, size_t lead, int64_t elem_bytes, int64_t from, int64_t count,
                 v1::DType dtype, v1::Tensor* t) {
  t->set_dtype(dtype);
  t->clear_shape();
  t->add_shape(count);
  for (size_t i = lead; i < s.shape.size(); ++i) t->add_shape(s.shape[i]);
  std::string* data = t->mutable_data();
  data->resize(static_cast<size_t>(count * elem_bytes));
  GPUSAMPLER_RETURN_IF_ERROR(At(s.what, ReadAt(s.fd, s.offset + s.header_bytes + from * elem_bytes,
                                               count * elem_bytes, data->data())));
  if (s.dtype == v1::DTYPE_BOOL) {
    GPUSAMPLER_RETURN_IF_ERROR(At(s.what, NpyCheck(common::CheckNpyBools(*data))));
  }
  return Status::Ok();
}

// Feeds the data of `o` (PieceWise) to `builder` in pieces. A read failure is returned with
// *read_failed set; else what builder.Add answered.
Status AddInPieces(const std::string& name, const Opened& o, DatasetBuilder* builder,
                   bool* read_failed) {
  const int64_t n = Elements(o);
  const size_t lead = LeadDims(o);
  const int64_t lb = o.labels.payload / n;
  const int64_t fb = o.has_features ? o.features.payload / n : 0;
  const int64_t per = std::max<int64_t>(1, kLoadPieceBytes / (lb + fb + (o.has_scores ? 4 : 0)));
  Dataset* ds = builder->dataset();
  ds->labels.reserve(static_cast<size_t>(o.labels.payload));
  if (o.has_features) ds->features.reserve(static_cast<size_t>(o.features.payload));
  if (o.has_scores) ds->scores.reserve(static_cast<size_t>(n));
  const v1::DType fdtype =
      o.feature_dtype == v1::DTYPE_BFLOAT16 ? o.feature_dtype : o.features.dtype;
  v1::DatasetChunk chunk;
  for (int64_t from = 0; from < n; from += per) {
    const int64_t m = std::min(per, n - from);
    Status s = Status::Ok();
    if (from == 0) {
      chunk.set_name(name);
      chunk.set_replace(true);
      if (o.has_row_splits) s = ReadSection(o.row_splits, chunk.mutable_row_splits());
    } else {
      chunk.clear_name();
      chunk.set_replace(false);
      chunk.clear_row_splits();
    }
    if (s.ok()) {
      s = ReadPiece(o.labels, lead, lb, from, m, o.labels.dtype, chunk.mutable_labels());
    }
    if (s.ok() && o.has_features) {
      s = ReadPiece(o.features, lead, fb, from, m, fdtype, chunk.mutable_features());
    }
    if (s.ok() && o.has_scores) {
      s = ReadPiece(o.scores, lead, 4, from, m, o.scores.dtype, chunk.mutable_scores());
    }
    if (!s.ok()) {
      *read_failed = true;
      return s;
    }
    GPUSAMPLER_RETURN_IF_ERROR(builder->Add(chunk));
  }
  return Status::Ok();
}

// The DatasetInfo of an opened dataset, from its headers alone.
v1::DatasetInfo InfoFromHeaders(const std::string& name, const Opened& o) {
  v1::DatasetInfo info;
  info.set_name(name);
  info.set_num_elements(Elements(o));
  if (FixedRows(o)) {
    info.set_num_rows(o.labels.shape[0]);
  } else {
    info.set_num_rows(o.has_row_splits && !o.row_splits.shape.empty() ? o.row_splits.shape[0] - 1
                                                                      : 1);
  }
  info.set_label_dtype(o.labels.dtype);
  if (o.has_features) {
    info.set_feature_dtype(o.feature_dtype != v1::DTYPE_UNSPECIFIED ? o.feature_dtype
                                                                    : o.features.dtype);
    for (size_t i = LeadDims(o); i < o.features.shape.size(); ++i)
      info.add_feature_shape(o.features.shape[i]);
  }
  info.set_bytes(o.payload());
  info.set_sha256(o.sha256);
  return info;
}

}  // namespace

Repository::Repository(std::string dir, const Limits& limits, DatasetRegistry* registry,
                       Hooks hooks)
    : dir_(std::move(dir)), limits_(limits), registry_(registry), hooks_(std::move(hooks)) {
  // Repository files are not messages: no per-message size limit (the budget bounds them).
  limits_.max_message_bytes = INT64_MAX;
}

Repository::~Repository() {
  {
    std::lock_guard<std::mutex> lock(poll_mu_);
    stop_ = true;
  }
  poll_cv_.notify_all();
  if (poller_.joinable()) poller_.join();
}

Repository::NameGuard::NameGuard(const Repository* repo, const std::string& name, bool wait)
    : repo_(repo), name_(name) {
  {
    std::lock_guard<std::mutex> lock(repo_->state_mu_);
    std::shared_ptr<std::mutex>& slot = repo_->name_locks_[name_];
    if (!slot) slot = std::make_shared<std::mutex>();
    mu_ = slot;
  }
  if (wait) {
    mu_->lock();
    owns_ = true;
  } else {
    owns_ = mu_->try_lock();
  }
}

Repository::NameGuard::~NameGuard() {
  if (owns_) mu_->unlock();
  // Every copy of the pointer is made and dropped under state_mu_, so the count is exact.
  std::lock_guard<std::mutex> lock(repo_->state_mu_);
  mu_.reset();
  const auto it = repo_->name_locks_.find(name_);
  if (it != repo_->name_locks_.end() && it->second.use_count() == 1) {
    repo_->name_locks_.erase(it);
  }
}

Repository::Found Repository::Stat(const std::string& name, Entry* entry) const {
  struct stat st;
  const std::string base = dir_ + "/" + name;
  auto gone = [] { return errno == ENOENT || errno == ENOTDIR; };
  if (stat((base + kContainerSuffix).c_str(), &st) == 0) {
    entry->container = true;
    entry->version = "c:" + Key(st);
    entry->file_bytes = st.st_size;
    return Found::kYes;
  }
  if (!gone()) return Found::kError;
  if (stat((base + kLabelsSuffix).c_str(), &st) != 0) return gone() ? Found::kNo : Found::kError;
  entry->container = false;
  entry->version = "p:" + Key(st) + "|";
  entry->file_bytes = st.st_size;
  for (const char* suffix : {".features.npy", ".row_splits.npy", kScoresSuffix}) {
    if (stat((base + suffix).c_str(), &st) == 0) {
      entry->version += Key(st) + "|";
      entry->file_bytes += st.st_size;
    } else if (gone()) {
      entry->version += "-|";
    } else {
      return Found::kError;
    }
  }
  return Found::kYes;
}

namespace {

// The files of a dataset a listing can show, in Stat's order: the container, then the plain
// files (labels first).
const char* const kListedSuffixes[5] = {kContainerSuffix, kLabelsSuffix, ".features.npy",
                                        ".row_splits.npy", kScoresSuffix};

}  // namespace

// Repository::Stat for a name whose files the listing showed (`mask`: bit i for
// kListedSuffixes[i]): one fstatat per existing file instead of a stat per possible one
// (100k datasets at a 2 s poll). A file gone since the listing: Stat decides.
Repository::Found Repository::StatListed(int dir_fd, const std::string& name, unsigned mask,
                                         Entry* entry) const {
  struct stat st;
  std::string path;
  path.reserve(name.size() + 16);
  auto at = [&](int i) {
    path.assign(name).append(kListedSuffixes[i]);
    return fstatat(dir_fd, path.c_str(), &st, 0);
  };
  if (mask & 1u) {
    if (at(0) != 0) return Stat(name, entry);
    entry->container = true;
    entry->version = "c:" + Key(st);
    entry->file_bytes = st.st_size;
    return Found::kYes;
  }
  if (at(1) != 0) return Stat(name, entry);
  entry->container = false;
  entry->version = "p:" + Key(st) + "|";
  entry->file_bytes = st.st_size;
  for (int i = 2; i < 5; ++i) {
    if (!(mask & (1u << i))) {
      entry->version += "-|";
      continue;
    }
    if (at(i) != 0) return Stat(name, entry);
    entry->version += Key(st) + "|";
    entry->file_bytes += st.st_size;
  }
  return Found::kYes;
}

bool Repository::Scan(Listing* out) const {
  out->clear();
  // name -> the kListedSuffixes files listed, gathered unsorted and merged after one sort
  std::vector<std::pair<std::string, unsigned>> names;
  size_t suffix_len[5];
  for (int i = 0; i < 5; ++i) suffix_len[i] = std::strlen(kListedSuffixes[i]);
  std::string failure;
  DIR* d = opendir(dir_.c_str());
  if (d != nullptr) {
    errno = 0;
    while (dirent* e = readdir(d)) {
      const size_t len = std::strlen(e->d_name);
      for (int i = 0; i < 5; ++i) {
        const size_t n = suffix_len[i];
        if (len > n && std::memcmp(e->d_name + len - n, kListedSuffixes[i], n) == 0) {
          names.emplace_back(std::string(e->d_name, len - n), 1u << i);
        }
      }
      errno = 0;
    }
    if (errno != 0) failure = "cannot list: " + Errno();
  } else {
    failure = "cannot list: " + Errno();
  }
  std::sort(names.begin(), names.end());
  for (size_t i = 0; failure.empty() && i < names.size();) {
    unsigned mask = 0;
    size_t j = i;
    for (; j < names.size() && names[j].first == names[i].first; ++j) mask |= names[j].second;
    if (mask & 3u) {  // a container or labels: a dataset
      Entry entry;
      const Found found = StatListed(dirfd(d), names[i].first, mask, &entry);
      if (found == Found::kYes) out->emplace_back(std::move(names[i].first), std::move(entry));
      if (found == Found::kError) failure = "cannot stat " + names[i].first + ".*: " + Errno();
    }
    i = j;
  }
  if (d != nullptr) closedir(d);
  if (failure.empty()) {
    if (scan_failing_.exchange(false)) spdlog::info("--dataset-dir {}: listing works again", dir_);
    return true;
  }
  // Not a deletion of everything: the resident datasets stay until a listing succeeds.
  if (!scan_failing_.exchange(true)) {
    spdlog::warn(
        "--dataset-dir {}: {}; keeping the resident datasets until a re-scan succeeds "
        "(logged once until then; counted in gpusampler_dataset_scan_failures_total)",
        dir_, failure);
  }
  if (hooks_.on_scan_failure) hooks_.on_scan_failure();
  out->clear();
  return false;
}

bool Repository::Exists(const std::string& name) const {
  Entry entry;
  // A stat that fails for another reason than absence: assume it exists (never overwrite).
  return ValidDatasetName(name) && Stat(name, &entry) != Found::kNo;
}

Status Repository::CheckWritable() const {
  if (access(dir_.c_str(), W_OK) != 0) {
    return Status(Code::kFailedPrecondition,
                  "--dataset-dir " + dir_ + " is not writable (" + Errno() +
                      "): this replica serves its datasets but cannot create or delete them");
  }
  return Status::Ok();
}

Status Repository::Open() {
  struct stat st;
  if (stat(dir_.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return InvalidArgument("--dataset-dir " + dir_ + ": not a directory (" +
                           (errno ? Errno() : std::string("exists")) + ")");
  }
  CleanLeftovers(kLeftoverAge);
  int loaded = 0, later = 0;
  Listing on_disk;
  (void)Scan(&on_disk);  // a failure is logged; the re-scans retry, misses still load
  for (const auto& [name, entry] : on_disk) {
    NameGuard guard(this, name);
    bool fits = true;
    std::shared_ptr<const Dataset> ds;
    if (Load(name, entry, /*evict=*/false, &fits, &ds).ok() && ds) ++loaded;
    if (!fits) ++later;
  }
  spdlog::info(
      "--dataset-dir {}: {} dataset(s) loaded, {} bytes; {} more load on demand (over "
      "--max-dataset-bytes); writable: {}",
      dir_, loaded, registry_->bytes(), later, CheckWritable().ok() ? "yes" : "no");
  if (hooks_.on_change) hooks_.on_change();
  return Status::Ok();
}

void Repository::StartPolling(int64_t seconds) {
  if (seconds <= 0) return;
  poll_seconds_ = seconds;
  poller_ = std::thread([this] { PollLoop(); });
}

void Repository::PollLoop() {
  LowerThisThreadsPriority();  // a scan of 100k files yields to the threads that answer
  std::unique_lock<std::mutex> lock(poll_mu_);
  while (!stop_) {
    poll_cv_.wait_for(lock, std::chrono::seconds(poll_seconds_));
    if (stop_) break;
    lock.unlock();
    try {
      Poll();
    } catch (...) {  // the poll thread's top: an escaping exception would end the process
      spdlog::error("--dataset-dir {}: {}", dir_, FromCurrentException("re-scan failed").message());
    }
    lock.lock();
  }
}

void Repository::Poll() {
  std::lock_guard<std::mutex> poll_lock(poll_run_mu_);  // one re-scan at a time
  CleanLeftovers(kLeftoverAge);
  Listing on_disk;
  if (!Scan(&on_disk)) return;  // a failed listing deletes nothing (logged, counted)
  // A hand-written set is written file by file: it is (re)loaded only once two re-scans in
  // a row saw the same versions of all its files, so a replacement caught between its files
  // (new labels, old features) is never served. A container is one rename: at once.
  // on_disk, last_scan_ and the registry's list are all sorted by name: the loops below walk
  // them side by side instead of looking each of 100k names up (the poller's CPU, item 9).
  auto before = last_scan_.cbegin();
  for (auto& [name, entry] : on_disk) {
    if (entry.container) continue;
    while (before != last_scan_.cend() && before->first < name) ++before;
    entry.settled = before != last_scan_.cend() && before->first == name &&
                    before->second.version == entry.version;
  }
  auto listed = [&on_disk](const std::string& name) {
    const auto it =
        std::lower_bound(on_disk.begin(), on_disk.end(), name,
                         [](const auto& e, const std::string& n) { return e.first < n; });
    return it != on_disk.end() && it->first == name;
  };
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    for (auto it = bad_.begin(); it != bad_.end();) {
      it = listed(it->first) ? std::next(it) : bad_.erase(it);  // gone from the dir
    }
  }
  bool changed = false;
  const std::vector<std::shared_ptr<const Dataset>> resident = registry_->List();
  auto disk = on_disk.begin();
  for (const auto& ds : resident) {  // the resident ones first: replaced, deleted
    while (disk != on_disk.end() && disk->first < ds->name) ++disk;
    const bool listed = disk != on_disk.end() && disk->first == ds->name;
    changed |= PollResident(ds, listed ? &disk->second : nullptr);
  }
  auto res = resident.begin();
  for (const auto& [name, entry] : on_disk) {  // then the new ones
    while (res != resident.end() && (*res)->name < name) ++res;
    if (res == resident.end() || (*res)->name != name) changed |= PollNew(name, entry);
  }
  last_scan_ = std::move(on_disk);
  if (changed && hooks_.on_change) hooks_.on_change();
}

bool Repository::PollResident(const std::shared_ptr<const Dataset>& ds, const Entry* scanned) {
  if (scanned != nullptr && (scanned->version == ds->repo_version || !scanned->settled)) {
    return false;
  }
  // The listing is a snapshot taken without a lock: under the name's lock, stat again, so
  // that an upload committed or a miss loaded since is not dropped or reloaded.
  // A name busy with a load, commit or deletion is looked at again by the next poll: the
  // poller never waits for one.
  NameGuard guard(this, ds->name, /*wait=*/false);
  if (!guard.owns()) return false;
  Entry entry;
  const Found found = Stat(ds->name, &entry);
  if (found == Found::kError ||
      (found == Found::kYes &&
       (entry.version == ds->repo_version || (scanned && entry.version != scanned->version)))) {
    return false;  // unchanged, or changed again since the listing (settles first)
  }
  if (found == Found::kNo) {
    if (!registry_->Drop(ds->name, ds.get())) return false;
    spdlog::info("dataset '{}' was deleted from --dataset-dir; dropped", ds->name);
    return true;
  }
  // The new version replaces the resident one only once it has loaded (Load's builder
  // replaces on Store): a file that does not load (truncated, damaged) leaves the good
  // version serving; Load logs and counts the failure once per file version.
  bool fits = true;
  std::shared_ptr<const Dataset> loaded;
  const Status s = Load(ds->name, entry, /*evict=*/true, &fits, &loaded);
  if (loaded) {
    spdlog::info("dataset '{}' was replaced in --dataset-dir; loaded the new version", ds->name);
    return true;
  }
  if (s.code() != Code::kResourceExhausted || KnownBad(ds->name, entry.version) ||
      !registry_->Drop(ds->name, ds.get())) {
    return false;
  }
  // No room for both versions at once: the old one goes first, as a replacing upload
  // would need the same room.
  spdlog::info(
      "dataset '{}' was replaced in --dataset-dir; no room for both versions, "
      "dropped the old one to load the new",
      ds->name);
  (void)Load(ds->name, entry, /*evict=*/true, &fits, &loaded);
  return true;
}

bool Repository::PollNew(const std::string& name, const Entry& entry) {
  // New here: loaded while it fits without evicting anything (else on demand).
  if (!entry.settled || entry.file_bytes > registry_->free_bytes()) return false;
  NameGuard guard(this, name, /*wait=*/false);               // busy: a miss is loading it
  if (!guard.owns() || registry_->Find(name)) return false;  // loaded meanwhile
  bool fits = true;
  std::shared_ptr<const Dataset> loaded;
  (void)Load(name, entry, /*evict=*/false, &fits, &loaded);  // a failure: logged by Load
  return loaded != nullptr;
}

void Repository::ForgetBad(const std::string& name) {
  std::lock_guard<std::mutex> lock(state_mu_);
  bad_.erase(name);
}

bool Repository::KnownBad(const std::string& name, const std::string& version) const {
  std::lock_guard<std::mutex> lock(state_mu_);
  const auto bad = bad_.find(name);
  return bad != bad_.end() && bad->second.first == version;
}

Status Repository::RecordBadFile(const std::string& name, const std::string& why,
                                 const std::string& version, Code code) {
  spdlog::warn("--dataset-dir: skipping bad dataset file: {}", why);
  Status s(code,
           "dataset '" + name + "' in --dataset-dir " + dir_ + " is a bad file: " + why +
               (code == Code::kResourceExhausted ? " (--max-dataset-bytes)" : ""),
           code == Code::kResourceExhausted ? kDoNotRetry : kNoPushback);
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    bad_[name] = {version, s};
  }
  if (hooks_.on_load) hooks_.on_load(false);
  return s;
}

Status Repository::Load(const std::string& name, const Entry& entry, bool evict, bool* fits,
                        std::shared_ptr<const Dataset>* out) {
  *fits = true;
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    const auto bad = bad_.find(name);
    if (bad != bad_.end() && bad->second.first == entry.version) return bad->second.second;
  }
  auto fail = [&](const std::string& why, const std::string& version, Code code = Code::kNotFound) {
    return RecordBadFile(name, why, version, code);
  };
  if (!ValidDatasetName(name)) {
    return fail(
        dir_ + "/" + name + ".*: dataset name '" + name + "' must match [A-Za-z0-9._-]{1,128}",
        entry.version);
  }
  Opened o;
  if (Status s = OpenDataset(dir_, name, entry.container, &o); !s.ok()) {
    return fail(s.message(), entry.version);
  }
  if (FixedRows(o)) {
    if (const std::string problem = FixedRowsProblem(o); !problem.empty()) {
      return fail(problem, entry.version);
    }
  }
  // Sizes are known from the headers: check them against the budget before reading data.
  const int64_t want = o.payload();
  if (want > registry_->max_bytes()) {
    return fail(dir_ + "/" + name + ": needs " + std::to_string(want) +
                    " bytes, over max_dataset_bytes = " + std::to_string(registry_->max_bytes()),
                entry.version, Code::kResourceExhausted);
  }
  if (!evict && want > registry_->free_bytes()) {
    *fits = false;
    return Status::Ok();
  }
  // Reserve the whole size before the data is read (evicting as needed), so memory stays
  // near the budget, and smaller loads cannot take the room that this one's evictions freed
  // while it reads (issue 31's load storm: a 512 MiB load lost it to 8 MiB misses). A
  // failure says why: datasets in use or uploads in progress, transient.
  DatasetBuilder builder(registry_, limits_);
  if (evict) {
    if (Status r = builder.Prepay(want); !r.ok()) return r;
  }
  Status s = Status::Ok();
  if (PieceWise(o)) {
    bool read_failed = false;
    s = AddInPieces(name, o, &builder, &read_failed);
    if (read_failed) return fail(s.message(), entry.version);
  } else {
    v1::DatasetChunk chunk;
    chunk.set_name(name);
    chunk.set_replace(true);
    if (Status r = ReadSections(o, &chunk); !r.ok()) return fail(r.message(), entry.version);
    if (FixedRows(o)) FlattenRows(o, &chunk);
    s = builder.Add(chunk);
  }
  if (s.ok() && FixedRows(o)) s = builder.SetFixedRows(o.labels.shape[0], o.labels.shape[1]);
  o.fds.clear();
  if (s.code() == Code::kResourceExhausted) {
    if (!evict) {
      *fits = false;
      return Status::Ok();
    }
    return s;  // datasets in use or uploads in progress hold the budget: transient
  }
  if (s.ok()) s = builder.Seal();
  if (s.ok() && !o.sha256.empty() && o.sha256 != builder.dataset()->sha256) {
    s = InvalidArgument("sha256 " + builder.dataset()->sha256 + " of the data differs from " +
                        o.sha256 + " in its header (damaged?)");
  }
  if (!s.ok()) {
    return fail(
        dir_ + "/" + name + (entry.container ? kContainerSuffix : ".*.npy") + ": " + s.message(),
        entry.version);
  }
  builder.dataset()->repo_version = o.version;
  // Device out of memory: not the file's fault.
  GPUSAMPLER_RETURN_IF_ERROR(builder.Store(out));
  ForgetBad(name);
  if (hooks_.on_load) hooks_.on_load(true);
  spdlog::info("dataset '{}' loaded from --dataset-dir ({} bytes, sha256 {})", name, want,
               (*out)->sha256);
  return Status::Ok();
}

Status Repository::LoadOnMiss(const std::string& name, std::shared_ptr<const Dataset>* out) {
  const Status not_found(Code::kNotFound, "dataset '" + name.substr(0, 140) +
                                              "' not found (CreateDataset uploads it; it is "
                                              "not in --dataset-dir either)");
  if (!ValidDatasetName(name)) return not_found;
  Entry entry;
  // A name the directory lacks is answered without any lock: it waits for no load.
  if (Stat(name, &entry) == Found::kNo) return not_found;
  NameGuard guard(this, name);
  // Single flight: a concurrent miss may have loaded it meanwhile.
  if ((*out = registry_->Find(name))) return Status::Ok();
  if (Stat(name, &entry) != Found::kYes) return not_found;
  bool fits = true;
  const Status s = Load(name, entry, /*evict=*/true, &fits, out);
  if (hooks_.on_change) hooks_.on_change();
  return s;
}

Status Repository::CommitUpload(DatasetBuilder* builder, std::shared_ptr<const Dataset>* stored) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckWritable());
  Dataset* ds = builder->dataset();
  const std::string final_path = dir_ + "/" + ds->name + kContainerSuffix;
  thread_local std::mt19937_64 gen(std::random_device{}());
  char rnd[17];
  std::snprintf(rnd, sizeof(rnd), "%016llx", static_cast<unsigned long long>(gen()));
  const std::string tmp = final_path + ".tmp-" + std::to_string(getpid()) + "-" + rnd;

  // 1. The whole file under a temporary name, fsynced: nothing loads it yet.
  std::string version;
  GPUSAMPLER_RETURN_IF_ERROR(WriteTemporary(*ds, tmp, &version));
  // 2. Where the workers sample (device copies; the host copy is kept until the commit).
  if (Status s = registry_->Place(ds, /*keep_host=*/true); !s.ok()) {
    unlink(tmp.c_str());
    return s;
  }
  // 3. The commit: one rename (replace) or link (a new name: the first replica wins).
  NameGuard guard(this, ds->name);
  const std::string base = dir_ + "/" + ds->name;
  GPUSAMPLER_RETURN_IF_ERROR(CommitName(*ds, builder->replace(), tmp, final_path));
  if (builder->replace()) {
    // A hand-written version of the name is replaced too.
    for (const char* suffix : {kLabelsSuffix, ".features.npy", ".row_splits.npy", kScoresSuffix}) {
      unlink((base + suffix).c_str());
    }
  }
  if (Fd d(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.get() >= 0) fsync(d.get());
  ForgetBad(ds->name);
  ds->repo_version = version;
  DatasetRegistry::ReleaseHost(ds);
  const Status s = builder->Store(stored, /*placed=*/true, /*replace=*/true);
  if (hooks_.on_change) hooks_.on_change();
  return s;
}

// The container file of `ds` at `tmp`, fsynced; *version names the written file (a rename
// keeps its inode, size and mtime). On failure nothing is left at `tmp`.
Status Repository::WriteTemporary(const Dataset& dataset, const std::string& tmp,
                                  std::string* version) const {
  const Dataset* ds = &dataset;
  Fd fd(open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return Status(Code::kInternal, "cannot create " + tmp + " in --dataset-dir: " + Errno());
  }
  // The elements' dims: [total], or [B, N] for fixed-length rows (loaded back as such).
  const std::vector<int64_t> lead = ds->rows == Dataset::Rows::kFixed
                                        ? std::vector<int64_t>{ds->fixed_rows, ds->row_length}
                                        : std::vector<int64_t>{ds->num_elements()};
  std::vector<int64_t> feature_shape = lead;
  feature_shape.insert(feature_shape.end(), ds->feature_shape.begin(), ds->feature_shape.end());
  const v1::DType ldtype = static_cast<v1::DType>(static_cast<int>(ds->label_dtype));
  const v1::DType fdtype = static_cast<v1::DType>(static_cast<int>(ds->feature_dtype));
  const std::string lh = NpyHeader(ldtype, lead);
  const std::string fh = ds->has_features() ? NpyHeader(fdtype, feature_shape) : "";
  const std::string rh =
      ds->has_row_splits()
          ? NpyHeader(v1::DTYPE_INT64, {static_cast<int64_t>(ds->row_splits.size())})
          : "";
  const bool has_scores = !ds->scores.empty();
  const std::string sh = has_scores ? NpyHeader(v1::DTYPE_FLOAT32, lead) : "";
  const int num_sections = has_scores ? 4 : 3;
  const size_t header_bytes = ContainerHeaderBytes(num_sections);
  char head[kContainerHeaderMax] = {};
  std::memcpy(head, has_scores ? kContainerMagicScores : kContainerMagic, 8);
  std::memcpy(head + 8, ds->sha256.data(), std::min<size_t>(64, ds->sha256.size()));
  PutLe64(head + 72, lh.size() + ds->labels.size());
  PutLe64(head + 80, ds->has_features() ? fh.size() + ds->features.size() : 0);
  PutLe64(head + 88, ds->has_row_splits() ? rh.size() + ds->row_splits.size() * 8 : 0);
  if (has_scores) PutLe64(head + 96, sh.size() + ds->scores.size() * 4);
  const uint32_t fd32 = ds->has_features() ? static_cast<uint32_t>(fdtype) : 0;
  const size_t dtype_at = 72 + 8 * static_cast<size_t>(num_sections);
  for (int i = 0; i < 4; ++i) head[dtype_at + i] = static_cast<char>(fd32 >> (8 * i));
  Status s = WriteAll(fd.get(), head, header_bytes);
  if (s.ok()) s = WriteAll(fd.get(), lh.data(), lh.size());
  if (s.ok()) s = WriteAll(fd.get(), ds->labels.data(), ds->labels.size());
  if (s.ok() && ds->has_features()) {
    s = WriteAll(fd.get(), fh.data(), fh.size());
    if (s.ok()) s = WriteAll(fd.get(), ds->features.data(), ds->features.size());
  }
  if (s.ok() && ds->has_row_splits()) {
    s = WriteAll(fd.get(), rh.data(), rh.size());
    if (s.ok()) s = WriteAll(fd.get(), ds->row_splits.data(), ds->row_splits.size() * 8);
  }
  if (s.ok() && has_scores) {
    s = WriteAll(fd.get(), sh.data(), sh.size());
    if (s.ok()) s = WriteAll(fd.get(), ds->scores.data(), ds->scores.size() * 4);
  }
  struct stat st;
  if (s.ok() && fsync(fd.get()) != 0) {
    s = Status(errno == ENOSPC ? Code::kResourceExhausted : Code::kInternal, "fsync: " + Errno());
  }
  if (s.ok() && fstat(fd.get(), &st) != 0) s = Status(Code::kInternal, "fstat: " + Errno());
  if (!s.ok()) {
    unlink(tmp.c_str());
    return At("cannot write dataset '" + ds->name + "' to --dataset-dir " + dir_, s);
  }
  // A rename keeps the inode, size and mtime: this is the committed file's version.
  *version = "c:" + Key(st);
  return Status();
}

// Gives `tmp` its committed name: a rename when replacing; else a hard link that fails when
// the name exists (the first replica wins), with check-then-rename where links are missing.
// `tmp` is gone afterwards either way. Called with the name's lock held.
Status Repository::CommitName(const Dataset& dataset, bool replace, const std::string& tmp,
                              const std::string& final_path) const {
  const Dataset* ds = &dataset;
  const std::string base = dir_ + "/" + ds->name;
  if (replace) {
    if (rename(tmp.c_str(), final_path.c_str()) != 0) {
      const std::string e = Errno();
      unlink(tmp.c_str());
      return Status(Code::kInternal, "cannot commit " + final_path + ": " + e);
    }
  } else {
    struct stat st;
    const bool plain = stat((base + kLabelsSuffix).c_str(), &st) == 0;
    int linked = plain ? -1 : link(tmp.c_str(), final_path.c_str());
    int err = plain ? EEXIST : errno;
    if (linked != 0 && (err == EPERM || err == EOPNOTSUPP || err == EMLINK)) {
      // A file system without hard links (some SMB shares): check, then rename. Two replicas
      // creating one name at the same instant may then both succeed, the later one winning.
      if (stat(final_path.c_str(), &st) == 0) {
        err = EEXIST;
      } else {
        linked = rename(tmp.c_str(), final_path.c_str());
        err = errno;
      }
    }
    if (linked != 0) {
      unlink(tmp.c_str());
      if (err == EEXIST) {
        return Status(Code::kAlreadyExists, "dataset '" + ds->name +
                                                "' was created by another upload first (set "
                                                "replace to overwrite it)");
      }
      return Status(Code::kInternal, "cannot commit " + final_path + ": " + std::strerror(err));
    }
    unlink(tmp.c_str());
  }
  return Status();
}

Status Repository::Delete(const std::string& name) {
  GPUSAMPLER_RETURN_IF_ERROR(CheckWritable());
  NameGuard guard(this, name);
  const std::string base = dir_ + "/" + name;
  bool existed = false;
  // The commit markers first (NAME.dataset, NAME.labels.npy), then the rest.
  for (const char* suffix :
       {kContainerSuffix, kLabelsSuffix, ".features.npy", ".row_splits.npy", kScoresSuffix}) {
    if (unlink((base + suffix).c_str()) == 0) {
      existed = true;
    } else if (errno != ENOENT) {
      return Status(Code::kFailedPrecondition,
                    "cannot delete " + base + suffix + " from --dataset-dir: " + Errno());
    }
  }
  if (Fd d(open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)); d.get() >= 0) fsync(d.get());
  ForgetBad(name);
  const bool resident = registry_->Delete(name);
  if (hooks_.on_change) hooks_.on_change();
  if (!existed && !resident) {
    return Status(Code::kNotFound, "dataset '" + name + "' not found");
  }
  return Status::Ok();
}

Status Repository::ListNotResident(std::vector<v1::DatasetInfo>* out) const {
  out->clear();
  const std::vector<std::shared_ptr<const Dataset>> resident = registry_->List();  // by name
  Listing on_disk;
  if (!Scan(&on_disk)) {
    return Status(Code::kUnavailable,
                  "--dataset-dir " + dir_ +
                      " cannot be listed now (logged); retry, or ask "
                      "another replica",
                  1000);
  }
  std::lock_guard<std::mutex> lock(listed_mu_);
  std::map<std::string, ListedInfo> listed;  // what this listing saw: the next one's cache
  auto r = resident.begin();
  for (const auto& [name, entry] : on_disk) {
    while (r != resident.end() && (*r)->name < name) ++r;  // both sorted by name
    if (r != resident.end() && (*r)->name == name) continue;
    if (!ValidDatasetName(name) || KnownBad(name, entry.version)) {
      continue;  // never sampled: a bad name, or this version failed to load
    }
    ListedInfo seen;
    const auto cached = listed_.find(name);
    if (cached != listed_.end() && cached->second.version == entry.version) {
      seen = std::move(cached->second);
    } else {
      seen.version = entry.version;
      Opened o;
      // Only what can be sampled: files that open, sections that agree, a size within the
      // budget.
      if (OpenDataset(dir_, name, entry.container, &o).ok() && Consistent(o) &&
          o.payload() <= registry_->max_bytes()) {
        seen.info = InfoFromHeaders(name, o);
      }
    }
    if (seen.info) out->push_back(*seen.info);
    listed.emplace_hint(listed.end(), name, std::move(seen));
  }
  listed_ = std::move(listed);
  return Status::Ok();
}

bool Repository::IsLeftover(const std::string& file) {
  const size_t at = file.rfind(kTmpMarker);
  if (at == std::string::npos || at == 0) return false;
  if (!ValidDatasetName(file.substr(0, at))) return false;
  // <pid>-<16 lowercase hex>, exactly, after the marker (CommitUpload's format).
  const std::string rest = file.substr(at + std::strlen(kTmpMarker));
  const size_t dash = rest.find('-');
  if (dash == 0 || dash == std::string::npos || dash > 10) return false;
  for (size_t i = 0; i < dash; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return false;
  }
  const std::string rnd = rest.substr(dash + 1);
  if (rnd.size() != 16) return false;
  for (char c : rnd) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

int Repository::CleanLeftovers(std::chrono::seconds age) {
  int removed = 0;
  DIR* d = opendir(dir_.c_str());
  if (d == nullptr) return 0;
  const auto now = std::chrono::system_clock::now();
  while (dirent* e = readdir(d)) {
    const std::string file = e->d_name;
    if (!IsLeftover(file)) continue;
    const std::string path = dir_ + "/" + file;
    struct stat st;
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    const auto mtime = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec);
    if (now - mtime < age) continue;
    if (unlink(path.c_str()) == 0) {
      ++removed;
      spdlog::info("--dataset-dir: removed {}, an upload never committed (older than {} s)", path,
                   age.count());
    }
  }
  closedir(d);
  return removed;
}

}  // namespace gpusampler::server
