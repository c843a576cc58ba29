#include "nabla/train/dataset.h"

#include <fnmatch.h>
#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/npy.h"

namespace nabla::train {

const char* ElemKindName(ElemKind kind) {
  switch (kind) {
    case ElemKind::kUInt8:
      return "uint8";
    case ElemKind::kInt8:
      return "int8";
    case ElemKind::kInt16:
      return "int16";
    case ElemKind::kInt32:
      return "int32";
    case ElemKind::kInt64:
      return "int64";
    case ElemKind::kFloat32:
      return "float32";
    case ElemKind::kFloat64:
      return "float64";
    case ElemKind::kBool:
      return "bool";
  }
  return "?";
}

namespace {

size_t ElemSize(ElemKind kind) {
  switch (kind) {
    case ElemKind::kUInt8:
    case ElemKind::kInt8:
    case ElemKind::kBool:
      return 1;
    case ElemKind::kInt16:
      return 2;
    case ElemKind::kInt32:
    case ElemKind::kFloat32:
      return 4;
    case ElemKind::kInt64:
    case ElemKind::kFloat64:
      return 8;
  }
  return 1;
}

template <typename T>
T Load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// zlib reads gzip and, transparently, plain files.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    NABLA_ENFORCE(file_ != nullptr, kNotFound, path, ": cannot open the dataset file (", std::strerror(errno), ")");
    gzbuffer(file_, 1 << 20);
  }
  ~GzFile() {
    if (file_) gzclose(file_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly `n` bytes or throws naming what was being read.
  void Read(void* dst, size_t n, const char* what) {
    const size_t want = n;
    auto* out = static_cast<uint8_t*>(dst);
    while (n > 0) {
      unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
      int got = gzread(file_, out, chunk);
      if (got < 0) ThrowDamaged(what);
      NABLA_ENFORCE(got > 0, kInvalidArgument, path_, ": the file ends inside the ", what, " at byte ", pos_,
                    "; expected ", n, " more bytes of ", want, " (truncated download?)");
      out += got;
      pos_ += static_cast<size_t>(got);
      n -= static_cast<size_t>(got);
    }
  }
  // Appends `n` bytes to `out`, growing it as the bytes arrive: a header
  // that lies about the size runs into the end of the file instead of
  // allocating what it claims.
  void ReadGrowing(std::vector<uint8_t>& out, size_t n, const char* what) {
    const size_t promised = n;
    while (n > 0) {
      // Chunks grow with what has arrived (1 MiB, then doubling up to 64 MiB).
      const size_t chunk = std::min({n, std::max<size_t>(out.size(), size_t(1) << 20), size_t(1) << 26});
      const size_t old = out.size();
      out.resize(old + chunk);
      const int got = gzread(file_, out.data() + old, static_cast<unsigned>(out.size() - old));
      if (got < 0) ThrowDamaged(what);
      out.resize(old + static_cast<size_t>(got));
      NABLA_ENFORCE(got > 0, kInvalidArgument, path_, ": the file ends inside the ", what, " at byte ", pos_,
                    "; the header promises ", promised, " bytes of it, ", n,
                    " more than the file holds (truncated file or a lying header?)");
      pos_ += static_cast<size_t>(got);
      n -= static_cast<size_t>(got);
    }
  }
  // A gzip stream's CRC and length are checked only when its end is read, so
  // damaged compressed bytes surface here as zlib's error, not as extra data.
  bool AtEnd() {
    uint8_t b;
    const int got = gzread(file_, &b, 1);
    if (got < 0) ThrowDamaged("end of the data");
    return got == 0;
  }

 private:
  [[noreturn]] void ThrowDamaged(const char* what) {
    int err = 0;
    std::string msg = gzerror(file_, &err);
    // zlib prefixes its message with the path, which the error names already.
    if (msg.rfind(path_ + ": ", 0) == 0) msg = msg.substr(path_.size() + 2);
    NABLA_THROW(kInvalidArgument, path_, ": the compressed data is damaged (zlib: ", msg, ") reading the ", what,
                " near uncompressed byte ", pos_);
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  size_t pos_ = 0;  // uncompressed bytes read so far
};

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

void SwapBytesInPlace(std::vector<uint8_t>& bytes, size_t elem) {
  if (elem == 1) return;
  for (size_t i = 0; i + elem <= bytes.size(); i += elem) std::reverse(bytes.begin() + i, bytes.begin() + i + elem);
}

void CheckSameRows(const Dataset& d) {
  const Column* first = nullptr;
  for (const auto& [name, c] : d.columns) {
    if (!first) {
      first = &c;
      continue;
    }
    NABLA_ENFORCE(c.rows == first->rows, kInvalidArgument, "dataset columns disagree on the number of samples: '",
                  first->name, "' (", first->source, ") has ", first->rows, " but '", c.name, "' (", c.source, ") has ",
                  c.rows);
  }
}

std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  size_t e = s.find_last_not_of(" \t\r");
  return s.substr(b, e - b + 1);
}

std::vector<std::string> SplitCsvLine(const std::string& line, char delim) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char ch = line[i];
    if (ch == '"') {
      if (quoted && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else {
        quoted = !quoted;
      }
    } else if (ch == delim && !quoted) {
      out.push_back(Trim(cur));
      cur.clear();
    } else {
      cur += ch;
    }
  }
  out.push_back(Trim(cur));
  return out;
}

// Column indices of one spec, given the header (may be empty).
std::vector<size_t> ResolveCsvSpec(const std::string& spec, const std::vector<std::string>& header, size_t ncols,
                                   const std::string& path) {
  auto parse_index = [&](const std::string& s, size_t* out) {
    if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos) return false;
    *out = std::stoull(s);
    return true;
  };
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    size_t a = 0, b = ncols;
    std::string sa = spec.substr(0, colon), sb = spec.substr(colon + 1);
    NABLA_ENFORCE(parse_index(sa, &a) && (sb.empty() || parse_index(sb, &b)), kInvalidArgument, path,
                  ": CSV column range '", spec, "' must be 'a:b' or 'a:' with 0-based column numbers");
    NABLA_ENFORCE(a < b && b <= ncols, kOutOfRange, path, ": CSV column range '", spec, "' selects no columns or ",
                  "runs past the last one; the file has ", ncols, " columns");
    std::vector<size_t> out;
    for (size_t i = a; i < b; ++i) out.push_back(i);
    return out;
  }
  auto it = std::find(header.begin(), header.end(), spec);
  if (it != header.end()) return {static_cast<size_t>(it - header.begin())};
  size_t idx = 0;
  if (parse_index(spec, &idx)) {
    NABLA_ENFORCE(idx < ncols, kOutOfRange, path, ": CSV column ", idx, " does not exist; the file has ", ncols,
                  " columns (0-based)");
    return {idx};
  }
  std::string names;
  for (const auto& h : header) names += (names.empty() ? "" : ", ") + h;
  NABLA_THROW(kNotFound, path, ": no CSV column named '", spec, "'",
              header.empty() ? std::string(" (the file has no header; use a 0-based index or a range 'a:b')")
                             : StrCat("; the header has: ", names));
}

}  // namespace

