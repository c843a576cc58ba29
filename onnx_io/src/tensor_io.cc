// TensorProto <-> host tensors, dtype names, and the Node accessors. An ONNX
// file is untrusted: every size in it is checked against the bytes that back
// it before a tensor is allocated.
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "importer.h"
#include "nabla/device.h"

namespace nabla::onnx_io {

namespace {

// 2^40 bytes: far beyond any model, small enough that a product of dims
// checked against it cannot overflow.
constexpr int64_t kMaxBytes = int64_t(1) << 40;

int64_t CheckedNumel(const google::protobuf::RepeatedField<int64_t>& dims, size_t elem, const std::string& where) {
  int64_t n = 1;
  for (int64_t d : dims) {
    NABLA_ENFORCE(d >= 0, kInvalidArgument, where, ": expected non-negative dims but received ", d);
    if (d == 0) n = 0;
    if (n == 0) continue;
    NABLA_ENFORCE(d <= kMaxBytes / static_cast<int64_t>(elem) / n, kInvalidArgument, where, ": dims give more than ",
                  kMaxBytes, " bytes");
    n *= d;
  }
  return n;
}

std::string ReadExternal(const onnx::TensorProto& t, const std::string& model_dir, size_t want,
                         const std::string& where) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const auto& kv : t.external_data()) {
    auto number = [&](const std::string& v) {
      NABLA_ENFORCE(!v.empty() && v.size() < 19 && v.find_first_not_of("0123456789") == std::string::npos,
                    kInvalidArgument, where, ": external data ", kv.key(), " '", v, "' is not a byte count");
      return static_cast<int64_t>(std::stoll(v));
    };
    if (kv.key() == "location") location = kv.value();
    if (kv.key() == "offset") offset = number(kv.value());
    if (kv.key() == "length") length = number(kv.value());
  }
  NABLA_ENFORCE(!location.empty(), kInvalidArgument, where, ": external data without a location");
  const std::filesystem::path rel(location);
  // The ONNX rule: external files lie under the model's folder.
  NABLA_ENFORCE(rel.is_relative() && location.find("..") == std::string::npos, kInvalidArgument, where,
                ": external data location '", location, "' is not a relative path under the model's folder");
  const std::string file = (std::filesystem::path(model_dir) / rel).string();
  struct stat st {};
  NABLA_ENFORCE(::stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode), kNotFound, where, ": external data file ", file,
                " is missing");
  const int64_t size = static_cast<int64_t>(st.st_size);
  NABLA_ENFORCE(offset <= size, kInvalidArgument, where, ": external data offset ", offset, " is past the end of ",
                file, " (", size, " bytes)");
  if (length < 0) length = size - offset;
  NABLA_ENFORCE(length <= size - offset, kInvalidArgument, where, ": external data [", offset, ", ", offset + length,
                ") runs past the end of ", file, " (", size, " bytes)");
  NABLA_ENFORCE(static_cast<size_t>(length) == want, kInvalidArgument, where, ": external data holds ", length,
                " bytes but the dims need ", want);
  std::ifstream in(file, std::ios::binary);
  std::string data(want, '\0');
  in.seekg(offset);
  in.read(data.data(), static_cast<std::streamsize>(want));
  NABLA_ENFORCE(in.good() || want == 0, kExternal, where, ": cannot read ", want, " bytes of ", file);
  return data;
}

template <typename T, typename Field>
void CopyTyped(const Field& field, int64_t n, void* out, const std::string& where, const char* field_name) {
  NABLA_ENFORCE(field.size() == n, kInvalidArgument, where, ": ", field_name, " holds ", field.size(),
                " values but the dims need ", n);
  T* dst = static_cast<T*>(out);
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(field.Get(static_cast<int>(i)));
}

}  // namespace

bool OnnxToDType(int onnx_type, DType* out) {
  switch (onnx_type) {
    case onnx::TensorProto::FLOAT:
      *out = DType::kFloat32;
      return true;
    case onnx::TensorProto::DOUBLE:
      *out = DType::kFloat64;
      return true;
    case onnx::TensorProto::INT32:
      *out = DType::kInt32;
      return true;
    case onnx::TensorProto::INT64:
      *out = DType::kInt64;
      return true;
    case onnx::TensorProto::BOOL:
      *out = DType::kBool;
      return true;
    case onnx::TensorProto::BFLOAT16:
      *out = DType::kBFloat16;
      return true;
    default:
      return false;
  }
}

