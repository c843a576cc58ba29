// The exporter: block 0's ops that lead to the graph outputs, one exporter
// per nabla op type (a table plugins add rows to), for inference: dropout
// and batch_norm as in test mode. The model must pass onnx's checker and
// strict shape inference before a byte is written.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <set>

#include "importer.h"
#include "nabla/device.h"
#include "nabla/opkit/number_text.h"
#include "nabla/program_io.h"

namespace nabla::onnx_io {

namespace {

std::mutex& TableMutex() {
  static std::mutex m;
  return m;
}

std::map<std::string, OpExporter>& ExporterTable();

class Ctx : public ExportContext {
 public:
  Ctx(const ProgramDesc& program, onnx::GraphProto* graph, std::set<std::string>* names)
      : program_(program), graph_(graph), nodes_(graph), names_(names), block_(program.Root()) {}
  void SetOp(const OpDesc* op) { op_ = op; }

  const OpDesc& Op() const override { return *op_; }
  Shape ShapeOf(const std::string& value) const override {
    const VarDesc* v = VarOf(value);
    return v ? v->GetShape() : Shape{};
  }
  DType DTypeOf(const std::string& value) const override {
    const VarDesc* v = VarOf(value);
    return v ? v->GetDType() : DType::kFloat32;
  }
  // The var an ONNX value is a version of (a var written twice is one ONNX
  // value per write: ONNX graphs are SSA).
  const VarDesc* VarOf(const std::string& value) const {
    auto it = var_of_.find(value);
    return block_->FindVarRecursive(it == var_of_.end() ? value : it->second);
  }
  std::string Current(const std::string& var) const {
    auto it = current_.find(var);
    return it == current_.end() ? var : it->second;
  }
  void SetCurrent(const std::string& var, const std::string& value) {
    current_[var] = value;
    if (value != var) var_of_[value] = var;
  }
  std::string AddNode(const std::string& op_type, const std::vector<std::string>& inputs,
                      const std::vector<std::string>& outputs, const std::map<std::string, OnnxAttr>& attrs) override {
    onnx::NodeProto* node = nodes_->add_node();
    node->set_op_type(op_type);
    const std::string name = Temp(op_->Type() + "/" + op_type);
    node->set_name(name);
    for (const auto& i : inputs) node->add_input(i);
    for (const auto& o : outputs) {
      node->add_output(o);
      produced_.insert(o);
    }
    for (const auto& [k, v] : attrs) {
      onnx::AttributeProto* a = node->add_attribute();
      a->set_name(k);
      if (auto* i = std::get_if<int64_t>(&v)) {
        a->set_type(onnx::AttributeProto::INT);
        a->set_i(*i);
      } else if (auto* f = std::get_if<float>(&v)) {
        a->set_type(onnx::AttributeProto::FLOAT);
        a->set_f(*f);
      } else if (auto* s = std::get_if<std::string>(&v)) {
        a->set_type(onnx::AttributeProto::STRING);
        a->set_s(*s);
      } else if (auto* is = std::get_if<std::vector<int64_t>>(&v)) {
        a->set_type(onnx::AttributeProto::INTS);
        for (int64_t x : *is) a->add_ints(x);
      } else if (auto* fs = std::get_if<std::vector<float>>(&v)) {
        a->set_type(onnx::AttributeProto::FLOATS);
        for (float x : *fs) a->add_floats(x);
      }
    }
    return name;
  }
  std::string AddInt64s(const std::vector<int64_t>& values, const std::vector<int64_t>& dims) override {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(Temp("const"));
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t d : dims) t->add_dims(d);
    for (int64_t v : values) t->add_int64_data(v);
    return t->name();
  }
  std::string AddFloats(const std::vector<float>& values, const std::vector<int64_t>& dims) override {
    onnx::TensorProto* t = graph_->add_initializer();
    t->set_name(Temp("const"));
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float v : values) t->add_float_data(v);
    return t->name();
  }
  std::string Temp(const std::string& hint) override {
    for (;;) {
      std::string name = hint + "_" + std::to_string(counter_++);
      if (names_->insert(name).second) return name;
    }
  }
  [[noreturn]] void Fail(const std::string& what) const override {
    NABLA_THROW(kUnimplemented, "cannot export op ", op_->Type(), " to ONNX: ", what);
  }
  const std::set<std::string>& Produced() const { return produced_; }
  void AddProduced(const std::string& value) { produced_.insert(value); }
  // A Loop node: its body is moved in.
  void AddLoop(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
               onnx::GraphProto* body) {
    onnx::NodeProto* node = nodes_->add_node();
    node->set_op_type("Loop");
    node->set_name(Temp("while/Loop"));
    for (const auto& i : inputs) node->add_input(i);
    for (const auto& o : outputs) {
      node->add_output(o);
      produced_.insert(o);
    }
    onnx::AttributeProto* a = node->add_attribute();
    a->set_name("body");
    a->set_type(onnx::AttributeProto::GRAPH);
    a->mutable_g()->Swap(body);
  }

  const ProgramDesc& Program() const { return program_; }
  const BlockDesc& Block() const { return *block_; }
  onnx::GraphProto* Nodes() const { return nodes_; }
  // Where nodes go and whose vars name values: a Loop body and its block.
  struct Scope {
    onnx::GraphProto* nodes;
    const BlockDesc* block;
    std::map<std::string, std::string> current;
  };
  Scope Enter(onnx::GraphProto* nodes, const BlockDesc* block) {
    Scope saved{nodes_, block_, current_};
    nodes_ = nodes;
    block_ = block;
    return saved;
  }
  void Leave(const Scope& saved) {
    nodes_ = saved.nodes;
    block_ = saved.block;
    current_ = saved.current;
  }
  // Tensor arrays written at constant indices: their entries, and (once a
  // loop reads one at a run-time index) the entries stacked on a new axis 0.
  std::map<std::string, std::map<int64_t, std::string>> arrays;
  std::map<std::string, std::string> stacked;

 private:
  const ProgramDesc& program_;
  onnx::GraphProto* graph_;  // initializers always go to the main graph
  onnx::GraphProto* nodes_;  // nodes go to the graph being written
  std::set<std::string>* names_;
  const BlockDesc* block_;
  std::map<std::string, std::string> var_of_;
  std::map<std::string, std::string> current_;
  const OpDesc* op_ = nullptr;
  std::set<std::string> produced_;
  int counter_ = 0;
};

// ---- helpers for exporters --------------------------------------------------

const std::string& In(ExportContext& c, const std::string& slot) {
  const auto& v = c.Op().Input(slot);
  if (v.empty()) c.Fail("input " + slot + " is empty");
  return v[0];
}
const std::string& Out(ExportContext& c, const std::string& slot) {
  const auto& v = c.Op().Output(slot);
  if (v.empty()) c.Fail("output " + slot + " is empty");
  return v[0];
}
template <typename T>
T A(ExportContext& c, const std::string& name) {
  return c.Op().Attr<T>(name);
}
std::vector<int64_t> I64(const std::vector<int>& v) { return {v.begin(), v.end()}; }
int64_t RankOf(ExportContext& c, const std::string& var) { return static_cast<int64_t>(c.ShapeOf(var).size()); }

std::string ScalarLike(ExportContext& c, const std::string& var, double value) {
  const DType d = c.DTypeOf(var);
  if (d == DType::kFloat32) return c.AddFloats({static_cast<float>(value)}, {});
  if (d == DType::kInt64) return c.AddInt64s({static_cast<int64_t>(value)}, {});
  if (d == DType::kFloat64) {
    const std::string f = c.AddFloats({static_cast<float>(value)}, {});
    const std::string out = c.Temp("const64");
    c.AddNode("Cast", {f}, {out}, {{"to", int64_t(onnx::TensorProto::DOUBLE)}});
    return out;
  }
  c.Fail(std::string("a constant of dtype ") + DTypeName(d));
  return {};  // Fail throws; a virtual call's [[noreturn]] is not seen here
}

void UnaryAs(ExportContext& c, const std::string& type, std::map<std::string, OnnxAttr> attrs = {}) {
  c.AddNode(type, {In(c, "X")}, {Out(c, "Out")}, attrs);
}

// Paddle's axis rule: the operand of lower rank (Y when the ranks are equal)
// sits at the other's dims [axis, axis + rank), trailing 1s that would not
// fit dropped (opkit's AlignAtAxis); ONNX broadcasts from the end, so that
// operand gets trailing 1s. X may be the smaller one: aligning only Y would
// leave a lower-rank X at the end of Y's dims, another sum (exit 0).
std::string AlignedAtAxis(ExportContext& c, const std::string& v, int64_t rank, int64_t axis) {
  const Shape s = c.ShapeOf(v);
  int64_t kept = static_cast<int64_t>(s.size());
  while (kept > 0 && axis + kept > rank && s[kept - 1] == 1) --kept;
  std::string out = v;
  if (kept < static_cast<int64_t>(s.size())) {
    std::vector<int64_t> axes;
    for (int64_t i = kept; i < static_cast<int64_t>(s.size()); ++i) axes.push_back(i);
    const std::string q = c.Temp(v + "_fitted");
    c.AddNode("Squeeze", {out, c.AddInt64s(axes, {static_cast<int64_t>(axes.size())})}, {q});
    out = q;
  }
  if (axis + kept < rank) {
    std::vector<int64_t> axes;
    for (int64_t i = kept; i < rank - axis; ++i) axes.push_back(i);
    const std::string u = c.Temp(v + "_aligned");
    c.AddNode("Unsqueeze", {out, c.AddInt64s(axes, {static_cast<int64_t>(axes.size())})}, {u});
    out = u;
  }
  return out;
}

