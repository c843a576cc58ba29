// Folding at import time: a node whose inputs are all known (Shape of a known
// shape, initializers, Constant outputs) becomes a constant, one small
// function per ONNX op. This is what turns PyTorch's shape arithmetic
// (Shape → Gather → Unsqueeze → Concat → Reshape) into Reshape's attribute.
// A folder returns {} to decline (the converter then runs instead).
#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>

#include "importer.h"

namespace nabla::onnx_io {

namespace {

constexpr int64_t kMaxFoldOutput = int64_t(1) << 20;

using Args = std::vector<const ConstValue*>;

int64_t NormAxis(const Node& n, int64_t axis, int64_t rank) {
  if (rank <= 0 || axis < -rank || axis >= rank) {
    n.Fail(ErrorKind::kOutOfRange, "axis " + std::to_string(axis) + " is outside [" + std::to_string(-rank) + ", " +
                                       std::to_string(rank) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

int64_t Numel(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || (d > 0 && n > kMaxFoldOutput / d)) return kMaxFoldOutput + 1;
    n *= d;
  }
  return n;
}

const ConstValue& Need(const Node& n, const Args& a, size_t i) {
  if (i >= a.size() || !a[i]) n.Fail(ErrorKind::kInvalidArgument, "expected input " + std::to_string(i));
  return *a[i];
}

std::vector<int64_t> Ints(const ConstValue& c) {
  std::vector<int64_t> v;
  for (long double x : c.data) v.push_back(static_cast<int64_t>(x));
  return v;
}

// Strides of a row-major shape.
std::vector<int64_t> Strides(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (int64_t i = static_cast<int64_t>(dims.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * dims[i + 1];
  return s;
}

// numpy broadcasting of several operands; {} when the result is too big.
std::vector<ConstValue> Broadcast(const Node& n, const std::vector<const ConstValue*>& xs,
                                  const std::function<long double(const std::vector<long double>&)>& f, DType out) {
  size_t rank = 0;
  for (auto* x : xs) rank = std::max(rank, x->dims.size());
  std::vector<int64_t> dims(rank, 1);
  for (auto* x : xs) {
    const size_t off = rank - x->dims.size();
    for (size_t i = 0; i < x->dims.size(); ++i) {
      const int64_t d = x->dims[i];
      if (d == dims[off + i] || d == 1) continue;
      if (dims[off + i] != 1) n.Fail(ErrorKind::kInvalidArgument, "operand shapes do not broadcast");
      dims[off + i] = d;
    }
  }
  const int64_t total = Numel(dims);
  if (total > kMaxFoldOutput) return {};
  ConstValue r;
  r.dtype = out;
  r.dims = dims;
  r.data.resize(static_cast<size_t>(total));
  const std::vector<int64_t> st = Strides(dims);
  std::vector<long double> vals(xs.size());
  for (int64_t i = 0; i < total; ++i) {
    for (size_t k = 0; k < xs.size(); ++k) {
      const auto* x = xs[k];
      const size_t off = rank - x->dims.size();
      int64_t idx = 0, stride = 1;
      for (int64_t d = static_cast<int64_t>(x->dims.size()) - 1; d >= 0; --d) {
        const int64_t coord = (i / st[off + d]) % dims[off + d];
        if (x->dims[d] != 1) idx += coord * stride;
        stride *= x->dims[d];
      }
      vals[k] = x->data[static_cast<size_t>(idx)];
    }
    r.data[static_cast<size_t>(i)] = f(vals);
  }
  return {r};
}

long double Truncate(DType d, long double v) {
  if (IsFloating(d)) return v;
  return std::trunc(v);
}

std::vector<ConstValue> Binary(const Node& n, const Args& a,
                               const std::function<long double(long double, long double)>& f) {
  const ConstValue& x = Need(n, a, 0);
  const ConstValue& y = Need(n, a, 1);
  const DType d = x.dtype;
  return Broadcast(
      n, {&x, &y}, [&](const std::vector<long double>& v) { return Truncate(d, f(v[0], v[1])); }, d);
}

std::vector<ConstValue> Unary(const Node& n, const Args& a, const std::function<long double(long double)>& f) {
  ConstValue r = Need(n, a, 0);
  for (auto& v : r.data) v = f(v);
  return {r};
}

std::vector<ConstValue> FoldConstant(const Node& n, const Args&, const Importer&) {
  ConstValue c;
  if (const auto* t = n.TensorAttr("value")) {
    if (t->data_location() == onnx::TensorProto::EXTERNAL) n.Unsupported("a Constant with external data");
    return {ToConst(ReadTensorProto(*t, ".", n.Describe()))};
  }
  if (n.HasAttr("value_float")) {
    c.dtype = DType::kFloat32;
    c.data = {n.Float("value_float", 0)};
    return {c};
  }
  if (n.HasAttr("value_int")) {
    c.dtype = DType::kInt64;
    c.data = {static_cast<long double>(n.Int("value_int", 0))};
    return {c};
  }
  if (n.HasAttr("value_floats")) {
    c.dtype = DType::kFloat32;
    for (float f : n.Floats("value_floats")) c.data.push_back(f);
    c.dims = {static_cast<int64_t>(c.data.size())};
    return {c};
  }
  if (n.HasAttr("value_ints")) {
    c.dtype = DType::kInt64;
    for (int64_t v : n.Ints("value_ints")) c.data.push_back(static_cast<long double>(v));
    c.dims = {static_cast<int64_t>(c.data.size())};
    return {c};
  }
  n.Unsupported("a Constant without value, value_float(s) or value_int(s) (sparse and string constants)");
}

std::vector<ConstValue> FoldShape(const Node& n, const Args&, const Importer& imp) {
  std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  const int64_t rank = static_cast<int64_t>(shape.size());
  int64_t start = n.Int("start", 0), end = n.Int("end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, 0, rank);
  ConstValue c;
  c.dtype = DType::kInt64;
  for (int64_t i = start; i < end; ++i) c.data.push_back(static_cast<long double>(shape[i]));
  c.dims = {static_cast<int64_t>(c.data.size())};
  return {c};
}

std::vector<ConstValue> FoldSize(const Node& n, const Args&, const Importer& imp) {
  ConstValue c;
  c.dtype = DType::kInt64;
  long double total = 1;
  for (int64_t d : imp.ShapeOf(n, n.Input(0))) total *= d;
  c.data = {total};
  return {c};
}

std::vector<ConstValue> FoldIdentity(const Node& n, const Args& a, const Importer&) { return {Need(n, a, 0)}; }

std::vector<ConstValue> FoldCast(const Node& n, const Args& a, const Importer&) {
  ConstValue r = Need(n, a, 0);
  DType to;
  if (!OnnxToDType(static_cast<int>(n.Int("to", 0)), &to)) return {};
  r.dtype = to;
  for (auto& v : r.data) {
    if (to == DType::kBool) v = v != 0;
    if (to == DType::kFloat32) v = static_cast<float>(v);
    if (to == DType::kInt32 || to == DType::kInt64) v = std::trunc(v);
  }
  return {r};
}

std::vector<ConstValue> FoldGather(const Node& n, const Args& a, const Importer&) {
  const ConstValue& x = Need(n, a, 0);
  const ConstValue& idx = Need(n, a, 1);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  if (rank == 0) n.Fail(ErrorKind::kInvalidArgument, "Gather of a scalar");
  const int64_t axis = NormAxis(n, n.Int("axis", 0), rank);
  const int64_t dim = x.dims[axis];
  std::vector<int64_t> out_dims(x.dims.begin(), x.dims.begin() + axis);
  out_dims.insert(out_dims.end(), idx.dims.begin(), idx.dims.end());
  out_dims.insert(out_dims.end(), x.dims.begin() + axis + 1, x.dims.end());
  if (Numel(out_dims) > kMaxFoldOutput) return {};
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= x.dims[i];
  for (int64_t i = axis + 1; i < rank; ++i) inner *= x.dims[i];
  ConstValue r;
  r.dtype = x.dtype;
  r.dims = out_dims;
  for (int64_t o = 0; o < outer; ++o) {
    for (long double iv : idx.data) {
      int64_t k = static_cast<int64_t>(iv);
      if (k < 0) k += dim;
      if (k < 0 || k >= dim) {
        n.Fail(ErrorKind::kOutOfRange, "index " + std::to_string(static_cast<int64_t>(iv)) + " is outside [-" +
                                           std::to_string(dim) + ", " + std::to_string(dim) + ")");
      }
      for (int64_t i = 0; i < inner; ++i) r.data.push_back(x.data[static_cast<size_t>((o * dim + k) * inner + i)]);
    }
  }
  return {r};
}

std::vector<ConstValue> FoldConcat(const Node& n, const Args& a, const Importer&) {
  const ConstValue& first = Need(n, a, 0);
  const int64_t rank = static_cast<int64_t>(first.dims.size());
  const int64_t axis = NormAxis(n, n.Int("axis", 0), rank);
  std::vector<int64_t> dims = first.dims;
  dims[axis] = 0;
  for (size_t k = 0; k < a.size(); ++k) {
    const ConstValue& x = Need(n, a, k);
    if (static_cast<int64_t>(x.dims.size()) != rank) n.Fail(ErrorKind::kInvalidArgument, "inputs differ in rank");
    for (int64_t i = 0; i < rank; ++i) {
      if (i != axis && x.dims[i] != first.dims[i]) n.Fail(ErrorKind::kInvalidArgument, "inputs differ in shape");
    }
    dims[axis] += x.dims[axis];
  }
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= dims[i];
  ConstValue r;
  r.dtype = first.dtype;
  r.dims = dims;
  for (int64_t o = 0; o < outer; ++o) {
    for (size_t k = 0; k < a.size(); ++k) {
      const ConstValue& x = *a[k];
      const int64_t chunk = x.Numel() / std::max<int64_t>(outer, 1);
      for (int64_t i = 0; i < chunk; ++i) r.data.push_back(x.data[static_cast<size_t>(o * chunk + i)]);
    }
  }
  return {r};
}

std::vector<int64_t> AxesOf(const Node& n, const Args& a, const Importer& imp) {
  if (imp.Opset() >= 13 && a.size() > 1 && a[1]) return Ints(*a[1]);
  return n.Ints("axes");
}

std::vector<ConstValue> FoldUnsqueeze(const Node& n, const Args& a, const Importer& imp) {
  ConstValue r = Need(n, a, 0);
  std::vector<int64_t> axes = AxesOf(n, a, imp);
  const int64_t out_rank = static_cast<int64_t>(r.dims.size() + axes.size());
  for (auto& ax : axes) ax = NormAxis(n, ax, out_rank);
  std::sort(axes.begin(), axes.end());
  for (int64_t ax : axes) r.dims.insert(r.dims.begin() + ax, 1);
  return {r};
}

std::vector<ConstValue> FoldSqueeze(const Node& n, const Args& a, const Importer& imp) {
  ConstValue r = Need(n, a, 0);
  std::vector<int64_t> axes = AxesOf(n, a, imp);
  const int64_t rank = static_cast<int64_t>(r.dims.size());
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i) drop[i] = r.dims[i] == 1;
  }
  for (int64_t ax : axes) {
    ax = NormAxis(n, ax, rank);
    if (r.dims[ax] != 1) n.Fail(ErrorKind::kInvalidArgument, "squeezed dim " + std::to_string(ax) + " is not 1");
    drop[ax] = true;
  }
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < rank; ++i) {
    if (!drop[i]) dims.push_back(r.dims[i]);
  }
  r.dims = dims;
  return {r};
}

std::vector<ConstValue> FoldReshape(const Node& n, const Args& a, const Importer&) {
  ConstValue r = Need(n, a, 0);
  std::vector<int64_t> shape = Ints(Need(n, a, 1));
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < -1 || shape[i] > kMaxFoldOutput) n.Fail(ErrorKind::kInvalidArgument, "a bad dim in the shape");
    if (shape[i] == 0 && !n.Int("allowzero", 0)) {
      if (i >= r.dims.size()) n.Fail(ErrorKind::kInvalidArgument, "shape copies a dim the input lacks");
      shape[i] = r.dims[i];
    }
    if (shape[i] == -1) {
      if (infer >= 0) n.Fail(ErrorKind::kInvalidArgument, "two -1 dims in the shape");
      infer = static_cast<int64_t>(i);
    } else {
      known = Numel({known, shape[i]});
    }
  }
  if (infer >= 0) shape[infer] = known > 0 ? r.Numel() / known : 0;
  if (Numel(shape) != r.Numel()) n.Fail(ErrorKind::kInvalidArgument, "shape does not match the element count");
  r.dims = shape;
  return {r};
}

std::vector<ConstValue> FoldSlice(const Node& n, const Args& a, const Importer& imp) {
  const ConstValue& x = Need(n, a, 0);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (imp.Opset() >= 10) {
    starts = Ints(Need(n, a, 1));
    ends = Ints(Need(n, a, 2));
    if (a.size() > 3 && a[3]) axes = Ints(*a[3]);
    if (a.size() > 4 && a[4]) steps = Ints(*a[4]);
  } else {
    starts = n.Ints("starts");
    ends = n.Ints("ends");
    axes = n.Ints("axes");
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    n.Fail(ErrorKind::kInvalidArgument, "starts, ends, axes and steps differ in length");
  }
  std::vector<int64_t> b(rank, 0), st(rank, 1), cnt(x.dims.begin(), x.dims.end());
  for (size_t k = 0; k < axes.size(); ++k) {
    const int64_t ax = NormAxis(n, axes[k], rank);
    const int64_t dim = x.dims[ax];
    const int64_t step = steps.at(k);
    if (step == 0) n.Fail(ErrorKind::kInvalidArgument, "a step of 0");
    int64_t s = starts.at(k), e = ends.at(k);
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      cnt[ax] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      cnt[ax] = s > e ? (s - e - step - 1) / -step : 0;
    }
    b[ax] = s;
    st[ax] = step;
  }
  ConstValue r;
  r.dtype = x.dtype;
  r.dims = cnt;
  const int64_t total = Numel(cnt);
  const std::vector<int64_t> xs = Strides(x.dims), os = Strides(cnt);
  for (int64_t i = 0; i < total; ++i) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d) src += (b[d] + ((i / os[d]) % cnt[d]) * st[d]) * xs[d];
    r.data.push_back(x.data[static_cast<size_t>(src)]);
  }
  return {r};
}