int DTypeToOnnx(DType d) {
  switch (d) {
    case DType::kFloat32:
      return onnx::TensorProto::FLOAT;
    case DType::kFloat64:
      return onnx::TensorProto::DOUBLE;
    case DType::kInt32:
      return onnx::TensorProto::INT32;
    case DType::kInt64:
      return onnx::TensorProto::INT64;
    case DType::kBool:
      return onnx::TensorProto::BOOL;
    case DType::kBFloat16:
      return onnx::TensorProto::BFLOAT16;
  }
  return onnx::TensorProto::UNDEFINED;
}

std::string OnnxTypeName(int onnx_type) {
  if (onnx::TensorProto::DataType_IsValid(onnx_type)) {
    return onnx::TensorProto::DataType_Name(static_cast<onnx::TensorProto::DataType>(onnx_type));
  }
  return "type " + std::to_string(onnx_type);
}

Tensor ReadTensorProto(const onnx::TensorProto& t, const std::string& model_dir, const std::string& where) {
  DType dtype;
  NABLA_ENFORCE(OnnxToDType(t.data_type(), &dtype), kUnimplemented, where, ": dtype ", OnnxTypeName(t.data_type()),
                " has no nabla dtype (", kNablaDTypes, ")");
  NABLA_ENFORCE(!t.has_segment(), kUnimplemented, where, ": segmented tensors are not supported");
  const size_t elem = DTypeSize(dtype);
  const int64_t n = CheckedNumel(t.dims(), elem, where);
  const size_t bytes = static_cast<size_t>(n) * elem;
  Shape shape(t.dims().begin(), t.dims().end());
  Tensor out;
  if (t.data_location() == onnx::TensorProto::EXTERNAL) {
    const std::string data = ReadExternal(t, model_dir, bytes, where);
    void* dst = out.Allocate(HostDevice(), dtype, shape);
    if (bytes) std::memcpy(dst, data.data(), bytes);
    return out;
  }
  if (t.has_raw_data()) {
    NABLA_ENFORCE(t.raw_data().size() == bytes, kInvalidArgument, where, ": raw_data holds ", t.raw_data().size(),
                  " bytes but the dims need ", bytes);
    void* dst = out.Allocate(HostDevice(), dtype, shape);
    if (bytes) std::memcpy(dst, t.raw_data().data(), bytes);
    return out;
  }
  // Typed fields: the count is checked before the allocation.
  int64_t have = 0;
  switch (dtype) {
    case DType::kFloat32:
      have = t.float_data_size();
      break;
    case DType::kFloat64:
      have = t.double_data_size();
      break;
    case DType::kInt64:
      have = t.int64_data_size();
      break;
    default:
      have = t.int32_data_size();
      break;
  }
  NABLA_ENFORCE(have == n, kInvalidArgument, where, ": the tensor holds ", have, " values but the dims need ", n);
  void* dst = out.Allocate(HostDevice(), dtype, shape);
  switch (dtype) {
    case DType::kFloat32:
      CopyTyped<float>(t.float_data(), n, dst, where, "float_data");
      break;
    case DType::kFloat64:
      CopyTyped<double>(t.double_data(), n, dst, where, "double_data");
      break;
    case DType::kInt64:
      CopyTyped<int64_t>(t.int64_data(), n, dst, where, "int64_data");
      break;
    case DType::kInt32:
      CopyTyped<int32_t>(t.int32_data(), n, dst, where, "int32_data");
      break;
    case DType::kBool:
      CopyTyped<bool>(t.int32_data(), n, dst, where, "int32_data");
      break;
    case DType::kBFloat16: {
      // ONNX keeps bfloat16 as its 16 bits in int32_data.
      bfloat16* dst16 = static_cast<bfloat16*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t bits = static_cast<uint16_t>(t.int32_data(static_cast<int>(i)));
        std::memcpy(&dst16[i], &bits, sizeof bits);
      }
      break;
    }
  }
  return out;
}

ConstValue ToConst(const Tensor& t) {
  ConstValue c;
  c.dtype = t.GetDType();
  c.dims.assign(t.GetShape().begin(), t.GetShape().end());
  const int64_t n = t.Numel();
  c.data.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    switch (c.dtype) {
      case DType::kFloat32:
        c.data[i] = t.Data<float>()[i];
        break;
      case DType::kFloat64:
        c.data[i] = t.Data<double>()[i];
        break;
      case DType::kInt32:
        c.data[i] = t.Data<int32_t>()[i];
        break;
      case DType::kInt64:
        c.data[i] = t.Data<int64_t>()[i];
        break;
      case DType::kBool:
        c.data[i] = t.Data<bool>()[i] ? 1 : 0;
        break;
      case DType::kBFloat16:
        c.data[i] = Bf16ToFloat(t.Data<bfloat16>()[i]);
        break;
    }
  }
  return c;
}