void Binary(ExportContext& c, const std::string& type) {
  std::string x = In(c, "X"), y = In(c, "Y");
  const int axis = c.Op().HasAttr("axis") ? A<int>(c, "axis") : -1;
  const int64_t rx = RankOf(c, x), ry = RankOf(c, y);
  if (axis >= 0) {
    if (ry <= rx)
      y = AlignedAtAxis(c, y, rx, axis);
    else
      x = AlignedAtAxis(c, x, ry, axis);
  }
  c.AddNode(type, {x, y}, {Out(c, "Out")});
}

// Paddle's mul flattens X to [prod(xs[:xn]), K] and Y to [K, prod(ys[yn:])]
// and gives xs[:xn] + ys[yn:]. X reshaped to xs[:xn] + [K] lets MatMul keep
// X's leading dims itself (dynamic ones too: Reshape's 0 copies them).
void ExportMul(ExportContext& c) {
  std::string x = In(c, "X"), y = In(c, "Y");
  const int xn = A<int>(c, "x_num_col_dims"), yn = A<int>(c, "y_num_col_dims");
  const Shape xs = c.ShapeOf(x), ys = c.ShapeOf(y);
  if (xn < 1 || xn >= static_cast<int>(xs.size()))
    c.Fail("x_num_col_dims " + std::to_string(xn) + " for X of rank " + std::to_string(xs.size()));
  if (yn < 1 || yn >= static_cast<int>(ys.size()))
    c.Fail("y_num_col_dims " + std::to_string(yn) + " for Y of rank " + std::to_string(ys.size()));
  if (xn == 1 && xs.size() > 2) {
    const std::string f = c.Temp(x + "_flat");
    c.AddNode("Flatten", {x}, {f}, {{"axis", int64_t(1)}});
    x = f;
  } else if (xs.size() > static_cast<size_t>(xn) + 1) {
    std::vector<int64_t> shape(static_cast<size_t>(xn), 0);
    shape.push_back(-1);
    const std::string f = c.Temp(x + "_rows");
    c.AddNode("Reshape", {x, c.AddInt64s(shape, {static_cast<int64_t>(shape.size())})}, {f});
    x = f;
  }
  if (ys.size() != 2 || yn != 1) {
    const std::string f = c.Temp(y + "_flat");
    c.AddNode("Flatten", {y}, {f}, {{"axis", int64_t(yn)}});
    y = f;
  }
  if (ys.size() - static_cast<size_t>(yn) > 1) {
    const std::string m = c.Temp("mul");
    c.AddNode("MatMul", {x, y}, {m});
    std::vector<int64_t> shape(static_cast<size_t>(xn), 0);
    for (size_t i = static_cast<size_t>(yn); i < ys.size(); ++i) {
      if (ys[i] < 0) c.Fail("Y with a dynamic dim after y_num_col_dims");
      shape.push_back(ys[i]);
    }
    c.AddNode("Reshape", {m, c.AddInt64s(shape, {static_cast<int64_t>(shape.size())})}, {Out(c, "Out")});
    return;
  }
  c.AddNode("MatMul", {x, y}, {Out(c, "Out")});
}

std::string LastTwoTransposed(ExportContext& c, const std::string& v) {
  const int64_t r = RankOf(c, v);
  if (r < 2) return v;
  std::vector<int64_t> perm;
  for (int64_t i = 0; i < r; ++i) perm.push_back(i);
  std::swap(perm[r - 1], perm[r - 2]);
  const std::string t = c.Temp(v + "_t");
  c.AddNode("Transpose", {v}, {t}, {{"perm", perm}});
  return t;
}

void ExportMatmul(ExportContext& c) {
  std::string x = In(c, "X"), y = In(c, "Y");
  if (A<bool>(c, "transpose_X")) x = LastTwoTransposed(c, x);
  if (A<bool>(c, "transpose_Y")) y = LastTwoTransposed(c, y);
  const float alpha = A<float>(c, "alpha");
  if (RankOf(c, In(c, "X")) == 1 && RankOf(c, In(c, "Y")) == 1) c.Fail("two 1-D operands (ONNX gives a scalar)");
  if (alpha == 1.0f) {
    c.AddNode("MatMul", {x, y}, {Out(c, "Out")});
    return;
  }
  const std::string m = c.Temp("matmul");
  c.AddNode("MatMul", {x, y}, {m});
  c.AddNode("Mul", {m, ScalarLike(c, Out(c, "Out"), alpha)}, {Out(c, "Out")});
}

// A float constant of `like`'s dtype (float32, or float64 through a Cast).
std::string FloatsLike(ExportContext& c, const std::string& like, const std::vector<float>& values,
                       const std::vector<int64_t>& dims) {
  const DType d = c.DTypeOf(like);
  if (d == DType::kFloat32) return c.AddFloats(values, dims);
  if (d != DType::kFloat64) c.Fail(std::string("a constant of dtype ") + DTypeName(d));
  const std::string f = c.AddFloats(values, dims), out = c.Temp("const64");
  c.AddNode("Cast", {f}, {out}, {{"to", int64_t(onnx::TensorProto::DOUBLE)}});
  return out;
}

