#include "nabla/opkit/attr_tensor.h"

#include <algorithm>

#include "nabla/error.h"

namespace nabla::opkit {
namespace {

// The two contexts as the helpers read them.
bool Runtime(const InferShapeContext& c) { return c.IsRuntime(); }
bool Runtime(const ExecutionContext&) { return true; }
std::string WhereOf(const InferShapeContext& c) { return c.Where(); }
std::string WhereOf(const ExecutionContext& c) { return StrCat("op '", c.Op().Type(), "'"); }
Shape ShapeOf(const InferShapeContext& c, const std::string& slot) { return c.InputShape(slot); }
Shape ShapeOf(const ExecutionContext& c, const std::string& slot) { return c.Input(slot).GetShape(); }

template <typename Ctx>
std::string Arg(const Ctx& c, const std::string& slot, size_t i, bool list) {
  const auto& args = c.Op().Input(slot);
  return StrCat("input ", slot, list ? StrCat("[", i, "]") : std::string(), " (var '", i < args.size() ? args[i] : "",
                "')");
}

std::vector<int64_t> Ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.Numel()));
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.GetDType() == DType::kInt32 ? t.Data<int32_t>()[i] : t.Data<int64_t>()[i];
  return v;
}

// "attribute scale": built in place (kernels ask on every call, and
// operator+ on a literal measures and reallocates more than it needs to).
template <size_t N>
void SetSource(std::string& source, const char (&what)[N], const std::string& name) {
  source.reserve(N - 1 + name.size());
  source.append(what, N - 1).append(name);
}

bool IsInt(DType d) { return d == DType::kInt32 || d == DType::kInt64; }

// The int32/int64 tensor of input slot[i]; `one` asks for exactly one
// element, else rank 1.
template <typename Ctx>
std::vector<int64_t> ReadInts(const Ctx& c, const std::string& slot, size_t i, bool one, bool list) {
  Tensor t = c.InputHostTensor(slot, i);
  const bool ok = IsInt(t.GetDType()) && (one ? t.Numel() == 1 : t.Rank() == 1);
  // Read at run time only: a wrong tensor is the computation's failure.
  NABLA_ENFORCE(ok, kRuntime, WhereOf(c), ": ", Arg(c, slot, i, list), " must be an int32 or int64 tensor ",
                one ? "of one element" : "of rank 1", ", but received ", t.DebugString());
  return Ints(t);
}

template <typename Ctx>
AttrValue<std::vector<int64_t>> IntListImpl(const Ctx& c, const std::string& tensor_slot, const std::string& list_slot,
                                            const std::string& attr, ListOrder order) {
  const bool has_tensor = !tensor_slot.empty() && c.HasInput(tensor_slot);
  const bool has_list = !list_slot.empty() && c.HasInput(list_slot);
  AttrValue<std::vector<int64_t>> r;
  if (has_tensor && (!has_list || order == ListOrder::kTensorFirst)) {
    SetSource(r.source, "input ", tensor_slot);
    if (Runtime(c)) {
      r.value = ReadInts(c, tensor_slot, 0, false, false);
    } else {
      const Shape s = ShapeOf(c, tensor_slot);
      if (s.size() == 1 && s[0] >= 0) r.size = s[0];
    }
  } else if (has_list) {
    SetSource(r.source, "input ", list_slot);
    const size_t n = c.InputSize(list_slot);
    if (Runtime(c)) {
      std::vector<int64_t> v;
      for (size_t i = 0; i < n; ++i) v.push_back(ReadInts(c, list_slot, i, true, true)[0]);
      r.value = std::move(v);
    }
    r.size = static_cast<int64_t>(n);
  } else {
    SetSource(r.source, "attribute ", attr);
    const auto& a = c.template Attr<std::vector<int>>(attr);
    r.value = std::vector<int64_t>(a.begin(), a.end());
  }
  if (r.value) r.size = static_cast<int64_t>(r.value->size());
  return r;
}