std::vector<ConstValue> FoldConstantOfShape(const Node& n, const Args& a, const Importer&) {
  std::vector<int64_t> shape = Ints(Need(n, a, 0));
  if (Numel(shape) > kMaxFoldOutput) return {};
  ConstValue r;
  r.dtype = DType::kFloat32;
  long double value = 0;
  if (const auto* t = n.TensorAttr("value")) {
    if (t->data_location() == onnx::TensorProto::EXTERNAL) n.Unsupported("a value with external data");
    ConstValue v = ToConst(ReadTensorProto(*t, ".", n.Describe()));
    r.dtype = v.dtype;
    if (!v.data.empty()) value = v.data[0];
  }
  r.dims = shape;
  r.data.assign(static_cast<size_t>(Numel(shape)), value);
  return {r};
}

std::vector<ConstValue> FoldWhere(const Node& n, const Args& a, const Importer&) {
  const ConstValue& x = Need(n, a, 1);
  return Broadcast(
      n, {&Need(n, a, 0), &x, &Need(n, a, 2)}, [](const std::vector<long double>& v) { return v[0] ? v[1] : v[2]; },
      x.dtype);
}

std::vector<ConstValue> FoldEqual(const Node& n, const Args& a, const Importer&) {
  return Broadcast(
      n, {&Need(n, a, 0), &Need(n, a, 1)}, [](const std::vector<long double>& v) { return v[0] == v[1]; },
      DType::kBool);
}