int64_t Column::SampleNumel() const {
  int64_t n = 1;
  for (int64_t d : sample_shape) n *= d;
  return n;
}

double Column::ValueAsDouble(int64_t i) const {
  const uint8_t* p = bytes.data() + static_cast<size_t>(i) * ElemSize(kind);
  switch (kind) {
    case ElemKind::kUInt8:
      return *p;
    case ElemKind::kInt8:
      return static_cast<int8_t>(*p);
    case ElemKind::kBool:
      return *p ? 1.0 : 0.0;
    case ElemKind::kInt16:
      return Load<int16_t>(p);
    case ElemKind::kInt32:
      return Load<int32_t>(p);
    case ElemKind::kInt64:
      return static_cast<double>(Load<int64_t>(p));
    case ElemKind::kFloat32:
      return Load<float>(p);
    case ElemKind::kFloat64:
      return Load<double>(p);
  }
  return 0;
}

int64_t Dataset::Size() const { return columns.empty() ? 0 : columns.begin()->second.rows; }

const Column& Dataset::Get(const std::string& name) const {
  auto it = columns.find(name);
  NABLA_ENFORCE(it != columns.end(), kNotFound, "the dataset has no column '", name, "'");
  return it->second;
}

Column ReadIdxFile(const std::string& path, const std::string& column_name) {
  GzFile f(path);
  uint8_t magic[4];
  f.Read(magic, 4, "IDX magic number");
  NABLA_ENFORCE(magic[0] == 0 && magic[1] == 0, kInvalidArgument, path,
                ": not an IDX file: expected the magic to start with two zero bytes, but received ", int(magic[0]),
                ", ", int(magic[1]));
  Column c;
  c.name = column_name;
  c.source = path;
  switch (magic[2]) {
    case 0x08:
      c.kind = ElemKind::kUInt8;
      break;
    case 0x09:
      c.kind = ElemKind::kInt8;
      break;
    case 0x0B:
      c.kind = ElemKind::kInt16;
      break;
    case 0x0C:
      c.kind = ElemKind::kInt32;
      break;
    case 0x0D:
      c.kind = ElemKind::kFloat32;
      break;
    case 0x0E:
      c.kind = ElemKind::kFloat64;
      break;
    default:
      NABLA_THROW(kInvalidArgument, path, ": unknown IDX element type 0x", std::hex, int(magic[2]),
                  "; expected 0x08, 0x09, 0x0B, 0x0C, 0x0D or 0x0E");
  }
  int ndims = magic[3];
  NABLA_ENFORCE(ndims >= 1, kInvalidArgument, path, ": an IDX file needs at least one dimension, but received 0");
  std::vector<uint8_t> dims_raw(4 * ndims);
  f.Read(dims_raw.data(), dims_raw.size(), "IDX dimensions");
  Shape dims;
  int64_t numel = 1;
  for (int i = 0; i < ndims; ++i) {
    int64_t d = BigEndian32(&dims_raw[4 * i]);
    dims.push_back(d);
    // Checked before multiplying: a zero-free run of large dims must not
    // overflow the count (found by tests/fuzz/fuzz_idx).
    NABLA_ENFORCE(d == 0 || numel <= (int64_t(1) << 36) / d, kInvalidArgument, path, ": IDX dimensions ",
                  ShapeToString(dims), " are implausibly large (corrupt header?)");
    numel *= d;
  }
  c.rows = dims[0];
  c.sample_shape.assign(dims.begin() + 1, dims.end());
  f.ReadGrowing(c.bytes, static_cast<size_t>(numel) * ElemSize(c.kind), "IDX data");
  NABLA_ENFORCE(f.AtEnd(), kInvalidArgument, path, ": trailing bytes after the ", ShapeToString(dims),
                " IDX data; the header does not match the file");
  SwapBytesInPlace(c.bytes, ElemSize(c.kind));  // IDX is big-endian; this is a little-endian host
  return c;
}