// flash_attn as the plain attention it computes (opset 17 has no Attention):
// q, k, v [B, S, H, D] to heads first, softmax(q k^T / sqrt(D) + mask) v,
// back to [B, S, H, Dv]. causal is a constant [Sq, Sk] mask of 0 and -inf
// (bottom-right aligned as the op's). softmax_lse, like batch_norm's saved
// statistics, is not computed: inference has no use for it.
void ExportFlashAttn(ExportContext& c) {
  const std::string q = In(c, "q"), k = In(c, "k"), v = In(c, "v");
  const Shape qs = c.ShapeOf(q), ks = c.ShapeOf(k);
  if (qs.size() != 4 || ks.size() != 4) c.Fail("q and k of rank other than 4");
  if (qs[3] < 0) c.Fail("a dynamic head_dim");
  const std::string qt = c.Temp(q + "_heads"), kt = c.Temp(k + "_heads_t"), vt = c.Temp(v + "_heads");
  c.AddNode("Transpose", {q}, {qt}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  c.AddNode("Transpose", {k}, {kt}, {{"perm", std::vector<int64_t>{0, 2, 3, 1}}});
  c.AddNode("Transpose", {v}, {vt}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
  const std::string s = c.Temp("scores"), scaled = c.Temp("scaled_scores");
  c.AddNode("MatMul", {qt, kt}, {s});
  c.AddNode("Mul", {s, FloatsLike(c, q, {static_cast<float>(1.0 / std::sqrt(static_cast<double>(qs[3])))}, {})},
            {scaled});
  std::string logits = scaled;
  if (!c.Op().Input("attn_mask").empty()) {
    const std::string masked = c.Temp("masked_scores");
    c.AddNode("Add", {logits, In(c, "attn_mask")}, {masked});
    logits = masked;
  }
  if (A<bool>(c, "causal")) {
    const int64_t sq = qs[1], sk = ks[1];
    if (sq < 0 || sk < 0) c.Fail("causal with a dynamic sequence length (its mask is a constant)");
    // A row that sees no key is zeros in flash_attn, NaN in a softmax.
    if (sq > sk) c.Fail("causal with seq_q > seq_k (rows that see no key)");
    std::vector<float> mask(static_cast<size_t>(sq * sk), 0.0f);
    for (int64_t i = 0; i < sq; ++i) {
      for (int64_t j = i + sk - sq + 1; j < sk; ++j) mask[static_cast<size_t>(i * sk + j)] = -INFINITY;
    }
    const std::string masked = c.Temp("causal_scores");
    c.AddNode("Add", {logits, FloatsLike(c, q, mask, {sq, sk})}, {masked});
    logits = masked;
  }
  const auto& softmax = c.Op().Output("softmax");
  const std::string p =
      A<bool>(c, "return_softmax") && !softmax.empty() && !softmax[0].empty() ? softmax[0] : c.Temp("probs");
  c.AddNode("Softmax", {logits}, {p}, {{"axis", int64_t(-1)}});
  const std::string o = c.Temp("attn_heads");
  c.AddNode("MatMul", {p, vt}, {o});
  c.AddNode("Transpose", {o}, {Out(c, "out")}, {{"perm", std::vector<int64_t>{0, 2, 1, 3}}});
}

// Paddle's [h, w] or [top, bottom, left, right] as ONNX's [top, left, bottom, right].
std::vector<int64_t> OnnxPads(ExportContext& c, const std::vector<int>& p) {
  if (p.size() == 2) return {p[0], p[1], p[0], p[1]};
  if (p.size() == 4) return {p[0], p[2], p[1], p[3]};
  c.Fail("paddings of " + std::to_string(p.size()) + " values");
  return {};
}

void WindowAttrs(ExportContext& c, std::map<std::string, OnnxAttr>* attrs) {
  const std::string algo = A<std::string>(c, "padding_algorithm");
  if (A<std::string>(c, "data_format") != "NCHW") c.Fail("data_format other than NCHW");
  (*attrs)["strides"] = I64(A<std::vector<int>>(c, "strides"));
  if (algo == "SAME") {
    (*attrs)["auto_pad"] = std::string("SAME_UPPER");
  } else if (algo == "VALID") {
    (*attrs)["auto_pad"] = std::string("VALID");
  } else {
    (*attrs)["pads"] = OnnxPads(c, A<std::vector<int>>(c, "paddings"));
  }
}

void ExportConv2d(ExportContext& c) {
  const Shape w = c.ShapeOf(In(c, "Filter"));
  if (w.size() != 4) c.Fail("a filter of rank other than 4");
  std::map<std::string, OnnxAttr> attrs;
  WindowAttrs(c, &attrs);
  attrs["kernel_shape"] = std::vector<int64_t>{w[2], w[3]};
  attrs["dilations"] = I64(A<std::vector<int>>(c, "dilations"));
  attrs["group"] = int64_t(A<int>(c, "groups"));
  c.AddNode("Conv", {In(c, "Input"), In(c, "Filter")}, {Out(c, "Output")}, attrs);
}

void ExportPool2d(ExportContext& c) {
  const std::string type = A<std::string>(c, "pooling_type");
  const bool avg = type == "avg";
  const std::vector<int> k = A<std::vector<int>>(c, "ksize");
  const bool global = A<bool>(c, "global_pooling") || (A<bool>(c, "adaptive") && k == std::vector<int>{1, 1});
  if (global) {
    c.AddNode(avg ? "GlobalAveragePool" : "GlobalMaxPool", {In(c, "X")}, {Out(c, "Out")});
    return;
  }
  if (A<bool>(c, "adaptive")) c.Fail("adaptive pooling to a size other than 1x1");
  std::map<std::string, OnnxAttr> attrs;
  WindowAttrs(c, &attrs);
  attrs["kernel_shape"] = I64(k);
  attrs["ceil_mode"] = int64_t(A<bool>(c, "ceil_mode"));
  if (avg) attrs["count_include_pad"] = int64_t(!A<bool>(c, "exclusive"));
  c.AddNode(avg ? "AveragePool" : "MaxPool", {In(c, "X")}, {Out(c, "Out")}, attrs);
}

void ExportBatchNorm(ExportContext& c) {
  if (A<std::string>(c, "data_layout") != "NCHW") c.Fail("data_layout other than NCHW");
  c.AddNode("BatchNormalization", {In(c, "X"), In(c, "Scale"), In(c, "Bias"), In(c, "Mean"), In(c, "Variance")},
            {Out(c, "Y")}, {{"epsilon", A<float>(c, "epsilon")}, {"momentum", A<float>(c, "momentum")}});
}

void ExportLayerNorm(ExportContext& c) {
  const std::string x = In(c, "X");
  const Shape xs = c.ShapeOf(x);
  const int axis = A<int>(c, "begin_norm_axis");
  std::vector<int64_t> norm(xs.begin() + std::min<size_t>(axis, xs.size()), xs.end());
  int64_t right = 1;
  for (int64_t d : norm) right = d < 0 || right < 0 ? -1 : right * d;
  auto param = [&](const std::string& slot, float fill) -> std::string {
    const auto& v = c.Op().Input(slot);
    if (v.empty()) {
      if (right < 0) c.Fail("no " + slot + " and normalized dims of unknown size");
      return c.AddFloats(std::vector<float>(static_cast<size_t>(right), fill), norm);
    }
    if (norm.size() == 1) return v[0];
    if (right < 0) c.Fail("normalized dims of unknown size");
    const std::string r = c.Temp(v[0] + "_shaped");
    c.AddNode("Reshape", {v[0], c.AddInt64s(norm, {static_cast<int64_t>(norm.size())})}, {r});
    return r;
  };
  if (c.DTypeOf(x) != DType::kFloat32) c.Fail("a dtype other than float32");
  c.AddNode("LayerNormalization", {x, param("Scale", 1.0f), param("Bias", 0.0f)}, {Out(c, "Y")},
            {{"axis", int64_t(axis)}, {"epsilon", A<float>(c, "epsilon")}});
}

void ExportDropout(ExportContext& c) {
  const std::string impl = A<std::string>(c, "dropout_implementation");
  if (impl == "upscale_in_train") {
    c.AddNode("Identity", {In(c, "X")}, {Out(c, "Out")});
  } else {
    c.AddNode("Mul", {In(c, "X"), ScalarLike(c, In(c, "X"), 1.0 - A<float>(c, "dropout_prob"))}, {Out(c, "Out")});
  }
}

// ---- tensor-valued attribute inputs (docs/tensor-attributes.md) ------------

// `var` as int64 (ONNX's shapes, bounds and repeats are int64 tensors).
std::string AsInt64(ExportContext& c, const std::string& var) {
  if (c.DTypeOf(var) == DType::kInt64) return var;
  const std::string out = c.Temp(var + "_i64");
  c.AddNode("Cast", {var}, {out}, {{"to", int64_t(onnx::TensorProto::INT64)}});
  return out;
}

// An int list attribute's run-time value: the 1-D slot, else the list slot
// (one-element tensors, concatenated), in the op's precedence; "" when
// neither is given.
std::string IntListInput(ExportContext& c, const std::string& tensor_slot, const std::string& list_slot,
                         bool list_first = false) {
  const auto& t = c.Op().Input(tensor_slot);
  const auto& list = c.Op().Input(list_slot);
  auto from_list = [&] {
    std::vector<std::string> parts;
    for (const auto& v : list) parts.push_back(AsInt64(c, v));
    const std::string out = c.Temp(list_slot);
    c.AddNode("Concat", parts, {out}, {{"axis", int64_t(0)}});
    return out;
  };
  if (list_first && !list.empty()) return from_list();
  if (!t.empty()) return AsInt64(c, t[0]);
  if (!list.empty()) return from_list();
  return "";
}

void NoTensorInput(ExportContext& c, const std::string& slot) {
  if (!c.Op().Input(slot).empty()) c.Fail("input " + slot + " (a run-time " + slot + " has no ONNX attribute form)");
}

void ExportScale(ExportContext& c) {
  NoTensorInput(c, "ScaleTensor");
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const float s = A<float>(c, "scale"), b = A<float>(c, "bias");
  if (b == 0.0f) {
    c.AddNode("Mul", {x, ScalarLike(c, x, s)}, {out});
    return;
  }
  const std::string t = c.Temp(out);
  if (A<bool>(c, "bias_after_scale")) {
    c.AddNode("Mul", {x, ScalarLike(c, x, s)}, {t});
    c.AddNode("Add", {t, ScalarLike(c, x, b)}, {out});
  } else {
    c.AddNode("Add", {x, ScalarLike(c, x, b)}, {t});
    c.AddNode("Mul", {t, ScalarLike(c, x, s)}, {out});
  }
}

void ExportReshape(ExportContext& c) {
  // Paddle's list ShapeTensor wins over Shape; the 0 and -1 mean in ONNX
  // (allowzero 0) what they mean in Paddle.
  std::string shape = IntListInput(c, "Shape", "ShapeTensor", true);
  if (shape.empty()) {
    const std::vector<int> s = A<std::vector<int>>(c, "shape");
    shape = c.AddInt64s(I64(s), {static_cast<int64_t>(s.size())});
  }
  c.AddNode("Reshape", {In(c, "X"), shape}, {Out(c, "Out")});
}

void ExportSlice(ExportContext& c) {
  const auto axes = I64(A<std::vector<int>>(c, "axes"));
  const auto dec = I64(A<std::vector<int>>(c, "decrease_axis"));
  const int64_t n = static_cast<int64_t>(axes.size());
  const std::string out = Out(c, "Out");
  const std::string s = dec.empty() ? out : c.Temp(out);
  std::string starts = IntListInput(c, "StartsTensor", "StartsTensorList");
  std::string ends = IntListInput(c, "EndsTensor", "EndsTensorList");
  if (starts.empty()) starts = c.AddInt64s(I64(A<std::vector<int>>(c, "starts")), {n});
  if (ends.empty()) ends = c.AddInt64s(I64(A<std::vector<int>>(c, "ends")), {n});
  c.AddNode("Slice", {In(c, "Input"), starts, ends, c.AddInt64s(axes, {n})}, {s});
  if (!dec.empty()) {
    if (dec.size() == c.ShapeOf(In(c, "Input")).size()) c.Fail("decrease_axis removing every dim (Paddle gives [1])");
    c.AddNode("Squeeze", {s, c.AddInt64s(dec, {static_cast<int64_t>(dec.size())})}, {out});
  }
}

void ExportSqueeze(ExportContext& c) {
  const auto axes = I64(A<std::vector<int>>(c, "axes"));
  if (c.ShapeOf(Out(c, "Out")).size() == 1 && c.ShapeOf(In(c, "X")).size() >= 1 && c.ShapeOf(Out(c, "Out"))[0] == 1) {
    // Squeezing every dim gives [1] in Paddle, a scalar in ONNX.
    const Shape xs = c.ShapeOf(In(c, "X"));
    bool all = true;
    for (int64_t d : xs) all = all && d == 1;
    if (all) {
      c.AddNode("Reshape", {In(c, "X"), c.AddInt64s({1}, {1})}, {Out(c, "Out")});
      return;
    }
  }
  if (axes.empty()) {
    c.AddNode("Squeeze", {In(c, "X")}, {Out(c, "Out")});
  } else {
    c.AddNode("Squeeze", {In(c, "X"), c.AddInt64s(axes, {static_cast<int64_t>(axes.size())})}, {Out(c, "Out")});
  }
}

void ExportUnsqueeze(ExportContext& c) {
  // nabla inserts in order, each axis in the shape built so far; ONNX
  // names the new dims' positions in the output.
  std::vector<bool> is_new(c.ShapeOf(In(c, "X")).size(), false);
  for (int a : A<std::vector<int>>(c, "axes")) {
    const int64_t len = static_cast<int64_t>(is_new.size());
    const int64_t at = a < 0 ? a + len + 1 : a;
    if (at < 0 || at > len) c.Fail("axis " + std::to_string(a) + " out of range");
    is_new.insert(is_new.begin() + at, true);
  }
  std::vector<int64_t> axes;
  for (size_t i = 0; i < is_new.size(); ++i) {
    if (is_new[i]) axes.push_back(static_cast<int64_t>(i));
  }
  c.AddNode("Unsqueeze", {In(c, "X"), c.AddInt64s(axes, {static_cast<int64_t>(axes.size())})}, {Out(c, "Out")});
}

void ExportSplit(ExportContext& c) {
  const auto& outs = c.Op().Output("Out");
  NoTensorInput(c, "AxisTensor");
  const int axis = A<int>(c, "axis");
  if (const std::string t = IntListInput(c, "", "SectionsTensorList"); !t.empty()) {
    c.AddNode("Split", {In(c, "X"), t}, outs, {{"axis", int64_t(axis)}});
    return;
  }
  std::vector<int64_t> sections = I64(A<std::vector<int>>(c, "sections"));
  if (sections.empty()) {
    c.AddNode("Split", {In(c, "X")}, outs, {{"axis", int64_t(axis)}});
    return;
  }
  if (std::count(sections.begin(), sections.end(), -1) > 0) {
    for (size_t i = 0; i < outs.size(); ++i) {
      const Shape s = c.ShapeOf(outs[i]);
      const int64_t r = static_cast<int64_t>(s.size());
      const int64_t a = axis < 0 ? axis + r : axis;
      if (a < 0 || a >= r || s[a] < 0) c.Fail("a -1 section of unknown size");
      sections[i] = s[a];
    }
  }
  c.AddNode("Split", {In(c, "X"), c.AddInt64s(sections, {static_cast<int64_t>(sections.size())})}, outs,
            {{"axis", int64_t(axis)}});
}

void ExportGather(ExportContext& c) {
  std::string index = In(c, "Index");
  if (RankOf(c, index) == 2) {
    const std::string f = c.Temp(index + "_flat");
    c.AddNode("Reshape", {index, c.AddInt64s({-1}, {1})}, {f});
    index = f;
  }
  c.AddNode("Gather", {In(c, "X"), index}, {Out(c, "Out")}, {{"axis", int64_t(A<int>(c, "axis"))}});
}

void ExportCast(ExportContext& c) {
  DType d;
  ParseDType(A<std::string>(c, "out_dtype"), &d);
  if (d == DType::kBFloat16) c.Fail("a cast to bfloat16");
  c.AddNode("Cast", {In(c, "X")}, {Out(c, "Out")}, {{"to", int64_t(DTypeToOnnx(d))}});
}

void ExportClip(ExportContext& c) {
  const std::string x = In(c, "X");
  // A run-time bound ([1], float32 or float64) becomes a scalar of X's dtype.
  auto bound = [&](const std::string& slot, const std::string& attr) {
    const auto& v = c.Op().Input(slot);
    if (v.empty()) return ScalarLike(c, x, A<float>(c, attr));
    const std::string scalar = c.Temp(v[0] + "_scalar"), cast = c.Temp(v[0] + "_cast");
    c.AddNode("Reshape", {v[0], c.AddInt64s({}, {0})}, {scalar});
    c.AddNode("Cast", {scalar}, {cast}, {{"to", int64_t(DTypeToOnnx(c.DTypeOf(x)))}});
    return cast;
  };
  c.AddNode("Clip", {x, bound("Min", "min"), bound("Max", "max")}, {Out(c, "Out")});
}

void ExportGelu(ExportContext& c) {
  // opset 17 has no Gelu: the formula, as PyTorch writes it.
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const std::string inner = c.Temp(out), t = c.Temp(out), p = c.Temp(out), h = c.Temp(out);
  if (A<bool>(c, "approximate")) {
    const std::string cube = c.Temp(out), mix = c.Temp(out), sc = c.Temp(out);
    c.AddNode("Pow", {x, ScalarLike(c, x, 3.0)}, {cube});
    c.AddNode("Mul", {cube, ScalarLike(c, x, 0.044715)}, {mix});
    c.AddNode("Add", {x, mix}, {inner});
    c.AddNode("Mul", {inner, ScalarLike(c, x, std::sqrt(2.0 / M_PI))}, {sc});
    c.AddNode("Tanh", {sc}, {t});
  } else {
    c.AddNode("Div", {x, ScalarLike(c, x, std::sqrt(2.0))}, {inner});
    c.AddNode("Erf", {inner}, {t});
  }
  c.AddNode("Add", {t, ScalarLike(c, x, 1.0)}, {p});
  c.AddNode("Mul", {x, p}, {h});
  c.AddNode("Mul", {h, ScalarLike(c, x, 0.5)}, {out});
}

void ExportReduce(ExportContext& c, const std::string& type) {
  const std::vector<int> dim = A<std::vector<int>>(c, "dim");
  // A dim list that names every dim of X reduces everything too, and gives
  // [1] as reduce_all does (ONNX: a scalar, reshaped below).
  const int64_t rank = RankOf(c, In(c, "X"));
  std::set<int64_t> listed;
  for (int d : dim) listed.insert(d < 0 ? d + rank : d);
  bool every = rank > 0;
  for (int64_t i = 0; i < rank; ++i) every = every && listed.count(i) != 0;
  const bool all = A<bool>(c, "reduce_all") || dim.empty() || every;
  const bool keep = A<bool>(c, "keep_dim");
  const std::string out = Out(c, "Out");
  // Reducing every dim gives [1] in Paddle, a scalar in ONNX.
  const bool reshape = all && !keep;
  const std::string r = reshape ? c.Temp(out) : out;
  std::map<std::string, OnnxAttr> attrs{{"keepdims", int64_t(keep)}};
  std::vector<std::string> inputs{In(c, "X")};
  if (!all) {
    if (type == "ReduceSum") {
      inputs.push_back(c.AddInt64s(I64(dim), {static_cast<int64_t>(dim.size())}));
    } else {
      attrs["axes"] = I64(dim);
    }
  }
  c.AddNode(type, inputs, {r}, attrs);
  if (reshape) c.AddNode("Reshape", {r, c.AddInt64s({1}, {1})}, {out});
}

void ExportMean(ExportContext& c) {
  const std::string r = c.Temp(Out(c, "Out"));
  c.AddNode("ReduceMean", {In(c, "X")}, {r}, {{"keepdims", int64_t(0)}});
  c.AddNode("Reshape", {r, c.AddInt64s({1}, {1})}, {Out(c, "Out")});
}

// fill_constant's value as its kernel reads it: str_value (exact) where set,
// else the float attribute value.
opkit::NumberText FillConstantNumber(const OpDesc& op) {
  opkit::NumberText v;
  const std::string s = op.HasAttr("str_value") ? op.Attr<std::string>("str_value") : std::string();
  if (s.empty() || !opkit::ParseNumberText(s, &v)) v = opkit::NumberText{false, 0, op.Attr<float>("value")};
  return v;
}

void ExportFillConstant(ExportContext& c) {
  DType d;
  ParseDType(A<std::string>(c, "dtype"), &d);
  const auto shape = I64(A<std::vector<int>>(c, "shape"));
  std::string dims = IntListInput(c, "ShapeTensor", "ShapeTensorList");
  if (dims.empty()) dims = c.AddInt64s(shape, {static_cast<int64_t>(shape.size())});
  // The value goes as a one-element int64 or float tensor, cast to Out's
  // dtype: a float64 Out whose str_value float does not hold would lose
  // digits.
  const opkit::NumberText v = FillConstantNumber(c.Op());
  const bool integral = d == DType::kInt64 || d == DType::kInt32 || d == DType::kBool;
  if (d == DType::kFloat64 && c.Op().Input("ValueTensor").empty() &&
      static_cast<double>(static_cast<float>(v.d)) != v.d && !std::isnan(v.d))
    c.Fail("a float64 str_value that float32 does not hold exactly (the value exports as a float tensor)");
  std::string one = integral ? c.AddInt64s({v.As<int64_t>()}, {1}) : c.AddFloats({v.As<float>()}, {1});
  if (const auto& vt = c.Op().Input("ValueTensor"); !vt.empty()) one = vt[0];
  const std::string filled = c.Temp("filled");
  c.AddNode("Expand", {one, dims}, {filled});
  c.AddNode("Cast", {filled}, {Out(c, "Out")}, {{"to", int64_t(DTypeToOnnx(d))}});
}

void ExportLookupTable(ExportContext& c) {
  const std::string ids = In(c, "Ids");
  if (A<int>(c, "padding_idx") != -1) c.Fail("padding_idx");
  const std::string s = c.Temp(ids + "_squeezed");
  c.AddNode("Squeeze", {ids, c.AddInt64s({-1}, {1})}, {s});
  c.AddNode("Gather", {In(c, "W"), s}, {Out(c, "Out")}, {{"axis", int64_t(0)}});
}

// lookup_table_v2: Ids of any shape, no trailing 1 to squeeze.
void ExportLookupTableV2(ExportContext& c) {
  if (A<int>(c, "padding_idx") != -1) c.Fail("padding_idx");
  c.AddNode("Gather", {In(c, "W"), In(c, "Ids")}, {Out(c, "Out")}, {{"axis", int64_t(0)}});
}

void ExportArgExtremum(ExportContext& c, const std::string& type) {
  const std::string x = In(c, "X");
  const int64_t axis = A<int>(c, "axis");
  if (A<bool>(c, "flatten")) {
    const std::string f = c.Temp(x + "_flat");
    c.AddNode("Reshape", {x, c.AddInt64s({-1}, {1})}, {f});
    // nabla's Out is [1], or with keepdims X's rank of 1s: ONNX gives [1].
    const int64_t rank = RankOf(c, In(c, "X"));
    const bool reshape = A<bool>(c, "keepdims") && rank > 1;
    const std::string found = reshape ? c.Temp(Out(c, "Out")) : Out(c, "Out");
    c.AddNode(type, {f}, {found}, {{"axis", int64_t(0)}, {"keepdims", int64_t(1)}});
    if (reshape) c.AddNode("Reshape", {found, c.AddInt64s(std::vector<int64_t>(rank, 1), {rank})}, {Out(c, "Out")});
    return;
  }
  c.AddNode(type, {x}, {Out(c, "Out")}, {{"axis", axis}, {"keepdims", int64_t(A<bool>(c, "keepdims"))}});
}

// The activations that have no ONNX op of the same formula, as short chains.
void ExportElu(ExportContext& c) {
  // ONNX's Elu is alpha (e^x - 1) below 0 for any alpha; nabla's is
  // min(0, alpha (e^x - 1)), the same for alpha >= 0 only.
  const float alpha = A<float>(c, "alpha");
  if (alpha < 0) c.Fail("alpha " + std::to_string(alpha) + " below 0 (ONNX's Elu has no min(0, ...))");
  UnaryAs(c, "Elu", {{"alpha", alpha}});
}

void ExportSoftplus(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const float beta = A<float>(c, "beta"), threshold = A<float>(c, "threshold");
  // Above a threshold of 20 the linear part differs from ln(1 + e^x) by
  // < e^-20: ONNX's Softplus (of beta x, over beta) is the op; below it
  // the switch to x is a Where.
  if (beta == 1.0f && threshold >= 20.0f) {
    c.AddNode("Softplus", {x}, {out});
    return;
  }
  const std::string bx = c.Temp(out), sp = c.Temp(out), d = threshold >= 20.0f ? out : c.Temp(out);
  c.AddNode("Mul", {x, ScalarLike(c, x, beta)}, {bx});
  c.AddNode("Softplus", {bx}, {sp});
  c.AddNode("Div", {sp, ScalarLike(c, x, beta)}, {d});
  if (threshold >= 20.0f) return;
  const std::string above = c.Temp(out);
  c.AddNode("Greater", {bx, ScalarLike(c, x, threshold)}, {above});
  c.AddNode("Where", {above, x, d}, {out});
}

void ExportHardSwish(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const std::string shifted = c.Temp(out), clipped = c.Temp(out), prod = c.Temp(out);
  c.AddNode("Add", {x, ScalarLike(c, x, A<float>(c, "offset"))}, {shifted});
  c.AddNode("Clip", {shifted, ScalarLike(c, x, 0.0), ScalarLike(c, x, A<float>(c, "threshold"))}, {clipped});
  c.AddNode("Mul", {x, clipped}, {prod});
  c.AddNode("Div", {prod, ScalarLike(c, x, A<float>(c, "scale"))}, {out});
}

void ExportSwish(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const std::string bx = c.Temp(out), s = c.Temp(out);
  c.AddNode("Mul", {x, ScalarLike(c, x, A<float>(c, "beta"))}, {bx});
  c.AddNode("Sigmoid", {bx}, {s});
  c.AddNode("Mul", {x, s}, {out});
}

// log sigmoid(x) = -softplus(-x).
void ExportLogSigmoid(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const std::string n = c.Temp(out), sp = c.Temp(out);
  c.AddNode("Neg", {x}, {n});
  c.AddNode("Softplus", {n}, {sp});
  c.AddNode("Neg", {sp}, {out});
}

void ExportTanhShrink(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out"), t = c.Temp(out);
  c.AddNode("Tanh", {x}, {t});
  c.AddNode("Sub", {x, t}, {out});
}

// nabla's round takes halves away from zero, ONNX's Round to even:
// s * (t + (|x| - t >= 1/2)), t = floor(|x|), s = 1 - 2 (x < 0) (Sign
// would give 0 at 0, losing -0), exact where floor(|x| + 1/2) is not
// (0.49999997 + 0.5 rounds up to 1).
void ExportRound(ExportContext& c) {
  const std::string x = In(c, "X"), out = Out(c, "Out");
  const int64_t to = DTypeToOnnx(c.DTypeOf(x));
  const std::string a = c.Temp(out), t = c.Temp(out), d = c.Temp(out), up = c.Temp(out), upf = c.Temp(out),
                    r = c.Temp(out), neg = c.Temp(out), negf = c.Temp(out), twice = c.Temp(out), sign = c.Temp(out);
  c.AddNode("Abs", {x}, {a});
  c.AddNode("Floor", {a}, {t});
  c.AddNode("Sub", {a, t}, {d});
  c.AddNode("GreaterOrEqual", {d, ScalarLike(c, x, 0.5)}, {up});
  c.AddNode("Cast", {up}, {upf}, {{"to", to}});
  c.AddNode("Add", {t, upf}, {r});
  c.AddNode("Less", {x, ScalarLike(c, x, 0.0)}, {neg});
  c.AddNode("Cast", {neg}, {negf}, {{"to", to}});
  c.AddNode("Mul", {negf, ScalarLike(c, x, 2.0)}, {twice});
  c.AddNode("Sub", {ScalarLike(c, x, 1.0), twice}, {sign});
  c.AddNode("Mul", {sign, r}, {out});
}

void ExportTrilTriu(ExportContext& c) {
  c.AddNode("Trilu", {In(c, "X"), c.AddInt64s({A<int>(c, "diagonal")}, {})}, {Out(c, "Out")},
            {{"upper", int64_t(!A<bool>(c, "lower"))}});
}

void ExportTopK(ExportContext& c) {
  c.AddNode("TopK", {In(c, "X"), c.AddInt64s({A<int>(c, "k")}, {1})}, {Out(c, "Out"), Out(c, "Indices")},
            {{"axis", int64_t(-1)}});
}

// Hard labels [..., 1] over classes on the last axis of [..., C] logits:
// ONNX's SoftmaxCrossEntropyLoss wants classes on axis 1 ([N, C, d1, ...])
// and labels without the class dim, and gives [N, d1, ...].
void ExportSoftmaxCrossEntropy(ExportContext& c) {
  std::string logits = In(c, "Logits");
  const std::string label = In(c, "Label");
  if (A<bool>(c, "soft_label")) c.Fail("soft labels");
  const int64_t rank = RankOf(c, logits);
  const int axis = A<int>(c, "axis");
  if (rank < 2 || (axis != -1 && axis != rank - 1)) c.Fail("classes on an axis other than the last");
  // use_softmax false: Logits are probabilities already, Softmax is their
  // copy and the loss the negative log of the label's, through the kernel's
  // clipped log (max(p, 1e-20): a 0 gives 46.05, not inf): ONNX's
  // NegativeLogLikelihoodLoss of that log.
  const bool use_softmax = A<bool>(c, "use_softmax");
  if (use_softmax) {
    c.AddNode("Softmax", {logits}, {Out(c, "Softmax")}, {{"axis", int64_t(-1)}});
  } else {
    c.AddNode("Identity", {logits}, {Out(c, "Softmax")});
    const std::string clipped = c.Temp(logits + "_clipped"), log = c.Temp(logits + "_log");
    c.AddNode("Max", {logits, ScalarLike(c, logits, 1e-20)}, {clipped});
    c.AddNode("Log", {clipped}, {log});
    logits = log;
  }
  if (rank > 2) {
    std::vector<int64_t> perm{0, rank - 1};
    for (int64_t i = 1; i < rank - 1; ++i) perm.push_back(i);
    const std::string t = c.Temp(logits + "_classes_second");
    c.AddNode("Transpose", {logits}, {t}, {{"perm", perm}});
    logits = t;
  }
  // A Label of Logits' rank less one (what fusing softmax and cross_entropy
  // gives) is ONNX's form already, and so is its Loss.
  const bool short_label = RankOf(c, label) == rank - 1;
  const std::string flat = short_label ? label : c.Temp(label + "_flat");
  const std::string loss = short_label ? Out(c, "Loss") : c.Temp(Out(c, "Loss"));
  if (!short_label) c.AddNode("Squeeze", {label, c.AddInt64s({rank - 1}, {1})}, {flat});
  c.AddNode(use_softmax ? "SoftmaxCrossEntropyLoss" : "NegativeLogLikelihoodLoss", {logits, flat}, {loss},
            {{"reduction", std::string("none")}, {"ignore_index", int64_t(A<int>(c, "ignore_index"))}});
  if (!short_label) c.AddNode("Unsqueeze", {loss, c.AddInt64s({rank - 1}, {1})}, {Out(c, "Loss")});
}

std::map<std::string, OpExporter>& ExporterTable() {
  static std::map<std::string, OpExporter> table = [] {
    std::map<std::string, OpExporter> t;
    auto unary = [&](const std::string& op, const std::string& onnx) {
      t[op] = [onnx](ExportContext& c) { UnaryAs(c, onnx); };
    };
    unary("relu", "Relu");
    unary("sigmoid", "Sigmoid");
    unary("tanh", "Tanh");
    unary("exp", "Exp");
    unary("log", "Log");
    unary("sqrt", "Sqrt");
    unary("abs", "Abs");
    unary("assign", "Identity");
    unary("logical_not", "Not");
    unary("sin", "Sin");
    unary("cos", "Cos");
    unary("atan", "Atan");
    unary("asin", "Asin");
    unary("acos", "Acos");
    unary("ceil", "Ceil");
    unary("floor", "Floor");
    unary("reciprocal", "Reciprocal");
    unary("softsign", "Softsign");
    auto binary = [&](const std::string& op, const std::string& onnx) {
      t[op] = [onnx](ExportContext& c) { Binary(c, onnx); };
    };
    binary("elementwise_add", "Add");
    binary("elementwise_sub", "Sub");
    binary("elementwise_mul", "Mul");
    binary("elementwise_div", "Div");
    binary("elementwise_pow", "Pow");
    binary("elementwise_max", "Max");
    binary("elementwise_min", "Min");
    binary("equal", "Equal");
    binary("less_than", "Less");
    binary("less_equal", "LessOrEqual");
    binary("greater_than", "Greater");
    binary("greater_equal", "GreaterOrEqual");
    binary("logical_and", "And");
    binary("logical_or", "Or");
    binary("logical_xor", "Xor");
    t["square"] = [](ExportContext& c) { c.AddNode("Mul", {In(c, "X"), In(c, "X")}, {Out(c, "Out")}); };
    t["softmax"] = [](ExportContext& c) { UnaryAs(c, "Softmax", {{"axis", int64_t(A<int>(c, "axis"))}}); };
    t["log_softmax"] = [](ExportContext& c) { UnaryAs(c, "LogSoftmax", {{"axis", int64_t(A<int>(c, "axis"))}}); };
    t["leaky_relu"] = [](ExportContext& c) { UnaryAs(c, "LeakyRelu", {{"alpha", A<float>(c, "alpha")}}); };
    t["flatten"] = [](ExportContext& c) { UnaryAs(c, "Flatten", {{"axis", int64_t(A<int>(c, "axis"))}}); };
    t["transpose"] = [](ExportContext& c) { UnaryAs(c, "Transpose", {{"perm", I64(A<std::vector<int>>(c, "axis"))}}); };
    t["concat"] = [](ExportContext& c) {
      NoTensorInput(c, "AxisTensor");
      c.AddNode("Concat", c.Op().Input("X"), {Out(c, "Out")}, {{"axis", int64_t(A<int>(c, "axis"))}});
    };
    t["sum"] = [](ExportContext& c) { c.AddNode("Sum", c.Op().Input("X"), {Out(c, "Out")}); };
    t["stack"] = [](ExportContext& c) {
      const auto& xs = c.Op().Input("X");
      if (xs.empty()) c.Fail("input X is empty");
      int64_t axis = A<int>(c, "axis");
      if (axis < 0) axis += RankOf(c, xs[0]) + 1;
      std::vector<std::string> parts;
      for (const auto& x : xs) {
        parts.push_back(c.Temp(x + "_unsqueezed"));
        c.AddNode("Unsqueeze", {x, c.AddInt64s({axis}, {1})}, {parts.back()});
      }
      c.AddNode("Concat", parts, {Out(c, "Y")}, {{"axis", axis}});
    };
    t["expand"] = [](ExportContext& c) {
      std::string times = IntListInput(c, "ExpandTimes", "expand_times_tensor");
      if (times.empty()) {
        const auto v = I64(A<std::vector<int>>(c, "expand_times"));
        times = c.AddInt64s(v, {static_cast<int64_t>(v.size())});
      }
      c.AddNode("Tile", {In(c, "X"), times}, {Out(c, "Out")});
    };
    t["mul"] = ExportMul;
    t["matmul"] = ExportMatmul;
    t["flash_attn"] = ExportFlashAttn;
    t["conv2d"] = ExportConv2d;
    t["pool2d"] = ExportPool2d;
    t["batch_norm"] = ExportBatchNorm;
    t["layer_norm"] = ExportLayerNorm;
    t["dropout"] = ExportDropout;
    t["scale"] = ExportScale;
    t["reshape"] = ExportReshape;
    t["slice"] = ExportSlice;
    t["squeeze"] = ExportSqueeze;
    t["unsqueeze"] = ExportUnsqueeze;
    t["split"] = ExportSplit;
    t["gather"] = ExportGather;
    t["cast"] = ExportCast;
    t["clip"] = ExportClip;
    t["gelu"] = ExportGelu;
    t["reduce_mean"] = [](ExportContext& c) { ExportReduce(c, "ReduceMean"); };
    t["reduce_sum"] = [](ExportContext& c) { ExportReduce(c, "ReduceSum"); };
    t["mean"] = ExportMean;
    t["fill_constant"] = ExportFillConstant;
    t["lookup_table"] = ExportLookupTable;
    t["lookup_table_v2"] = ExportLookupTableV2;
    t["arg_max"] = [](ExportContext& c) { ExportArgExtremum(c, "ArgMax"); };
    t["arg_min"] = [](ExportContext& c) { ExportArgExtremum(c, "ArgMin"); };
    t["reduce_max"] = [](ExportContext& c) { ExportReduce(c, "ReduceMax"); };
    t["reduce_min"] = [](ExportContext& c) { ExportReduce(c, "ReduceMin"); };
    t["reduce_prod"] = [](ExportContext& c) { ExportReduce(c, "ReduceProd"); };
    t["elu"] = ExportElu;
    t["softplus"] = ExportSoftplus;
    t["hard_swish"] = ExportHardSwish;
    t["swish"] = ExportSwish;
    t["logsigmoid"] = ExportLogSigmoid;
    t["tanh_shrink"] = ExportTanhShrink;
    t["tril_triu"] = ExportTrilTriu;
    t["round"] = ExportRound;
    t["rsqrt"] = [](ExportContext& c) {
      const std::string s = c.Temp(Out(c, "Out"));
      c.AddNode("Sqrt", {In(c, "X")}, {s});
      c.AddNode("Reciprocal", {s}, {Out(c, "Out")});
    };
    t["pow"] = [](ExportContext& c) {
      const std::string x = In(c, "X");
      c.AddNode("Pow", {x, ScalarLike(c, x, A<float>(c, "factor"))}, {Out(c, "Out")});
    };
    t["thresholded_relu"] = [](ExportContext& c) {
      UnaryAs(c, "ThresholdedRelu", {{"alpha", A<float>(c, "threshold")}});
    };
    t["hard_shrink"] = [](ExportContext& c) {
      UnaryAs(c, "Shrink", {{"lambd", A<float>(c, "threshold")}, {"bias", 0.0f}});
    };
    t["softshrink"] = [](ExportContext& c) {
      UnaryAs(c, "Shrink", {{"lambd", A<float>(c, "lambda")}, {"bias", A<float>(c, "lambda")}});
    };
    t["hard_sigmoid"] = [](ExportContext& c) {
      UnaryAs(c, "HardSigmoid", {{"alpha", A<float>(c, "slope")}, {"beta", A<float>(c, "offset")}});
    };
    t["relu6"] = [](ExportContext& c) {
      const std::string x = In(c, "X");
      c.AddNode("Clip", {x, ScalarLike(c, x, 0.0), ScalarLike(c, x, A<float>(c, "threshold"))}, {Out(c, "Out")});
    };
    t["top_k"] = ExportTopK;
    t["increment"] = [](ExportContext& c) {
      const std::string x = In(c, "X");
      c.AddNode("Add", {x, ScalarLike(c, x, A<float>(c, "step"))}, {Out(c, "Out")});
    };
    t["softmax_with_cross_entropy"] = ExportSoftmaxCrossEntropy;
    return t;
  }();
  return table;
}

void SetValueInfo(onnx::ValueInfoProto* vi, const std::string& name, const VarDesc* var) {
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(DTypeToOnnx(var->GetDType()));
  auto* shape = tt->mutable_shape();
  int unknown = 0;
  for (int64_t d : var->GetShape()) {
    auto* dim = shape->add_dim();
    if (d >= 0) {
      dim->set_dim_value(d);
    } else {
      dim->set_dim_param(unknown++ == 0 ? "N" : "d" + std::to_string(unknown));
    }
  }
}

void BodyValue(onnx::ValueInfoProto* vi, const std::string& name, const VarDesc* var, bool scalar) {
  if (scalar) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(onnx::TensorProto::INT64);
    tt->mutable_shape();
    return;
  }
  SetValueInfo(vi, name, var);
}

void AddInitializer(onnx::GraphProto* g, const std::string& name, const Tensor& t) {
  onnx::TensorProto* p = g->add_initializer();
  p->set_name(name);
  p->set_data_type(DTypeToOnnx(t.GetDType()));
  for (int64_t d : t.GetShape()) p->add_dims(d);
  std::string raw(t.Bytes(), '\0');
  if (t.Bytes()) t.GetDevice()->CopyToHost(raw.data(), t.RawData(), t.Bytes());
  p->set_raw_data(raw);
}

// What an op reads of block 0: its inputs, and for an op with a sub-block
// the block 0 vars the sub-block's ops read (int and bool vars may be left
// out of a while's X).
std::vector<std::string> ReadsOf(const ProgramDesc& program, const OpDesc& op) {
  std::vector<std::string> out = op.InputArgumentNames();
  for (const auto& [name, attr] : op.Attrs()) {
    if (TypeOf(attr) != AttrType::kBlock) continue;
    const BlockDesc* b = program.Block(static_cast<size_t>(std::get<BlockRef>(attr).idx));
    for (const auto& sub : b->AllOps()) {
      for (const auto& n : ReadsOf(program, *sub)) {
        if (!b->FindVar(n) && program.Root()->FindVar(n)) out.push_back(n);
      }
    }
  }
  return out;
}

// A var that one fill_constant of the block writes: its value.
bool ConstIndex(const BlockDesc& block, const std::string& var, int64_t* out) {
  int writers = 0;
  bool ok = false;
  for (const auto& op : block.AllOps()) {
    const auto names = op->OutputArgumentNames();
    if (std::find(names.begin(), names.end(), var) == names.end()) continue;
    ++writers;
    ok = op->Type() == "fill_constant" && op->Input("ShapeTensor").empty() && op->Input("ShapeTensorList").empty() &&
         op->Input("ValueTensor").empty();
    if (ok) *out = FillConstantNumber(*op).As<int64_t>();
  }
  return writers == 1 && ok;
}

void ExportOps(Ctx& ctx, const std::vector<const OpDesc*>& ops, bool top, const std::set<std::string>& inputs);

// A tensor array's entries [0, n) stacked on a new axis 0, in the graph
// being written (a Loop's body reads it at a run-time index).
std::string Stacked(Ctx& ctx, const std::string& array) {
  auto done = ctx.stacked.find(array);
  if (done != ctx.stacked.end()) return done->second;
  const auto& entries = ctx.arrays[array];
  std::vector<std::string> parts;
  for (const auto& [i, value] : entries) {
    if (i != static_cast<int64_t>(parts.size()))
      ctx.Fail("tensor array '" + array + "' has no entry " + std::to_string(parts.size()) + " written in block 0");
    const std::string u = ctx.Temp(value + "_entry");
    ctx.AddNode("Unsqueeze", {value, ctx.AddInt64s({0}, {1})}, {u}, {});
    parts.push_back(u);
  }
  if (parts.empty()) ctx.Fail("tensor array '" + array + "' is read but no entry of it is written in block 0");
  const std::string out = ctx.Temp(array + "_stacked");
  ctx.AddNode("Concat", parts, {out}, {{"axis", int64_t(0)}});
  ctx.stacked[array] = out;
  return out;
}

// Tensor arrays exist at export time only: block 0 writes entries at
// constant indices (fill_constant), which become the ONNX values themselves.
void ExportWriteToArray(Ctx& ctx, const OpDesc& op) {
  if (&ctx.Block() != ctx.Program().Root()) ctx.Fail("a tensor array written inside a loop (ONNX has none)");
  int64_t i = 0;
  if (!ConstIndex(ctx.Block(), op.Input("I").at(0), &i)) ctx.Fail("an index I that no single fill_constant gives");
  ctx.arrays[op.Output("Out").at(0)][i] = op.Input("X").at(0);
}

void ExportReadFromArray(Ctx& ctx, const OpDesc& renamed, const OpDesc& op) {
  const std::string array = op.Input("X").at(0), out = renamed.Output("Out").at(0);
  int64_t i = 0;
  if (ConstIndex(ctx.Block(), op.Input("I").at(0), &i)) {
    auto it = ctx.arrays[array].find(i);
    if (it == ctx.arrays[array].end()) ctx.Fail("entry " + std::to_string(i) + " of '" + array + "' is never written");
    ctx.AddNode("Identity", {it->second}, {out}, {});
    return;
  }
  auto stacked = ctx.stacked.find(array);
  const std::string all = stacked != ctx.stacked.end() ? stacked->second : Stacked(ctx, array);
  const std::string index = AsInt64(ctx, renamed.Input("I").at(0)), row = ctx.Temp(out + "_row");
  ctx.AddNode("Gather", {all, index}, {row}, {{"axis", int64_t(0)}});
  ctx.AddNode("Squeeze", {row, ctx.AddInt64s({0}, {1})}, {out}, {});
}

void BodyValue(onnx::ValueInfoProto* vi, const std::string& name, const VarDesc* var, bool scalar = false);

// while as Loop: no trip count, the Condition as cond, and every var the op
// writes loop-carried (the Condition as well, for its final value). Arrays the body reads are
// stacked first, in the enclosing graph.
void ExportWhile(Ctx& ctx, const OpDesc& renamed, const OpDesc& op) {
  const BlockDesc& sub = *ctx.Program().Block(static_cast<size_t>(op.Attr<BlockRef>("sub_block").idx));
  const std::string cond = op.Input("Condition").at(0);
  for (const auto& x : op.Input("X")) {
    const VarDesc* v = ctx.Block().FindVarRecursive(x);
    if (v && v->Type() == VarType::kTensorArray) Stacked(ctx, x);
  }
  std::vector<std::string> carried, finals;
  const auto& outs = op.Output("Out");
  for (size_t j = 0; j < outs.size(); ++j) {
    const VarDesc* v = ctx.Block().FindVarRecursive(outs[j]);
    if (!v || v->Type() != VarType::kDense) ctx.Fail("output '" + outs[j] + "' is not a dense tensor");
    if (outs[j] == cond) continue;
    if (!ctx.Produced().count(ctx.Current(outs[j])) && !v->Persistable() && ctx.Current(outs[j]) == outs[j] &&
        std::find(op.Input("X").begin(), op.Input("X").end(), outs[j]) == op.Input("X").end()) {
      ctx.Fail("'" + outs[j] + "' is written by the loop but has no value before it (ONNX's Loop carries values)");
    }
    carried.push_back(outs[j]);
    finals.push_back(renamed.Output("Out").at(j));
  }
  std::string cond_final = ctx.Temp(cond + "_final");
  for (size_t j = 0; j < outs.size(); ++j) {
    if (outs[j] == cond) cond_final = renamed.Output("Out").at(j);
  }
  onnx::GraphProto body;
  body.set_name(ctx.Temp("while_body"));
  const std::string iter = ctx.Temp("iteration"), cond_in = ctx.Temp(cond + "_in");
  BodyValue(body.add_input(), iter, nullptr, true);
  BodyValue(body.add_input(), cond_in, ctx.Block().FindVarRecursive(cond));
  // The condition is carried too (ONNX's Loop does not output its final cond).
  const std::string cond_carried = ctx.Temp(cond + "_carried");
  BodyValue(body.add_input(), cond_carried, ctx.Block().FindVarRecursive(cond));
  std::vector<std::string> loop_inputs{"", ctx.Current(cond), ctx.Current(cond)};
  std::vector<std::string> ins;
  for (const auto& c : carried) {
    ins.push_back(ctx.Temp(c + "_in"));
    BodyValue(body.add_input(), ins.back(), ctx.Block().FindVarRecursive(c));
    loop_inputs.push_back(ctx.Current(c));
  }
  Ctx::Scope saved = ctx.Enter(&body, &sub);
  ctx.SetCurrent(cond, cond_in);
  for (size_t k = 0; k < carried.size(); ++k) ctx.SetCurrent(carried[k], ins[k]);
  std::vector<const OpDesc*> body_ops;
  for (const auto& o : sub.AllOps()) body_ops.push_back(o.get());
  ExportOps(ctx, body_ops, false, {});
  ctx.SetOp(&renamed);
  std::vector<std::string> results{cond, cond};
  results.insert(results.end(), carried.begin(), carried.end());
  for (const auto& r : results) {
    const std::string out = ctx.Temp(r + "_out");
    ctx.AddNode("Identity", {ctx.Current(r)}, {out}, {});
    BodyValue(body.add_output(), out, sub.FindVarRecursive(r));
  }
  ctx.Leave(saved);
  ctx.SetOp(&renamed);
  std::vector<std::string> loop_outputs{cond_final};
  loop_outputs.insert(loop_outputs.end(), finals.begin(), finals.end());
  ctx.AddLoop(loop_inputs, loop_outputs, &body);
}

void ExportOps(Ctx& ctx, const std::vector<const OpDesc*>& ops, bool top, const std::set<std::string>& inputs) {
  // SSA: a read sees the latest write; each write is a fresh value but the
  // last write of a block 0 var that is no graph input, which keeps the
  // var's name (a graph output is the var's final value).
  std::map<std::string, int> writes;
  for (const OpDesc* op : ops) {
    for (const auto& n : op->OutputArgumentNames()) ++writes[n];
  }
  for (const OpDesc* op : ops) {
    NABLA_ENFORCE(op->Type().size() < 5 || op->Type().substr(op->Type().size() - 5) != "_grad", kInvalidArgument,
                  "cannot export op ", op->Type(), ": ONNX export takes a forward program (no backward part)");
    VarNameMap in, out;
    for (const auto& [slot, args] : op->Inputs()) {
      auto& v = in[slot];
      for (const auto& a : args) v.push_back(ctx.Current(a));
    }
    std::vector<std::pair<std::string, std::string>> updates;
    for (const auto& [slot, args] : op->Outputs()) {
      auto& v = out[slot];
      for (const auto& a : args) {
        const VarDesc* var = ctx.Block().FindVarRecursive(a);
        const bool dense = !var || var->Type() == VarType::kDense;
        const bool last = --writes[a] == 0;
        std::string name = a;
        if (dense && !(top && last && !inputs.count(a))) name = ctx.Temp(a + "_v");
        v.push_back(name);
        if (dense) updates.emplace_back(a, name);
      }
    }
    OpDesc renamed(op->Type(), in, out, op->Attrs());
    ctx.SetOp(&renamed);
    if (op->Type() == "while") {
      ExportWhile(ctx, renamed, *op);
    } else if (op->Type() == "write_to_array") {
      ExportWriteToArray(ctx, renamed);
    } else if (op->Type() == "read_from_array") {
      ExportReadFromArray(ctx, renamed, *op);
    } else {
      for (const auto& [name, attr] : op->Attrs()) {
        NABLA_ENFORCE(TypeOf(attr) != AttrType::kBlock, kUnimplemented, "cannot export op ", op->Type(),
                      ": ops with sub-blocks other than while (Loop) have no exporter");
      }
      OpExporter exporter;
      {
        std::lock_guard<std::mutex> lock(TableMutex());
        auto it = ExporterTable().find(op->Type());
        NABLA_ENFORCE(it != ExporterTable().end(), kUnimplemented, "cannot export op ", op->Type(),
                      ": it has no ONNX exporter (its plugin registers none)");
        exporter = it->second;
      }
      exporter(ctx);
    }
    for (const auto& [var, name] : updates) ctx.SetCurrent(var, name);
  }
}

}  // namespace

