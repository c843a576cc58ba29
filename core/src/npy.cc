// NumPy .npy reading and writing (format versions 1.0, 2.0 and 3.0).
//
// The header is a Python dict literal; rather than accept "anything
// ast.literal_eval would", the parser takes exactly the grammar np.save
// writes (three keys, quoted strings, True/False, an int tuple) so that a
// damaged file fails with the position of the damage instead of a bad tensor.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "nabla's .npy I/O assumes a little-endian host"
#endif

namespace nabla {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// np.save aligns the data to 64 bytes so that memory-mapped arrays are aligned.
constexpr size_t kAlign = 64;

struct Descr {
  const char* text;
  DType dtype;
};
constexpr Descr kDescrs[] = {
    {"<f4", DType::kFloat32}, {"<f8", DType::kFloat64}, {"<i4", DType::kInt32},
    {"<i8", DType::kInt64},   {"|b1", DType::kBool},
};

const char* DescrOf(DType dtype) {
  for (const Descr& d : kDescrs) {
    if (d.dtype == dtype) return d.text;
  }
  NABLA_THROW(kInvalidArgument, "no .npy descr for dtype ", DTypeName(dtype));
}

std::string Printable(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// A cursor over the header dict with errors that name the file and offset.
class HeaderParser {
 public:
  HeaderParser(const std::string& path, const std::string& text) : path_(path), text_(text) {}

  [[noreturn]] void Fail(const std::string& what) const {
    std::string near = text_.substr(pos_, 20);
    NABLA_THROW(kInvalidArgument, path_, ": malformed .npy header: ", what, " at header offset ", pos_,
                " but received '", Printable(near), "'");
  }

  void SkipSpace() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool TryConsume(char c) {
    SkipSpace();
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void Expect(char c) {
    if (!TryConsume(c)) Fail(std::string("expected '") + c + "'");
  }
  std::string String() {
    SkipSpace();
    if (pos_ >= text_.size() || (text_[pos_] != '\'' && text_[pos_] != '"')) Fail("expected a quoted string");
    char quote = text_[pos_++];
    size_t end = text_.find(quote, pos_);
    if (end == std::string::npos) Fail("unterminated string");
    std::string s = text_.substr(pos_, end - pos_);
    if (s.find('\\') != std::string::npos) Fail("escape sequences are not supported in header strings");
    pos_ = end + 1;
    return s;
  }
  bool Bool() {
    SkipSpace();
    if (text_.compare(pos_, 4, "True") == 0) {
      pos_ += 4;
      return true;
    }
    if (text_.compare(pos_, 5, "False") == 0) {
      pos_ += 5;
      return false;
    }
    Fail("expected True or False");
  }
  int64_t Int() {
    SkipSpace();
    size_t start = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      int digit = text_[pos_] - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        pos_ = start;
        Fail("dimension too large");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    // numpy writes Python ints, which may carry an 'L' suffix in files from Python 2.
    if (pos_ > start && pos_ < text_.size() && text_[pos_] == 'L') ++pos_;
    if (pos_ == start) Fail("expected a non-negative integer dimension");
    return v;
  }
  Shape Tuple() {
    Expect('(');
    Shape shape;
    if (TryConsume(')')) return shape;
    while (true) {
      shape.push_back(Int());
      if (TryConsume(')')) break;
      Expect(',');
      if (TryConsume(')')) break;
    }
    return shape;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }

 private:
  const std::string& path_;
  const std::string& text_;
  size_t pos_ = 0;
};

struct Header {
  DType dtype = DType::kFloat32;
  Shape shape;
};

Header ParseHeader(const std::string& path, const std::string& text) {
  HeaderParser p(path, text);
  Header h;
  bool have_descr = false, have_order = false, have_shape = false;
  p.Expect('{');
  while (!p.TryConsume('}')) {
    std::string key = p.String();
    p.Expect(':');
    if (key == "descr" && !have_descr) {
      have_descr = true;
      std::string descr = p.String();
      bool known = false;
      for (const Descr& d : kDescrs) {
        if (descr == d.text) {
          h.dtype = d.dtype;
          known = true;
        }
      }
      NABLA_ENFORCE(known, kInvalidArgument, path, ": unsupported .npy dtype '", Printable(descr),
                    "': expected one of '<f4' (float32), '<f8' (float64), '<i4' (int32), '<i8' (int64), "
                    "'|b1' (bool); convert with arr.astype(...)");
    } else if (key == "fortran_order" && !have_order) {
      have_order = true;
      NABLA_ENFORCE(!p.Bool(), kInvalidArgument, path,
                    ": Fortran-order arrays are not supported: expected fortran_order False but received True; "
                    "save np.ascontiguousarray(arr) instead");
    } else if (key == "shape" && !have_shape) {
      have_shape = true;
      h.shape = p.Tuple();
    } else {
      NABLA_THROW(kInvalidArgument, path, ": malformed .npy header: unexpected or repeated key '", Printable(key),
                  "': expected exactly 'descr', 'fortran_order' and 'shape'");
    }
    if (!p.TryConsume(',')) {
      p.Expect('}');
      break;
    }
  }
  if (!p.AtEnd()) p.Fail("expected only padding after the closing '}'");
  NABLA_ENFORCE(have_descr && have_order && have_shape, kInvalidArgument, path,
                ": malformed .npy header: expected the keys 'descr', 'fortran_order' and 'shape' but ",
                !have_descr   ? "'descr'"
                : !have_order ? "'fortran_order'"
                              : "'shape'",
                " is missing");
  return h;
}

uint32_t ReadLittleEndian(const std::string& bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i])) << (8 * i);
  return v;
}