Dataset ReadIdxDataset(const std::map<std::string, std::string>& files) {
  Dataset d;
  for (const auto& [name, path] : files) d.columns[name] = ReadIdxFile(path, name);
  CheckSameRows(d);
  return d;
}

std::vector<std::string> ExpandTextFiles(const std::vector<std::string>& patterns,
                                         const std::vector<std::string>& exclude) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const auto& pattern : patterns) {
    glob_t g{};
    const int rc = glob(pattern.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches;
    if (rc == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    NABLA_ENFORCE(rc == 0 || rc == GLOB_NOMATCH, kInvalidArgument, pattern, ": the glob failed (glob(3) code ", rc,
                  ")");
    // A file whose own name holds glob characters ("a[1].txt") is itself.
    std::error_code exists_ec;
    if (matches.empty() && std::filesystem::exists(pattern, exists_ec)) matches.push_back(pattern);
    NABLA_ENFORCE(!matches.empty(), kNotFound, pattern, ": no such file (the pattern matches nothing)");
    std::sort(matches.begin(), matches.end());
    for (const auto& m : matches) {
      bool excluded = false;
      for (const auto& e : exclude) excluded = excluded || fnmatch(e.c_str(), m.c_str(), 0) == 0;
      if (excluded) continue;
      // Checked before anything opens it: a named pipe blocks open(2) until
      // a writer comes, and a folder reads as empty text.
      std::error_code type_ec;
      NABLA_ENFORCE(std::filesystem::is_regular_file(m, type_ec), kInvalidArgument, m,
                    ": not a regular file (a folder, pipe or device); name text files, or a glob of them",
                    m == pattern ? "" : StrCat(" (matched by ", pattern, ")"));
      std::error_code ec;
      const std::string canonical = std::filesystem::canonical(m, ec).string();
      if (!seen.insert(ec ? m : canonical).second) continue;
      out.push_back(m);
    }
  }
  NABLA_ENFORCE(!out.empty(), kNotFound, "the text files: every match of the patterns is excluded");
  return out;
}

TextSplits ReadTextDataset(const std::vector<std::string>& files, int64_t seq_len, double eval_fraction,
                           const std::string& split) {
  NABLA_ENFORCE(seq_len >= 1 && seq_len <= kMaxTextSeqLen, kInvalidArgument,
                "text dataset: seq_len must lie in [1, 2^30], but received ", seq_len);
  NABLA_ENFORCE(eval_fraction >= 0 && eval_fraction < 1, kInvalidArgument,
                "text dataset: eval_fraction must lie in [0, 1), but received ", eval_fraction);
  std::vector<uint8_t> train_bytes, eval_bytes;  // windows back to back, seq_len + 1 each
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the text file (", std::strerror(errno), ")");
    std::ostringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    const int64_t size = static_cast<int64_t>(text.size());
    const int64_t windows = size > seq_len ? (size - 1) / seq_len : 0;
    int64_t held = static_cast<int64_t>(std::llround(eval_fraction * static_cast<double>(windows)));
    if (eval_fraction > 0 && held == 0 && windows >= 2) held = 1;
    for (int64_t w = 0; w < windows; ++w) {
      auto& dst = w >= windows - held ? eval_bytes : train_bytes;
      const auto* src = reinterpret_cast<const uint8_t*>(text.data()) + w * seq_len;
      dst.insert(dst.end(), src, src + seq_len + 1);
    }
  }
  const std::string source =
      files.size() == 1 ? files[0] : files[0] + " (and " + std::to_string(files.size() - 1) + " more text files)";
  auto make = [&](const std::vector<uint8_t>& bytes) {
    Dataset d;
    const int64_t rows = static_cast<int64_t>(bytes.size()) / (seq_len + 1);
    for (const char* name : {"inputs", "labels"}) {
      Column c;
      c.name = name;
      c.source = source;
      c.kind = ElemKind::kUInt8;
      c.sample_shape = {seq_len};
      c.rows = rows;
      c.bytes.resize(static_cast<size_t>(rows * seq_len));
      const int64_t shift = std::string(name) == "labels" ? 1 : 0;
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(c.bytes.data() + r * seq_len, bytes.data() + r * (seq_len + 1) + shift,
                    static_cast<size_t>(seq_len));
      d.columns[name] = std::move(c);
    }
    return d;
  };
  TextSplits s{make(train_bytes), make(eval_bytes)};
  NABLA_ENFORCE(s.train.Size() > 0, kInvalidArgument, source, ": the text holds no ", split, " window of ", seq_len + 1,
                " bytes (files shorter than that, or all held out)");
  return s;
}