std::vector<ConstValue> FoldRange(const Node& n, const Args& a, const Importer&) {
  const long double start = Need(n, a, 0).data.at(0), limit = Need(n, a, 1).data.at(0),
                    delta = Need(n, a, 2).data.at(0);
  if (delta == 0) n.Fail(ErrorKind::kInvalidArgument, "a delta of 0");
  const long double count = std::max<long double>(std::ceil((limit - start) / delta), 0);
  if (count > kMaxFoldOutput) return {};
  ConstValue r;
  r.dtype = Need(n, a, 0).dtype;
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) r.data.push_back(start + i * delta);
  r.dims = {static_cast<int64_t>(r.data.size())};
  return {r};
}

std::vector<ConstValue> FoldTranspose(const Node& n, const Args& a, const Importer&) {
  const ConstValue& x = Need(n, a, 0);
  const int64_t rank = static_cast<int64_t>(x.dims.size());
  std::vector<int64_t> perm = n.Ints("perm");
  if (perm.empty()) {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int64_t>(perm.size()) != rank) n.Fail(ErrorKind::kInvalidArgument, "perm does not match the rank");
  std::vector<int64_t> dims;
  std::vector<bool> used(static_cast<size_t>(rank), false);
  for (auto& p : perm) {
    p = NormAxis(n, p, rank);
    if (used[p]) n.Fail(ErrorKind::kInvalidArgument, "perm is not a permutation");
    used[p] = true;
    dims.push_back(x.dims[p]);
  }
  const std::vector<int64_t> xs = Strides(x.dims), os = Strides(dims);
  ConstValue r;
  r.dtype = x.dtype;
  r.dims = dims;
  for (int64_t i = 0; i < x.Numel(); ++i) {
    int64_t src = 0;
    for (int64_t d = 0; d < rank; ++d) src += ((i / os[d]) % dims[d]) * xs[perm[d]];
    r.data.push_back(x.data[static_cast<size_t>(src)]);
  }
  return {r};
}