std::string ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    int err = errno;
    NABLA_THROW(kNotFound, path, ": cannot open .npy file: ", std::strerror(err));
  }
  std::ostringstream buf;
  buf << in.rdbuf();
  NABLA_ENFORCE(!in.bad(), kExternal, path, ": read failed: ", std::strerror(errno));
  return buf.str();
}

// Temp file in the same folder, fsync, rename: readers see the old file or the
// whole new one, never a prefix.
// TODO(cli): switch to WriteFileAtomically (program_io.h) once program_io.cc lands.
void WriteNpyFileAtomically(const std::string& path, const std::string& data) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  NABLA_ENFORCE(fd >= 0, kExternal, path, ": cannot create '", tmp, "': ", std::strerror(errno));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      NABLA_THROW(kExternal, path, ": write failed: ", std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  int err = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    if (synced) err = errno;
    ::unlink(tmp.c_str());
    NABLA_THROW(kExternal, path, ": write failed: ", std::strerror(err));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    NABLA_THROW(kExternal, path, ": cannot rename '", tmp, "' into place: ", std::strerror(err));
  }
}

}  // namespace

Tensor ReadNpy(const std::string& path, Device& device) {
  const std::string bytes = ReadWholeFile(path);
  NABLA_ENFORCE(bytes.size() >= kMagicLen && bytes.compare(0, kMagicLen, kMagic, kMagicLen) == 0, kInvalidArgument,
                path, ": not a .npy file: expected the magic string '\\x93NUMPY' but received '",
                Printable(bytes.substr(0, kMagicLen)), "'");
  NABLA_ENFORCE(bytes.size() >= kMagicLen + 2, kInvalidArgument, path,
                ": truncated .npy file: it ends inside the version field");
  const int major = static_cast<unsigned char>(bytes[kMagicLen]);
  const int minor = static_cast<unsigned char>(bytes[kMagicLen + 1]);
  NABLA_ENFORCE((major == 1 || major == 2 || major == 3) && minor == 0, kInvalidArgument, path,
                ": unsupported .npy format version: expected 1.0, 2.0 or 3.0 but received ", major, ".", minor);
  const size_t len_width = major == 1 ? 2 : 4;
  const size_t len_offset = kMagicLen + 2;
  NABLA_ENFORCE(bytes.size() >= len_offset + len_width, kInvalidArgument, path,
                ": truncated .npy file: it ends inside the header length field");
  const size_t header_len = ReadLittleEndian(bytes, len_offset, len_width);
  const size_t data_offset = len_offset + len_width + header_len;
  NABLA_ENFORCE(bytes.size() >= data_offset, kInvalidArgument, path, ": truncated .npy file: the header claims ",
                header_len, " bytes but only ", bytes.size() - len_offset - len_width, " follow");
  // Version 3.0 only differs by allowing UTF-8 in the header; the grammar
  // accepted here is pure ASCII, so the same parser serves all three.
  const Header h = ParseHeader(path, bytes.substr(len_offset + len_width, header_len));

  int64_t numel = 1;
  for (int64_t d : h.shape) {
    NABLA_ENFORCE(d == 0 || numel <= std::numeric_limits<int64_t>::max() / d, kInvalidArgument, path, ": .npy shape ",
                  ShapeToString(h.shape), " has too many elements");
    numel *= d;
  }
  const size_t elem = DTypeSize(h.dtype);
  NABLA_ENFORCE(static_cast<uint64_t>(numel) <= std::numeric_limits<uint64_t>::max() / elem, kInvalidArgument, path,
                ": .npy shape ", ShapeToString(h.shape), " has too many elements");
  const uint64_t want = static_cast<uint64_t>(numel) * elem;
  const uint64_t have = bytes.size() - data_offset;
  NABLA_ENFORCE(have >= want, kInvalidArgument, path, ": truncated .npy data: shape ", ShapeToString(h.shape), " ",
                DTypeName(h.dtype), " needs ", want, " bytes but only ", have, " follow the header");
  NABLA_ENFORCE(have == want, kInvalidArgument, path, ": .npy file has ", have - want,
                " unexpected bytes after the data of shape ", ShapeToString(h.shape), " ", DTypeName(h.dtype));
  const char* data = bytes.data() + data_offset;
  if (h.dtype == DType::kBool) {
    // Any byte other than 0 or 1 would be an invalid C++ bool.
    for (int64_t i = 0; i < numel; ++i) {
      NABLA_ENFORCE(data[i] == 0 || data[i] == 1, kInvalidArgument, path, ": bool element ", i, " holds the byte ",
                    static_cast<int>(static_cast<unsigned char>(data[i])), " but a bool must be 0 or 1");
    }
  }

  Tensor t;
  void* dst = t.Allocate(device, h.dtype, h.shape);
  device.CopyFromHost(dst, data, want);
  return t;
}