Dataset ReadNpyDataset(const std::map<std::string, std::string>& files) {
  Dataset d;
  for (const auto& [name, path] : files) {
    Tensor t = ReadNpy(path, HostDevice());
    NABLA_ENFORCE(t.Rank() >= 1, kInvalidArgument, path, ": a dataset array needs a first (sample) dimension, ",
                  "but received a scalar");
    Column c;
    c.name = name;
    c.source = path;
    switch (t.GetDType()) {
      case DType::kFloat32:
        c.kind = ElemKind::kFloat32;
        break;
      case DType::kFloat64:
        c.kind = ElemKind::kFloat64;
        break;
      case DType::kInt32:
        c.kind = ElemKind::kInt32;
        break;
      case DType::kInt64:
        c.kind = ElemKind::kInt64;
        break;
      case DType::kBool:
        c.kind = ElemKind::kBool;
        break;
      case DType::kBFloat16:  // .npy files never hold it
        NABLA_THROW(kInvalidArgument, path, ": bfloat16 data columns are not supported");
    }
    c.rows = t.Dim(0);
    c.sample_shape.assign(t.GetShape().begin() + 1, t.GetShape().end());
    c.bytes.resize(t.Bytes());
    if (!c.bytes.empty()) HostDevice().CopyToHost(c.bytes.data(), t.RawData(), t.Bytes());
    d.columns[name] = std::move(c);
  }
  CheckSameRows(d);
  return d;
}