template <typename Ctx>
AttrValue<int64_t> IntImpl(const Ctx& c, const std::string& slot, const std::string& attr) {
  AttrValue<int64_t> r;
  if (c.HasInput(slot)) {
    SetSource(r.source, "input ", slot);
    if (Runtime(c)) r.value = ReadInts(c, slot, 0, true, false)[0];
  } else {
    SetSource(r.source, "attribute ", attr);
    r.value = c.template Attr<int>(attr);
  }
  return r;
}

template <typename Ctx>
AttrValue<double> FloatImpl(const Ctx& c, const std::string& slot, const std::string& attr) {
  AttrValue<double> r;
  if (c.HasInput(slot)) {
    SetSource(r.source, "input ", slot);
    if (Runtime(c)) {
      Tensor t = c.InputHostTensor(slot, 0);
      const DType d = t.GetDType();
      NABLA_ENFORCE((d == DType::kFloat32 || d == DType::kFloat64) && t.Numel() == 1, kRuntime, WhereOf(c), ": ",
                    Arg(c, slot, 0, false), " must be a float32 or float64 tensor of one element, but received ",
                    t.DebugString());
      r.value = d == DType::kFloat32 ? static_cast<double>(t.Data<float>()[0]) : t.Data<double>()[0];
    }
  } else {
    SetSource(r.source, "attribute ", attr);
    r.value = c.template Attr<float>(attr);
  }
  return r;
}

template <typename Ctx>
Shape CreatedShapeImpl(const Ctx& c) {
  const auto shape = IntListImpl(c, "ShapeTensor", "ShapeTensorList", "shape", ListOrder::kTensorFirst);
  if (!shape.Known()) return Shape(std::max<int64_t>(shape.size, 0), -1);
  for (int64_t d : *shape)
    NABLA_ENFORCE_VALUE(d >= 0, shape, WhereOf(c), ": ", shape.source, " = ", ValuesToString(*shape), " holds ", d,
                        ": every dim of Out's shape must be >= 0");
  return Shape(shape->begin(), shape->end());
}

template <typename Ctx>
std::optional<int> AxisImpl(const Ctx& c, const std::string& slot, const std::string& attr, size_t rank) {
  const auto axis = IntImpl(c, slot, attr);
  if (!axis.Known()) return std::nullopt;
  const int64_t r = static_cast<int64_t>(rank);
  if (!(*axis >= -r && *axis < r))
    ThrowError(axis.BadValueKind(ErrorKind::kOutOfRange),
               StrCat(WhereOf(c), ": ", axis.source, " must be in [", -r, ", ", r, ") for an input of rank ", r,
                      ", but received ", *axis));
  return static_cast<int>(*axis < 0 ? *axis + r : *axis);
}

}  // namespace

std::optional<int> AxisAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr,
                                    size_t rank) {
  return AxisImpl(c, slot, attr, rank);
}
int AxisAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr, size_t rank) {
  return *AxisImpl(c, slot, attr, rank);
}

Shape CreatedShape(const InferShapeContext& c) { return CreatedShapeImpl(c); }
Shape CreatedShape(const ExecutionContext& c) { return CreatedShapeImpl(c); }

AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const InferShapeContext& c, const std::string& tensor_slot,
                                                    const std::string& list_slot, const std::string& attr,
                                                    ListOrder order) {
  return IntListImpl(c, tensor_slot, list_slot, attr, order);
}
AttrValue<std::vector<int64_t>> IntListAttrOrTensor(const ExecutionContext& c, const std::string& tensor_slot,
                                                    const std::string& list_slot, const std::string& attr,
                                                    ListOrder order) {
  return IntListImpl(c, tensor_slot, list_slot, attr, order);
}
AttrValue<int64_t> IntAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr) {
  return IntImpl(c, slot, attr);
}
AttrValue<int64_t> IntAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr) {
  return IntImpl(c, slot, attr);
}
AttrValue<double> FloatAttrOrTensor(const InferShapeContext& c, const std::string& slot, const std::string& attr) {
  return FloatImpl(c, slot, attr);
}
AttrValue<double> FloatAttrOrTensor(const ExecutionContext& c, const std::string& slot, const std::string& attr) {
  return FloatImpl(c, slot, attr);
}

std::string ValuesToString(const std::vector<int64_t>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) s += StrCat(i ? ", " : "", values[i]);
  return s + "]";
}

}  // namespace nabla::opkit