void WriteNpy(const std::string& path, const Tensor& tensor) {
  NABLA_ENFORCE(tensor.IsInitialized(), kPreconditionNotMet, path, ": cannot write a tensor that holds no data (",
                tensor.DebugString(), ")");
  if (tensor.GetDType() == DType::kBFloat16) {
    // NumPy has no bfloat16: such a tensor (a mixed-precision program's
    // intermediate) is written widened to float32, exactly.
    std::vector<bfloat16> h(static_cast<size_t>(tensor.Numel()));
    if (!h.empty()) tensor.GetDevice()->CopyToHost(h.data(), tensor.RawData(), tensor.Bytes());
    Tensor wide;
    float* w = wide.Allocate<float>(*tensor.GetDevice(), tensor.GetShape());
    std::vector<float> f(h.size());
    for (size_t i = 0; i < h.size(); ++i) f[i] = Bf16ToFloat(h[i]);
    if (!f.empty()) tensor.GetDevice()->CopyFromHost(w, f.data(), f.size() * sizeof(float));
    WriteNpy(path, wide);
    return;
  }
  std::string shape = "(";
  for (size_t i = 0; i < tensor.Rank(); ++i) {
    if (i) shape += ", ";
    shape += std::to_string(tensor.Dim(i));
  }
  if (tensor.Rank() == 1) shape += ",";
  shape += ")";
  std::string header =
      std::string("{'descr': '") + DescrOf(tensor.GetDType()) + "', 'fortran_order': False, 'shape': " + shape + ", }";

  // Version 1.0 stores the header length in 16 bits; longer headers (very
  // high ranks) need 2.0.
  size_t prefix = kMagicLen + 2 + 2;
  int major = 1;
  size_t padded = (prefix + header.size() + 1 + kAlign - 1) / kAlign * kAlign;
  if (padded - prefix > 0xffff) {
    major = 2;
    prefix = kMagicLen + 2 + 4;
    padded = (prefix + header.size() + 1 + kAlign - 1) / kAlign * kAlign;
  }
  header.append(padded - prefix - header.size() - 1, ' ');
  header += '\n';

  std::string out(kMagic, kMagicLen);
  out += static_cast<char>(major);
  out += '\0';
  const uint32_t len = static_cast<uint32_t>(header.size());
  for (size_t i = 0; i < (major == 1 ? 2u : 4u); ++i) out += static_cast<char>((len >> (8 * i)) & 0xff);
  out += header;
  const size_t data_at = out.size();
  out.resize(data_at + tensor.Bytes());
  if (tensor.Bytes() != 0) tensor.GetDevice()->CopyToHost(&out[data_at], tensor.RawData(), tensor.Bytes());
  WriteNpyFileAtomically(path, out);
}

}  // namespace nabla