Dataset ReadCsvDataset(const std::string& path, const std::vector<std::string>& specs, bool header, char delimiter) {
  std::ifstream in(path);
  NABLA_ENFORCE(in.good(), kNotFound, path, ": cannot open the dataset file (", std::strerror(errno), ")");
  std::string line;
  std::vector<std::string> names;
  int64_t line_no = 0;
  size_t ncols = 0;
  if (header) {
    NABLA_ENFORCE(static_cast<bool>(std::getline(in, line)), kInvalidArgument, path,
                  ": the CSV file is empty; expected a header line");
    ++line_no;
    names = SplitCsvLine(line, delimiter);
    ncols = names.size();
  }
  std::vector<std::vector<size_t>> picks;
  std::vector<std::vector<double>> values(specs.size());
  int64_t rows = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (Trim(line).empty()) continue;
    std::vector<std::string> cells = SplitCsvLine(line, delimiter);
    if (ncols == 0) ncols = cells.size();
    NABLA_ENFORCE(cells.size() == ncols, kInvalidArgument, path, ":", line_no, ": expected ", ncols,
                  " CSV fields, but received ", cells.size());
    if (picks.empty()) {
      for (const auto& s : specs) picks.push_back(ResolveCsvSpec(s, names, ncols, path));
    }
    for (size_t s = 0; s < specs.size(); ++s) {
      for (size_t col : picks[s]) {
        const std::string& cell = cells[col];
        char* end = nullptr;
        errno = 0;
        double v = std::strtod(cell.c_str(), &end);
        NABLA_ENFORCE(!cell.empty() && end == cell.c_str() + cell.size(), kInvalidArgument, path, ":", line_no,
                      ": CSV field ", col + 1, " must be a number, but received '", cell, "'");
        values[s].push_back(v);
      }
    }
    ++rows;
  }
  NABLA_ENFORCE(rows > 0, kInvalidArgument, path, ": the CSV file has no data rows");
  Dataset d;
  for (size_t s = 0; s < specs.size(); ++s) {
    Column c;
    c.name = specs[s];
    c.source = path;
    c.kind = ElemKind::kFloat64;
    c.rows = rows;
    // A single column is one value per sample; a range is a feature vector.
    if (specs[s].find(':') != std::string::npos) c.sample_shape = {static_cast<int64_t>(picks[s].size())};
    c.bytes.resize(values[s].size() * sizeof(double));
    std::memcpy(c.bytes.data(), values[s].data(), c.bytes.size());
    d.columns[c.name] = std::move(c);
  }
  return d;
}

FeedBinding BindFeed(const std::string& var, const Shape& var_shape, DType var_dtype, const Column& column,
                     std::optional<double> scale, const std::string& where) {
  FeedBinding f;
  f.var = var;
  f.column = &column;
  f.dtype = var_dtype;
  NABLA_ENFORCE(!var_shape.empty(), kInvalidArgument, where, ": feed var '", var,
                "' must have a batch dimension first (e.g. [-1, 784]), but its shape is []");
  f.sample_shape.assign(var_shape.begin() + 1, var_shape.end());
  int64_t want = 1;
  for (int64_t d : f.sample_shape) {
    NABLA_ENFORCE(d >= 0, kInvalidArgument, where, ": feed var '", var, "' has shape ", ShapeToString(var_shape),
                  "; only its first (batch) dimension may be -1");
    want *= d;
  }
  NABLA_ENFORCE(want == column.SampleNumel(), kInvalidArgument, where, ": the dataset column '", column.name, "' (",
                column.source, ") holds samples of shape ", ShapeToString(column.sample_shape), " (",
                column.SampleNumel(), " values), but feed var '", var, "' has shape ", ShapeToString(var_shape), " (",
                want, " values per sample)");
  if (IsFloating(var_dtype)) {
    f.scale = scale.value_or(column.kind == ElemKind::kUInt8 ? 1.0 / 255.0 : 1.0);
  } else {
    NABLA_ENFORCE(!scale.has_value(), kInvalidArgument, where, ": feed var '", var, "' is ", DTypeName(var_dtype),
                  "; a scale applies only to float vars");
  }
  return f;
}