void RegisterOnnxExporter(const std::string& op_type, OpExporter exporter) {
  std::lock_guard<std::mutex> lock(TableMutex());
  ExporterTable()[op_type] = std::move(exporter);
}

bool HasOnnxExporter(const std::string& op_type) {
  std::lock_guard<std::mutex> lock(TableMutex());
  return ExporterTable().count(op_type) != 0;
}

std::string ExportOnnxBytes(const ProgramDesc& program, const NamedTensors& weights, const ExportOptions& options) {
  NABLA_ENFORCE(options.opset >= 13 && options.opset <= 17, kInvalidArgument, "--opset: the exporter writes opsets 13 ",
                "to 17 but received ", options.opset);
  const BlockDesc& root = *program.Root();
  std::map<std::string, const Tensor*> wmap;
  for (const auto& [name, t] : weights) wmap[name] = &t;

  // Graph outputs: given, or every var written and never read.
  std::set<std::string> read, written;
  for (const auto& op : root.AllOps()) {
    for (const auto& n : op->InputArgumentNames()) read.insert(n);
    for (const auto& n : op->OutputArgumentNames()) written.insert(n);
  }
  std::vector<std::string> outputs = options.outputs;
  const bool default_outputs = outputs.empty();
  if (default_outputs) {
    for (const auto& op : root.AllOps()) {
      for (const auto& n : op->OutputArgumentNames()) {
        const VarDesc* v = root.FindVar(n);
        if (!read.count(n) && v && !v->Persistable() && v->Type() == VarType::kDense &&
            std::find(outputs.begin(), outputs.end(), n) == outputs.end()) {
          outputs.push_back(n);
        }
      }
    }
  }
  std::set<std::string> listed;
  for (const auto& o : outputs) {
    NABLA_ENFORCE(written.count(o), kNotFound, "--output ", o, ": no op of block 0 writes '", o, "'");
    // One graph output per value: a second would be the same ONNX output twice.
    NABLA_ENFORCE(listed.insert(o).second, kAlreadyExists, "--output ", o, ": expected each output once, but '", o,
                  "' is listed twice");
  }
  // The ops that lead to the outputs, in program order.
  std::set<std::string> needed(outputs.begin(), outputs.end());
  std::vector<const OpDesc*> ops;
  for (auto it = root.AllOps().rbegin(); it != root.AllOps().rend(); ++it) {
    const OpDesc& op = **it;
    bool use = false;
    for (const auto& n : op.OutputArgumentNames()) use = use || needed.count(n);
    if (!use) continue;
    ops.push_back(&op);
    for (const auto& n : ReadsOf(program, op)) needed.insert(n);
  }
  std::reverse(ops.begin(), ops.end());

  onnx::ModelProto model;
  model.set_ir_version(8);
  model.set_producer_name("nabla");
  model.set_producer_version("0.1");
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(options.opset);
  onnx::GraphProto* g = model.mutable_graph();
  g->set_name("nabla");
  std::set<std::string> names;
  for (const auto& v : root.AllVars()) names.insert(v->Name());

  // Inputs and initializers: what the ops read that no earlier op wrote.
  std::set<std::string> defined, graph_inputs;
  for (const OpDesc* op : ops) {
    NABLA_ENFORCE(op->Type().size() < 5 || op->Type().substr(op->Type().size() - 5) != "_grad", kInvalidArgument,
                  "cannot export op ", op->Type(), ": ONNX export takes a forward program (no backward part)");
    for (const auto& n : ReadsOf(program, *op)) {
      if (defined.count(n)) continue;
      defined.insert(n);
      graph_inputs.insert(n);
      const VarDesc* v = root.FindVar(n);
      NABLA_ENFORCE(v, kNotFound, "cannot export op ", op->Type(), ": var '", n, "' is not declared in block 0");
      if (v->Persistable()) {
        auto w = wmap.find(n);
        NABLA_ENFORCE(w != wmap.end(), kNotFound, "cannot export: persistable var '", n,
                      "' has no value (pass --weights, or give it an init)");
        AddInitializer(g, n, *w->second);
      } else {
        SetValueInfo(g->add_input(), n, v);
      }
    }
    for (const auto& n : op->OutputArgumentNames()) defined.insert(n);
  }
  Ctx ctx(program, g, &names);
  ExportOps(ctx, ops, true, graph_inputs);
  for (const auto& o : outputs) {
    if (!ctx.Produced().count(o)) {
      // An auxiliary output (SavedMean, Mask, ...) inference has no value for.
      NABLA_ENFORCE(default_outputs, kUnimplemented, "--output ", o, ": the exported ops do not compute it");
      continue;
    }
    SetValueInfo(g->add_output(), o, root.FindVar(o));
  }
  NABLA_ENFORCE(g->output_size() > 0, kInvalidArgument, "cannot export: the program has no output to export");
  try {
    onnx::checker::check_model(model);
    onnx::ShapeInferenceOptions opts{true, 1, false};
    onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), opts);
  } catch (const std::exception& e) {
    NABLA_THROW(kInvalidArgument, "the exported model fails onnx's checks: ", OneLineMessage(e.what()));
  }
  // InferShapes filled value_info: keep the model as written, checks passed.
  g->clear_value_info();
  std::string bytes;
  NABLA_ENFORCE(model.SerializeToString(&bytes), kExternal, "cannot serialize the ONNX model (over 2 GiB?)");
  return bytes;
}

void ExportOnnx(const ProgramDesc& program, const NamedTensors& weights, const std::string& path,
                const ExportOptions& options) {
  WriteFileAtomically(path, ExportOnnxBytes(program, weights, options));
}

}  // namespace nabla::onnx_io