namespace {
template <typename T>
T Saturate(long double v) {
  if (std::is_floating_point<T>::value) return static_cast<T>(v);
  if (v != v) return 0;
  if (v >= static_cast<long double>(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  if (v <= static_cast<long double>(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  return static_cast<T>(v);
}
}  // namespace

Tensor ToTensor(const ConstValue& c) {
  Tensor t;
  Shape shape(c.dims.begin(), c.dims.end());
  t.Allocate(HostDevice(), c.dtype, shape);
  for (size_t i = 0; i < c.data.size(); ++i) {
    switch (c.dtype) {
      case DType::kFloat32:
        t.MutableData<float>()[i] = Saturate<float>(c.data[i]);
        break;
      case DType::kFloat64:
        t.MutableData<double>()[i] = Saturate<double>(c.data[i]);
        break;
      case DType::kInt32:
        t.MutableData<int32_t>()[i] = Saturate<int32_t>(c.data[i]);
        break;
      case DType::kInt64:
        t.MutableData<int64_t>()[i] = Saturate<int64_t>(c.data[i]);
        break;
      case DType::kBool:
        t.MutableData<bool>()[i] = c.data[i] != 0;
        break;
      case DType::kBFloat16:
        t.MutableData<bfloat16>()[i] = FloatToBf16(static_cast<float>(c.data[i]));
        break;
    }
  }
  return t;
}

// ---- Node -------------------------------------------------------------------

std::string Node::Describe() const {
  std::string name = p_.name();
  if (name.empty() && p_.output_size() > 0) name = p_.output(0);
  return "node '" + name + "' (" + p_.op_type() + ")";
}

const std::string& Node::Input(int i) const {
  if (!HasInput(i)) Fail(ErrorKind::kInvalidArgument, "expected input " + std::to_string(i) + " but it is absent");
  return p_.input(i);
}

const std::string& Node::Output(int i) const {
  if (!HasOutput(i)) Fail(ErrorKind::kInvalidArgument, "expected output " + std::to_string(i) + " but it is absent");
  return p_.output(i);
}

const onnx::AttributeProto* Node::Find(const std::string& name) const {
  for (const auto& a : p_.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t Node::Int(const std::string& name, int64_t def) const {
  const auto* a = Find(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INT) Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not an int");
  return a->i();
}

float Node::Float(const std::string& name, float def) const {
  const auto* a = Find(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::FLOAT) {
    Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not a float");
  }
  return a->f();
}

std::string Node::String(const std::string& name, const std::string& def) const {
  const auto* a = Find(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::STRING) {
    Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not a string");
  }
  return a->s();
}

std::vector<int64_t> Node::Ints(const std::string& name, const std::vector<int64_t>& def) const {
  const auto* a = Find(name);
  if (!a) return def;
  if (a->type() != onnx::AttributeProto::INTS) Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not ints");
  return {a->ints().begin(), a->ints().end()};
}

std::vector<float> Node::Floats(const std::string& name) const {
  const auto* a = Find(name);
  if (!a) return {};
  if (a->type() != onnx::AttributeProto::FLOATS) {
    Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not floats");
  }
  return {a->floats().begin(), a->floats().end()};
}

const onnx::GraphProto& Node::GraphAttr(const std::string& name) const {
  const auto* a = Find(name);
  if (!a || a->type() != onnx::AttributeProto::GRAPH || !a->has_g()) {
    Fail(ErrorKind::kInvalidArgument, "attribute " + name + " (a graph) is missing");
  }
  return a->g();
}

const onnx::TensorProto* Node::TensorAttr(const std::string& name) const {
  const auto* a = Find(name);
  if (!a) return nullptr;
  if (a->type() != onnx::AttributeProto::TENSOR) {
    Fail(ErrorKind::kInvalidArgument, "attribute " + name + " is not a tensor");
  }
  return &a->t();
}

void Node::Fail(ErrorKind kind, const std::string& what) const { ThrowError(kind, Describe() + ": " + what); }

void Node::Unsupported(const std::string& what) const {
  ThrowError(ErrorKind::kUnimplemented, "no converter for " + Describe() + ": " + what);
}

}  // namespace nabla::onnx_io