void CheckLabelRange(const FeedBinding& feed, int64_t classes, const std::string& where) {
  const Column& c = *feed.column;
  const int64_t n = c.rows * c.SampleNumel();
  for (int64_t i = 0; i < n; ++i) {
    double v = c.ValueAsDouble(i);
    NABLA_ENFORCE(v >= 0 && v < classes && v == std::floor(v), kOutOfRange, where, ": label out of range in ", c.source,
                  " (sample ", i / c.SampleNumel(), "): expected an integer in [0, ", classes, ") for feed var '",
                  feed.var, "', but received ", v);
  }
}

std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[i] = i;
  if (!shuffle || n < 2) return order;
  // mt19937_64 is specified bit for bit by the standard; the bounded draw
  // is our own (the standard distributions vary between libraries).
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32), static_cast<uint32_t>(epoch),
                    static_cast<uint32_t>(static_cast<uint64_t>(epoch) >> 32)};
  std::mt19937_64 rng(seq);
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t range = static_cast<uint64_t>(i) + 1;
    const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
    uint64_t r;
    do {
      r = rng();
    } while (r >= limit);
    std::swap(order[i], order[static_cast<int64_t>(r % range)]);
  }
  return order;
}

int64_t NumBatches(int64_t n, int64_t batch_size, bool drop_last) {
  return drop_last ? n / batch_size : (n + batch_size - 1) / batch_size;
}

namespace {

template <typename T>
void FillBatch(const FeedBinding& f, const std::vector<int64_t>& order, int64_t begin, int64_t end, T* out) {
  const Column& c = *f.column;
  const int64_t per = c.SampleNumel();
  const double scale = f.scale;
  for (int64_t b = begin; b < end; ++b) {
    const int64_t row = order[b];
    T* dst = out + (b - begin) * per;
    const int64_t base = row * per;
    if constexpr (std::is_floating_point_v<T>) {
      if (c.kind == ElemKind::kUInt8) {  // the hot path: IDX images
        const uint8_t* src = c.bytes.data() + base;
        const T s = static_cast<T>(scale);
        for (int64_t j = 0; j < per; ++j) dst[j] = static_cast<T>(src[j]) * s;
        continue;
      }
      for (int64_t j = 0; j < per; ++j) dst[j] = static_cast<T>(c.ValueAsDouble(base + j) * scale);
    } else {
      for (int64_t j = 0; j < per; ++j) {
        double v = c.ValueAsDouble(base + j);
        NABLA_ENFORCE(v == std::floor(v), kInvalidArgument, c.source, ": sample ", row, " of column '", c.name,
                      "' feeds integer var '", f.var, "', but holds the non-integer value ", v);
        dst[j] = static_cast<T>(v);
      }
    }
  }
}

}  // namespace

Tensor MakeBatch(const FeedBinding& f, const std::vector<int64_t>& order, int64_t begin, int64_t end, Device& device) {
  Shape shape{end - begin};
  shape.insert(shape.end(), f.sample_shape.begin(), f.sample_shape.end());
  Tensor host;
  Device& host_device = HostDevice();
  host.Allocate(host_device, f.dtype, shape);
  switch (f.dtype) {
    case DType::kFloat32:
      FillBatch(f, order, begin, end, host.MutableData<float>());
      break;
    case DType::kFloat64:
      FillBatch(f, order, begin, end, host.MutableData<double>());
      break;
    case DType::kInt32:
      FillBatch(f, order, begin, end, host.MutableData<int32_t>());
      break;
    case DType::kInt64:
      FillBatch(f, order, begin, end, host.MutableData<int64_t>());
      break;
    case DType::kBool:
      FillBatch(f, order, begin, end, host.MutableData<bool>());
      break;
    case DType::kBFloat16:
      NABLA_THROW(kInvalidArgument, "feed var '", f.var,
                  "' is bfloat16; declare feeds float32 (precision: bf16 casts inside the program)");
  }
  if (&device == &host_device) return host;
  Tensor t;
  t.CopyFrom(host, device);
  return t;
}

}  // namespace nabla::train
