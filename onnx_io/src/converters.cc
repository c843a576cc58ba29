// The converter table: one small function per ONNX op type, writing Paddle's
// ops (a few ONNX ops become short chains). Constant inputs become
// attributes; computed ones, where nabla's op has no tensor-valued input for
// them yet, are reported. Ops that have no converter yet are listed in
// kMissing with the nabla op they wait for, so a new op is one row here.
#include <algorithm>
#include <array>
#include <cfloat>
#include <climits>
#include <cmath>
#include <cstdio>
#include <map>

#include "importer.h"
#include "nabla/op_registry.h"

namespace nabla::onnx_io {

namespace {

using Ints = std::vector<int>;

int ToInt(const Node& n, int64_t v, const std::string& what) {
  if (v > INT_MAX || v < INT_MIN) {
    n.Unsupported(what + " " + std::to_string(v) + " does not fit an int attribute");
  }
  return static_cast<int>(v);
}

// Slice bounds: ONNX writes INT64_MAX for "to the end", which clamps anyway.
int ClampInt(int64_t v) { return static_cast<int>(std::clamp<int64_t>(v, INT_MIN, INT_MAX)); }

Ints ToInts(const Node& n, const std::vector<int64_t>& v, const std::string& what) {
  Ints out;
  for (int64_t x : v) out.push_back(ToInt(n, x, what));
  return out;
}

int64_t NormAxis(const Node& n, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) {
    n.Fail(ErrorKind::kOutOfRange, "axis " + std::to_string(axis) + " is outside [" + std::to_string(-rank) + ", " +
                                       std::to_string(rank) + ")");
  }
  return axis < 0 ? axis + rank : axis;
}

// ONNX takes integers where nabla's op may have float kernels only (Concat,
// Abs, MatMul, ...): asked of the registry, so the node converts once a
// kernel for its dtype is registered, and refused here by name otherwise,
// rather than at run time ("no kernel") or by the op the reader verifies.
void RequireCpuKernel(const Node& n, const Importer& imp, const std::string& op, int input) {
  if (!n.HasInput(input) || !imp.HasDType(n.Input(input))) return;
  const DType dtype = imp.DTypeOf(n, n.Input(input));
  const std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  if (!registry->Find(op) || registry->FindKernel(op, DeviceType::kCPU, dtype)) return;
  std::string have;
  for (const auto& [device, d] : registry->KernelsOf(op)) {
    if (device != DeviceType::kCPU) continue;
    have += (have.empty() ? "" : ", ") + std::string(DTypeName(d));
  }
  n.Unsupported("input '" + n.Input(input) + "' has dtype " + DTypeName(dtype) + ", but nabla's " + op +
                " has cpu kernels for " + (have.empty() ? std::string("no dtype") : have) + " only");
}

void Unary(const Node& n, Importer& imp, const std::string& type, AttributeMap attrs = {}) {
  imp.Emit(type, {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}}, std::move(attrs));
}

// A constant operand with one element, as a number (for scale's attributes).
bool ScalarConst(const Importer& imp, const Node& n, int i, long double* out) {
  const Tensor* t = imp.Const(n, i);
  if (!t || t->Numel() != 1) return false;
  *out = ToConst(*t).data[0];
  return true;
}

// The operands of a binary op in one dtype: a constant takes the other's.
std::string Operand(const Node& n, Importer& imp, int i) {
  const int other = 1 - i;
  const Tensor* t = imp.Const(n, i);
  if (t && n.HasInput(other) && imp.HasDType(n.Input(other)) && !imp.ConstOf(n.Input(other))) {
    const DType want = imp.DTypeOf(n, n.Input(other));
    if (t->GetDType() != want) {
      ConstValue c = ToConst(*t);
      c.dtype = want;
      return imp.ConstVar(ToTensor(c), n.Input(i));
    }
  }
  return imp.In(n, i);
}

// numpy broadcasting goes both ways; nabla's binary ops broadcast Y onto X
// only, so an X smaller than the result is tiled to it first (known dims).
std::string BroadcastX(const Node& n, Importer& imp, const std::string& x) {
  if (!imp.HasShape(n.Input(0)) || !imp.HasShape(n.Input(1))) return x;
  std::vector<int64_t> xs = imp.ShapeOf(n, n.Input(0)), ys = imp.ShapeOf(n, n.Input(1));
  const size_t r = std::max(xs.size(), ys.size());
  if (xs.empty()) return x;  // a scalar X: nabla's [1] broadcasts no further
  xs.insert(xs.begin(), r - xs.size(), 1);
  ys.insert(ys.begin(), r - ys.size(), 1);
  Ints times;
  bool tile = false;
  for (size_t i = 0; i < r; ++i) {
    if (xs[i] < 0 || ys[i] < 0) return x;
    const bool grow = xs[i] == 1 && ys[i] > 1;
    times.push_back(grow ? ToInt(n, ys[i], "dim") : 1);
    tile = tile || grow;
  }
  if (!tile && imp.RankOf(n, n.Input(0)) == static_cast<int64_t>(r)) return x;
  std::string src = x;
  if (imp.RankOf(n, n.Input(0)) != static_cast<int64_t>(r)) {
    src = imp.Temp(n.Output(0));
    imp.Emit("reshape", {{"X", {x}}}, {{"Out", {src}}}, {{"shape", ToInts(n, xs, "dim")}});
  }
  if (!tile) return src;
  const std::string out = imp.Temp(n.Output(0));
  imp.Emit("expand", {{"X", {src}}}, {{"Out", {out}}}, {{"expand_times", times}});
  return out;
}

void Elementwise(const Node& n, Importer& imp, const std::string& type) {
  imp.Emit(type, {{"X", {BroadcastX(n, imp, Operand(n, imp, 0))}}, {"Y", {Operand(n, imp, 1)}}},
           {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// x + c, x - c, x * c for a float32 x and a scalar constant c: one scale op,
// exactly the same arithmetic, and no constant var for a training run to
// carry (Constant nodes and folded values only). A scalar of lower rank never changes x's shape.
bool ScaleForScalar(const Node& n, Importer& imp, const std::string& type) {
  long double c;
  // An initializer stays a var: it may be a parameter to fine-tune.
  if (!ScalarConst(imp, n, 1, &c) || imp.ConstOf(n.Input(0)) || imp.IsInitializer(n.Input(1))) return false;
  if (!imp.HasDType(n.Input(0)) || imp.DTypeOf(n, n.Input(0)) != DType::kFloat32) return false;
  if (!imp.HasShape(n.Input(0)) || !imp.HasShape(n.Input(1))) return false;
  if (imp.RankOf(n, n.Input(0)) == 0 || imp.RankOf(n, n.Input(1)) > imp.RankOf(n, n.Input(0))) return false;
  float scale = 1, bias = 0;
  if (type == "Add") bias = static_cast<float>(c);
  if (type == "Sub") bias = static_cast<float>(-c);
  if (type == "Mul") scale = static_cast<float>(c);
  Unary(n, imp, "scale", {{"scale", scale}, {"bias", bias}, {"bias_after_scale", true}});
  return true;
}

void Add(const Node& n, Importer& imp) {
  if (!ScaleForScalar(n, imp, "Add")) Elementwise(n, imp, "elementwise_add");
}
void Sub(const Node& n, Importer& imp) {
  if (!ScaleForScalar(n, imp, "Sub")) Elementwise(n, imp, "elementwise_sub");
}
void Mul(const Node& n, Importer& imp) {
  if (!ScaleForScalar(n, imp, "Mul")) Elementwise(n, imp, "elementwise_mul");
}
void Div(const Node& n, Importer& imp) { Elementwise(n, imp, "elementwise_div"); }
// ONNX's Pow takes an exponent of any numeric dtype; the result has the
// base's. The exponent goes to the base's dtype (never the other way: a
// constant base of 2.5 made int would be 2), except a float exponent of an
// integer base, which would truncate (4 ** 0.5 computed as 4 ** 0 = 1): that
// power is computed in float64 and cast back, as ONNX's reference computes
// it (numpy's power, then astype of the base's dtype).
void Pow(const Node& n, Importer& imp) {
  if (!imp.HasDType(n.Input(0)) || !imp.HasDType(n.Input(1))) {
    Elementwise(n, imp, "elementwise_pow");
    return;
  }
  const DType x = imp.DTypeOf(n, n.Input(0)), y = imp.DTypeOf(n, n.Input(1));
  const bool int_base = x == DType::kInt32 || x == DType::kInt64;
  const DType work = int_base && IsFloating(y) ? DType::kFloat64 : x;
  auto as_work = [&](int i, DType from) {
    if (from == work) return imp.In(n, i);
    if (const Tensor* t = imp.Const(n, i)) {
      ConstValue c = ToConst(*t);
      c.dtype = work;
      return imp.ConstVar(ToTensor(c), n.Input(i));
    }
    const std::string cast = imp.Temp(n.Input(i));
    imp.Emit("cast", {{"X", {imp.In(n, i)}}}, {{"Out", {cast}}},
             {{"in_dtype", std::string(DTypeName(from))}, {"out_dtype", std::string(DTypeName(work))}});
    return cast;
  };
  const std::string base = BroadcastX(n, imp, as_work(0, x)), exponent = as_work(1, y);
  const std::string out = work == x ? n.Output(0) : imp.Temp(n.Output(0));
  imp.Emit("elementwise_pow", {{"X", {base}}, {"Y", {exponent}}}, {{"Out", {out}}}, {{"axis", -1}});
  if (work != x)
    imp.Emit("cast", {{"X", {out}}}, {{"Out", {n.Output(0)}}},
             {{"in_dtype", std::string(DTypeName(work))}, {"out_dtype", std::string(DTypeName(x))}});
}
void Max(const Node& n, Importer& imp);
void Min(const Node& n, Importer& imp);

// Variadic Max/Min/Sum as a chain of binary ops.
void Chain(const Node& n, Importer& imp, const std::string& type) {
  if (n.NumInputs() == 1) {
    imp.Emit("assign", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}});
    return;
  }
  std::string acc = imp.In(n, 0);
  for (int i = 1; i < n.NumInputs(); ++i) {
    const std::string out = i + 1 == n.NumInputs() ? n.Output(0) : imp.Temp(n.Output(0));
    imp.Emit(type, {{"X", {acc}}, {"Y", {imp.In(n, i)}}}, {{"Out", {out}}}, {{"axis", -1}});
    acc = out;
  }
}
void Max(const Node& n, Importer& imp) { Chain(n, imp, "elementwise_max"); }
void Min(const Node& n, Importer& imp) { Chain(n, imp, "elementwise_min"); }
void Sum(const Node& n, Importer& imp) { Chain(n, imp, "elementwise_add"); }
void Mean(const Node& n, Importer& imp) {
  const std::string s = imp.Temp(n.Output(0));
  std::string acc = imp.In(n, 0);
  for (int i = 1; i < n.NumInputs(); ++i) {
    const std::string out = i + 1 == n.NumInputs() ? s : imp.Temp(n.Output(0));
    imp.Emit("elementwise_add", {{"X", {acc}}, {"Y", {imp.In(n, i)}}}, {{"Out", {out}}}, {{"axis", -1}});
    acc = out;
  }
  imp.Emit("scale", {{"X", {acc}}}, {{"Out", {n.Output(0)}}}, {{"scale", 1.0f / static_cast<float>(n.NumInputs())}});
}

void Neg(const Node& n, Importer& imp) { Unary(n, imp, "scale", {{"scale", -1.0f}}); }

void Reciprocal(const Node& n, Importer& imp) { Unary(n, imp, "reciprocal"); }

void Compare(const Node& n, Importer& imp, const std::string& type) { Elementwise(n, imp, type); }

// The logical ops have no axis: both operands broadcast numpy style.
void Logical(const Node& n, Importer& imp, const std::string& type) {
  imp.Emit(type, {{"X", {BroadcastX(n, imp, imp.In(n, 0))}}, {"Y", {imp.In(n, 1)}}}, {{"Out", {n.Output(0)}}});
}

void Gemm(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "matmul", 0);
  const bool has_c = n.HasInput(2);
  const float alpha = n.Float("alpha", 1.0f), beta = n.Float("beta", 1.0f);
  const std::string prod = has_c ? imp.Temp(n.Output(0)) : n.Output(0);
  imp.Emit("matmul", {{"X", {imp.In(n, 0)}}, {"Y", {imp.In(n, 1)}}}, {{"Out", {prod}}},
           {{"transpose_X", n.Int("transA", 0) != 0}, {"transpose_Y", n.Int("transB", 0) != 0}, {"alpha", alpha}});
  if (!has_c) return;
  std::string c;
  if (beta == 1.0f) {
    c = imp.In(n, 2);
  } else if (const Tensor* t = imp.Const(n, 2)) {
    ConstValue v = ToConst(*t);
    for (auto& x : v.data) x = static_cast<float>(x * beta);
    c = imp.ConstVar(ToTensor(v), n.Input(2));
  } else {
    c = imp.Temp(n.Output(0));
    imp.Emit("scale", {{"X", {imp.In(n, 2)}}}, {{"Out", {c}}}, {{"scale", beta}});
  }
  imp.Emit("elementwise_add", {{"X", {prod}}, {"Y", {c}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

void MatMul(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "matmul", 0);
  imp.Emit("matmul", {{"X", {imp.In(n, 0)}}, {"Y", {imp.In(n, 1)}}}, {{"Out", {n.Output(0)}}});
}

// Conv and pooling windows: ONNX pads are [begins..., ends...], Paddle's
// [top, bottom, left, right]; auto_pad maps to padding_algorithm.
void Windows(const Node& n, Importer& imp, const std::vector<int64_t>& kernel, AttributeMap* attrs) {
  if (kernel.size() != 2) {
    n.Unsupported(std::to_string(kernel.size()) + "-D windows (1-D and 2-D only: 3-D needs nabla's conv3d/pool3d)");
  }
  const std::vector<int64_t> strides = n.Ints("strides", {1, 1});
  std::vector<int64_t> pads = n.Ints("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || pads.size() != 4) n.Fail(ErrorKind::kInvalidArgument, "strides/pads do not match 2-D");
  const std::string auto_pad = n.String("auto_pad", "NOTSET");
  (*attrs)["strides"] = ToInts(n, strides, "stride");
  if (auto_pad == "SAME_UPPER") {
    (*attrs)["padding_algorithm"] = std::string("SAME");
  } else if (auto_pad == "VALID") {
    (*attrs)["padding_algorithm"] = std::string("VALID");
  } else if (auto_pad == "SAME_LOWER") {
    // The odd pad goes first: explicit pads from the known input size.
    const std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
    const std::vector<int64_t> dil = n.Ints("dilations", {1, 1});
    if (dil.size() != 2 || shape.size() != 4) n.Fail(ErrorKind::kInvalidArgument, "dilations/input do not match 2-D");
    for (int i = 0; i < 2; ++i) {
      const int64_t in = shape.at(2 + i);
      if (in < 0) n.Unsupported("SAME_LOWER padding of a dynamic dim (fix it with --input-shape)");
      const int64_t out = (in + strides[i] - 1) / strides[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1 - in);
      pads[i] = total - total / 2;
      pads[2 + i] = total / 2;
    }
    (*attrs)["paddings"] = ToInts(n, {pads[0], pads[2], pads[1], pads[3]}, "pad");
  } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
    (*attrs)["paddings"] = ToInts(n, {pads[0], pads[2], pads[1], pads[3]}, "pad");
  } else {
    n.Unsupported("auto_pad " + auto_pad);
  }
}

void Conv2D(const Node& n, Importer& imp) {
  std::vector<int64_t> kernel = n.Ints("kernel_shape");
  if (kernel.empty()) {
    const std::vector<int64_t> w = imp.ShapeOf(n, n.Input(1));
    kernel.assign(w.begin() + std::min<size_t>(2, w.size()), w.end());
  }
  AttributeMap attrs;
  Windows(n, imp, kernel, &attrs);
  attrs["dilations"] = ToInts(n, n.Ints("dilations", {1, 1}), "dilation");
  attrs["groups"] = ToInt(n, n.Int("group", 1), "group");
  const bool bias = n.HasInput(2);
  const std::string out = bias ? imp.Temp(n.Output(0)) : n.Output(0);
  imp.Emit("conv2d", {{"Input", {imp.In(n, 0)}}, {"Filter", {imp.In(n, 1)}}}, {{"Output", {out}}}, attrs);
  if (bias) {
    imp.Emit("elementwise_add", {{"X", {out}}, {"Y", {imp.In(n, 2)}}}, {{"Out", {n.Output(0)}}}, {{"axis", 1}});
  }
}

void Pool(const Node& n, Importer& imp, const std::string& type) {
  if (n.HasOutput(1)) n.Unsupported("the Indices output of MaxPool (needs nabla op max_pool2d_with_index)");
  for (int64_t d : n.Ints("dilations", {1, 1})) {
    if (d != 1) n.Unsupported("pooling dilations other than 1");
  }
  AttributeMap attrs;
  Windows(n, imp, n.Ints("kernel_shape"), &attrs);
  attrs["pooling_type"] = type;
  attrs["ksize"] = ToInts(n, n.Ints("kernel_shape"), "kernel size");
  attrs["ceil_mode"] = n.Int("ceil_mode", 0) != 0;
  if (type == "avg") attrs["exclusive"] = n.Int("count_include_pad", 0) == 0;
  imp.Emit("pool2d", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}}, attrs);
}
// 1-D convolution and pooling as 2-D over a height of 1: the input (and
// Conv's filter) get a dim of 1 at 2, the windows a 1 in front, and the
// 2-D converter's output loses the dim again.
bool As2D(const Node& n, Importer& imp, void (*convert)(const Node&, Importer&)) {
  if (!imp.HasShape(n.Input(0)) || imp.RankOf(n, n.Input(0)) != 3) return false;
  onnx::NodeProto p = n.Proto();
  auto unsqueezed = [&](int i) {
    const std::string out = imp.Temp(n.Input(i));
    imp.Emit("unsqueeze", {{"X", {imp.In(n, i)}}}, {{"Out", {out}}}, {{"axes", Ints{2}}});
    imp.AddVar(out);
    if (imp.HasShape(n.Input(i))) {
      std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(i));
      shape.insert(shape.begin() + 2, 1);
      imp.SetInfo(out, shape, imp.DTypeOf(n, n.Input(i)));
    }
    p.set_input(i, out);
  };
  unsqueezed(0);
  if (n.OpType() == "Conv") unsqueezed(1);
  std::vector<int64_t> kernel = n.Ints("kernel_shape");
  if (kernel.empty() && n.OpType() == "Conv") kernel = {imp.ShapeOf(n, n.Input(1)).at(2)};
  for (auto& a : *p.mutable_attribute()) {
    const std::string& name = a.name();
    if (name == "kernel_shape" || name == "strides" || name == "dilations") {
      if (a.ints_size() != 1) n.Fail(ErrorKind::kInvalidArgument, name + " does not match 1-D");
      const int64_t v = a.ints(0);
      a.clear_ints();
      a.add_ints(1);
      a.add_ints(v);
    } else if (name == "pads") {
      if (a.ints_size() != 2) n.Fail(ErrorKind::kInvalidArgument, "pads do not match 1-D");
      const int64_t b = a.ints(0), e = a.ints(1);
      a.clear_ints();
      for (int64_t v : {int64_t(0), b, int64_t(0), e}) a.add_ints(v);
    }
  }
  if (!n.HasAttr("kernel_shape") && !kernel.empty()) {
    auto* a = p.add_attribute();
    a->set_name("kernel_shape");
    a->set_type(onnx::AttributeProto::INTS);
    a->add_ints(1);
    a->add_ints(kernel.at(0));
  }
  const std::string out2d = imp.Temp(n.Output(0));
  p.set_output(0, out2d);
  convert(Node(p), imp);
  imp.Emit("squeeze", {{"X", {out2d}}}, {{"Out", {n.Output(0)}}}, {{"axes", Ints{2}}});
  return true;
}