std::vector<ConstValue> FoldReduceProd(const Node& n, const Args& a, const Importer&) {
  const ConstValue& x = Need(n, a, 0);
  // Shape products (numel of a shape tensor) only: a 1-D input over axis 0.
  if (x.dims.size() != 1) return {};
  ConstValue r;
  r.dtype = x.dtype;
  r.data = {std::accumulate(x.data.begin(), x.data.end(), (long double)1, std::multiplies<long double>())};
  r.dims = n.Int("keepdims", 1) ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  return {r};
}

const std::map<std::string, Folder>& Table() {
  static const std::map<std::string, Folder> kTable = {
      {"Constant", FoldConstant},
      {"Shape", FoldShape},
      {"Size", FoldSize},
      {"Identity", FoldIdentity},
      {"Cast", FoldCast},
      {"Gather", FoldGather},
      {"Concat", FoldConcat},
      {"Unsqueeze", FoldUnsqueeze},
      {"Squeeze", FoldSqueeze},
      {"Reshape", FoldReshape},
      {"Slice", FoldSlice},
      {"ConstantOfShape", FoldConstantOfShape},
      {"Where", FoldWhere},
      {"Equal", FoldEqual},
      {"Range", FoldRange},
      {"Transpose", FoldTranspose},
      {"ReduceProd", FoldReduceProd},
      {"Add", [](const Node& n, const Args& a,
                 const Importer&) { return Binary(n, a, [](long double x, long double y) { return x + y; }); }},
      {"Sub", [](const Node& n, const Args& a,
                 const Importer&) { return Binary(n, a, [](long double x, long double y) { return x - y; }); }},
      {"Mul", [](const Node& n, const Args& a,
                 const Importer&) { return Binary(n, a, [](long double x, long double y) { return x * y; }); }},
      {"Div",
       [](const Node& n, const Args& a, const Importer&) {
         const bool integer = !IsFloating(Need(n, a, 0).dtype);
         return Binary(n, a, [&](long double x, long double y) {
           if (integer && y == 0) n.Fail(ErrorKind::kInvalidArgument, "integer division by zero");
           return x / y;  // Binary truncates integer results, as ONNX's Div
         });
       }},
      {"Neg",
       [](const Node& n, const Args& a, const Importer&) { return Unary(n, a, [](long double x) { return -x; }); }},
      {"Sqrt", [](const Node& n, const Args& a,
                  const Importer&) { return Unary(n, a, [](long double x) { return std::sqrt(x); }); }},
      // Range's expansion (a trip count from ceil((limit - start) / delta)).
      {"Ceil", [](const Node& n, const Args& a,
                  const Importer&) { return Unary(n, a, [](long double x) { return std::ceil(x); }); }},
      {"Floor", [](const Node& n, const Args& a,
                   const Importer&) { return Unary(n, a, [](long double x) { return std::floor(x); }); }},
      {"Relu", [](const Node& n, const Args& a,
                  const Importer&) { return Unary(n, a, [](long double x) { return x > 0 ? x : 0; }); }},
      {"Abs", [](const Node& n, const Args& a,
                 const Importer&) { return Unary(n, a, [](long double x) { return std::fabs(x); }); }},
  };
  return kTable;
}

}  // namespace

const Folder* FindFolder(const std::string& op_type) {
  auto it = Table().find(op_type);
  return it == Table().end() ? nullptr : &it->second;
}

bool FoldsFromShape(const std::string& op_type) { return op_type == "Shape" || op_type == "Size"; }

}  // namespace nabla::onnx_io