void Conv(const Node& n, Importer& imp) {
  if (!As2D(n, imp, Conv2D)) Conv2D(n, imp);
}

void MaxPool(const Node& n, Importer& imp) {
  if (!As2D(n, imp, [](const Node& m, Importer& i) { Pool(m, i, "max"); })) Pool(n, imp, "max");
}
void AveragePool(const Node& n, Importer& imp) {
  if (!As2D(n, imp, [](const Node& m, Importer& i) { Pool(m, i, "avg"); })) Pool(n, imp, "avg");
}

void GlobalPool(const Node& n, Importer& imp, const std::string& type) {
  if (imp.RankOf(n, n.Input(0)) != 4) n.Unsupported("global pooling of a rank other than 4 (only 2-D)");
  imp.Emit("pool2d", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}},
           {{"pooling_type", type}, {"global_pooling", true}, {"ksize", Ints{1, 1}}});
}
void GlobalAveragePool(const Node& n, Importer& imp) { GlobalPool(n, imp, "avg"); }
void GlobalMaxPool(const Node& n, Importer& imp) { GlobalPool(n, imp, "max"); }

// Running statistics are state, not parameters: they stay out of training.
std::string Stat(const Node& n, Importer& imp, int i) {
  const std::string name = imp.In(n, i);
  imp.Freeze(name);
  return name;
}

void BatchNormalization(const Node& n, Importer& imp) {
  if (n.HasOutput(1) || n.HasOutput(2) || n.Int("training_mode", 0) != 0) {
    n.Unsupported("training-mode BatchNormalization (running-statistics outputs); export the model in eval mode");
  }
  const std::string mean = Stat(n, imp, 3), var = Stat(n, imp, 4);
  // Frozen statistics: ONNX's BatchNormalization is inference, and a
  // fine-tuning run keeps it so (use_global_stats: gradients through the
  // running statistics, which are never updated).
  imp.Emit(
      "batch_norm",
      {{"X", {imp.In(n, 0)}},
       {"Scale", {imp.In(n, 1)}},
       {"Bias", {imp.In(n, 2)}},
       {"Mean", {mean}},
       {"Variance", {var}}},
      {{"Y", {n.Output(0)}},
       {"MeanOut", {mean}},
       {"VarianceOut", {var}},
       {"SavedMean", {imp.Temp(n.Output(0) + "_saved_mean")}},
       {"SavedVariance", {imp.Temp(n.Output(0) + "_saved_var")}}},
      {{"epsilon", n.Float("epsilon", 1e-5f)}, {"momentum", n.Float("momentum", 0.9f)}, {"use_global_stats", true}});
}

void Relu(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "relu", 0);
  Unary(n, imp, "relu");
}
void Sigmoid(const Node& n, Importer& imp) { Unary(n, imp, "sigmoid"); }
void Tanh(const Node& n, Importer& imp) { Unary(n, imp, "tanh"); }
void Exp(const Node& n, Importer& imp) { Unary(n, imp, "exp"); }
void Log(const Node& n, Importer& imp) { Unary(n, imp, "log"); }
void Sqrt(const Node& n, Importer& imp) { Unary(n, imp, "sqrt"); }
void Abs(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "abs", 0);
  Unary(n, imp, "abs");
}
void Not(const Node& n, Importer& imp) { Unary(n, imp, "logical_not"); }

// ONNX's activations with Paddle's ops of the same formula (Softplus: ONNX's
// ln(1 + e^x) with no threshold; softplus turns linear above beta x = 20,
// where the two differ by e^-20, below float32's resolution of x).
void Sin(const Node& n, Importer& imp) { Unary(n, imp, "sin"); }
void Cos(const Node& n, Importer& imp) { Unary(n, imp, "cos"); }
void Atan(const Node& n, Importer& imp) { Unary(n, imp, "atan"); }
void Asin(const Node& n, Importer& imp) { Unary(n, imp, "asin"); }
void Acos(const Node& n, Importer& imp) { Unary(n, imp, "acos"); }
void Ceil(const Node& n, Importer& imp) { Unary(n, imp, "ceil"); }
void Floor(const Node& n, Importer& imp) { Unary(n, imp, "floor"); }
void Softsign(const Node& n, Importer& imp) { Unary(n, imp, "softsign"); }
void Softplus(const Node& n, Importer& imp) { Unary(n, imp, "softplus"); }
void Elu(const Node& n, Importer& imp) { Unary(n, imp, "elu", {{"alpha", n.Float("alpha", 1.0f)}}); }
void ThresholdedRelu(const Node& n, Importer& imp) {
  Unary(n, imp, "thresholded_relu", {{"threshold", n.Float("alpha", 1.0f)}});
}

// tan = sin / cos (nabla has no tan op): within a few ulps of tan, and the
// chain's gradient is tan's.
void Tan(const Node& n, Importer& imp) {
  const std::string s = imp.Temp(n.Output(0)), c = imp.Temp(n.Output(0));
  imp.Emit("sin", {{"X", {imp.In(n, 0)}}}, {{"Out", {s}}});
  imp.Emit("cos", {{"X", {imp.In(n, 0)}}}, {{"Out", {c}}});
  imp.Emit("elementwise_div", {{"X", {s}}, {"Y", {c}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// Selu = gamma * elu(x, alpha) (the same formula for alpha > 0); Celu =
// alpha * elu(x / alpha, 1).
void Selu(const Node& n, Importer& imp) {
  const float alpha = n.Float("alpha", 1.67326319217681884765625f);
  const float gamma = n.Float("gamma", 1.05070102214813232421875f);
  if (!(alpha > 0)) n.Unsupported("alpha " + std::to_string(alpha) + " (elu's form needs alpha > 0)");
  const std::string e = imp.Temp(n.Output(0));
  imp.Emit("elu", {{"X", {imp.In(n, 0)}}}, {{"Out", {e}}}, {{"alpha", alpha}});
  imp.Emit("scale", {{"X", {e}}}, {{"Out", {n.Output(0)}}}, {{"scale", gamma}});
}
void Celu(const Node& n, Importer& imp) {
  const float alpha = n.Float("alpha", 1.0f);
  if (!(alpha > 0)) n.Unsupported("alpha " + std::to_string(alpha));
  const std::string s = imp.Temp(n.Output(0)), e = imp.Temp(n.Output(0));
  imp.Emit("scale", {{"X", {imp.In(n, 0)}}}, {{"Out", {s}}}, {{"scale", 1.0f / alpha}});
  imp.Emit("elu", {{"X", {s}}}, {{"Out", {e}}}, {{"alpha", 1.0f}});
  imp.Emit("scale", {{"X", {e}}}, {{"Out", {n.Output(0)}}}, {{"scale", alpha}});
}

// Mish = x * tanh(softplus(x)).
void Mish(const Node& n, Importer& imp) {
  const std::string sp = imp.Temp(n.Output(0)), t = imp.Temp(n.Output(0));
  imp.Emit("softplus", {{"X", {imp.In(n, 0)}}}, {{"Out", {sp}}});
  imp.Emit("tanh", {{"X", {sp}}}, {{"Out", {t}}});
  imp.Emit("elementwise_mul", {{"X", {imp.In(n, 0)}}, {"Y", {t}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// Shrink: x - bias above lambd, x + bias below -lambd, else 0. Bias 0 is
// hard_shrink, bias = lambd softshrink; other biases have no exact chain.
void Shrink(const Node& n, Importer& imp) {
  const float lambd = n.Float("lambd", 0.5f), bias = n.Float("bias", 0.0f);
  if (bias == 0.0f) {
    Unary(n, imp, "hard_shrink", {{"threshold", lambd}});
  } else if (bias == lambd && lambd >= 0) {
    Unary(n, imp, "softshrink", {{"lambda", lambd}});
  } else {
    n.Unsupported("bias " + std::to_string(bias) + " other than 0 or lambd (hard_shrink and softshrink only)");
  }
}

// PRelu = relu(x) + slope * (x - relu(x)): x - relu(x) is min(x, 0)
// exactly, and slope broadcasts numpy style as in ONNX.
void PRelu(const Node& n, Importer& imp) {
  const std::string r = imp.Temp(n.Output(0)), neg = imp.Temp(n.Output(0)), sn = imp.Temp(n.Output(0));
  imp.Emit("relu", {{"X", {imp.In(n, 0)}}}, {{"Out", {r}}});
  imp.Emit("elementwise_sub", {{"X", {imp.In(n, 0)}}, {"Y", {r}}}, {{"Out", {neg}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {neg}}, {"Y", {imp.In(n, 1)}}}, {{"Out", {sn}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {r}}, {"Y", {sn}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// Round is half to even; nabla's round (std::round) takes halves away from
// zero. floor(x) + (d > 1/2) + (d == 1/2) * (floor(x) mod 2), d = x - floor(x)
// (exact in binary floating point), is ONNX's rounding.
void Round(const Node& n, Importer& imp) {
  const DType dt = imp.DTypeOf(n, n.Input(0));
  const std::string type(DTypeName(dt));
  ConstValue half;
  half.dtype = dt;
  half.dims = {1};
  half.data = {0.5L};
  const std::string h = imp.ConstVar(ToTensor(half), "half");
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const std::string f = tmp(), d = tmp(), up = tmp(), upf = tmp(), tie = tmp(), tief = tmp(), f2 = tmp(), f2f = tmp(),
                    odd = tmp(), tie_odd = tmp(), inc = tmp();
  auto bin = [&](const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
    imp.Emit(type, {{"X", {x}}, {"Y", {y}}}, {{"Out", {out}}}, {{"axis", -1}});
  };
  auto to_float = [&](const std::string& x, const std::string& out) {
    imp.Emit("cast", {{"X", {x}}}, {{"Out", {out}}}, {{"in_dtype", std::string("bool")}, {"out_dtype", type}});
  };
  imp.Emit("floor", {{"X", {imp.In(n, 0)}}}, {{"Out", {f}}});
  bin("elementwise_sub", imp.In(n, 0), f, d);
  bin("greater_than", d, h, up);
  to_float(up, upf);
  bin("equal", d, h, tie);
  to_float(tie, tief);
  // floor(x) mod 2 = floor(x) - 2 floor(floor(x) / 2).
  imp.Emit("scale", {{"X", {f}}}, {{"Out", {f2}}}, {{"scale", 0.5f}});
  imp.Emit("floor", {{"X", {f2}}}, {{"Out", {f2f}}});
  const std::string twice = tmp();
  imp.Emit("scale", {{"X", {f2f}}}, {{"Out", {twice}}}, {{"scale", 2.0f}});
  bin("elementwise_sub", f, twice, odd);
  bin("elementwise_mul", tief, odd, tie_odd);
  bin("elementwise_add", upf, tie_odd, inc);
  bin("elementwise_add", f, inc, n.Output(0));
}
void LeakyRelu(const Node& n, Importer& imp) { Unary(n, imp, "leaky_relu", {{"alpha", n.Float("alpha", 0.01f)}}); }
void Gelu(const Node& n, Importer& imp) {
  const std::string approx = n.String("approximate", "none");
  if (approx != "none" && approx != "tanh") n.Unsupported("approximate '" + approx + "'");
  Unary(n, imp, "gelu", {{"approximate", approx == "tanh"}});
}

// HardSigmoid = clip(alpha x + beta, 0, 1) (hard_sigmoid wants a positive slope).
std::string HardSigmoidChain(const Node& n, Importer& imp, float alpha, float beta, const std::string& out) {
  const std::string s = imp.Temp(n.Output(0));
  imp.Emit("scale", {{"X", {imp.In(n, 0)}}}, {{"Out", {s}}}, {{"scale", alpha}, {"bias", beta}});
  imp.Emit("clip", {{"X", {s}}}, {{"Out", {out}}}, {{"min", 0.0f}, {"max", 1.0f}});
  return out;
}
void HardSigmoid(const Node& n, Importer& imp) {
  const float alpha = n.Float("alpha", 0.2f), beta = n.Float("beta", 0.5f);
  if (alpha > 0) {
    Unary(n, imp, "hard_sigmoid", {{"slope", alpha}, {"offset", beta}});
  } else {
    HardSigmoidChain(n, imp, alpha, beta, n.Output(0));
  }
}
// x * clip(x / 6 + 1/2, 0, 1) = x * clip(x + 3, 0, 6) / 6: hard_swish's defaults.
void HardSwish(const Node& n, Importer& imp) { Unary(n, imp, "hard_swish"); }

// Before opset 13 Softmax and LogSoftmax normalize X flattened to 2-D at
// axis; that is one axis only when axis is the last.
void SoftmaxLike(const Node& n, Importer& imp, const std::string& type) {
  const int64_t given = n.Int("axis", imp.Opset() >= 13 ? -1 : 1);
  if (imp.Opset() >= 13 || given == -1) {
    // One axis: no rank needed (the shape may be dynamic).
    Unary(n, imp, type, {{"axis", ToInt(n, given, "axis")}});
    return;
  }
  const int64_t rank = imp.RankOf(n, n.Input(0));
  const int64_t axis = NormAxis(n, n.Int("axis", imp.Opset() >= 13 ? -1 : 1), std::max<int64_t>(rank, 1));
  if (imp.Opset() >= 13 || axis == rank - 1) {
    Unary(n, imp, type, {{"axis", ToInt(n, axis, "axis")}});
    return;
  }
  std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  if (std::count(shape.begin(), shape.end(), -1) > 1) {
    n.Unsupported("softmax over flattened dims of a shape with several dynamic dims (use --input-shape)");
  }
  const std::string flat = imp.Temp(n.Output(0)), soft = imp.Temp(n.Output(0));
  imp.Emit("flatten", {{"X", {imp.In(n, 0)}}}, {{"Out", {flat}}}, {{"axis", ToInt(n, axis, "axis")}});
  imp.Emit(type, {{"X", {flat}}}, {{"Out", {soft}}}, {{"axis", -1}});
  imp.Emit("reshape", {{"X", {soft}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, shape, "dim")}});
}
void Softmax(const Node& n, Importer& imp) { SoftmaxLike(n, imp, "softmax"); }
void LogSoftmax(const Node& n, Importer& imp) { SoftmaxLike(n, imp, "log_softmax"); }

void Flatten(const Node& n, Importer& imp) {
  int64_t axis = n.Int("axis", 1);
  if (axis < 0) axis += imp.RankOf(n, n.Input(0));
  Unary(n, imp, "flatten", {{"axis", ToInt(n, axis, "axis")}});
}

// A shape with dynamic dims: an element equal to the input's dim at the
// same position is Paddle's 0 (copy), and one element left unknown is -1.
bool ReshapeFromPartial(const Node& n, Importer& imp) {
  const PartialDims* p = imp.PartialOf(n.Input(1));
  if (!p) return false;
  std::vector<int64_t> dims;
  if (!imp.PartialReshapeDims(n.Input(0), *p, &dims)) {
    n.Unsupported("a shape with several dims computed from dynamic dims (fix them with --input-shape)");
  }
  imp.Emit("reshape", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, dims, "dim")}});
  return true;
}

// A 1-D int operand computed at run time: its var, for a tensor-valued
// attribute input (int32 and int64 only; none while it is a constant).
std::string RunTimeInts(const Node& n, Importer& imp, int i) {
  if (!n.HasInput(i) || imp.Const(n, i) || imp.PartialOf(n.Input(i))) return "";
  const DType dt = imp.DTypeOf(n, n.Input(i));
  if (dt != DType::kInt64 && dt != DType::kInt32) return "";
  return imp.In(n, i);
}

void Reshape(const Node& n, Importer& imp) {
  if (imp.Opset() >= 5 && ReshapeFromPartial(n, imp)) return;
  if (imp.Opset() >= 5) {
    if (const std::string s = RunTimeInts(n, imp, 1); !s.empty()) {
      // allowzero's 0 would be an empty dim, Paddle's copies the input's.
      if (n.Int("allowzero", 0) != 0) n.Unsupported("allowzero with a shape computed at run time");
      imp.Emit("reshape", {{"X", {imp.In(n, 0)}}, {"Shape", {s}}}, {{"Out", {n.Output(0)}}});
      return;
    }
  }
  std::vector<int64_t> shape =
      imp.Opset() >= 5 ? imp.ConstInts(n, 1, "the shape (needs reshape's Shape tensor input)") : n.Ints("shape");
  if (n.Int("allowzero", 0) != 0 && std::count(shape.begin(), shape.end(), 0) > 0) {
    n.Unsupported("allowzero with a 0 in the shape (Paddle's 0 copies the input's dim)");
  }
  // A scalar is [1] in nabla.
  if (shape.empty()) shape = {1};
  imp.Emit("reshape", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, shape, "dim")}});
}

void Transpose(const Node& n, Importer& imp) {
  std::vector<int64_t> perm = n.Ints("perm");
  if (perm.empty()) {
    for (int64_t i = imp.RankOf(n, n.Input(0)) - 1; i >= 0; --i) perm.push_back(i);
  }
  Unary(n, imp, "transpose", {{"axis", ToInts(n, perm, "perm")}});
}

void Concat(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "concat", 0);
  std::vector<std::string> xs;
  for (int i = 0; i < n.NumInputs(); ++i) xs.push_back(imp.In(n, i));
  imp.Emit("concat", {{"X", xs}}, {{"Out", {n.Output(0)}}}, {{"axis", ToInt(n, n.Int("axis", 0), "axis")}});
}

void Split(const Node& n, Importer& imp) {
  std::vector<int64_t> split;
  if (imp.Opset() >= 13 && n.HasInput(1) && !RunTimeInts(n, imp, 1).empty()) {
    // Sizes computed at run time: one [1] piece each for SectionsTensorList.
    const std::string sizes = imp.In(n, 1);
    std::vector<std::string> pieces, outs;
    for (int i = 0; i < n.NumOutputs(); ++i) {
      pieces.push_back(imp.Temp(sizes));
      imp.Emit("slice", {{"Input", {sizes}}}, {{"Out", {pieces.back()}}},
               {{"axes", Ints{0}}, {"starts", Ints{i}}, {"ends", Ints{i + 1}}});
      outs.push_back(n.HasOutput(i) ? n.Output(i) : imp.Temp("unused"));
    }
    imp.Emit("split", {{"X", {imp.In(n, 0)}}, {"SectionsTensorList", pieces}}, {{"Out", outs}},
             {{"axis", ToInt(n, n.Int("axis", 0), "axis")}});
    return;
  }
  if (imp.Opset() >= 13 && n.HasInput(1)) {
    split = imp.ConstInts(n, 1, "the split sizes");
  } else {
    split = n.Ints("split");
  }
  std::vector<std::string> outs;
  for (int i = 0; i < n.NumOutputs(); ++i) outs.push_back(n.HasOutput(i) ? n.Output(i) : imp.Temp("unused"));
  AttributeMap attrs{{"axis", ToInt(n, n.Int("axis", 0), "axis")}};
  if (split.empty()) {
    attrs["num"] = n.NumOutputs();
  } else {
    attrs["sections"] = ToInts(n, split, "split size");
  }
  imp.Emit("split", {{"X", {imp.In(n, 0)}}}, {{"Out", outs}}, attrs);
}

void Slice(const Node& n, Importer& imp) {
  std::vector<int64_t> starts, ends, axes, steps;
  // Bounds computed at run time go to StartsTensor / EndsTensor (their
  // count from the operand's shape, for the default axes).
  VarNameMap inputs{{"Input", {imp.In(n, 0)}}};
  int64_t count = -1;
  if (imp.Opset() >= 10) {
    for (int i : {1, 2}) {
      const std::string t = RunTimeInts(n, imp, i);
      if (t.empty()) continue;
      inputs[i == 1 ? "StartsTensor" : "EndsTensor"] = {t};
      const std::vector<int64_t> shape = imp.HasShape(n.Input(i)) ? imp.ShapeOf(n, n.Input(i)) : std::vector<int64_t>{};
      if (shape.size() == 1 && shape[0] >= 0) count = shape[0];
    }
    if (!inputs.count("StartsTensor")) starts = imp.ConstInts(n, 1, "starts");
    if (!inputs.count("EndsTensor")) ends = imp.ConstInts(n, 2, "ends");
    if (n.HasInput(3)) axes = imp.ConstInts(n, 3, "axes");
    if (n.HasInput(4)) steps = imp.ConstInts(n, 4, "steps");
    if (!inputs.count("StartsTensor")) count = static_cast<int64_t>(starts.size());
    if (!inputs.count("EndsTensor")) count = static_cast<int64_t>(ends.size());
  } else {
    starts = n.Ints("starts");
    ends = n.Ints("ends");
    axes = n.Ints("axes");
  }
  if (axes.empty()) {
    const int64_t k = imp.Opset() >= 10 ? count : static_cast<int64_t>(starts.size());
    if (k < 0) n.Unsupported("starts and ends computed at run time with no axes and no known length");
    for (int64_t i = 0; i < k; ++i) axes.push_back(i);
  }
  for (int64_t s : steps) {
    if (s != 1) n.Unsupported("a step of " + std::to_string(s) + " (needs nabla op strided_slice)");
  }
  Ints s, e;
  for (int64_t v : starts) s.push_back(ClampInt(v));
  for (int64_t v : ends) e.push_back(ClampInt(v));
  imp.Emit("slice", inputs, {{"Out", {n.Output(0)}}}, {{"axes", ToInts(n, axes, "axis")}, {"starts", s}, {"ends", e}});
}

std::vector<int64_t> Axes(const Node& n, Importer& imp, int input) {
  if (imp.Opset() >= 13 && n.HasInput(input)) return imp.ConstInts(n, input, "axes");
  return n.Ints("axes");
}

void Squeeze(const Node& n, Importer& imp) { Unary(n, imp, "squeeze", {{"axes", ToInts(n, Axes(n, imp, 1), "axis")}}); }

void Unsqueeze(const Node& n, Importer& imp) {
  std::vector<int64_t> axes = Axes(n, imp, 1);
  if (imp.RankOf(n, n.Input(0)) == 0) {
    // A scalar is [1] in nabla already: the result is all ones.
    imp.Emit("reshape", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}}, {{"shape", Ints(axes.size(), 1)}});
    return;
  }
  const int64_t out_rank = imp.RankOf(n, n.Input(0)) + static_cast<int64_t>(axes.size());
  for (auto& a : axes) a = NormAxis(n, a, out_rank);
  // ONNX's axes index the output; inserted in increasing order, each is
  // where nabla's unsqueeze (which counts in the shape built so far) puts it.
  std::sort(axes.begin(), axes.end());
  Unary(n, imp, "unsqueeze", {{"axes", ToInts(n, axes, "axis")}});
}

std::string ScalarVar(Importer& imp, DType dtype, long double v, const std::string& hint);

void Gather(const Node& n, Importer& imp) {
  const std::vector<int64_t> xshape = imp.ShapeOf(n, n.Input(0));
  const int64_t axis = NormAxis(n, n.Int("axis", 0), static_cast<int64_t>(xshape.size()));
  std::string index = imp.In(n, 1);
  std::vector<int64_t> ishape = imp.ShapeOf(n, n.Input(1));
  if (const Tensor* t = imp.Const(n, 1)) {
    // Negative indices count from the end in ONNX; gather wants them in range.
    ConstValue c = ToConst(*t);
    const int64_t dim = xshape[axis];
    bool changed = false;
    for (auto& v : c.data) {
      if (v < 0) {
        if (dim < 0) n.Unsupported("a negative index into a dynamic dim");
        v += dim;
        changed = true;
      }
    }
    if (ishape.empty()) c.dims = {1};
    if (changed || ishape.empty()) index = imp.ConstVar(ToTensor(c), n.Input(1));
  } else {
    // Run-time indices may be negative too: index + (index < 0) * dim, in
    // the indices' dtype (gather itself fails on them at run time).
    const int64_t dim = xshape[axis];
    if (dim < 0) {
      n.Unsupported(
          "run-time indices into a dynamic dim (ONNX's negative indices are wrapped by the dim; fix it "
          "with --input-shape)");
    }
    const DType it = imp.DTypeOf(n, n.Input(1));
    if (it != DType::kInt32 && it != DType::kInt64) {
      n.Fail(ErrorKind::kInvalidArgument, std::string("indices must be int32 or int64, but received ") + DTypeName(it));
    }
    auto tmp = [&] { return imp.Temp(n.Input(1)); };
    const std::string neg = tmp(), negi = tmp(), wrap = tmp(), wrapped = tmp();
    imp.Emit("less_than", {{"X", {index}}, {"Y", {ScalarVar(imp, it, 0, "zero")}}}, {{"Out", {neg}}}, {{"axis", -1}});
    imp.Emit("cast", {{"X", {neg}}}, {{"Out", {negi}}},
             {{"in_dtype", std::string("bool")}, {"out_dtype", std::string(DTypeName(it))}});
    imp.Emit("elementwise_mul", {{"X", {negi}}, {"Y", {ScalarVar(imp, it, dim, "dim")}}}, {{"Out", {wrap}}},
             {{"axis", -1}});
    imp.Emit("elementwise_add", {{"X", {index}}, {"Y", {wrap}}}, {{"Out", {wrapped}}}, {{"axis", -1}});
    index = wrapped;
  }
  AttributeMap attrs{{"axis", ToInt(n, axis, "axis")}};
  if (ishape.size() == 1) {
    imp.Emit("gather", {{"X", {imp.In(n, 0)}}, {"Index", {index}}}, {{"Out", {n.Output(0)}}}, attrs);
    return;
  }
  const std::string g = imp.Temp(n.Output(0));
  if (ishape.empty()) {
    // A scalar index drops the axis.
    imp.Emit("gather", {{"X", {imp.In(n, 0)}}, {"Index", {index}}}, {{"Out", {g}}}, attrs);
    imp.Emit("squeeze", {{"X", {g}}}, {{"Out", {n.Output(0)}}}, {{"axes", Ints{ToInt(n, axis, "axis")}}});
    return;
  }
  // Indices of rank > 1: gather the flattened list, then restore its dims.
  std::vector<int64_t> out(xshape.begin(), xshape.begin() + axis);
  out.insert(out.end(), ishape.begin(), ishape.end());
  out.insert(out.end(), xshape.begin() + axis + 1, xshape.end());
  if (std::count(out.begin(), out.end(), -1) > 1) n.Unsupported("indices of rank > 1 with several dynamic dims");
  const std::string flat = imp.Temp(n.Input(1));
  imp.Emit("reshape", {{"X", {index}}}, {{"Out", {flat}}}, {{"shape", Ints{-1}}});
  imp.Emit("gather", {{"X", {imp.In(n, 0)}}, {"Index", {flat}}}, {{"Out", {g}}}, attrs);
  imp.Emit("reshape", {{"X", {g}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, out, "dim")}});
}

void Identity(const Node& n, Importer& imp) { Unary(n, imp, "assign"); }

void Dropout(const Node& n, Importer& imp) {
  bool training = false;
  if (imp.Opset() >= 12 && n.HasInput(2)) training = imp.ConstFloats(n, 2, "training_mode").at(0) != 0;
  // In inference the ratio changes nothing: a run-time one is fine then.
  float ratio = n.Float("ratio", 0.5f);
  if (imp.Opset() >= 12 && n.HasInput(1) && (training || imp.Const(n, 1))) {
    ratio = imp.ConstFloats(n, 1, "ratio").at(0);
  }
  if (n.HasOutput(1)) n.Unsupported("the mask output (a bool mask; nabla's Mask is float)");
  // ONNX's Dropout scales kept values in training (upscale_in_train) and is
  // the identity in inference, which is what the graph means unless
  // training_mode says otherwise.
  // In training nabla's dropout keeps its Mask for the gradient.
  VarNameMap outputs{{"Out", {n.Output(0)}}};
  if (training) outputs["Mask"] = {imp.Temp(n.Output(0) + "_mask")};
  imp.Emit(
      "dropout", {{"X", {imp.In(n, 0)}}}, outputs,
      {{"dropout_prob", ratio}, {"is_test", !training}, {"dropout_implementation", std::string("upscale_in_train")}});
}

void Cast(const Node& n, Importer& imp) {
  const int to = static_cast<int>(n.Int("to", 0));
  DType out;
  if (!OnnxToDType(to, &out)) {
    n.Unsupported("a cast to " + OnnxTypeName(to) + ", which nabla lacks (it has " + kNablaDTypes + ")");
  }
  const DType in = imp.DTypeOf(n, n.Input(0));
  if (in == out) {
    Unary(n, imp, "assign");
    return;
  }
  Unary(n, imp, "cast", {{"in_dtype", std::string(DTypeName(in))}, {"out_dtype", std::string(DTypeName(out))}});
}

// LSTM, GRU and RNN unrolled over a sequence length known at import time: per
// step the GEMMs, the gate split and the state update, as nabla ops (so the
// backward part and fine-tuning come with them). The default activations
// only; layout 1 (batch first) and ONNX's gate orders (LSTM i, o, f, c with
// peepholes; GRU z, r, h with either linear_before_reset).
class Unroll {
 public:
  Unroll(const Node& n, Importer& imp, int gates, const std::vector<std::string>& activations)
      : n_(n), imp_(imp), batch_first_(n.Int("layout", 0) != 0) {
    if (n.HasAttr("clip")) n.Unsupported("cell clipping");
    for (const auto& a : n.Proto().attribute()) {
      if (a.name() != "activations") continue;
      for (int i = 0; i < a.strings_size(); ++i) {
        const std::string& want = activations[static_cast<size_t>(i) % activations.size()];
        if (a.strings(i) != want) n.Unsupported("activation " + a.strings(i) + " (only the defaults)");
      }
    }
    xs_ = imp.ShapeOf(n, n.Input(0));
    if (batch_first_ && xs_.size() == 3) std::swap(xs_[0], xs_[1]);
    if (xs_.size() != 3 || xs_[0] <= 0) {
      n.Unsupported("a sequence length unknown at import time (fix it with --input-shape)");
    }
    steps_ = xs_[0];
    // sequence_lens: each row's states stop at its own length and Y is 0
    // past it. All lengths full (a constant) is the plain unroll; otherwise
    // every step blends by a 0/1 mask of the rows still running.
    if (n.HasInput(4)) {
      bool full = false;
      if (const Tensor* c = imp.Const(n, 4)) {
        full = true;
        for (long double len : ToConst(*c).data) {
          if (len < 0 || len > steps_) {
            n.Fail(ErrorKind::kOutOfRange, "sequence_lens value " + std::to_string(static_cast<int64_t>(len)) +
                                               " is outside [0, " + std::to_string(steps_) + "]");
          }
          full = full && len == steps_;
        }
      }
      if (!full) lens_ = imp.In(n, 4);
    }
    const std::vector<int64_t> ws = imp.ShapeOf(n, n.Input(1));
    hidden_ = n.Int("hidden_size", ws.size() == 3 ? ws[1] / gates : -1);
    const std::string direction = n.String("direction", "forward");
    if (direction == "forward" || direction == "reverse") reverse_ = {direction == "reverse"};
    if (direction == "bidirectional") reverse_ = {false, true};
    if (reverse_.empty()) n.Unsupported("direction " + direction);
    for (int i = 0; i < n.NumOutputs() && tag_.empty(); ++i) {
      if (n.HasOutput(i)) tag_ = n.Output(i);
    }
    // The input, one [batch, input] piece per step.
    std::vector<std::string> pieces;
    for (int64_t t = 0; t < steps_; ++t) pieces.push_back(Tmp());
    const int axis = batch_first_ ? 1 : 0;
    imp.Emit("split", {{"X", {imp.In(n, 0)}}}, {{"Out", pieces}}, {{"num", ToInt(n, steps_, "steps")}, {"axis", axis}});
    for (const auto& p : pieces) xt_.push_back(Emit("squeeze", {{"X", {p}}}, {{"axes", Ints{axis}}}));
    ys_.resize(static_cast<size_t>(steps_));
  }

  size_t Dirs() const { return reverse_.size(); }
  int64_t Steps() const { return steps_; }
  // The input at step k of direction d (reversed directions run backwards).
  int64_t Time(size_t d, int64_t k) const { return reverse_[d] ? steps_ - 1 - k : k; }
  const std::string& X(int64_t t) const { return xt_[static_cast<size_t>(t)]; }

  std::string Tmp() { return imp_.Temp(tag_); }
  std::string Emit(const std::string& type, VarNameMap in, AttributeMap attrs = {}) {
    const std::string out = Tmp();
    imp_.Emit(type, std::move(in), {{"Out", {out}}}, std::move(attrs));
    return out;
  }
  std::vector<std::string> Split(const std::string& x, int parts, int axis) {
    std::vector<std::string> outs;
    for (int i = 0; i < parts; ++i) outs.push_back(Tmp());
    imp_.Emit("split", {{"X", {x}}}, {{"Out", outs}}, {{"num", parts}, {"axis", axis}});
    return outs;
  }
  std::string Add(const std::string& x, const std::string& y) {
    return Emit("elementwise_add", {{"X", {x}}, {"Y", {y}}}, {{"axis", -1}});
  }
  std::string Mul(const std::string& x, const std::string& y) {
    return Emit("elementwise_mul", {{"X", {x}}, {"Y", {y}}}, {{"axis", -1}});
  }
  std::string MatMulT(const std::string& x, const std::string& w) {
    return Emit("matmul", {{"X", {x}}, {"Y", {w}}}, {{"transpose_Y", true}});
  }
  // Input `input`'s slice for direction d, its direction dim dropped; the
  // initial states (inputs 5, 6) come batch first with layout 1.
  std::string Pick(int input, size_t d) {
    std::string src = imp_.In(n_, input);
    if (batch_first_ && (input == 5 || input == 6)) {
      if (!states_.count(input)) states_[input] = Emit("transpose", {{"X", {src}}}, {{"axis", Ints{1, 0, 2}}});
      src = states_[input];
    }
    return Emit("slice", {{"Input", {src}}},
                {{"axes", Ints{0}},
                 {"starts", Ints{static_cast<int>(d)}},
                 {"ends", Ints{static_cast<int>(d + 1)}},
                 {"decrease_axis", Ints{0}}});
  }
  // An initial state: given, or zeros (which need the batch size).
  std::string State(int input, size_t d) {
    if (n_.HasInput(input)) return Pick(input, d);
    if (xs_[1] < 0) n_.Unsupported("no initial state and a dynamic batch (fix it with --input-shape)");
    const std::string out = Tmp();
    imp_.Emit("fill_constant", {}, {{"Out", {out}}},
              {{"shape", Ints{ToInt(n_, xs_[1], "batch"), ToInt(n_, hidden_, "hidden_size")}},
               {"value", 0.0f},
               {"dtype", std::string(DTypeName(imp_.DTypeOf(n_, n_.Input(0))))}});
    return out;
  }
  // The state after step t: `now` for the rows whose sequence runs through
  // t, `before` for the others (m * now + (1 - m) * before is exact for m
  // in {0, 1}).
  std::string Blend(int64_t t, const std::string& now, const std::string& before) {
    if (lens_.empty()) return now;
    const auto& [keep, drop] = Mask(t);
    return Add(Mul(now, keep), Mul(before, drop));
  }
  void Record(int64_t t, const std::string& h) {
    if (!n_.HasOutput(0)) return;
    const std::string y = lens_.empty() ? h : Mul(h, Mask(t).first);  // 0 past a row's length
    ys_[static_cast<size_t>(t)].push_back(Emit("unsqueeze", {{"X", {y}}}, {{"axes", Ints{0, 1}}}));
  }
  void Last(int output, const std::string& state) {
    last_[output].push_back(Emit("unsqueeze", {{"X", {state}}}, {{"axes", Ints{0}}}));
  }
  // Y [seq, dirs, batch, H] (layout 1: [batch, seq, dirs, H]); the last
  // states [dirs, batch, H] (layout 1: [batch, dirs, H]).
  void Finish() {
    if (n_.HasOutput(0)) {
      std::vector<std::string> rows;
      for (const auto& per_dir : ys_) {
        rows.push_back(per_dir.size() == 1 ? per_dir[0] : Emit("concat", {{"X", per_dir}}, {{"axis", 1}}));
      }
      Join(rows, Ints{2, 0, 1, 3}, n_.Output(0));
    }
    for (const auto& [output, parts] : last_) {
      if (n_.HasOutput(output)) Join(parts, Ints{1, 0, 2}, n_.Output(output));
    }
  }

 private:
  void Join(const std::vector<std::string>& parts, const Ints& perm, const std::string& out) {
    if (!batch_first_) {
      imp_.Emit("concat", {{"X", parts}}, {{"Out", {out}}}, {{"axis", 0}});
      return;
    }
    imp_.Emit("transpose", {{"X", {Emit("concat", {{"X", parts}}, {{"axis", 0}})}}}, {{"Out", {out}}},
              {{"axis", perm}});
  }

  const Node& n_;
  Importer& imp_;
  bool batch_first_;
  std::vector<int64_t> xs_;
  int64_t steps_ = 0, hidden_ = -1;
  std::vector<bool> reverse_;
  std::string tag_;
  std::vector<std::string> xt_;
  std::vector<std::vector<std::string>> ys_;  // [t][d]: h as [1, 1, B, H]
  std::map<int, std::vector<std::string>> last_;
  std::map<int, std::string> states_;
  std::string lens_;  // sequence_lens when some row is shorter (or unknown)
  std::map<int64_t, std::pair<std::string, std::string>> masks_;

  // [batch, 1]: 1 where t < sequence_lens, and 1 minus that.
  const std::pair<std::string, std::string>& Mask(int64_t t) {
    auto it = masks_.find(t);
    if (it != masks_.end()) return it->second;
    const std::string at = Tmp();
    imp_.Emit("fill_constant", {}, {{"Out", {at}}},
              {{"shape", Ints{1}},
               {"value", static_cast<float>(t)},
               {"dtype", std::string(DTypeName(imp_.DTypeOf(n_, n_.Input(4))))}});
    const std::string running = Emit("greater_than", {{"X", {lens_}}, {"Y", {at}}}, {{"axis", -1}});
    const std::string dtype = DTypeName(imp_.DTypeOf(n_, n_.Input(0)));
    const std::string f = Emit("cast", {{"X", {running}}}, {{"in_dtype", std::string("bool")}, {"out_dtype", dtype}});
    const std::string keep = Emit("unsqueeze", {{"X", {f}}}, {{"axes", Ints{1}}});
    const std::string drop = Emit("scale", {{"X", {keep}}}, {{"scale", -1.0f}, {"bias", 1.0f}});
    return masks_[t] = {keep, drop};
  }
};

void LSTM(const Node& n, Importer& imp) {
  if (n.Int("input_forget", 0) != 0) n.Unsupported("input_forget");
  Unroll u(n, imp, 4, {"Sigmoid", "Tanh", "Tanh"});
  for (size_t d = 0; d < u.Dirs(); ++d) {
    const std::string w = u.Pick(1, d), r = u.Pick(2, d);
    std::string bias;
    if (n.HasInput(3)) {
      const auto wr = u.Split(u.Pick(3, d), 2, 0);
      bias = u.Add(wr[0], wr[1]);
    }
    // Peepholes P [3H] (i, o, f) weigh the cell state into three gates.
    std::vector<std::string> p;
    if (n.HasInput(7)) p = u.Split(u.Pick(7, d), 3, 0);
    auto peep = [&](const std::string& gate, size_t which, const std::string& cell) {
      return p.empty() ? gate : u.Add(gate, u.Mul(cell, p[which]));
    };
    std::string h = u.State(5, d), c = u.State(6, d);
    for (int64_t k = 0; k < u.Steps(); ++k) {
      const int64_t t = u.Time(d, k);
      std::string g = u.Add(u.MatMulT(u.X(t), w), u.MatMulT(h, r));
      if (!bias.empty()) g = u.Add(g, bias);
      const auto gates = u.Split(g, 4, 1);  // i, o, f, c
      const std::string i = u.Emit("sigmoid", {{"X", {peep(gates[0], 0, c)}}});
      const std::string f = u.Emit("sigmoid", {{"X", {peep(gates[2], 2, c)}}});
      const std::string cc = u.Emit("tanh", {{"X", {gates[3]}}});
      const std::string c_next = u.Add(u.Mul(f, c), u.Mul(i, cc));
      const std::string o = u.Emit("sigmoid", {{"X", {peep(gates[1], 1, c_next)}}});
      const std::string h_next = u.Mul(o, u.Emit("tanh", {{"X", {c_next}}}));
      u.Record(t, h_next);
      c = u.Blend(t, c_next, c);
      h = u.Blend(t, h_next, h);
    }
    u.Last(1, h);
    u.Last(2, c);
  }
  u.Finish();
}

void GRU(const Node& n, Importer& imp) {
  Unroll u(n, imp, 3, {"Sigmoid", "Tanh"});
  const bool linear_before_reset = n.Int("linear_before_reset", 0) != 0;
  for (size_t d = 0; d < u.Dirs(); ++d) {
    const std::string w = u.Pick(1, d);
    const auto r = u.Split(u.Pick(2, d), 3, 0);  // Rz, Rr, Rh
    std::string wb;
    std::vector<std::string> rb;
    if (n.HasInput(3)) {
      const auto b = u.Split(u.Pick(3, d), 2, 0);
      wb = b[0];
      rb = u.Split(b[1], 3, 0);
    }
    auto plus_rb = [&](const std::string& x, size_t which) { return rb.empty() ? x : u.Add(x, rb[which]); };
    std::string h = u.State(5, d);
    for (int64_t k = 0; k < u.Steps(); ++k) {
      const int64_t t = u.Time(d, k);
      std::string gx = u.MatMulT(u.X(t), w);
      if (!wb.empty()) gx = u.Add(gx, wb);
      const auto x = u.Split(gx, 3, 1);  // z, r, h parts of the input
      const std::string z = u.Emit("sigmoid", {{"X", {u.Add(x[0], plus_rb(u.MatMulT(h, r[0]), 0))}}});
      const std::string rr = u.Emit("sigmoid", {{"X", {u.Add(x[1], plus_rb(u.MatMulT(h, r[1]), 1))}}});
      const std::string recurrent =
          linear_before_reset ? u.Mul(rr, plus_rb(u.MatMulT(h, r[2]), 2)) : plus_rb(u.MatMulT(u.Mul(rr, h), r[2]), 2);
      const std::string hh = u.Emit("tanh", {{"X", {u.Add(x[2], recurrent)}}});
      // (1 - z) hh + z h = hh + z (h - hh)
      const std::string diff = u.Emit("elementwise_sub", {{"X", {h}}, {"Y", {hh}}}, {{"axis", -1}});
      const std::string h_next = u.Add(hh, u.Mul(z, diff));
      u.Record(t, h_next);
      h = u.Blend(t, h_next, h);
    }
    u.Last(1, h);
  }
  u.Finish();
}

// The plain recurrent net: h = tanh(x W^T + h R^T + Wb + Rb).
void RNN(const Node& n, Importer& imp) {
  Unroll u(n, imp, 1, {"Tanh"});
  for (size_t d = 0; d < u.Dirs(); ++d) {
    const std::string w = u.Pick(1, d), r = u.Pick(2, d);
    std::string bias;
    if (n.HasInput(3)) {
      const auto wr = u.Split(u.Pick(3, d), 2, 0);
      bias = u.Add(wr[0], wr[1]);
    }
    std::string h = u.State(5, d);
    for (int64_t k = 0; k < u.Steps(); ++k) {
      const int64_t t = u.Time(d, k);
      std::string g = u.Add(u.MatMulT(u.X(t), w), u.MatMulT(h, r));
      if (!bias.empty()) g = u.Add(g, bias);
      const std::string h_next = u.Emit("tanh", {{"X", {g}}});
      u.Record(t, h_next);
      h = u.Blend(t, h_next, h);
    }
    u.Last(1, h);
  }
  u.Finish();
}

// CastLike: to the dtype of input 1 (read for its dtype only).
void CastLike(const Node& n, Importer& imp) {
  const DType in = imp.DTypeOf(n, n.Input(0)), out = imp.DTypeOf(n, n.Input(1));
  if (in == out) {
    Unary(n, imp, "assign");
    return;
  }
  Unary(n, imp, "cast", {{"in_dtype", std::string(DTypeName(in))}, {"out_dtype", std::string(DTypeName(out))}});
}

// A reduction, with an elementwise op before it (ReduceL1: abs) and after
// it (ReduceL2: sqrt) where ONNX's reduction is such a chain.
void Reduce(const Node& n, Importer& imp, const std::string& type, bool axes_input, const std::string& pre = "",
            const std::string& post = "") {
  std::vector<int64_t> axes =
      axes_input ? (n.HasInput(1) ? imp.ConstInts(n, 1, "axes") : std::vector<int64_t>{}) : n.Ints("axes");
  const bool keep = n.Int("keepdims", 1) != 0;
  std::string x = imp.In(n, 0);
  if (!pre.empty()) {
    const std::string t = imp.Temp(n.Output(0));
    imp.Emit(pre, {{"X", {x}}}, {{"Out", {t}}});
    x = t;
  }
  if (axes.empty() && n.Int("noop_with_empty_axes", 0) != 0) {
    imp.Emit(post.empty() ? "assign" : post, {{"X", {x}}}, {{"Out", {n.Output(0)}}});
    return;
  }
  AttributeMap attrs{{"keep_dim", keep}};
  if (axes.empty()) {
    attrs["reduce_all"] = true;
    attrs["dim"] = Ints{};
  } else {
    attrs["dim"] = ToInts(n, axes, "axis");
  }
  const std::string reduced = post.empty() ? n.Output(0) : imp.Temp(n.Output(0));
  imp.Emit(type, {{"X", {x}}}, {{"Out", {reduced}}}, attrs);
  if (!post.empty()) imp.Emit(post, {{"X", {reduced}}}, {{"Out", {n.Output(0)}}});
}
void ReduceMean(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_mean", imp.Opset() >= 18); }
void ReduceSum(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_sum", imp.Opset() >= 13); }
void ReduceL1(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_sum", imp.Opset() >= 18, "abs"); }
void ReduceL2(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_sum", imp.Opset() >= 18, "square", "sqrt"); }
void ReduceSumSquare(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_sum", imp.Opset() >= 18, "square"); }
void ReduceMax(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_max", imp.Opset() >= 18); }
void ReduceMin(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_min", imp.Opset() >= 18); }
void ReduceProd(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_prod", imp.Opset() >= 18); }
void ReduceLogSum(const Node& n, Importer& imp) { Reduce(n, imp, "reduce_sum", imp.Opset() >= 18, "", "log"); }
// log(sum(exp(x))) as m + log(sum(exp(x - m))), m the max over the same
// axes (kept for the subtraction): the same value without exp's overflow.
void ReduceLogSumExp(const Node& n, Importer& imp) {
  onnx::NodeProto p = n.Proto();
  auto keep = [&](onnx::NodeProto* q, bool k) {
    for (auto& a : *q->mutable_attribute()) {
      if (a.name() == "keepdims") {
        a.set_i(k ? 1 : 0);
        return;
      }
    }
    auto* a = q->add_attribute();
    a->set_name("keepdims");
    a->set_type(onnx::AttributeProto::INT);
    a->set_i(k ? 1 : 0);
  };
  const bool keepdims = n.Int("keepdims", 1) != 0;
  const std::string m = imp.Temp(n.Output(0)), shifted = imp.Temp(n.Output(0)), e = imp.Temp(n.Output(0)),
                    lse = imp.Temp(n.Output(0));
  onnx::NodeProto pm = p;
  keep(&pm, true);
  pm.set_output(0, m);
  ReduceMax(Node(pm), imp);
  imp.Emit("elementwise_sub", {{"X", {imp.In(n, 0)}}, {"Y", {m}}}, {{"Out", {shifted}}}, {{"axis", -1}});
  imp.Emit("exp", {{"X", {shifted}}}, {{"Out", {e}}});
  imp.AddVar(e);
  onnx::NodeProto ps = p;
  ps.set_input(0, e);
  ps.set_output(0, lse);
  Reduce(Node(ps), imp, "reduce_sum", imp.Opset() >= 18, "", "log");
  std::string mo = m;
  if (!keepdims) {
    mo = imp.Temp(n.Output(0));
    onnx::NodeProto pk = p;
    pk.set_output(0, mo);
    ReduceMax(Node(pk), imp);
  }
  imp.Emit("elementwise_add", {{"X", {lse}}, {"Y", {mo}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

void LayerNormalization(const Node& n, Importer& imp) {
  const int64_t rank = imp.RankOf(n, n.Input(0));
  const int64_t axis = NormAxis(n, n.Int("axis", -1), rank);
  // begin_norm_axis is at least 1: axis 0 normalizes X with a leading 1.
  std::string x = imp.In(n, 0), y = n.Output(0);
  if (axis == 0) {
    x = imp.Temp(n.Input(0));
    y = imp.Temp(n.Output(0));
    imp.Emit("unsqueeze", {{"X", {imp.In(n, 0)}}}, {{"Out", {x}}}, {{"axes", Ints{0}}});
  }
  // layer_norm's Scale and Bias are flat [right]: reshape them when not 1-D.
  auto flat = [&](int i) -> std::string {
    if (!n.HasInput(i)) return "";
    if (imp.RankOf(n, n.Input(i)) == 1) return imp.In(n, i);
    const std::string out = imp.Temp(n.Input(i));
    imp.Emit("reshape", {{"X", {imp.In(n, i)}}}, {{"Out", {out}}}, {{"shape", Ints{-1}}});
    return out;
  };
  VarNameMap inputs{{"X", {x}}};
  const std::string scale = flat(1), bias = flat(2);
  if (!scale.empty()) inputs["Scale"] = {scale};
  if (!bias.empty()) inputs["Bias"] = {bias};
  const float eps = n.Float("epsilon", 1e-5f);
  const std::string mean = imp.Temp(n.Output(0) + "_mean"), var = imp.Temp(n.Output(0) + "_var");
  imp.Emit("layer_norm", inputs, {{"Y", {y}}, {"Mean", {mean}}, {"Variance", {var}}},
           {{"epsilon", eps}, {"begin_norm_axis", ToInt(n, std::max<int64_t>(axis, 1), "axis")}});
  if (axis == 0) imp.Emit("squeeze", {{"X", {y}}}, {{"Out", {n.Output(0)}}}, {{"axes", Ints{0}}});
  if (!n.HasOutput(1) && !n.HasOutput(2)) return;
  // ONNX's Mean and InvStdDev keep X's rank (1s from axis on); nabla's are
  // flat [left], and its Variance is not inverted.
  const std::vector<int64_t> xs = imp.ShapeOf(n, n.Input(0));
  Ints shape;
  for (int64_t i = 0; i < rank; ++i) shape.push_back(i < axis ? ToInt(n, xs[i], "dim") : 1);
  if (std::count(shape.begin(), shape.end(), -1) > 1) n.Unsupported("Mean/InvStdDev with several dynamic dims");
  if (n.HasOutput(1)) imp.Emit("reshape", {{"X", {mean}}}, {{"Out", {n.Output(1)}}}, {{"shape", shape}});
  if (n.HasOutput(2)) {
    const std::string shifted = imp.Temp(n.Output(2)), sd = imp.Temp(n.Output(2)), inv = imp.Temp(n.Output(2));
    imp.Emit("scale", {{"X", {var}}}, {{"Out", {shifted}}}, {{"scale", 1.0f}, {"bias", eps}});
    imp.Emit("sqrt", {{"X", {shifted}}}, {{"Out", {sd}}});
    ConstValue one;
    one.dtype = imp.DTypeOf(n, n.Input(0));
    one.dims = {1};
    one.data = {1};
    imp.Emit("elementwise_div", {{"X", {imp.ConstVar(ToTensor(one), "one")}}, {"Y", {sd}}}, {{"Out", {inv}}},
             {{"axis", -1}});
    imp.Emit("reshape", {{"X", {inv}}}, {{"Out", {n.Output(2)}}}, {{"shape", shape}});
  }
}

void Clip(const Node& n, Importer& imp) {
  RequireCpuKernel(n, imp, "clip", 0);
  float lo = -FLT_MAX, hi = FLT_MAX;
  VarNameMap inputs{{"X", {imp.In(n, 0)}}};
  if (imp.Opset() >= 11) {
    // A bound computed at run time is clip's Min / Max input.
    for (int i : {1, 2}) {
      if (!n.HasInput(i)) continue;
      if (imp.Const(n, i)) {
        (i == 1 ? lo : hi) = imp.ConstFloats(n, i, i == 1 ? "min" : "max").at(0);
      } else {
        inputs[i == 1 ? "Min" : "Max"] = {imp.In(n, i)};
      }
    }
  } else {
    lo = n.Float("min", lo);
    hi = n.Float("max", hi);
  }
  imp.Emit("clip", inputs, {{"Out", {n.Output(0)}}}, {{"min", lo}, {"max", hi}});
}

// select_last_index: the first extremum of X reversed along the axis (a
// gather of d-1, ..., 0) is the last one of X, at d - 1 - its position.
void ArgExtremum(const Node& n, Importer& imp, const std::string& type) {
  const int axis = ToInt(n, n.Int("axis", 0), "axis");
  const AttributeMap attrs{{"axis", axis}, {"keepdims", n.Int("keepdims", 1) != 0}};
  if (n.Int("select_last_index", 0) == 0) {
    Unary(n, imp, type, attrs);
    return;
  }
  const std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  const int64_t norm = NormAxis(n, axis, static_cast<int64_t>(shape.size()));
  const int64_t d = shape.at(static_cast<size_t>(norm));
  if (d < 0) n.Unsupported("select_last_index along a dynamic dim (fix it with --input-shape)");
  ConstValue rev, last;
  rev.dtype = last.dtype = DType::kInt64;
  rev.dims = {d};
  for (int64_t i = d - 1; i >= 0; --i) rev.data.push_back(i);
  last.dims = {1};
  last.data = {static_cast<long double>(d - 1)};
  const std::string reversed = imp.Temp(n.Output(0)), pos = imp.Temp(n.Output(0));
  imp.Emit("gather", {{"X", {imp.In(n, 0)}}, {"Index", {imp.ConstVar(ToTensor(rev), "reversed")}}},
           {{"Out", {reversed}}}, {{"axis", static_cast<int>(norm)}});
  imp.Emit(type, {{"X", {reversed}}}, {{"Out", {pos}}}, attrs);
  imp.Emit("elementwise_sub", {{"X", {imp.ConstVar(ToTensor(last), "last")}}, {"Y", {pos}}}, {{"Out", {n.Output(0)}}},
           {{"axis", -1}});
}
void ArgMax(const Node& n, Importer& imp) { ArgExtremum(n, imp, "arg_max"); }
void ArgMin(const Node& n, Importer& imp) { ArgExtremum(n, imp, "arg_min"); }

// Trilu's k is tril_triu's diagonal (a constant: tril_triu has no tensor input for it).
void SelectExact(const Node& n, Importer& imp, const std::array<std::pair<std::string, std::vector<int64_t>>, 3>& in,
                 DType dt, const std::string& result);
std::string ScalarVar(Importer& imp, DType dtype, long double v, const std::string& hint);
std::string CastTo(Importer& imp, const std::string& x, DType from, DType to, const std::string& hint);

// A k known at import time is tril_triu's diagonal; one computed at run
// time selects x or 0 by (j - i <= k) (>= k for upper) with SelectExact
// (Where's exact gather), on known dims.
void Trilu(const Node& n, Importer& imp) {
  const bool upper = n.Int("upper", 1) != 0;
  if (!n.HasInput(1) || imp.Const(n, 1)) {
    const int64_t k = n.HasInput(1) ? imp.ConstInts(n, 1, "k").at(0) : 0;
    Unary(n, imp, "tril_triu", {{"diagonal", ToInt(n, k, "k")}, {"lower", !upper}});
    return;
  }
  const std::vector<int64_t> xs = imp.ShapeOf(n, n.Input(0));
  if (xs.size() < 2 || xs[xs.size() - 2] < 0 || xs.back() < 0) {
    n.Unsupported("k computed at run time for an input whose last two dims are not known");
  }
  const int64_t rows = xs[xs.size() - 2], cols = xs.back();
  if (std::count(xs.begin(), xs.end(), 0) > 0) {
    Unary(n, imp, "assign");  // empty: nothing to select
    return;
  }
  if (rows * cols > (int64_t(1) << 22)) n.Unsupported("k computed at run time for a matrix of over 2^22 elements");
  ConstValue diff;
  diff.dtype = DType::kInt64;
  diff.dims = {rows, cols};
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) diff.data.push_back(static_cast<long double>(j - i));
  }
  const DType kt = imp.DTypeOf(n, n.Input(1)), dt = imp.DTypeOf(n, n.Input(0));
  const std::string k = CastTo(imp, imp.In(n, 1), kt, DType::kInt64, n.Output(0));
  const std::string keep = imp.Temp(n.Output(0));
  imp.Emit(upper ? "greater_equal" : "less_equal", {{"X", {imp.ConstVar(ToTensor(diff), "trilu_offsets")}}, {"Y", {k}}},
           {{"Out", {keep}}}, {{"axis", -1}});
  std::array<std::pair<std::string, std::vector<int64_t>>, 3> in;
  in[0] = {keep, {rows, cols}};
  in[1] = {imp.In(n, 0), xs};
  in[2] = {ScalarVar(imp, dt, 0, "zero"), {}};
  SelectExact(n, imp, in, dt, n.Output(0));
}

// Expand to a shape computed at run time, for an input whose dims are known:
// expand's ExpandTimes is target * m + (1 - m), m = 1 where X's (aligned)
// dim is 1: a dim of 1 takes the target's, any other dim stays (ONNX lets
// the target say 1 or the dim itself there).
bool ExpandRunTime(const Node& n, Importer& imp) {
  const std::string target = RunTimeInts(n, imp, 1);
  if (target.empty() || !imp.HasShape(n.Input(0)) || !imp.HasShape(n.Input(1))) return false;
  std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  const std::vector<int64_t> ts = imp.ShapeOf(n, n.Input(1));
  if (ts.size() != 1 || ts[0] < 0) return false;
  const size_t k = static_cast<size_t>(ts[0]);
  for (int64_t d : shape) {
    if (d < 0) n.Unsupported("a shape computed at run time for an input with dynamic dims (use --input-shape)");
  }
  if (k == 0) {
    Unary(n, imp, "assign");
    return true;
  }
  std::string x = imp.In(n, 0);
  if (k > shape.size()) {
    Ints axes;
    for (size_t i = 0; i < k - shape.size(); ++i) axes.push_back(static_cast<int>(i));
    const std::string u = imp.Temp(n.Output(0));
    imp.Emit("unsqueeze", {{"X", {x}}}, {{"Out", {u}}}, {{"axes", axes}});
    shape.insert(shape.begin(), k - shape.size(), 1);
    x = u;
  }
  // The target's dims apply to X's last k; X's leading dims are not tiled.
  // A gather spreads the target over X's rank (nabla's concat is float
  // only), the leading entries masked to 1.
  const DType dt = imp.DTypeOf(n, n.Input(1));
  const size_t r = shape.size();
  ConstValue index, mask, rest;
  index.dtype = DType::kInt64;
  mask.dtype = rest.dtype = dt;
  index.dims = mask.dims = rest.dims = {static_cast<int64_t>(r)};
  for (size_t i = 0; i < r; ++i) {
    const bool tiled = i >= r - k && shape[i] == 1;
    index.data.push_back(i >= r - k ? static_cast<long double>(i - (r - k)) : 0);
    mask.data.push_back(tiled ? 1 : 0);
    rest.data.push_back(tiled ? 0 : 1);
  }
  const std::string spread = imp.Temp(n.Output(0)), masked = imp.Temp(n.Output(0)), times = imp.Temp(n.Output(0));
  imp.Emit("gather", {{"X", {target}}, {"Index", {imp.ConstVar(ToTensor(index), "expand_index")}}}, {{"Out", {spread}}},
           {{"axis", 0}});
  imp.Emit("elementwise_mul", {{"X", {spread}}, {"Y", {imp.ConstVar(ToTensor(mask), "expand_mask")}}},
           {{"Out", {masked}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {masked}}, {"Y", {imp.ConstVar(ToTensor(rest), "expand_rest")}}},
           {{"Out", {times}}}, {{"axis", -1}});
  imp.Emit("expand", {{"X", {x}}, {"ExpandTimes", {times}}}, {{"Out", {n.Output(0)}}});
  return true;
}

void Expand(const Node& n, Importer& imp) {
  if (ExpandRunTime(n, imp)) return;
  const std::vector<int64_t> target = imp.ConstInts(n, 1, "the shape");
  std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  std::string x = imp.In(n, 0);
  // numpy broadcasting: align at the end, then tile the size-1 dims.
  if (target.size() > shape.size()) {
    std::vector<int> axes;
    for (size_t i = 0; i < target.size() - shape.size(); ++i) axes.push_back(static_cast<int>(i));
    const std::string u = imp.Temp(n.Output(0));
    imp.Emit("unsqueeze", {{"X", {x}}}, {{"Out", {u}}}, {{"axes", axes}});
    shape.insert(shape.begin(), target.size() - shape.size(), 1);
    x = u;
  }
  Ints times;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t t = i + target.size() >= shape.size() ? target[i + target.size() - shape.size()] : 1;
    if (shape[i] == 1 && t > 1) {
      times.push_back(ToInt(n, t, "dim"));
    } else if (shape[i] < 0 && t > 1) {
      n.Unsupported("expanding a dynamic dim (fix it with --input-shape)");
    } else {
      times.push_back(1);
    }
  }
  imp.Emit("expand", {{"X", {x}}}, {{"Out", {n.Output(0)}}}, {{"expand_times", times}});
}

void Tile(const Node& n, Importer& imp) {
  if (const std::string r = RunTimeInts(n, imp, 1); !r.empty()) {
    imp.Emit("expand", {{"X", {imp.In(n, 0)}}, {"ExpandTimes", {r}}}, {{"Out", {n.Output(0)}}});
    return;
  }
  Unary(n, imp, "expand", {{"expand_times", ToInts(n, imp.ConstInts(n, 1, "repeats"), "repeat")}});
}

void ConstantOfShape(const Node& n, Importer& imp) {
  const std::string shape_var = RunTimeInts(n, imp, 0);
  const std::vector<int64_t> shape = shape_var.empty() ? imp.ConstInts(n, 0, "the shape") : std::vector<int64_t>{};
  float value = 0;
  long double exact = 0;
  DType dtype = DType::kFloat32;
  if (const auto* t = n.TensorAttr("value")) {
    if (t->data_location() == onnx::TensorProto::EXTERNAL) n.Unsupported("a value with external data");
    ConstValue v = ToConst(ReadTensorProto(*t, ".", n.Describe()));
    dtype = v.dtype;
    if (!v.data.empty()) exact = v.data[0];
    value = static_cast<float>(exact);
  }
  VarNameMap inputs;
  if (!shape_var.empty()) inputs["ShapeTensor"] = {shape_var};
  AttributeMap attrs{{"shape", ToInts(n, shape, "dim")}, {"value", value}, {"dtype", std::string(DTypeName(dtype))}};
  // A finite value float does not hold (an int64 past 2^24, a double such
  // as 0.1) goes exactly in str_value too, as Paddle writes it; NaN and the
  // infinities float holds.
  if (std::isfinite(static_cast<double>(exact)) && exact != static_cast<long double>(value)) {
    char text[64];
    if (dtype == DType::kInt64 || dtype == DType::kInt32)
      std::snprintf(text, sizeof text, "%lld", static_cast<long long>(exact));
    else
      std::snprintf(text, sizeof text, "%.17g", static_cast<double>(exact));
    attrs["str_value"] = std::string(text);
  }
  imp.Emit("fill_constant", inputs, {{"Out", {n.Output(0)}}}, attrs);
}

void TopK(const Node& n, Importer& imp) {
  const int64_t rank = imp.RankOf(n, n.Input(0));
  if (NormAxis(n, n.Int("axis", -1), rank) != rank - 1) n.Unsupported("an axis other than the last");
  const int64_t k = imp.Opset() >= 10 ? imp.ConstInts(n, 1, "k").at(0) : n.Int("k", 1);
  if (n.Int("largest", 1) != 0) {
    imp.Emit("top_k", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(0)}}, {"Indices", {n.Output(1)}}},
             {{"k", ToInt(n, k, "k")}});
    return;
  }
  // The k smallest: the k largest of -x (exact for floats), negated back.
  if (!IsFloating(imp.DTypeOf(n, n.Input(0)))) n.Unsupported("largest=0 on integers");
  const std::string neg = imp.Temp(n.Output(0)), top = imp.Temp(n.Output(0));
  imp.Emit("scale", {{"X", {imp.In(n, 0)}}}, {{"Out", {neg}}}, {{"scale", -1.0f}});
  imp.Emit("top_k", {{"X", {neg}}}, {{"Out", {top}}, {"Indices", {n.Output(1)}}}, {{"k", ToInt(n, k, "k")}});
  imp.Emit("scale", {{"X", {top}}}, {{"Out", {n.Output(0)}}}, {{"scale", -1.0f}});
}

// OneHot: ids (negative ones count from depth) to rows of off values with
// on at the id, along `axis`: one_hot (ids out of range give rows of
// zeros, as ONNX's all-off rows), then on * h + off * (1 - h), exact for
// h in {0, 1}, in values' dtype. A depth computed at run time is
// one_hot's depth_tensor.
void OneHot(const Node& n, Importer& imp) {
  const int64_t rank = imp.RankOf(n, n.Input(0));
  const int64_t axis = NormAxis(n, n.Int("axis", -1), rank + 1);
  const DType vt = imp.DTypeOf(n, n.Input(2)), it = imp.DTypeOf(n, n.Input(0));
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  auto scalar = [&](DType dt, long double v, const std::string& hint) {
    ConstValue c;
    c.dtype = dt;
    c.dims = {1};
    c.data = {v};
    return imp.ConstVar(ToTensor(c), hint);
  };
  // The depth: an int64 [1] var (for the wrap of negative ids) and, when
  // constant, the attribute.
  std::string depth;
  int depth_attr = -1;
  if (const Tensor* t = imp.Const(n, 1)) {
    const ConstValue c = ToConst(*t);
    if (c.data.size() != 1)
      n.Fail(ErrorKind::kInvalidArgument, "depth has " + std::to_string(c.data.size()) + " elements");
    if (!(c.data[0] >= 1 && c.data[0] <= INT_MAX)) {
      n.Fail(ErrorKind::kInvalidArgument, "depth " + std::to_string(static_cast<double>(c.data[0])) +
                                              " is not in [1, " + std::to_string(INT_MAX) + "]");
    }
    depth_attr = static_cast<int>(c.data[0]);
    depth = scalar(DType::kInt64, depth_attr, "depth");
  } else {
    const DType dt = imp.DTypeOf(n, n.Input(1));
    depth = imp.In(n, 1);
    if (dt != DType::kInt64) {
      const std::string d = tmp();
      imp.Emit("cast", {{"X", {depth}}}, {{"Out", {d}}},
               {{"in_dtype", std::string(DTypeName(dt))}, {"out_dtype", std::string("int64")}});
      depth = d;
    }
    if (imp.RankOf(n, n.Input(1)) == 0) {
      const std::string d = tmp();
      imp.Emit("reshape", {{"X", {depth}}}, {{"Out", {d}}}, {{"shape", Ints{1}}});
      depth = d;
    }
  }
  std::string ids = imp.In(n, 0);
  if (it != DType::kInt64) {
    const std::string c = tmp();
    imp.Emit("cast", {{"X", {ids}}}, {{"Out", {c}}},
             {{"in_dtype", std::string(DTypeName(it))}, {"out_dtype", std::string("int64")}});
    ids = c;
  }
  const std::string neg = tmp(), negi = tmp(), shift = tmp(), wrapped = tmp(), col = tmp(), hot = tmp();
  imp.Emit("less_than", {{"X", {ids}}, {"Y", {scalar(DType::kInt64, 0, "zero")}}}, {{"Out", {neg}}}, {{"axis", -1}});
  imp.Emit("cast", {{"X", {neg}}}, {{"Out", {negi}}},
           {{"in_dtype", std::string("bool")}, {"out_dtype", std::string("int64")}});
  imp.Emit("elementwise_mul", {{"X", {negi}}, {"Y", {depth}}}, {{"Out", {shift}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {ids}}, {"Y", {shift}}}, {{"Out", {wrapped}}}, {{"axis", -1}});
  imp.Emit("unsqueeze", {{"X", {wrapped}}}, {{"Out", {col}}}, {{"axes", Ints{static_cast<int>(rank)}}});
  VarNameMap in{{"X", {col}}};
  if (depth_attr < 0) in["depth_tensor"] = {depth};
  imp.Emit("one_hot", in, {{"Out", {hot}}},
           {{"depth", std::max(depth_attr, 1)}, {"dtype", std::string(DTypeName(vt))}, {"allow_out_of_range", true}});
  // values [off, on].
  const std::string off = tmp(), on = tmp(), cold = tmp(), a = tmp(), b = tmp();
  const std::string out = axis == rank ? n.Output(0) : tmp();
  imp.Emit("slice", {{"Input", {imp.In(n, 2)}}}, {{"Out", {off}}},
           {{"axes", Ints{0}}, {"starts", Ints{0}}, {"ends", Ints{1}}});
  imp.Emit("slice", {{"Input", {imp.In(n, 2)}}}, {{"Out", {on}}},
           {{"axes", Ints{0}}, {"starts", Ints{1}}, {"ends", Ints{2}}});
  imp.Emit("elementwise_sub", {{"X", {scalar(vt, 1, "one")}}, {"Y", {hot}}}, {{"Out", {cold}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {hot}}, {"Y", {on}}}, {{"Out", {a}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {cold}}, {"Y", {off}}}, {{"Out", {b}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {a}}, {"Y", {b}}}, {{"Out", {out}}}, {{"axis", -1}});
  if (axis == rank) return;
  // The class dim from last to `axis`.
  Ints perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i == axis) perm.push_back(static_cast<int>(rank));
    perm.push_back(static_cast<int>(i));
  }
  imp.Emit("transpose", {{"X", {out}}}, {{"Out", {n.Output(0)}}}, {{"axis", perm}});
}

// PyTorch writes a Pad of zeros before some poolings: that one is a copy.
void Pad(const Node& n, Importer& imp) {
  const std::vector<int64_t> pads = imp.Opset() >= 11 ? imp.ConstInts(n, 1, "pads") : n.Ints("pads");
  for (int64_t p : pads) {
    if (p != 0) n.Unsupported("non-zero pads (needs nabla op pad)");
  }
  Unary(n, imp, "assign");
}

// -x[n, target[n, ...], ...] for log-probabilities x [N, C, d...]: a
// one-hot product (nabla has no take_along_axis), which also carries class
// weights and ignore_index, and ONNX's weighted mean.
void NllChain(const Node& n, Importer& imp, const std::string& x_var, const std::string& out) {
  const std::vector<int64_t> xs = imp.ShapeOf(n, n.Input(0));
  const int64_t rank = static_cast<int64_t>(xs.size());
  if (rank < 2 || xs[1] < 0) n.Unsupported("scores without a known class dim 1");
  const DType ft = imp.DTypeOf(n, n.Input(0)), it = imp.DTypeOf(n, n.Input(1));
  const std::string reduction = n.String("reduction", "mean");
  if (reduction != "none" && reduction != "sum" && reduction != "mean") n.Unsupported("reduction " + reduction);
  std::string x = x_var;
  if (rank > 2) {
    // Classes last, where one_hot puts them.
    Ints perm{0};
    for (int64_t i = 2; i < rank; ++i) perm.push_back(static_cast<int>(i));
    perm.push_back(1);
    x = imp.Temp(n.Output(0));
    imp.Emit("transpose", {{"X", {x_var}}}, {{"Out", {x}}}, {{"axis", perm}});
  }
  const std::string t1 = imp.Temp(n.Input(1)), onehot = imp.Temp(n.Output(0));
  imp.Emit("unsqueeze", {{"X", {imp.In(n, 1)}}}, {{"Out", {t1}}}, {{"axes", Ints{static_cast<int>(rank - 1)}}});
  imp.Emit(
      "one_hot", {{"X", {t1}}}, {{"Out", {onehot}}},
      {{"depth", ToInt(n, xs[1], "classes")}, {"dtype", std::string(DTypeName(ft))}, {"allow_out_of_range", true}});
  std::string w = onehot;
  if (n.HasInput(2)) {
    const std::string weighted = imp.Temp(n.Output(0));
    imp.Emit("elementwise_mul", {{"X", {w}}, {"Y", {imp.In(n, 2)}}}, {{"Out", {weighted}}}, {{"axis", -1}});
    w = weighted;
  }
  if (n.HasAttr("ignore_index")) {
    ConstValue ig;
    ig.dtype = it;
    ig.dims = {1};
    ig.data = {static_cast<long double>(n.Int("ignore_index", -100))};
    const std::string keep = imp.Temp(n.Output(0)), keepf = imp.Temp(n.Output(0)), masked = imp.Temp(n.Output(0));
    imp.Emit("not_equal", {{"X", {t1}}, {"Y", {imp.ConstVar(ToTensor(ig), "ignore_index")}}}, {{"Out", {keep}}},
             {{"axis", -1}});
    imp.Emit("cast", {{"X", {keep}}}, {{"Out", {keepf}}},
             {{"in_dtype", std::string("bool")}, {"out_dtype", std::string(DTypeName(ft))}});
    imp.Emit("elementwise_mul", {{"X", {w}}, {"Y", {keepf}}}, {{"Out", {masked}}}, {{"axis", -1}});
    w = masked;
  }
  const std::string picked = imp.Temp(n.Output(0)), summed = imp.Temp(n.Output(0));
  imp.Emit("elementwise_mul", {{"X", {x}}, {"Y", {w}}}, {{"Out", {picked}}}, {{"axis", -1}});
  imp.Emit("reduce_sum", {{"X", {picked}}}, {{"Out", {summed}}}, {{"dim", Ints{-1}}, {"keep_dim", false}});
  const std::string loss = reduction == "none" ? out : imp.Temp(n.Output(0));
  imp.Emit("scale", {{"X", {summed}}}, {{"Out", {loss}}}, {{"scale", -1.0f}});
  if (reduction == "none") return;
  const AttributeMap all{{"reduce_all", true}, {"dim", Ints{}}};
  if (reduction == "sum") {
    imp.Emit("reduce_sum", {{"X", {loss}}}, {{"Out", {out}}}, all);
  } else if (!n.HasInput(2) && !n.HasAttr("ignore_index")) {
    imp.Emit("mean", {{"X", {loss}}}, {{"Out", {out}}});
  } else {
    // ONNX's mean divides by the weights of the rows counted.
    const std::string num = imp.Temp(n.Output(0)), den = imp.Temp(n.Output(0));
    imp.Emit("reduce_sum", {{"X", {loss}}}, {{"Out", {num}}}, all);
    imp.Emit("reduce_sum", {{"X", {w}}}, {{"Out", {den}}}, all);
    imp.Emit("elementwise_div", {{"X", {num}}, {"Y", {den}}}, {{"Out", {out}}}, {{"axis", -1}});
  }
}

void NegativeLogLikelihoodLoss(const Node& n, Importer& imp) { NllChain(n, imp, imp.In(n, 0), n.Output(0)); }

// PyTorch's CrossEntropyLoss (and nabla's own export of
// softmax_with_cross_entropy): class scores [N, C, ...], labels [N, ...].
void SoftmaxCrossEntropyLoss(const Node& n, Importer& imp) {
  // Classes on axis 1 of [N, C, d1, ...]; labels [N, d1, ...] get their 1 there.
  const std::string reduction = n.String("reduction", "mean");
  const bool has_ignore = n.HasAttr("ignore_index");
  if (n.HasInput(2) || (has_ignore && reduction == "mean")) {
    // Weighted means: log_softmax, then the one-hot chain.
    const std::string logp = n.HasOutput(1) ? n.Output(1) : imp.Temp(n.Output(0));
    imp.Emit("log_softmax", {{"X", {imp.In(n, 0)}}}, {{"Out", {logp}}}, {{"axis", 1}});
    NllChain(n, imp, logp, n.Output(0));
    return;
  }
  if (imp.DTypeOf(n, n.Input(1)) != DType::kInt64) n.Unsupported("labels other than int64");
  const std::string label = imp.Temp(n.Input(1)), loss = imp.Temp(n.Output(0));
  imp.Emit("unsqueeze", {{"X", {imp.In(n, 1)}}}, {{"Out", {label}}}, {{"axes", Ints{1}}});
  AttributeMap attrs{{"axis", 1}};
  if (has_ignore) attrs["ignore_index"] = ToInt(n, n.Int("ignore_index", -100), "ignore_index");
  imp.Emit("softmax_with_cross_entropy", {{"Logits", {imp.In(n, 0)}}, {"Label", {label}}},
           {{"Softmax", {imp.Temp(n.Output(0) + "_softmax")}}, {"Loss", {loss}}}, attrs);
  if (reduction == "none") {
    imp.Emit("squeeze", {{"X", {loss}}}, {{"Out", {n.Output(0)}}}, {{"axes", Ints{1}}});
  } else if (reduction == "mean") {
    imp.Emit("mean", {{"X", {loss}}}, {{"Out", {n.Output(0)}}});
  } else if (reduction == "sum") {
    imp.Emit("reduce_sum", {{"X", {loss}}}, {{"Out", {n.Output(0)}}}, {{"reduce_all", true}, {"dim", Ints{}}});
  } else {
    n.Unsupported("reduction " + reduction);
  }
  if (n.HasOutput(1)) imp.Emit("log_softmax", {{"X", {imp.In(n, 0)}}}, {{"Out", {n.Output(1)}}}, {{"axis", 1}});
}

// ---- ops as short chains of nabla ops ---------------------------------------

// A [1] constant of `dtype` (a comparison's other operand).
std::string ScalarVar(Importer& imp, DType dtype, long double v, const std::string& hint) {
  ConstValue c;
  c.dtype = dtype;
  c.dims = {1};
  c.data = {v};
  return imp.ConstVar(ToTensor(c), hint);
}

std::string CastTo(Importer& imp, const std::string& x, DType from, DType to, const std::string& hint) {
  if (from == to) return x;
  const std::string out = imp.Temp(hint);
  imp.Emit("cast", {{"X", {x}}}, {{"Out", {out}}},
           {{"in_dtype", std::string(DTypeName(from))}, {"out_dtype", std::string(DTypeName(to))}});
  return out;
}

// Hardmax: 1 at the first maximum along the axis, 0 elsewhere: arg_max,
// then one_hot in x's dtype (the axis moved last and back when it is not).
// Before opset 13 the input is coerced to 2-D at the axis, as Softmax's.
void Hardmax(const Node& n, Importer& imp) {
  const std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t axis = NormAxis(n, n.Int("axis", imp.Opset() >= 13 ? -1 : 1), std::max<int64_t>(rank, 1));
  const DType dt = imp.DTypeOf(n, n.Input(0));
  if (!IsFloating(dt) || dt == DType::kBFloat16) n.Unsupported(std::string("dtype ") + DTypeName(dt));
  auto hot = [&](const std::string& x, int64_t depth, const std::string& out) {
    if (depth < 0) n.Unsupported("a dynamic size along the axis (fix it with --input-shape)");
    const std::string idx = imp.Temp(n.Output(0));
    imp.Emit("arg_max", {{"X", {x}}}, {{"Out", {idx}}}, {{"axis", -1}, {"keepdims", true}});
    imp.Emit("one_hot", {{"X", {idx}}}, {{"Out", {out}}},
             {{"depth", ToInt(n, depth, "depth")}, {"dtype", std::string(DTypeName(dt))}});
  };
  if (imp.Opset() < 13 && axis != rank - 1) {
    int64_t cols = 1;
    for (int64_t i = axis; i < rank; ++i) cols = shape[i] < 0 || cols < 0 ? -1 : cols * shape[i];
    if (std::count(shape.begin(), shape.end(), -1) > 1) n.Unsupported("several dynamic dims (use --input-shape)");
    const std::string flat = imp.Temp(n.Output(0)), h = imp.Temp(n.Output(0));
    imp.Emit("flatten", {{"X", {imp.In(n, 0)}}}, {{"Out", {flat}}}, {{"axis", ToInt(n, axis, "axis")}});
    hot(flat, cols, h);
    imp.Emit("reshape", {{"X", {h}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, shape, "dim")}});
    return;
  }
  if (axis == rank - 1) {
    hot(imp.In(n, 0), shape[axis], n.Output(0));
    return;
  }
  Ints perm;
  for (int64_t i = 0; i < rank; ++i) {
    if (i != axis) perm.push_back(static_cast<int>(i));
  }
  perm.push_back(static_cast<int>(axis));
  Ints back(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = static_cast<int>(i);
  const std::string moved = imp.Temp(n.Output(0)), h = imp.Temp(n.Output(0));
  imp.Emit("transpose", {{"X", {imp.In(n, 0)}}}, {{"Out", {moved}}}, {{"axis", perm}});
  hot(moved, shape[axis], h);
  imp.Emit("transpose", {{"X", {h}}}, {{"Out", {n.Output(0)}}}, {{"axis", back}});
}

// EyeLike: a constant (its input is read for its shape and dtype only).
void EyeLike(const Node& n, Importer& imp) {
  const std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(0));
  if (shape.size() != 2 || shape[0] < 0 || shape[1] < 0) n.Unsupported("an input that is not 2-D of known dims");
  DType dt = imp.DTypeOf(n, n.Input(0));
  if (n.HasAttr("dtype") && !OnnxToDType(static_cast<int>(n.Int("dtype", 1)), &dt)) {
    n.Unsupported("dtype " + OnnxTypeName(static_cast<int>(n.Int("dtype", 1))) + ", which nabla lacks");
  }
  if (shape[0] * shape[1] > (int64_t(1) << 24)) n.Unsupported("an identity of more than 2^24 elements");
  const int64_t k = n.Int("k", 0);
  ConstValue c;
  c.dtype = dt;
  c.dims = shape;
  c.data.assign(static_cast<size_t>(shape[0] * shape[1]), 0);
  for (int64_t i = 0; i < shape[0]; ++i) {
    const int64_t j = i + k;
    if (j >= 0 && j < shape[1]) c.data[static_cast<size_t>(i * shape[1] + j)] = 1;
  }
  imp.SetConst(n.Output(0), ToTensor(c));
}

// IsNaN: x != x. IsInf: x == +inf or x == -inf (as detect_* ask). Exact.
void IsNaN(const Node& n, Importer& imp) {
  const std::string x = imp.In(n, 0), same = imp.Temp(n.Output(0));
  imp.Emit("equal", {{"X", {x}}, {"Y", {x}}}, {{"Out", {same}}}, {{"axis", -1}});
  imp.Emit("logical_not", {{"X", {same}}}, {{"Out", {n.Output(0)}}});
}
void IsInf(const Node& n, Importer& imp) {
  const DType dt = imp.DTypeOf(n, n.Input(0));
  const std::string x = imp.In(n, 0);
  std::vector<std::string> hits;
  for (const auto& [attr, sign] : {std::pair{"detect_positive", 1.0L}, std::pair{"detect_negative", -1.0L}}) {
    if (n.Int(attr, 1) == 0) continue;
    const std::string hit = imp.Temp(n.Output(0));
    imp.Emit("equal", {{"X", {x}}, {"Y", {ScalarVar(imp, dt, sign * HUGE_VALL, "inf")}}}, {{"Out", {hit}}},
             {{"axis", -1}});
    hits.push_back(hit);
  }
  if (hits.empty()) {
    // Neither sign: all false, of x's shape.
    const std::string same = imp.Temp(n.Output(0));
    imp.Emit("equal", {{"X", {x}}, {"Y", {x}}}, {{"Out", {same}}}, {{"axis", -1}});
    imp.Emit("logical_and", {{"X", {same}}, {"Y", {ScalarVar(imp, DType::kBool, 0, "false")}}},
             {{"Out", {n.Output(0)}}});
    return;
  }
  if (hits.size() == 1) {
    imp.Emit("assign", {{"X", {hits[0]}}}, {{"Out", {n.Output(0)}}});
    return;
  }
  imp.Emit("logical_or", {{"X", {hits[0]}}, {"Y", {hits[1]}}}, {{"Out", {n.Output(0)}}});
}

// Sign: (x > 0) - (x < 0) in x's dtype.
void Sign(const Node& n, Importer& imp) {
  const DType dt = imp.DTypeOf(n, n.Input(0));
  if (dt == DType::kBool || dt == DType::kBFloat16) n.Unsupported(std::string("dtype ") + DTypeName(dt));
  const std::string x = imp.In(n, 0), zero = ScalarVar(imp, dt, 0, "zero");
  const std::string pos = imp.Temp(n.Output(0)), neg = imp.Temp(n.Output(0));
  imp.Emit("greater_than", {{"X", {x}}, {"Y", {zero}}}, {{"Out", {pos}}}, {{"axis", -1}});
  imp.Emit("less_than", {{"X", {x}}, {"Y", {zero}}}, {{"Out", {neg}}}, {{"axis", -1}});
  imp.Emit("elementwise_sub",
           {{"X", {CastTo(imp, pos, DType::kBool, dt, n.Output(0))}},
            {"Y", {CastTo(imp, neg, DType::kBool, dt, n.Output(0))}}},
           {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// DepthToSpace and SpaceToDepth: a reshape to 6-D, a transpose, a reshape
// back (ONNX's own definition), on NCHW of known C, H, W.
void BlockRearrange(const Node& n, Importer& imp, bool to_space) {
  const std::vector<int64_t> s = imp.ShapeOf(n, n.Input(0));
  const int64_t b = n.Int("blocksize", 0);
  if (s.size() != 4 || s[1] < 0 || s[2] < 0 || s[3] < 0) n.Unsupported("an input other than NCHW of known C, H, W");
  if (b <= 0) n.Fail(ErrorKind::kInvalidArgument, "blocksize " + std::to_string(b) + " is not positive");
  const int64_t c = s[1], h = s[2], w = s[3];
  std::vector<int64_t> first, last;
  Ints perm;
  if (to_space) {
    if (c % (b * b)) n.Fail(ErrorKind::kInvalidArgument, "C is not a multiple of blocksize^2");
    const bool crd = n.String("mode", "DCR") == "CRD";
    first = crd ? std::vector<int64_t>{0, c / (b * b), b, b, h, w} : std::vector<int64_t>{0, b, b, c / (b * b), h, w};
    perm = crd ? Ints{0, 1, 4, 2, 5, 3} : Ints{0, 3, 4, 1, 5, 2};
    last = {0, c / (b * b), h * b, w * b};
  } else {
    if (h % b || w % b) n.Fail(ErrorKind::kInvalidArgument, "H or W is not a multiple of blocksize");
    first = {0, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    last = {0, c * b * b, h / b, w / b};
  }
  const std::string a = imp.Temp(n.Output(0)), t = imp.Temp(n.Output(0));
  imp.Emit("reshape", {{"X", {imp.In(n, 0)}}}, {{"Out", {a}}}, {{"shape", ToInts(n, first, "dim")}});
  imp.Emit("transpose", {{"X", {a}}}, {{"Out", {t}}}, {{"axis", perm}});
  imp.Emit("reshape", {{"X", {t}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, last, "dim")}});
}
void DepthToSpace(const Node& n, Importer& imp) { BlockRearrange(n, imp, true); }
void SpaceToDepth(const Node& n, Importer& imp) { BlockRearrange(n, imp, false); }

// InstanceNormalization: per sample and channel over the spatial dims,
// (x - mean) / sqrt(var + eps) * scale + B, as reductions and elementwise
// ops (so it differentiates and fine-tunes).
void InstanceNormalization(const Node& n, Importer& imp) {
  const int64_t rank = imp.RankOf(n, n.Input(0));
  if (rank < 3) n.Fail(ErrorKind::kInvalidArgument, "the input has rank " + std::to_string(rank) + " (needs >= 3)");
  Ints axes;
  for (int64_t i = 2; i < rank; ++i) axes.push_back(static_cast<int>(i));
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const AttributeMap mean_attrs{{"dim", axes}, {"keep_dim", true}, {"reduce_all", false}};
  const std::string x = imp.In(n, 0), mean = tmp(), d = tmp(), sq = tmp(), var = tmp(), ve = tmp(), inv = tmp(),
                    norm = tmp(), scaled = tmp();
  imp.Emit("reduce_mean", {{"X", {x}}}, {{"Out", {mean}}}, mean_attrs);
  imp.Emit("elementwise_sub", {{"X", {x}}, {"Y", {mean}}}, {{"Out", {d}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {d}}, {"Y", {d}}}, {{"Out", {sq}}}, {{"axis", -1}});
  imp.Emit("reduce_mean", {{"X", {sq}}}, {{"Out", {var}}}, mean_attrs);
  imp.Emit("scale", {{"X", {var}}}, {{"Out", {ve}}}, {{"scale", 1.0f}, {"bias", n.Float("epsilon", 1e-5f)}});
  imp.Emit("rsqrt", {{"X", {ve}}}, {{"Out", {inv}}});
  imp.Emit("elementwise_mul", {{"X", {d}}, {"Y", {inv}}}, {{"Out", {norm}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {norm}}, {"Y", {imp.In(n, 1)}}}, {{"Out", {scaled}}}, {{"axis", 1}});
  imp.Emit("elementwise_add", {{"X", {scaled}}, {"Y", {imp.In(n, 2)}}}, {{"Out", {n.Output(0)}}}, {{"axis", 1}});
}

// LRN over channels: the squares summed over a window of `size` channels
// (zero padded: floor((size-1)/2) before, the rest after) as an average
// pool of [N, 1, C, H*W] that counts the pads, times size; then
// x / (bias + alpha / size * sum)^beta.
void LRN(const Node& n, Importer& imp) {
  const std::vector<int64_t> s = imp.ShapeOf(n, n.Input(0));
  if (s.size() != 4 || s[1] < 0 || s[2] < 0 || s[3] < 0) n.Unsupported("an input other than NCHW of known C, H, W");
  const int64_t size = n.Int("size", 0);
  if (size <= 0) n.Fail(ErrorKind::kInvalidArgument, "size " + std::to_string(size) + " is not positive");
  const float alpha = n.Float("alpha", 1e-4f), beta = n.Float("beta", 0.75f), bias = n.Float("bias", 1.0f);
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const std::string x = imp.In(n, 0), sq = tmp(), flat = tmp(), avg = tmp(), back = tmp(), base = tmp(), den = tmp();
  imp.Emit("elementwise_mul", {{"X", {x}}, {"Y", {x}}}, {{"Out", {sq}}}, {{"axis", -1}});
  imp.Emit("reshape", {{"X", {sq}}}, {{"Out", {flat}}}, {{"shape", ToInts(n, {0, 1, s[1], s[2] * s[3]}, "dim")}});
  const int before = ToInt(n, (size - 1) / 2, "size"), after = ToInt(n, size - 1 - (size - 1) / 2, "size");
  imp.Emit("pool2d", {{"X", {flat}}}, {{"Out", {avg}}},
           {{"pooling_type", std::string("avg")},
            {"ksize", Ints{ToInt(n, size, "size"), 1}},
            {"strides", Ints{1, 1}},
            {"paddings", Ints{before, after, 0, 0}},
            {"exclusive", false}});
  imp.Emit("reshape", {{"X", {avg}}}, {{"Out", {back}}}, {{"shape", ToInts(n, {0, s[1], s[2], s[3]}, "dim")}});
  // avg = sum / size, so alpha / size * sum = alpha * avg.
  imp.Emit("scale", {{"X", {back}}}, {{"Out", {base}}}, {{"scale", alpha}, {"bias", bias}});
  imp.Emit("pow", {{"X", {base}}}, {{"Out", {den}}}, {{"factor", beta}});
  imp.Emit("elementwise_div", {{"X", {x}}, {"Y", {den}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// MeanVarianceNormalization as ONNX's own function body: (x - E[x]) /
// (sqrt(E[x^2] - E[x]^2) + 1e-9) over `axes` (default N, H, W).
void MeanVarianceNormalization(const Node& n, Importer& imp) {
  const int64_t rank = imp.RankOf(n, n.Input(0));
  Ints axes;
  for (int64_t a : n.Ints("axes", {0, 2, 3})) axes.push_back(static_cast<int>(NormAxis(n, a, rank)));
  const AttributeMap mean_attrs{{"dim", axes}, {"keep_dim", true}, {"reduce_all", false}};
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const std::string x = imp.In(n, 0), mean = tmp(), mean_sq = tmp(), sq = tmp(), sq_mean = tmp(), var = tmp(),
                    std_dev = tmp(), d = tmp(), den = tmp();
  imp.Emit("reduce_mean", {{"X", {x}}}, {{"Out", {mean}}}, mean_attrs);
  imp.Emit("elementwise_mul", {{"X", {mean}}, {"Y", {mean}}}, {{"Out", {mean_sq}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {x}}, {"Y", {x}}}, {{"Out", {sq}}}, {{"axis", -1}});
  imp.Emit("reduce_mean", {{"X", {sq}}}, {{"Out", {sq_mean}}}, mean_attrs);
  imp.Emit("elementwise_sub", {{"X", {sq_mean}}, {"Y", {mean_sq}}}, {{"Out", {var}}}, {{"axis", -1}});
  imp.Emit("sqrt", {{"X", {var}}}, {{"Out", {std_dev}}});
  imp.Emit("elementwise_sub", {{"X", {x}}, {"Y", {mean}}}, {{"Out", {d}}}, {{"axis", -1}});
  imp.Emit("scale", {{"X", {std_dev}}}, {{"Out", {den}}}, {{"scale", 1.0f}, {"bias", 1e-9f}});
  imp.Emit("elementwise_div", {{"X", {d}}, {"Y", {den}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// Mod of integers: r = a - trunc(a / b) * b (nabla's integer division
// truncates, so this is C's %, ONNX's fmod=1); fmod=0 takes the divisor's
// sign: r + b where r != 0 and r, b differ in sign. Exact. Floats have no
// exact chain (a - trunc(a / b) * b rounds).
void Mod(const Node& n, Importer& imp) {
  const DType dt = imp.DTypeOf(n, n.Input(0));
  if (dt != DType::kInt32 && dt != DType::kInt64) {
    n.Unsupported(std::string("Mod of ") + DTypeName(dt) + " (no exact chain of nabla ops: needs elementwise_mod)");
  }
  const bool fmod = n.Int("fmod", 0) != 0;
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const std::string a = BroadcastX(n, imp, imp.In(n, 0)), b = imp.In(n, 1);
  const std::string q = tmp(), qb = tmp(), r = fmod ? n.Output(0) : tmp();
  imp.Emit("elementwise_div", {{"X", {a}}, {"Y", {b}}}, {{"Out", {q}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {q}}, {"Y", {b}}}, {{"Out", {qb}}}, {{"axis", -1}});
  imp.Emit("elementwise_sub", {{"X", {a}}, {"Y", {qb}}}, {{"Out", {r}}}, {{"axis", -1}});
  if (fmod) return;
  const std::string zero = ScalarVar(imp, dt, 0, "zero");
  const std::string nonzero = tmp(), r_neg = tmp(), b_neg = tmp(), differ = tmp(), fix = tmp(), fixi = tmp(),
                    shift = tmp();
  imp.Emit("not_equal", {{"X", {r}}, {"Y", {zero}}}, {{"Out", {nonzero}}}, {{"axis", -1}});
  imp.Emit("less_than", {{"X", {r}}, {"Y", {zero}}}, {{"Out", {r_neg}}}, {{"axis", -1}});
  imp.Emit("less_than", {{"X", {b}}, {"Y", {zero}}}, {{"Out", {b_neg}}}, {{"axis", -1}});
  imp.Emit("logical_xor", {{"X", {r_neg}}, {"Y", {b_neg}}}, {{"Out", {differ}}});
  imp.Emit("logical_and", {{"X", {differ}}, {"Y", {nonzero}}}, {{"Out", {fix}}});
  imp.Emit("cast", {{"X", {fix}}}, {{"Out", {fixi}}},
           {{"in_dtype", std::string("bool")}, {"out_dtype", std::string(DTypeName(dt))}});
  imp.Emit("elementwise_mul", {{"X", {fixi}}, {"Y", {b}}}, {{"Out", {shift}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {r}}, {"Y", {shift}}}, {{"Out", {n.Output(0)}}}, {{"axis", -1}});
}

// Where(c, a, b) exactly, as a gather: a and b broadcast to the result's
// shape and stacked into one [2N] vector, read at i + N * (1 - c[i]). A
// copy, so infinities and NaN pass unchanged (c * a + (1 - c) * b would
// make them NaN), and the gradient reaches a and b through gather's and
// stack's. Needs the dims at import time. Operands are (var, ONNX shape).
using Operand3 = std::array<std::pair<std::string, std::vector<int64_t>>, 3>;
void SelectExact(const Node& n, Importer& imp, const Operand3& in, DType dt, const std::string& result) {
  size_t rank = 0;
  for (const auto& op : in) rank = std::max(rank, op.second.size());
  std::vector<std::vector<int64_t>> shapes;
  std::vector<int64_t> out(rank, 1);
  for (const auto& op : in) {
    std::vector<int64_t> sh = op.second;
    sh.insert(sh.begin(), rank - sh.size(), 1);
    for (size_t d = 0; d < rank; ++d) {
      if (sh[d] < 0) n.Unsupported("dynamic dims (fix them with --input-shape)");
      if (sh[d] != 1) {
        if (out[d] != 1 && out[d] != sh[d]) n.Fail(ErrorKind::kInvalidArgument, "inputs that do not broadcast");
        out[d] = sh[d];
      }
    }
    shapes.push_back(sh);
  }
  int64_t count = 1;
  for (int64_t d : out) count *= d;
  if (count > (int64_t(1) << 22)) n.Unsupported("more than 2^22 elements (the gather's index is a constant)");
  if (count == 0) n.Unsupported("an empty result");
  if (dt == DType::kBool || dt == DType::kBFloat16) n.Unsupported(std::string("dtype ") + DTypeName(dt));
  auto tmp = [&] { return imp.Temp(result); };
  const Ints flat{ToInt(n, count, "size")};
  // Operand i broadcast to the result's shape, as [N].
  auto full = [&](size_t i) {
    std::string x = in[i].first;
    const std::vector<int64_t>& sh = shapes[i];
    if (in[i].second.size() != rank) {
      const std::string r = tmp();
      imp.Emit("reshape", {{"X", {x}}}, {{"Out", {r}}}, {{"shape", rank == 0 ? Ints{1} : ToInts(n, sh, "dim")}});
      x = r;
    }
    Ints times;
    bool tile = false;
    for (size_t d = 0; d < rank; ++d) {
      times.push_back(sh[d] == out[d] ? 1 : ToInt(n, out[d], "dim"));
      tile = tile || sh[d] != out[d];
    }
    if (tile) {
      const std::string e = tmp();
      imp.Emit("expand", {{"X", {x}}}, {{"Out", {e}}}, {{"expand_times", times}});
      x = e;
    }
    const std::string f = tmp();
    imp.Emit("reshape", {{"X", {x}}}, {{"Out", {f}}}, {{"shape", flat}});
    return f;
  };
  const std::string cond = full(0), a = full(1), b = full(2);
  const std::string both = tmp(), pool = tmp(), ci = tmp(), off = tmp(), idx = tmp(), picked = tmp();
  imp.Emit("stack", {{"X", {a, b}}}, {{"Y", {both}}}, {{"axis", 0}});
  imp.Emit("reshape", {{"X", {both}}}, {{"Out", {pool}}}, {{"shape", Ints{ToInt(n, 2 * count, "size")}}});
  imp.Emit("cast", {{"X", {cond}}}, {{"Out", {ci}}},
           {{"in_dtype", std::string("bool")}, {"out_dtype", std::string("int64")}});
  // N * (1 - c): exact in scale's float arithmetic for N <= 2^22.
  imp.Emit("scale", {{"X", {ci}}}, {{"Out", {off}}},
           {{"scale", -static_cast<float>(count)}, {"bias", static_cast<float>(count)}});
  ConstValue iota;
  iota.dtype = DType::kInt64;
  iota.dims = {count};
  for (int64_t i = 0; i < count; ++i) iota.data.push_back(static_cast<long double>(i));
  imp.Emit("elementwise_add", {{"X", {off}}, {"Y", {imp.ConstVar(ToTensor(iota), "where_index")}}}, {{"Out", {idx}}},
           {{"axis", -1}});
  imp.Emit("gather", {{"X", {pool}}, {"Index", {idx}}}, {{"Out", {picked}}}, {{"axis", 0}});
  imp.Emit("reshape", {{"X", {picked}}}, {{"Out", {result}}}, {{"shape", rank == 0 ? Ints{1} : ToInts(n, out, "dim")}});
}

void Where(const Node& n, Importer& imp) {
  Operand3 in;
  for (int i = 0; i < 3; ++i) in[static_cast<size_t>(i)] = {imp.In(n, i), imp.ShapeOf(n, n.Input(i))};
  SelectExact(n, imp, in, imp.DTypeOf(n, n.Input(1)), n.Output(0));
}

// GatherElements (PyTorch's torch.gather) as a gather from the flattened
// data: element p of the result reads data at base[p] + index[p] *
// stride[axis], base[p] the flat position of p's other coordinates (a
// constant of the known dims); negative indices wrap. A copy, exact, and
// the gradient scatters back through gather's.
void GatherElements(const Node& n, Importer& imp) {
  const std::vector<int64_t> ds = imp.ShapeOf(n, n.Input(0)), is = imp.ShapeOf(n, n.Input(1));
  const int64_t rank = static_cast<int64_t>(ds.size());
  if (rank == 0 || static_cast<int64_t>(is.size()) != rank) {
    n.Fail(ErrorKind::kInvalidArgument, "data and indices must have one rank >= 1");
  }
  const int64_t axis = NormAxis(n, n.Int("axis", 0), rank);
  int64_t dn = 1, in = 1;
  for (int64_t i = 0; i < rank; ++i) {
    if (ds[i] < 0 || is[i] < 0) n.Unsupported("dynamic dims (fix them with --input-shape)");
    dn *= ds[i];
    in *= is[i];
  }
  if (dn > (int64_t(1) << 26) || in > (int64_t(1) << 22))
    n.Unsupported("data or indices too large for a constant base");
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
  for (int64_t i = rank - 2; i >= 0; --i) stride[i] = stride[i + 1] * ds[i + 1];
  ConstValue base;
  base.dtype = DType::kInt64;
  base.dims = {in};
  std::vector<int64_t> at(static_cast<size_t>(rank), 0);
  for (int64_t p = 0; p < in; ++p) {
    int64_t pos = 0;
    for (int64_t d = 0; d < rank; ++d) {
      if (d != axis) pos += at[d] * stride[d];
    }
    base.data.push_back(static_cast<long double>(pos));
    for (int64_t d = rank - 1; d >= 0 && ++at[d] == is[d]; --d) at[d] = 0;
  }
  const DType it = imp.DTypeOf(n, n.Input(1));
  if (it != DType::kInt32 && it != DType::kInt64) n.Fail(ErrorKind::kInvalidArgument, "indices must be int32 or int64");
  auto tmp = [&] { return imp.Temp(n.Output(0)); };
  const std::string idx = tmp(), neg = tmp(), negi = tmp(), wrap = tmp(), wrapped = tmp(), off = tmp(),
                    flat_idx = tmp(), flat = tmp(), picked = tmp();
  imp.Emit("reshape", {{"X", {CastTo(imp, imp.In(n, 1), it, DType::kInt64, n.Output(0))}}}, {{"Out", {idx}}},
           {{"shape", Ints{ToInt(n, in, "size")}}});
  imp.Emit("less_than", {{"X", {idx}}, {"Y", {ScalarVar(imp, DType::kInt64, 0, "zero")}}}, {{"Out", {neg}}},
           {{"axis", -1}});
  imp.Emit("cast", {{"X", {neg}}}, {{"Out", {negi}}},
           {{"in_dtype", std::string("bool")}, {"out_dtype", std::string("int64")}});
  imp.Emit("elementwise_mul", {{"X", {negi}}, {"Y", {ScalarVar(imp, DType::kInt64, ds[axis], "dim")}}},
           {{"Out", {wrap}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {idx}}, {"Y", {wrap}}}, {{"Out", {wrapped}}}, {{"axis", -1}});
  imp.Emit("elementwise_mul", {{"X", {wrapped}}, {"Y", {ScalarVar(imp, DType::kInt64, stride[axis], "stride")}}},
           {{"Out", {off}}}, {{"axis", -1}});
  imp.Emit("elementwise_add", {{"X", {off}}, {"Y", {imp.ConstVar(ToTensor(base), "gather_base")}}},
           {{"Out", {flat_idx}}}, {{"axis", -1}});
  imp.Emit("reshape", {{"X", {imp.In(n, 0)}}}, {{"Out", {flat}}}, {{"shape", Ints{ToInt(n, dn, "size")}}});
  imp.Emit("gather", {{"X", {flat}}, {"Index", {flat_idx}}}, {{"Out", {picked}}}, {{"axis", 0}});
  imp.Emit("reshape", {{"X", {picked}}}, {{"Out", {n.Output(0)}}}, {{"shape", ToInts(n, is, "dim")}});
}

// ---- control flow: subgraphs as sub-blocks ---------------------------------

// A bool [1] var holding `value` (a Loop's condition, when absent).
std::string BoolConst(Importer& imp, bool value, const std::string& hint) {
  const std::string v = imp.Temp(hint);
  imp.Emit("fill_constant", {}, {{"Out", {v}}},
           {{"shape", Ints{1}}, {"dtype", std::string("bool")}, {"value", value ? 1.0f : 0.0f}});
  imp.AddVar(v);
  return v;
}

// Binds a subgraph input to an outer var: a copy in the sub-block under the
// input's own name, so the body's nodes convert unchanged.
void BindInput(Importer& imp, const onnx::ValueInfoProto& input, const std::string& outer) {
  if (input.name().empty()) return;
  imp.Emit("assign", {{"X", {outer}}}, {{"Out", {input.name()}}});
  imp.AddVar(input.name());
}

// Runs the current sub-block (made by BeginBlock) from `parent`: the op's
// slots are what the block reads and writes outside it.
void EmitBlockOp(Importer& imp, BlockDesc* parent, BlockDesc* block, const std::string& type, const std::string& cond) {
  imp.EndBlock(parent);
  std::vector<std::string> reads, writes;
  imp.OuterVars(*block, &reads, &writes);
  const std::string scopes = imp.Temp(type == "while" ? "loop_scopes" : "branch_scope");
  VarDesc* sv = parent->Var(scopes);
  sv->SetType(VarType::kStepScopes);
  sv->SetDeclared(true);
  imp.AddVar(scopes);
  if (type == "while") {
    imp.Emit("while", {{"X", reads}, {"Condition", {cond}}}, {{"Out", writes}, {"StepScopes", {scopes}}},
             {{"sub_block", BlockRef{block->Idx()}}});
  } else {
    imp.Emit("conditional_block", {{"Cond", {cond}}, {"Input", reads}}, {{"Out", writes}, {"Scope", {scopes}}},
             {{"sub_block", BlockRef{block->Idx()}}, {"is_scalar_condition", true}});
  }
}

// Loop(M, cond, v...) as while: the carried values live in the Loop's output
// vars (assigned their initial values first), an int64 counter i, and the
// loop runs while i < M and cond. The body binds iter_num, cond_in and each
// v_in to them, and at its end writes cond_out and v_out back, counts i up
// and recomputes the condition.
void Loop(const Node& n, Importer& imp) {
  const onnx::GraphProto& body = n.GraphAttr("body");
  const int carried = n.NumInputs() - 2;
  if (carried < 0) n.Fail(ErrorKind::kInvalidArgument, "Loop needs the inputs M and cond (either may be empty)");
  if (body.input_size() != carried + 2 || body.output_size() < carried + 1) {
    n.Fail(ErrorKind::kInvalidArgument, "the body has " + std::to_string(body.input_size()) + " inputs and " +
                                            std::to_string(body.output_size()) + " outputs for " +
                                            std::to_string(carried) + " loop-carried values");
  }
  // Scan outputs go to tensor arrays, stacked after the loop entry by entry:
  // that needs the number of iterations at import time, so a constant M and
  // a condition that stays true (absent or constant true, and the body's
  // cond_out its cond_in through Identity nodes).
  const int scans = body.output_size() - carried - 1;
  int64_t trips = 0;
  if (scans > 0) {
    const Tensor* m = imp.Const(n, 0);
    const Tensor* c = imp.Const(n, 1);
    std::string cond_out = body.output(0).name();
    for (bool changed = true; changed && cond_out != body.input(1).name();) {
      changed = false;
      for (const auto& node : body.node()) {
        if (node.op_type() == "Identity" && node.output_size() == 1 && node.output(0) == cond_out) {
          cond_out = node.input(0);
          changed = true;
        }
      }
    }
    if (!m || m->Numel() != 1 || (n.HasInput(1) && (!c || c->Numel() != 1 || ToConst(*c).data[0] == 0)) ||
        cond_out != body.input(1).name()) {
      n.Unsupported(
          "scan outputs of a Loop whose number of iterations is not known at import time (a constant M "
          "and a condition that stays true): nabla stacks them entry by entry");
    }
    trips = static_cast<int64_t>(ToConst(*m).data[0]);
    if (trips <= 0 || trips > 4096) {
      n.Unsupported("scan outputs of a Loop of " + std::to_string(trips) + " iterations (1 to 4096 are stacked)");
    }
    // An untrusted file must not make millions of ops.
    if (trips * scans > (int64_t(1) << 16)) {
      n.Unsupported(std::to_string(scans) + " scan outputs of " + std::to_string(trips) +
                    " iterations (at most 65536 entries are stacked)");
    }
  }
  std::vector<std::string> values;
  for (int k = 0; k < carried; ++k) {
    const std::string v = n.HasOutput(k) ? n.Output(k) : imp.Temp("loop_value");
    imp.Emit("assign", {{"X", {imp.In(n, k + 2)}}}, {{"Out", {v}}});
    imp.AddVar(v);
    values.push_back(v);
  }
  const std::string i = imp.Temp("loop_i");
  imp.Emit("fill_constant", {}, {{"Out", {i}}}, {{"shape", Ints{1}}, {"dtype", std::string("int64")}, {"value", 0.0f}});
  imp.AddVar(i);
  std::string limit;
  if (n.HasInput(0)) {
    limit = imp.In(n, 0);
    if (imp.DTypeOf(n, n.Input(0)) != DType::kInt64) n.Fail(ErrorKind::kInvalidArgument, "M must be int64");
  }
  std::string cond;
  if (n.HasInput(1)) {
    cond = imp.Temp("loop_cond");
    imp.Emit("assign", {{"X", {imp.In(n, 1)}}}, {{"Out", {cond}}});
    imp.AddVar(cond);
  } else {
    cond = BoolConst(imp, true, "loop_cond");
  }
  const std::string keep = imp.Temp("loop_keep");
  auto keep_going = [&] {
    if (limit.empty()) {
      imp.Emit("assign", {{"X", {cond}}}, {{"Out", {keep}}});
      return;
    }
    const std::string below = imp.Temp("loop_below");
    imp.Emit("less_than", {{"X", {i}}, {"Y", {limit}}}, {{"Out", {below}}});
    imp.Emit("logical_and", {{"X", {below}}, {"Y", {cond}}}, {{"Out", {keep}}});
  };
  keep_going();
  imp.AddVar(keep);

  BlockDesc* parent = imp.BeginBlock();
  BlockDesc* block = imp.CurrentBlock();
  BindInput(imp, body.input(0), i);
  BindInput(imp, body.input(1), cond);
  for (int k = 0; k < carried; ++k) BindInput(imp, body.input(k + 2), values[k]);
  imp.ConvertGraph(body);
  auto body_out = [&](int k) {
    const std::string& name = body.output(k).name();
    if (imp.ConstOf(name)) return imp.ConstVar(*imp.ConstOf(name), name);
    return name;
  };
  // Every new value first, then the writes: a body may return its inputs
  // swapped, and each v_out must be the value before any write-back.
  std::vector<std::string> outs;
  for (int k = 0; k <= carried; ++k) {
    const std::string t = imp.Temp("loop_next");
    imp.Emit("assign", {{"X", {body_out(k)}}}, {{"Out", {t}}});
    outs.push_back(t);
  }
  imp.Emit("assign", {{"X", {outs[0]}}}, {{"Out", {cond}}});
  for (int k = 0; k < carried; ++k) imp.Emit("assign", {{"X", {outs[k + 1]}}}, {{"Out", {values[k]}}});
  std::vector<std::string> arrays;
  for (int k = 0; k < scans; ++k) {
    const std::string& value = body.output(carried + 1 + k).name();
    const std::string array = imp.Temp("scan_array");
    VarDesc* av = parent->Var(array);
    av->SetType(VarType::kTensorArray);
    av->SetDType(imp.DTypeOf(n, value));
    av->MarkDTypeKnown();
    const std::vector<int64_t> shape = imp.HasShape(value) ? imp.ShapeOf(n, value) : std::vector<int64_t>{-1};
    av->SetShape(shape.empty() ? Shape{1} : Shape(shape.begin(), shape.end()));
    av->SetDeclared(true);
    imp.AddVar(array);
    imp.Emit("write_to_array", {{"X", {body_out(carried + 1 + k)}}, {"I", {i}}}, {{"Out", {array}}});
    arrays.push_back(array);
  }
  imp.Emit("increment", {{"X", {i}}}, {{"Out", {i}}}, {{"step", 1.0f}});
  keep_going();
  EmitBlockOp(imp, parent, block, "while", keep);
  for (int k = 0; k < scans; ++k) {
    const std::string& value = body.output(carried + 1 + k).name();
    std::vector<std::string> entries;
    for (int64_t t = 0; t < trips; ++t) {
      const std::string at = imp.Temp("scan_index"), entry = imp.Temp("scan_entry");
      imp.Emit("fill_constant", {}, {{"Out", {at}}},
               {{"shape", Ints{1}}, {"dtype", std::string("int64")}, {"value", static_cast<float>(t)}});
      imp.Emit("read_from_array", {{"X", {arrays[k]}}, {"I", {at}}}, {{"Out", {entry}}});
      entries.push_back(entry);
    }
    const std::string out = n.HasOutput(carried + k) ? n.Output(carried + k) : imp.Temp("scan_output");
    // A scalar per step (nabla's [1]) stacks to ONNX's [trips]: a concat.
    const bool scalar_steps = (imp.HasShape(value) && imp.ShapeOf(n, value).empty()) ||
                              (n.HasOutput(carried + k) && imp.HasShape(out) && imp.RankOf(n, out) == 1);
    if (scalar_steps) {
      // stack, then [trips, 1] to [trips] (nabla's concat is float only).
      const std::string stacked = imp.Temp("scan_stacked");
      imp.Emit("stack", {{"X", entries}}, {{"Y", {stacked}}}, {{"axis", 0}});
      imp.Emit("reshape", {{"X", {stacked}}}, {{"Out", {out}}}, {{"shape", Ints{ToInt(n, trips, "M")}}});
    } else {
      imp.Emit("stack", {{"X", entries}}, {{"Y", {out}}}, {{"axis", 0}});
    }
  }
}

// A copy of a subgraph whose own values (inputs, initializers, node
// outputs) are renamed fresh, so it converts once per unrolled step; names
// from outside stay. A body with subgraphs of its own is not renamed.
onnx::GraphProto Renamed(const Node& n, Importer& imp, const onnx::GraphProto& g) {
  std::map<std::string, std::string> to;
  auto add = [&](const std::string& name) {
    if (name.empty() || to.count(name)) return;
    to[name] = imp.Temp(name);
    imp.CopyInfo(name, to[name]);
  };
  for (const auto& i : g.input()) add(i.name());
  for (const auto& i : g.initializer()) add(i.name());
  for (const auto& node : g.node()) {
    for (const auto& a : node.attribute()) {
      if (a.has_g() || a.graphs_size() > 0) n.Unsupported("a Scan body with subgraphs of its own");
    }
    for (const auto& o : node.output()) add(o);
  }
  auto rename = [&](std::string* name) {
    auto it = to.find(*name);
    if (it != to.end()) *name = it->second;
  };
  onnx::GraphProto out = g;
  for (auto& i : *out.mutable_input()) rename(i.mutable_name());
  for (auto& i : *out.mutable_initializer()) rename(i.mutable_name());
  for (auto& o : *out.mutable_output()) rename(o.mutable_name());
  for (auto& node : *out.mutable_node()) {
    for (auto& i : *node.mutable_input()) rename(&i);
    for (auto& o : *node.mutable_output()) rename(&o);
  }
  return out;
}

// Scan (opset 9 on) unrolled over a sequence length known at import time, as
// LSTM is: each step slices the scan inputs, converts a renamed copy of the
// body, and the scan outputs stack the steps' values.
void Scan(const Node& n, Importer& imp) {
  if (imp.Opset() < 9) n.Unsupported("Scan before opset 9 (a batch axis and sequence_lens)");
  const onnx::GraphProto& body = n.GraphAttr("body");
  const int scan_in = static_cast<int>(n.Int("num_scan_inputs", 0));
  const int states = n.NumInputs() - scan_in;
  const int scan_out = n.NumOutputs() - states;
  if (scan_in < 1 || states < 0 || scan_out < 0 || body.input_size() != n.NumInputs() ||
      body.output_size() != n.NumOutputs()) {
    n.Fail(ErrorKind::kInvalidArgument, "the body's inputs and outputs do not match the node's");
  }
  auto per = [&](const std::string& name, int count) {
    std::vector<int64_t> v = n.Ints(name, std::vector<int64_t>(static_cast<size_t>(count), 0));
    if (static_cast<int>(v.size()) != count) n.Fail(ErrorKind::kInvalidArgument, name + " has the wrong length");
    return v;
  };
  std::vector<int64_t> in_axes = per("scan_input_axes", scan_in), in_dirs = per("scan_input_directions", scan_in);
  const std::vector<int64_t> out_axes = per("scan_output_axes", scan_out),
                             out_dirs = per("scan_output_directions", scan_out);
  int64_t steps = -1;
  for (int j = 0; j < scan_in; ++j) {
    const std::vector<int64_t> shape = imp.ShapeOf(n, n.Input(states + j));
    in_axes[j] = NormAxis(n, in_axes[j], static_cast<int64_t>(shape.size()));
    const int64_t len = shape[static_cast<size_t>(in_axes[j])];
    if (len < 0) n.Unsupported("a scan length that is not known at import time (fix it with --input-shape)");
    if (steps >= 0 && len != steps) n.Fail(ErrorKind::kInvalidArgument, "scan inputs of different lengths");
    steps = len;
  }
  if (steps <= 0 || steps > 4096) n.Unsupported("a Scan of " + std::to_string(steps) + " steps (1 to 4096 unroll)");
  // An untrusted file must not make millions of ops.
  if (steps * (body.node_size() + n.NumInputs()) > (int64_t(1) << 18)) {
    n.Unsupported("a Scan of " + std::to_string(steps) + " steps over a body of " + std::to_string(body.node_size()) +
                  " nodes (at most 2^18 unrolled nodes)");
  }
  std::vector<std::string> carried;
  for (int k = 0; k < states; ++k) carried.push_back(imp.In(n, k));
  std::vector<std::vector<std::string>> pieces(static_cast<size_t>(scan_out));
  for (int64_t t = 0; t < steps; ++t) {
    onnx::GraphProto g = Renamed(n, imp, body);
    for (int k = 0; k < states; ++k) {
      imp.Emit("assign", {{"X", {carried[k]}}}, {{"Out", {g.input(k).name()}}});
      imp.AddVar(g.input(k).name());
    }
    for (int j = 0; j < scan_in; ++j) {
      const int64_t at = in_dirs[j] ? steps - 1 - t : t;
      const int axis = ToInt(n, in_axes[j], "axis");
      const std::string& slice = g.input(states + j).name();
      // A rank-1 scan input gives scalars: nabla keeps them [1].
      const bool keep = imp.RankOf(n, n.Input(states + j)) == 1;
      imp.Emit("slice", {{"Input", {imp.In(n, states + j)}}}, {{"Out", {slice}}},
               {{"axes", Ints{axis}},
                {"starts", Ints{ToInt(n, at, "step")}},
                {"ends", Ints{ToInt(n, at + 1, "step")}},
                {"decrease_axis", keep ? Ints{} : Ints{axis}}});
      imp.AddVar(slice);
    }
    imp.ConvertGraph(g);
    auto value = [&](int k) {
      const std::string& name = g.output(k).name();
      if (imp.ConstOf(name)) return imp.ConstVar(*imp.ConstOf(name), name);
      return name;
    };
    for (int k = 0; k < states; ++k) carried[k] = value(k);
    for (int k = 0; k < scan_out; ++k) pieces[k].push_back(value(states + k));
  }
  for (int k = 0; k < states; ++k) {
    if (n.HasOutput(k)) imp.Emit("assign", {{"X", {carried[k]}}}, {{"Out", {n.Output(k)}}});
  }
  for (int k = 0; k < scan_out; ++k) {
    if (!n.HasOutput(states + k)) continue;
    std::vector<std::string> xs = pieces[k];
    if (out_dirs[k]) std::reverse(xs.begin(), xs.end());
    const std::string& piece = body.output(states + k).name();
    const bool scalar = imp.HasShape(piece) && imp.ShapeOf(n, piece).empty();
    const int64_t rank = (imp.HasShape(piece) ? static_cast<int64_t>(imp.ShapeOf(n, piece).size()) : 0) + 1;
    const int axis = ToInt(n, NormAxis(n, out_axes[k], scalar ? 1 : rank), "axis");
    if (scalar) {
      const std::string stacked = imp.Temp("scan_stacked");
      imp.Emit("stack", {{"X", xs}}, {{"Y", {stacked}}}, {{"axis", 0}});
      imp.Emit("reshape", {{"X", {stacked}}}, {{"Out", {n.Output(states + k)}}},
               {{"shape", Ints{ToInt(n, steps, "steps")}}});
    } else {
      imp.Emit("stack", {{"X", xs}}, {{"Y", {n.Output(states + k)}}}, {{"axis", axis}});
    }
  }
}

// If(cond): a constant cond inlines the branch taken; otherwise each branch
// is a conditional_block (on cond and on not cond) writing the outputs.
void If(const Node& n, Importer& imp) {
  const onnx::GraphProto& then_g = n.GraphAttr("then_branch");
  const onnx::GraphProto& else_g = n.GraphAttr("else_branch");
  for (const onnx::GraphProto* g : {&then_g, &else_g}) {
    if (g->output_size() != n.NumOutputs()) {
      n.Fail(ErrorKind::kInvalidArgument, "branch '" + g->name() + "' has " + std::to_string(g->output_size()) +
                                              " outputs for the node's " + std::to_string(n.NumOutputs()));
    }
  }
  auto branch_out = [&](const onnx::GraphProto& g, int k) {
    const std::string& name = g.output(k).name();
    if (imp.ConstOf(name)) return imp.ConstVar(*imp.ConstOf(name), name);
    return name;
  };
  if (const Tensor* c = imp.Const(n, 0)) {
    if (c->Numel() != 1) n.Fail(ErrorKind::kInvalidArgument, "cond must have one element");
    const onnx::GraphProto& g = ToConst(*c).data[0] != 0 ? then_g : else_g;
    imp.ConvertGraph(g);
    for (int k = 0; k < n.NumOutputs(); ++k) {
      if (n.HasOutput(k)) imp.Emit("assign", {{"X", {branch_out(g, k)}}}, {{"Out", {n.Output(k)}}});
    }
    return;
  }
  if (imp.DTypeOf(n, n.Input(0)) != DType::kBool) n.Fail(ErrorKind::kInvalidArgument, "cond must be bool");
  const std::string cond = imp.In(n, 0);
  for (int k = 0; k < n.NumOutputs(); ++k) {
    if (!n.HasOutput(k)) continue;
    if (!imp.HasDType(n.Output(k))) {
      for (const onnx::GraphProto* g : {&then_g, &else_g}) {
        if (imp.HasDType(g->output(k).name())) {
          imp.SetInfo(
              n.Output(k),
              imp.HasShape(g->output(k).name()) ? imp.ShapeOf(n, g->output(k).name()) : std::vector<int64_t>{-1},
              imp.DTypeOf(n, g->output(k).name()));
          break;
        }
      }
    }
    imp.DeclareVar(n, n.Output(k));
    imp.AddVar(n.Output(k));
  }
  const std::string not_cond = imp.Temp("else_cond");
  imp.Emit("logical_not", {{"X", {cond}}}, {{"Out", {not_cond}}});
  imp.AddVar(not_cond);
  for (const auto& [g, c] : {std::pair{&then_g, cond}, std::pair{&else_g, not_cond}}) {
    BlockDesc* parent = imp.BeginBlock();
    BlockDesc* block = imp.CurrentBlock();
    imp.ConvertGraph(*g);
    for (int k = 0; k < n.NumOutputs(); ++k) {
      if (n.HasOutput(k)) imp.Emit("assign", {{"X", {branch_out(*g, k)}}}, {{"Out", {n.Output(k)}}});
    }
    EmitBlockOp(imp, parent, block, "conditional_block", c);
  }
}

const std::map<std::string, Converter>& Table() {
  static const std::map<std::string, Converter> kTable = {
      {"Abs", Abs},
      {"Acos", Acos},
      {"Add", Add},
      {"And", [](const Node& n, Importer& imp) { Logical(n, imp, "logical_and"); }},
      {"ArgMax", ArgMax},
      {"ArgMin", ArgMin},
      {"Asin", Asin},
      {"Atan", Atan},
      {"AveragePool", AveragePool},
      {"BatchNormalization", BatchNormalization},
      {"Cast", Cast},
      {"CastLike", CastLike},
      {"Ceil", Ceil},
      {"Celu", Celu},
      {"Clip", Clip},
      {"Concat", Concat},
      {"ConstantOfShape", ConstantOfShape},
      {"Conv", Conv},
      {"Cos", Cos},
      {"GatherElements", GatherElements},
      {"Where", Where},
      {"Mod", Mod},
      {"LRN", LRN},
      {"MeanVarianceNormalization", MeanVarianceNormalization},
      {"DepthToSpace", DepthToSpace},
      {"EyeLike", EyeLike},
      {"Hardmax", Hardmax},
      {"InstanceNormalization", InstanceNormalization},
      {"IsInf", IsInf},
      {"IsNaN", IsNaN},
      {"Sign", Sign},
      {"SpaceToDepth", SpaceToDepth},
      {"Div", Div},
      {"Dropout", Dropout},
      {"Elu", Elu},
      {"Equal", [](const Node& n, Importer& imp) { Compare(n, imp, "equal"); }},
      {"Exp", Exp},
      {"Expand", Expand},
      {"Flatten", Flatten},
      {"Floor", Floor},
      {"GRU", GRU},
      {"Gather", Gather},
      {"Gelu", Gelu},
      {"Gemm", Gemm},
      {"GlobalAveragePool", GlobalAveragePool},
      {"GlobalMaxPool", GlobalMaxPool},
      {"Greater", [](const Node& n, Importer& imp) { Compare(n, imp, "greater_than"); }},
      {"GreaterOrEqual", [](const Node& n, Importer& imp) { Compare(n, imp, "greater_equal"); }},
      {"HardSigmoid", HardSigmoid},
      {"HardSwish", HardSwish},
      {"Identity", Identity},
      {"If", If},
      {"LSTM", LSTM},
      {"Loop", Loop},
      {"LayerNormalization", LayerNormalization},
      {"LeakyRelu", LeakyRelu},
      {"Less", [](const Node& n, Importer& imp) { Compare(n, imp, "less_than"); }},
      {"LessOrEqual", [](const Node& n, Importer& imp) { Compare(n, imp, "less_equal"); }},
      {"Log", Log},
      {"LogSoftmax", LogSoftmax},
      {"MatMul", MatMul},
      {"Max", Max},
      {"MaxPool", MaxPool},
      {"Mean", Mean},
      {"Min", Min},
      {"Mish", Mish},
      {"Mul", Mul},
      {"Neg", Neg},
      {"NegativeLogLikelihoodLoss", NegativeLogLikelihoodLoss},
      {"Not", Not},
      {"OneHot", OneHot},
      {"Or", [](const Node& n, Importer& imp) { Logical(n, imp, "logical_or"); }},
      {"PRelu", PRelu},
      {"Pad", Pad},
      {"Pow", Pow},
      {"RNN", RNN},
      {"Reciprocal", Reciprocal},
      {"ReduceL1", ReduceL1},
      {"ReduceL2", ReduceL2},
      {"ReduceLogSum", ReduceLogSum},
      {"ReduceLogSumExp", ReduceLogSumExp},
      {"ReduceMax", ReduceMax},
      {"ReduceMean", ReduceMean},
      {"ReduceMin", ReduceMin},
      {"ReduceProd", ReduceProd},
      {"ReduceSum", ReduceSum},
      {"ReduceSumSquare", ReduceSumSquare},
      {"Relu", Relu},
      {"Reshape", Reshape},
      {"Round", Round},
      {"Scan", Scan},
      {"Selu", Selu},
      {"Shrink", Shrink},
      {"Sigmoid", Sigmoid},
      {"Sin", Sin},
      {"Slice", Slice},
      {"Softmax", Softmax},
      {"SoftmaxCrossEntropyLoss", SoftmaxCrossEntropyLoss},
      {"Softplus", Softplus},
      {"Softsign", Softsign},
      {"Split", Split},
      {"Sqrt", Sqrt},
      {"Squeeze", Squeeze},
      {"Sub", Sub},
      {"Sum", Sum},
      {"Tan", Tan},
      {"Tanh", Tanh},
      {"ThresholdedRelu", ThresholdedRelu},
      {"Tile", Tile},
      {"TopK", TopK},
      {"Transpose", Transpose},
      {"Trilu", Trilu},
      {"Unsqueeze", Unsqueeze},
      {"Xor", [](const Node& n, Importer& imp) { Logical(n, imp, "logical_xor"); }},
  };
  return kTable;
}

// ONNX ops the importer knows but cannot convert yet, with what they need.
const std::map<std::string, std::string>& Missing() {
  static const std::map<std::string, std::string> kMissing = {
      {"Acosh", "needs nabla op acosh"},
      {"Asinh", "needs nabla op asinh"},
      {"Atanh", "needs nabla op atanh"},
      {"ConvTranspose", "needs nabla op conv2d_transpose"},
      {"Cosh", "needs nabla op cosh"},
      {"CumSum", "needs nabla op cumsum"},
      {"Einsum", "needs nabla op einsum"},
      {"Erf", "needs nabla op erf (the erf-based GELU pattern is converted to gelu)"},
      {"GatherND", "needs nabla op gather_nd"},
      {"GroupNormalization", "needs nabla op group_norm"},
      {"MaxUnpool", "needs nabla op unpool"},
      {"NonZero", "data-dependent output shape (needs nabla op where_index)"},
      {"Range", "needs nabla op range (folded when its inputs are constants)"},
      {"Resize", "needs nabla op interpolate"},
      {"ScatterElements", "needs nabla op put_along_axis"},
      {"ScatterND", "needs nabla op scatter_nd_add"},
      {"Shape", "folded at import time when the input's dims are known: fix dynamic ones with --input-shape"},
      {"Sinh", "needs nabla op sinh"},
      {"Size", "folded at import time when the input's dims are known: fix dynamic ones with --input-shape"},
      {"Upsample", "needs nabla op interpolate"},
  };
  return kMissing;
}

}  // namespace

const Converter* FindConverter(const std::string& op_type) {
  auto it = Table().find(op_type);
  return it == Table().end() ? nullptr : &it->second;
}

std::string MissingConverterReason(const std::string& op_type) {
  auto it = Missing().find(op_type);
  return it == Missing().end() ? "" : it->second;
}

std::vector<std::string> ConvertibleOnnxOps() {
  std::vector<std::string> out;
  for (const auto& [k, v] : Table()) out.push_back(k);
  // Folded at import time (Shape and Size when the dims are known).
  for (const char* folded : {"Constant", "Shape", "Size"}) out.push_back(folded);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> UnconvertibleOnnxOps() {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& [op, why] : Missing()) {
    if (op != "Shape" && op != "Size") out.emplace_back(op, why);
  }
  return out;
}

}  // namespace nabla::onnx_io
