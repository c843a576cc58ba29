// The importer's driver: parse, read initializers and graph inputs, infer
// shapes with onnx's own inference (data propagation on, so PyTorch's Shape →
// Gather → Concat → Reshape chains get shapes), then one converter per node
// in graph order, folding nodes whose inputs are all known.
#include <onnx/shape_inference/implementation.h>

#include <google/protobuf/io/coded_stream.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "importer.h"
#include "nabla/device.h"
#include "nabla/program_io.h"

namespace nabla::onnx_io {

namespace {

constexpr int kMinOpset = 1;
constexpr int kMaxOpset = 17;
// Folding is for shape arithmetic and small constants: bigger values stay
// vars computed at run time.
constexpr int64_t kMaxFoldElements = int64_t(1) << 20;
// protobuf's own limit for one message.
constexpr size_t kMaxModelBytes = size_t(2) << 30;

std::string ModelDir(const std::string& path) {
  const std::filesystem::path p(path);
  return p.has_parent_path() ? p.parent_path().string() : std::string(".");
}

}  // namespace

// onnx's shape inference trusts the nodes it reads: a malformed Conv makes
// libonnx 1.12 read out of bounds (convPoolShapeInference, found by
// fuzz_onnx). An ONNX file is untrusted, so inference runs in a forked child
// that sends back only the value_info it found; a child that dies is a
// malformed model, reported as such, and never takes the importer with it.
// What inference found inside subgraphs (Loop's body, If's branches), with
// their inputs and outputs: ONNX's names are unique across nested graphs, so
// they join the main graph's value_info.
static void CollectSubgraphInfo(const onnx::GraphProto& g, onnx::GraphProto* out) {
  for (const auto& node : g.node()) {
    for (const auto& a : node.attribute()) {
      std::vector<const onnx::GraphProto*> subs;
      if (a.has_g()) subs.push_back(&a.g());
      for (const auto& sg : a.graphs()) subs.push_back(&sg);
      for (const onnx::GraphProto* sub : subs) {
        for (const auto& vi : sub->input()) *out->add_value_info() = vi;
        for (const auto& vi : sub->value_info()) *out->add_value_info() = vi;
        for (const auto& vi : sub->output()) *out->add_value_info() = vi;
        CollectSubgraphInfo(*sub, out);
      }
    }
  }
}

static void InferShapesIsolated(onnx::ModelProto& model, const std::string& path) {
  int fds[2];
  NABLA_ENFORCE(::pipe(fds) == 0, kExternal, path, ": cannot create a pipe for shape inference");
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fds[0]);
    ::close(fds[1]);
    NABLA_THROW(kExternal, path, ": cannot fork for shape inference");
  }
  if (pid == 0) {
    ::close(fds[0]);
    // A crash here is reported by the parent in one line; the child's own
    // report (a sanitizer's, in fuzz builds) would only be noise.
    const int null = ::open("/dev/null", O_WRONLY);
    if (null >= 0) ::dup2(null, 2);
    // The default action for a crash: no handler the parent installed (a
    // sanitizer's, libFuzzer's) runs in the child and reports it as its own.
    for (int sig : {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL}) ::signal(sig, SIG_DFL);
    onnx::GraphProto out;
    try {
      onnx::ShapeInferenceOptions opts{false, 0, true};
      onnx::shape_inference::InferShapes(model, onnx::OpSchemaRegistry::Instance(), opts);
      *out.mutable_value_info() = model.graph().value_info();
      *out.mutable_output() = model.graph().output();
      CollectSubgraphInfo(model.graph(), &out);
    } catch (...) {
      // Nothing inferred: the importer goes on with the shapes it has.
    }
    std::string bytes;
    out.SerializeToString(&bytes);
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fds[1], bytes.data() + done, bytes.size() - done);
      if (n <= 0) ::_exit(1);
      done += static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::string bytes;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  onnx::GraphProto out;
  NABLA_ENFORCE(WIFEXITED(status) && WEXITSTATUS(status) == 0 && out.ParseFromString(bytes), kInvalidArgument, path,
                ": onnx's shape inference crashed on this model (malformed node attributes or inputs)");
  *model.mutable_graph()->mutable_value_info() = out.value_info();
  *model.mutable_graph()->mutable_output() = out.output();
}

Importer::Importer(const onnx::ModelProto& model, const std::string& path, const ImportOptions& options)
    : model_(model), path_(path), options_(options), block_(program_.Root()) {}

void Importer::RecordValueInfo(const onnx::ValueInfoProto& vi) {
  if (!vi.has_type() || !vi.type().has_tensor_type()) return;
  const auto& tt = vi.type().tensor_type();
  Info& info = info_[vi.name()];
  DType d;
  if (tt.has_elem_type()) info.onnx_type = tt.elem_type();
  if (tt.has_elem_type() && OnnxToDType(tt.elem_type(), &d)) {
    info.dtype = d;
    info.has_dtype = true;
  }
  if (tt.has_shape()) {
    info.shape.clear();
    info.params.clear();
    for (const auto& dim : tt.shape().dim()) {
      info.shape.push_back(dim.has_dim_value() && dim.dim_value() >= 0 ? dim.dim_value() : -1);
      info.params.push_back(dim.has_dim_param() ? dim.dim_param() : "");
    }
    info.has_shape = true;
  }
}

void Importer::ReadInitializers() {
  const std::string dir = ModelDir(path_);
  for (const auto& init : model_.graph().initializer()) {
    const std::string where = path_ + ": initializer '" + init.name() + "'";
    NABLA_ENFORCE(!init.name().empty(), kInvalidArgument, path_, ": an initializer has no name");
    NABLA_ENFORCE(!consts_.count(init.name()), kAlreadyExists, where, " is given twice");
    consts_[init.name()] = ReadTensorProto(init, dir, where);
    initializers_.insert(init.name());
    const Tensor& t = consts_[init.name()];
    SetInfo(init.name(), std::vector<int64_t>(t.GetShape().begin(), t.GetShape().end()), t.GetDType());
  }
  NABLA_ENFORCE(model_.graph().sparse_initializer_size() == 0, kUnimplemented, path_,
                ": sparse initializers are not supported");
}

void Importer::ReadGraphInputs() {
  BlockDesc& root = *program_.Root();
  std::set<std::string> seen;
  for (const auto& in : model_.graph().input()) {
    NABLA_ENFORCE(seen.insert(in.name()).second, kAlreadyExists, path_, ": graph input '", in.name(),
                  "' is listed twice");
    // Older exporters list initializers as inputs too: they are weights.
    if (consts_.count(in.name())) continue;
    NABLA_ENFORCE(in.type().has_tensor_type(), kUnimplemented, path_, ": graph input '", in.name(),
                  "' is not a tensor (sequences, maps and optionals have no converter)");
    const auto& tt = in.type().tensor_type();
    DType d;
    if (!OnnxToDType(tt.elem_type(), &d)) {
      // Named with the node that reads it: that is what has no converter.
      std::string reader;
      for (const auto& node : model_.graph().node()) {
        if (!reader.empty()) break;
        for (const auto& i : node.input()) {
          if (i == in.name()) reader = " (read by " + Node(node).Describe() + ")";
        }
      }
      NABLA_THROW(kUnimplemented, path_, ": graph input '", in.name(), "'", reader, " has dtype ",
                  OnnxTypeName(tt.elem_type()), ", which nabla lacks (it has ", kNablaDTypes, ")");
    }
    Info& info = info_[in.name()];
    info.dtype = d;
    info.has_dtype = true;
    info.shape.clear();
    info.params.clear();
    for (const auto& dim : tt.shape().dim()) {
      info.shape.push_back(dim.has_dim_value() && dim.dim_value() >= 0 ? dim.dim_value() : -1);
      info.params.push_back(dim.has_dim_param() ? dim.dim_param() : "");
    }
    info.has_shape = tt.has_shape();
    auto fixed = options_.input_shapes.find(in.name());
    if (fixed != options_.input_shapes.end()) {
      NABLA_ENFORCE(!info.has_shape || info.shape.size() == fixed->second.size(), kInvalidArgument, "--input-shape ",
                    in.name(), ": the model gives it rank ", info.shape.size(), " but received ", fixed->second.size(),
                    " dims");
      for (size_t i = 0; info.has_shape && i < info.shape.size(); ++i) {
        NABLA_ENFORCE(info.shape[i] < 0 || info.shape[i] == fixed->second[i], kInvalidArgument, "--input-shape ",
                      in.name(), ": dim ", i, " is ", info.shape[i], " in the model but received ", fixed->second[i]);
      }
      info.shape = fixed->second;
      info.params.assign(info.shape.size(), "");
      info.has_shape = true;
    }
    VarDesc* var = root.Var(in.name());
    var->SetDType(d);
    var->MarkDTypeKnown();
    // A scalar input is fed as [1] (nabla's vars have rank >= 1); the
    // converters still see ONNX's rank 0.
    var->SetShape(info.has_shape && info.shape.empty() ? Shape{1} : Shape(info.shape.begin(), info.shape.end()));
    var->SetDeclared(true);
    // Graph inputs are data: gradients stop there unless a float input is
    // meant to be trained (an ONNX graph cannot say so).
    var->SetStopGradient(!IsFloating(d));
    vars_.insert(in.name());
  }
  for (const auto& [name, dims] : options_.input_shapes) {
    NABLA_ENFORCE(vars_.count(name), kNotFound, "--input-shape ", name, ": ", path_, " has no graph input '", name,
                  "'");
  }
}

void Importer::InferShapes() {
  // onnx's inference on a copy whose inputs carry --input-shape's dims and
  // whose folded values are initializers, so shapes that depend on them
  // (a Slice whose ends were shape arithmetic) are known too. A model it
  // cannot infer keeps the shapes it gave itself.
  onnx::ModelProto copy = model_;
  onnx::GraphProto* g = copy.mutable_graph();
  for (auto& in : *g->mutable_input()) {
    auto it = options_.input_shapes.find(in.name());
    if (it == options_.input_shapes.end() || !in.type().has_tensor_type()) continue;
    auto* shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    shape->clear_dim();
    for (int64_t d : it->second) shape->add_dim()->set_dim_value(d);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (const auto& node : g->node()) {
    bool folded = node.output_size() > 0;
    for (const auto& o : node.output()) folded = folded && (o.empty() || consts_.count(o));
    if (!folded) {
      *kept.Add() = node;
      continue;
    }
    for (const auto& o : node.output()) {
      if (o.empty()) continue;
      const Tensor& t = consts_.at(o);
      onnx::TensorProto* p = g->add_initializer();
      p->set_name(o);
      p->set_data_type(DTypeToOnnx(t.GetDType()));
      for (int64_t d : t.GetShape()) p->add_dims(d);
      p->set_raw_data(std::string(static_cast<const char*>(t.RawData()), t.Bytes()));
    }
  }
  g->mutable_node()->Swap(&kept);
  // A Reshape to shape arithmetic on dynamic dims gets its shape as Paddle's
  // 0s and -1, which ONNX's Reshape reads the same way: its output's shape
  // (and what follows) is then inferred.
  for (auto& node : *g->mutable_node()) {
    if (node.op_type() != "Reshape" || node.input_size() < 2 || !partials_.count(node.input(1))) continue;
    std::vector<int64_t> dims;
    if (!PartialReshapeDims(node.input(0), partials_.at(node.input(1)), &dims)) continue;
    onnx::TensorProto* p = g->add_initializer();
    p->set_name(node.input(1) + "@as_reshape_dims");
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(static_cast<int64_t>(dims.size()));
    for (int64_t d : dims) p->add_int64_data(d);
    node.set_input(1, p->name());
  }
  InferShapesIsolated(copy, path_);
  for (const auto& vi : g->value_info()) {
    if (!consts_.count(vi.name())) RecordValueInfo(vi);
  }
  for (const auto& vi : g->output()) {
    if (!info_.count(vi.name())) RecordValueInfo(vi);
  }
}

// Folding and shape inference feed each other: a folded Slice end gives a
// shape, a shape gives a folded Shape. Rounds until nothing more folds.
void Importer::FoldConstants() {
  const auto& g = model_.graph();
  for (int round = 0; round < 8; ++round) {
    InferShapes();
    bool progress = false;
    for (const auto& proto : g.node()) {
      Node n(proto);
      bool done = n.NumOutputs() > 0;
      for (int i = 0; i < n.NumOutputs(); ++i) done = done && (!n.HasOutput(i) || consts_.count(n.Output(i)));
      if (done) continue;
      if (!proto.domain().empty() && proto.domain() != "ai.onnx") continue;
      bool inputs_known = true;

      for (int i = 0; i < n.NumInputs(); ++i) {
        if (n.HasInput(i) && !consts_.count(n.Input(i)) && !(FoldsFromShape(n.OpType()) && i == 0)) {
          inputs_known = false;
        }
      }
      if (!inputs_known) continue;
      try {
        if (TryFold(n)) progress = true;
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        n.Fail(ErrorKind::kInvalidArgument, std::string("malformed node: ") + e.what());
      }
    }
    // Shape arithmetic on dynamic dims, element by element, again from the
    // shapes this round knows.
    const std::map<std::string, PartialDims> before = std::move(partials_);
    partials_.clear();
    for (const auto& proto : g.node()) {
      Node n(proto);
      if (n.NumOutputs() != 1 || !n.HasOutput(0) || consts_.count(n.Output(0))) continue;
      if (!proto.domain().empty() && proto.domain() != "ai.onnx") continue;
      try {
        if (TryFoldPartial(n) && consts_.count(n.Output(0))) progress = true;
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        n.Fail(ErrorKind::kInvalidArgument, std::string("malformed node: ") + e.what());
      }
    }
    auto same = [](const std::map<std::string, PartialDims>& a, const std::map<std::string, PartialDims>& b) {
      if (a.size() != b.size()) return false;
      for (auto i = a.begin(), j = b.begin(); i != a.end(); ++i, ++j) {
        if (i->first != j->first || i->second.elems.size() != j->second.elems.size()) return false;
        for (size_t k = 0; k < i->second.elems.size(); ++k) {
          const auto &x = i->second.elems[k], &y = j->second.elems[k];
          if (x.known != y.known || x.value != y.value || x.of != y.of || x.dim != y.dim || x.param != y.param) {
            return false;
          }
        }
      }
      return true;
    };
    if (!progress && same(before, partials_)) break;
  }
}

const PartialDims* Importer::PartialOf(const std::string& value) const {
  auto it = partials_.find(value);
  return it == partials_.end() ? nullptr : &it->second;
}

bool Importer::PartialReshapeDims(const std::string& input, const PartialDims& p, std::vector<int64_t>* out) const {
  std::vector<std::string> params = ParamsOf(input);
  params.resize(p.elems.size());
  out->clear();
  for (size_t i = 0; i < p.elems.size(); ++i) {
    const auto& e = p.elems[i];
    const bool same_dim =
        (e.of == input && e.dim == static_cast<int64_t>(i)) || (!e.param.empty() && params[i] == e.param);
    out->push_back(e.known ? e.value : same_dim ? 0 : -1);
  }
  return std::count(out->begin(), out->end(), -1) <= 1;
}

std::vector<std::string> Importer::ParamsOf(const std::string& value) const {
  auto it = info_.find(value);
  if (it == info_.end() || !it->second.has_shape) return {};
  std::vector<std::string> p = it->second.params;
  p.resize(it->second.shape.size());
  return p;
}

// x.view(x.size(0), -1) with a dynamic batch: Shape → Gather → Unsqueeze →
// Concat cannot fold to numbers, but element by element it is "dim 0 of x,
// then -1", which is Paddle's reshape [0, -1]. Structural ops keep what is
// known of each element; arithmetic keeps known results only.
bool Importer::TryFoldPartial(const Node& n) {
  const std::string& op = n.OpType();
  // Inputs as element lists: a partial, or a small int constant.
  auto as_partial = [&](int i, PartialDims* out) {
    if (!n.HasInput(i)) return false;
    if (const PartialDims* p = PartialOf(n.Input(i))) {
      *out = *p;
      return true;
    }
    const Tensor* t = ConstOf(n.Input(i));
    if (!t || t->Rank() > 1 || t->Numel() > 64 || IsFloating(t->GetDType()) || t->GetDType() == DType::kBool) {
      return false;
    }
    out->scalar = t->Rank() == 0;
    for (long double v : ToConst(*t).data) {
      PartialDims::Elem e;
      e.known = true;
      e.value = static_cast<int64_t>(v);
      out->elems.push_back(e);
    }
    return true;
  };
  auto ints = [&](int i, std::vector<int64_t>* out) {
    const Tensor* t = n.HasInput(i) ? ConstOf(n.Input(i)) : nullptr;
    if (!t || IsFloating(t->GetDType())) return false;
    for (long double v : ToConst(*t).data) out->push_back(static_cast<int64_t>(v));
    return true;
  };
  PartialDims r;
  if (op == "Shape") {
    if (!n.HasInput(0) || !HasShape(n.Input(0))) return false;
    const std::vector<int64_t> shape = info_.at(n.Input(0)).shape;
    const std::vector<std::string> params = ParamsOf(n.Input(0));
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t start = n.Int("start", 0), end = n.Int("end", rank);
    if (start < 0) start += rank;
    if (end < 0) end += rank;
    start = std::clamp<int64_t>(start, 0, rank);
    end = std::clamp<int64_t>(end, 0, rank);
    for (int64_t i = start; i < end; ++i) {
      PartialDims::Elem e;
      e.known = shape[i] >= 0;
      e.value = shape[i];
      e.of = n.Input(0);
      e.dim = i;
      e.param = params[i];
      r.elems.push_back(e);
    }
  } else if (op == "Identity" || op == "Cast") {
    if (!as_partial(0, &r)) return false;
  } else if (op == "Gather") {
    PartialDims x;
    std::vector<int64_t> idx;
    if (!as_partial(0, &x) || !ints(1, &idx) || x.scalar || n.Int("axis", 0) != 0) return false;
    const int64_t size = static_cast<int64_t>(x.elems.size());
    for (int64_t k : idx) {
      if (k < 0) k += size;
      if (k < 0 || k >= size) n.Fail(ErrorKind::kOutOfRange, "index " + std::to_string(k) + " is out of range");
      r.elems.push_back(x.elems[k]);
    }
    r.scalar = ConstOf(n.Input(1))->Rank() == 0;
  } else if (op == "Unsqueeze") {
    if (!as_partial(0, &r) || !r.scalar) return false;
    r.scalar = false;
  } else if (op == "Squeeze") {
    if (!as_partial(0, &r) || r.scalar || r.elems.size() != 1) return false;
    r.scalar = true;
  } else if (op == "Concat") {
    for (int i = 0; i < n.NumInputs(); ++i) {
      PartialDims x;
      if (!as_partial(i, &x) || x.scalar) return false;
      r.elems.insert(r.elems.end(), x.elems.begin(), x.elems.end());
    }
  } else if (op == "Slice" && Opset() >= 10) {
    PartialDims x;
    std::vector<int64_t> st, en, steps;
    if (!as_partial(0, &x) || x.scalar || !ints(1, &st) || !ints(2, &en) || st.size() != 1 || en.size() != 1) {
      return false;
    }
    if (n.HasInput(4) && (!ints(4, &steps) || steps != std::vector<int64_t>{1})) return false;
    const int64_t size = static_cast<int64_t>(x.elems.size());
    int64_t b = st[0] < 0 ? st[0] + size : st[0], e = en[0] < 0 ? en[0] + size : en[0];
    b = std::clamp<int64_t>(b, 0, size);
    e = std::clamp<int64_t>(e, 0, size);
    for (int64_t i = b; i < e; ++i) r.elems.push_back(x.elems[i]);
  } else if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div") {
    PartialDims x, y;
    if (!as_partial(0, &x) || !as_partial(1, &y)) return false;
    if (x.elems.size() != y.elems.size() && x.elems.size() != 1 && y.elems.size() != 1) return false;
    const size_t size = std::max(x.elems.size(), y.elems.size());
    r.scalar = x.scalar && y.scalar;
    for (size_t i = 0; i < size; ++i) {
      const auto& a = x.elems[x.elems.size() == 1 ? 0 : i];
      const auto& b = y.elems[y.elems.size() == 1 ? 0 : i];
      PartialDims::Elem e;
      e.known = a.known && b.known && !(op == "Div" && b.value == 0);
      if (e.known) {
        e.value = op == "Add"   ? a.value + b.value
                  : op == "Sub" ? a.value - b.value
                  : op == "Mul" ? a.value * b.value
                                : a.value / b.value;
      }
      r.elems.push_back(e);
    }
  } else {
    return false;
  }
  bool any_unknown = false;
  for (const auto& e : r.elems) any_unknown = any_unknown || !e.known;
  if (!any_unknown) {
    // Every element known after all: a plain constant.
    ConstValue c;
    c.dtype = DType::kInt64;
    if (!r.scalar) c.dims = {static_cast<int64_t>(r.elems.size())};
    for (const auto& e : r.elems) c.data.push_back(static_cast<long double>(e.value));
    if (r.scalar && c.data.size() != 1) return false;
    SetConst(n.Output(0), ToTensor(c));
    return true;
  }
  partials_[n.Output(0)] = std::move(r);
  return true;
}

// PyTorch writes GELU as 0.5 * x * (1 + erf(x / sqrt(2))): Div → Erf → Add →
// Mul (by x) → Mul (by 0.5). nabla has gelu but no erf, so the chain becomes
// one node when its intermediate values are used nowhere else.
void Importer::FuseGelu() {
  const auto& g = model_.graph();
  std::map<std::string, std::vector<size_t>> consumers;
  std::map<std::string, size_t> producer;
  std::set<std::string> outputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input()) consumers[in].push_back(static_cast<size_t>(i));
    for (const auto& out : g.node(i).output()) producer[out] = static_cast<size_t>(i);
  }
  auto only_consumer = [&](const std::string& v, const char* type) -> long {
    if (outputs.count(v)) return -1;
    auto it = consumers.find(v);
    if (it == consumers.end() || it->second.size() != 1) return -1;
    const auto& node = g.node(static_cast<int>(it->second[0]));
    return node.op_type() == type && node.output_size() == 1 ? static_cast<long>(it->second[0]) : -1;
  };
  // The other input of a binary node, when it is a scalar constant near `want`.
  auto scalar_is = [&](const onnx::NodeProto& n, const std::string& self, double want) {
    if (n.input_size() != 2) return false;
    const std::string& other = n.input(0) == self ? n.input(1) : n.input(0);
    const Tensor* t = ConstOf(other);
    if (!t || t->Numel() != 1) return false;
    return std::fabs(static_cast<double>(ToConst(*t).data[0]) - want) < 1e-4 * std::fabs(want);
  };
  for (int e = 0; e < g.node_size(); ++e) {
    const auto& erf = g.node(e);
    if (erf.op_type() != "Erf" || erf.input_size() != 1 || erf.output_size() != 1) continue;
    auto p = producer.find(erf.input(0));
    if (p == producer.end() || only_consumer(erf.input(0), "Erf") != e) continue;
    const auto& div = g.node(static_cast<int>(p->second));
    if (div.input_size() != 2 || div.output_size() != 1) continue;
    std::string x;
    if (div.op_type() == "Div" && scalar_is(div, div.input(0), std::sqrt(2.0))) x = div.input(0);
    if (div.op_type() == "Mul" && scalar_is(div, div.input(0), std::sqrt(0.5))) x = div.input(0);
    if (div.op_type() == "Mul" && x.empty() && scalar_is(div, div.input(1), std::sqrt(0.5))) x = div.input(1);
    if (x.empty()) continue;
    const long add = only_consumer(erf.output(0), "Add");
    if (add < 0 || !scalar_is(g.node(add), erf.output(0), 1.0)) continue;
    const long m1 = only_consumer(g.node(add).output(0), "Mul");
    if (m1 < 0) continue;
    const auto& mul1 = g.node(m1);
    if (mul1.input_size() != 2 || (mul1.input(0) != x && mul1.input(1) != x)) continue;
    const long m2 = only_consumer(mul1.output(0), "Mul");
    if (m2 < 0 || !scalar_is(g.node(m2), mul1.output(0), 0.5)) continue;
    onnx::NodeProto gelu;
    gelu.set_op_type("Gelu");
    gelu.set_name(g.node(m2).name());
    gelu.add_input(x);
    gelu.add_output(g.node(m2).output(0));
    replacements_[static_cast<size_t>(m2)] = gelu;
    for (long i : {static_cast<long>(p->second), static_cast<long>(e), add, m1}) fused_.insert(static_cast<size_t>(i));
  }
}

// PyTorch writes AvgPool2d(padding=p) (count_include_pad) as a Pad of zeros
// and an unpadded AveragePool, and F.pad before a Conv the same way. nabla
// has no pad op, but the window ops pad with zeros themselves: a zero Pad of
// H and W feeding only a Conv or AveragePool becomes that op's pads.
void Importer::FusePads() {
  const auto& g = model_.graph();
  std::map<std::string, std::vector<int>> consumers;
  std::set<std::string> outputs;
  for (const auto& o : g.output()) outputs.insert(o.name());
  for (int i = 0; i < g.node_size(); ++i) {
    for (const auto& in : g.node(i).input()) consumers[in].push_back(i);
  }
  for (int i = 0; i < g.node_size(); ++i) {
    const auto& pad = g.node(i);
    if (pad.op_type() != "Pad" || pad.output_size() != 1 || pad.input_size() < 1 || fused_.count(i)) continue;
    Node pn(pad);
    if (pn.String("mode", "constant") != "constant") continue;
    std::vector<int64_t> pads;
    if (opset_ >= 11) {
      const Tensor* t = pn.HasInput(1) ? ConstOf(pad.input(1)) : nullptr;
      if (!t || IsFloating(t->GetDType())) continue;
      for (long double v : ToConst(*t).data) pads.push_back(static_cast<int64_t>(v));
      if (pn.HasInput(2)) {
        const Tensor* v = ConstOf(pad.input(2));
        if (!v || v->Numel() != 1 || ToConst(*v).data[0] != 0) continue;
      }
    } else {
      pads = pn.Ints("pads");
      if (pn.Float("value", 0.0f) != 0.0f) continue;
    }
    if (pads.size() != 8 || pads[0] || pads[1] || pads[4] || pads[5]) continue;
    bool negative = false;
    for (int64_t v : pads) negative = negative || v < 0;
    if (negative || outputs.count(pad.output(0))) continue;
    auto it = consumers.find(pad.output(0));
    if (it == consumers.end() || it->second.size() != 1) continue;
    const int c = it->second[0];
    if (replacements_.count(c) || fused_.count(c)) continue;
    onnx::NodeProto next = g.node(c);
    Node nn(next);
    if ((next.op_type() != "Conv" && next.op_type() != "AveragePool") || next.input(0) != pad.output(0)) continue;
    if (nn.String("auto_pad", "NOTSET") != "NOTSET" && !nn.String("auto_pad", "NOTSET").empty()) continue;
    std::vector<int64_t> own = nn.Ints("pads", {0, 0, 0, 0});
    if (own.size() != 4) continue;
    const bool own_zero = !own[0] && !own[1] && !own[2] && !own[3];
    // An average counting padded cells: only if the op's own pads count too.
    if (next.op_type() == "AveragePool" && !own_zero && nn.Int("count_include_pad", 0) == 0) continue;
    const std::vector<int64_t> sum{own[0] + pads[2], own[1] + pads[3], own[2] + pads[6], own[3] + pads[7]};
    next.set_input(0, pad.input(0));
    onnx::AttributeProto* a = nullptr;
    for (auto& attr : *next.mutable_attribute()) {
      if (attr.name() == "pads") a = &attr;
    }
    if (!a) {
      a = next.add_attribute();
      a->set_name("pads");
      a->set_type(onnx::AttributeProto::INTS);
    }
    a->clear_ints();
    for (int64_t v : sum) a->add_ints(v);
    if (next.op_type() == "AveragePool") {
      bool set = false;
      for (auto& attr : *next.mutable_attribute()) {
        if (attr.name() == "count_include_pad") {
          attr.set_i(1);
          set = true;
        }
      }
      if (!set) {
        auto* cip = next.add_attribute();
        cip->set_name("count_include_pad");
        cip->set_type(onnx::AttributeProto::INT);
        cip->set_i(1);
      }
    }
    replacements_[static_cast<size_t>(c)] = next;
    fused_.insert(static_cast<size_t>(i));
  }
}

bool Importer::TryFold(const Node& n) {
  if (FoldsFromShape(n.OpType())) {
    if (!n.HasInput(0) || !HasShape(n.Input(0))) return false;
    for (int64_t d : info_.at(n.Input(0)).shape) {
      if (d < 0) return false;
    }
  } else {
    if (!FindFolder(n.OpType())) return false;
  }
  const Folder* folder = FindFolder(n.OpType());
  std::vector<ConstValue> values(static_cast<size_t>(n.NumInputs()));
  std::vector<const ConstValue*> args(static_cast<size_t>(n.NumInputs()), nullptr);
  int64_t total = 0;
  for (int i = 0; i < n.NumInputs(); ++i) {
    if (!n.HasInput(i)) continue;
    if (FoldsFromShape(n.OpType()) && i == 0) continue;
    const Tensor* t = ConstOf(n.Input(i));
    if (!t) return false;
    // A float initializer is a parameter: what is computed from it stays
    // ops, so fine-tuning trains it (PyTorch reorders LSTM gates this way).
    if (IsInitializer(n.Input(i)) && IsFloating(t->GetDType())) return false;
    total += t->Numel();
    if (total > kMaxFoldElements) return false;
    values[i] = ToConst(*t);
    args[i] = &values[i];
  }
  std::vector<ConstValue> outs = (*folder)(n, args, *this);
  if (outs.empty()) return false;  // the folder declined (too big, or needs a run)
  for (size_t i = 0; i < outs.size() && static_cast<int>(i) < n.NumOutputs(); ++i) {
    if (!n.HasOutput(static_cast<int>(i))) continue;
    SetConst(n.Output(static_cast<int>(i)), ToTensor(outs[i]));
  }
  return true;
}

void Importer::ConvertNode(const onnx::NodeProto& proto, size_t index) {
  Node n(proto);
  const std::string& domain = proto.domain();
  if (!domain.empty() && domain != "ai.onnx") {
    n.Unsupported("ops of domain '" + domain + "' have no converters");
  }
  for (int i = 0; i < n.NumInputs(); ++i) {
    if (!n.HasInput(i)) continue;
    NABLA_ENFORCE(vars_.count(n.Input(i)) || consts_.count(n.Input(i)) || partials_.count(n.Input(i)), kInvalidArgument,
                  n.Describe(), ": input '", n.Input(i),
                  "' is not a graph input, an initializer or an earlier node's output");
  }
  bool folded = n.NumOutputs() > 0;
  for (int i = 0; i < n.NumOutputs(); ++i) folded = folded && (!n.HasOutput(i) || consts_.count(n.Output(i)));
  if (folded) return;                                                                 // FoldConstants did it
  if (n.NumOutputs() == 1 && n.HasOutput(0) && partials_.count(n.Output(0))) return;  // shape arithmetic
  for (int i = 0; i < n.NumOutputs(); ++i) {
    if (!n.HasOutput(i)) continue;
    NABLA_ENFORCE(!vars_.count(n.Output(i)) && !consts_.count(n.Output(i)), kInvalidArgument, n.Describe(),
                  ": output '", n.Output(i), "' is already defined (ONNX values are assigned once)");
  }
  const Converter* conv = FindConverter(n.OpType());
  if (!conv) {
    const std::string reason = MissingConverterReason(n.OpType());
    n.Unsupported(reason.empty() ? "ONNX op " + n.OpType() + " is not known to the importer"
                                 : "ONNX op " + n.OpType() + " (" + reason + ")");
  }
  try {
    (*conv)(n, *this);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    // A list shorter than the node's attributes promise, and the like.
    n.Fail(ErrorKind::kInvalidArgument, std::string("malformed node: ") + e.what());
  }
  for (int i = 0; i < n.NumOutputs(); ++i) {
    if (n.HasOutput(i) && !consts_.count(n.Output(i))) vars_.insert(n.Output(i));
  }
  (void)index;
}

void Importer::FinishOutputs() {
  BlockDesc& root = *program_.Root();
  for (const auto& out : model_.graph().output()) {
    const std::string& name = out.name();
    NABLA_ENFORCE(vars_.count(name) || consts_.count(name), kInvalidArgument, path_, ": graph output '", name,
                  "' is not produced by any node");
    if (vars_.count(name)) continue;
    // A folded output: its value becomes a persistable var of that name.
    Materialize(name, false);
  }
  (void)root;
}

std::string Importer::Materialize(const std::string& value, bool trainable) {
  if (vars_.count(value)) return value;
  const Tensor& t = consts_.at(value);
  Tensor stored = t;
  // nabla's vars have rank >= 1: a scalar is stored as [1].
  if (t.GetShape().empty()) stored.Resize(Shape{1});
  VarDesc* var = program_.Root()->Var(value);
  var->SetDType(stored.GetDType());
  var->MarkDTypeKnown();
  var->SetShape(stored.GetShape());
  var->SetPersistable(true);
  var->SetStopGradient(!trainable || !IsFloating(stored.GetDType()));
  var->SetDeclared(true);
  weights_.emplace_back(value, stored);
  vars_.insert(value);
  return value;
}

std::string Importer::In(const Node& n, int i) {
  const std::string& name = n.Input(i);
  if (vars_.count(name)) return name;
  if (partials_.count(name)) {
    n.Unsupported("input '" + name + "' is shape arithmetic on dynamic dims, which nabla computes at import " +
                  "time only (fix the dims with --input-shape)");
  }
  return Materialize(name, initializers_.count(name) != 0);
}

const Tensor* Importer::ConstOf(const std::string& value) const {
  auto it = consts_.find(value);
  return it == consts_.end() ? nullptr : &it->second;
}

const Tensor* Importer::Const(const Node& n, int i) const {
  if (!n.HasInput(i)) return nullptr;
  return ConstOf(n.Input(i));
}

std::vector<int64_t> Importer::ConstInts(const Node& n, int i, const std::string& what) const {
  const Tensor* t = Const(n, i);
  if (!t) {
    n.Unsupported(what + " (input " + std::to_string(i) + ") is computed at run time; it must be a constant" +
                  (partials_.count(n.Input(i)) ? " (it depends on dynamic dims: fix them with --input-shape)" : ""));
  }
  NABLA_ENFORCE(t->GetDType() == DType::kInt64 || t->GetDType() == DType::kInt32, kInvalidArgument, n.Describe(), ": ",
                what, " must be int64 but received ", DTypeName(t->GetDType()));
  std::vector<int64_t> out;
  for (long double v : ToConst(*t).data) out.push_back(static_cast<int64_t>(v));
  return out;
}

std::vector<float> Importer::ConstFloats(const Node& n, int i, const std::string& what) const {
  const Tensor* t = Const(n, i);
  if (!t) n.Unsupported(what + " (input " + std::to_string(i) + ") is computed at run time; it must be a constant");
  std::vector<float> out;
  for (long double v : ToConst(*t).data) out.push_back(static_cast<float>(v));
  return out;
}

bool Importer::HasShape(const std::string& value) const {
  auto it = info_.find(value);
  return it != info_.end() && it->second.has_shape;
}

std::vector<int64_t> Importer::ShapeOf(const Node& n, const std::string& value) const {
  auto it = info_.find(value);
  if (it == info_.end() || !it->second.has_shape) {
    n.Unsupported("the shape of '" + value + "' is unknown (fix dynamic input dims with --input-shape)");
  }
  return it->second.shape;
}

int64_t Importer::RankOf(const Node& n, const std::string& value) const {
  return static_cast<int64_t>(ShapeOf(n, value).size());
}

bool Importer::HasDType(const std::string& value) const {
  auto it = info_.find(value);
  return it != info_.end() && it->second.has_dtype;
}

DType Importer::DTypeOf(const Node& n, const std::string& value) const {
  auto it = info_.find(value);
  if (it != info_.end() && !it->second.has_dtype && it->second.onnx_type != 0) {
    n.Unsupported("'" + value + "' has dtype " + OnnxTypeName(it->second.onnx_type) + ", which nabla lacks (it has " +
                  kNablaDTypes + ")");
  }
  if (it == info_.end() || !it->second.has_dtype) n.Unsupported("the dtype of '" + value + "' is unknown");
  return it->second.dtype;
}

void Importer::Emit(const std::string& type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs) {
  block_->AppendOp(OpDesc(type, std::move(inputs), std::move(outputs), std::move(attrs)));
}

std::string Importer::Temp(const std::string& hint) {
  for (;;) {
    std::string name = hint + "@onnx" + std::to_string(temp_counter_++);
    if (!names_.count(name)) {
      names_.insert(name);
      return name;
    }
  }
}

void Importer::SetConst(const std::string& value, Tensor t) {
  SetInfo(value, std::vector<int64_t>(t.GetShape().begin(), t.GetShape().end()), t.GetDType());
  consts_[value] = std::move(t);
}

std::string Importer::ConstVar(const Tensor& t, const std::string& hint) {
  const std::string name = Temp(hint);
  consts_[name] = t;
  return Materialize(name, false);
}

void Importer::SetInfo(const std::string& value, std::vector<int64_t> shape, DType dtype) {
  Info& info = info_[value];
  info.shape = std::move(shape);
  info.has_shape = true;
  info.dtype = dtype;
  info.has_dtype = true;
}

void Importer::DeclareVar(const Node& n, const std::string& value) {
  VarDesc* var = block_->Var(value);
  var->SetDType(DTypeOf(n, value));
  var->MarkDTypeKnown();
  const std::vector<int64_t> shape = HasShape(value) ? info_.at(value).shape : std::vector<int64_t>{-1};
  var->SetShape(shape.empty() ? Shape{1} : Shape(shape.begin(), shape.end()));
  var->SetDeclared(true);
}

BlockDesc* Importer::BeginBlock() {
  BlockDesc* previous = block_;
  block_ = program_.AppendBlock(previous->Idx());
  return previous;
}

void Importer::ConvertGraph(const onnx::GraphProto& g) {
  const std::string dir = ModelDir(path_);
  for (const auto& init : g.initializer()) {
    const std::string where = path_ + ": initializer '" + init.name() + "' of subgraph '" + g.name() + "'";
    NABLA_ENFORCE(!consts_.count(init.name()) && !vars_.count(init.name()), kAlreadyExists, where,
                  " names a value defined before");
    SetConst(init.name(), ReadTensorProto(init, dir, where));
  }
  NABLA_ENFORCE(g.sparse_initializer_size() == 0, kUnimplemented, path_, ": subgraph '", g.name(),
                "' has sparse initializers, which are not supported");
  for (size_t i = 0; i < static_cast<size_t>(g.node_size()); ++i) {
    const onnx::NodeProto& proto = g.node(static_cast<int>(i));
    Node n(proto);
    bool known = proto.domain().empty() || proto.domain() == "ai.onnx";
    for (int k = 0; k < n.NumInputs(); ++k) {
      if (n.HasInput(k) && !consts_.count(n.Input(k)) && !(FoldsFromShape(n.OpType()) && k == 0)) known = false;
    }
    try {
      if (known && TryFold(n)) continue;
    } catch (const Error&) {
      throw;
    } catch (const std::exception& e) {
      n.Fail(ErrorKind::kInvalidArgument, std::string("malformed node: ") + e.what());
    }
    ConvertNode(proto, i);
  }
}

void Importer::OuterVars(const BlockDesc& block, std::vector<std::string>* reads,
                         std::vector<std::string>* writes) const {
  // A var is local when an op of this block (or a block inside it) first
  // defines it; everything else comes from outside.
  std::set<std::string> outer;
  for (const BlockDesc* b = block.Parent(); b; b = b->Parent()) {
    for (const auto& v : b->AllVars()) outer.insert(v->Name());
    for (const auto& op : b->AllOps()) {
      for (const auto& name : op->OutputArgumentNames()) outer.insert(name);
    }
  }
  std::set<std::string> seen_r, seen_w;
  for (const auto& op : block.AllOps()) {
    for (const auto& name : op->InputArgumentNames()) {
      if (outer.count(name) && seen_r.insert(name).second) reads->push_back(name);
    }
    for (const auto& name : op->OutputArgumentNames()) {
      if (outer.count(name) && seen_w.insert(name).second) writes->push_back(name);
    }
    // A block inside this one: what its op reads and writes is this block's.
  }
}

ImportResult Importer::Run() {
  for (const auto& op : model_.opset_import()) {
    if (op.domain().empty() || op.domain() == "ai.onnx") opset_ = static_cast<int>(op.version());
  }
  NABLA_ENFORCE(model_.has_graph(), kInvalidArgument, path_, ": not an ONNX model: it has no graph");
  NABLA_ENFORCE(opset_ >= kMinOpset && opset_ <= kMaxOpset, kUnimplemented, path_, ": opset ", opset_,
                " of the default domain is outside what the importer converts (", kMinOpset, " to ", kMaxOpset, ")");
  const auto& g = model_.graph();
  onnx::GraphProto nested;
  CollectSubgraphInfo(g, &nested);
  for (const auto& vi : nested.value_info()) names_.insert(vi.name());
  for (const auto& n : g.node()) {
    for (const auto& o : n.output()) names_.insert(o);
  }
  for (const auto& i : g.input()) names_.insert(i.name());
  for (const auto& i : g.initializer()) names_.insert(i.name());
  ReadInitializers();
  ReadGraphInputs();
  FoldConstants();
  FuseGelu();
  FusePads();
  for (int i = 0; i < g.node_size(); ++i) {
    const size_t idx = static_cast<size_t>(i);
    if (fused_.count(idx)) continue;
    auto r = replacements_.find(idx);
    ConvertNode(r != replacements_.end() ? r->second : g.node(i), idx);
  }
  FinishOutputs();
  program_.SetSourceFile(path_);
  // Through the program reader: fills default attributes, creates the vars
  // that only ops produce, infers and verifies, exactly as `nabla exec` will.
  ImportResult result;
  result.program = ParseProgram(ProgramToYaml(program_), path_ + " (imported)");
  result.weights = std::move(weights_);
  return result;
}

ImportResult ImportOnnxBytes(const std::string& bytes, const std::string& path, const ImportOptions& options) {
  NABLA_ENFORCE(bytes.size() <= kMaxModelBytes, kInvalidArgument, path, ": ", bytes.size(),
                " bytes is more than a protobuf message may hold (2 GiB); keep the weights as external data");
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(bytes.size()));
  in.SetTotalBytesLimit(static_cast<int>(std::min<size_t>(bytes.size() + 1, std::numeric_limits<int>::max())));
  NABLA_ENFORCE(model.ParseFromCodedStream(&in) && in.ConsumedEntireMessage(), kInvalidArgument, path,
                ": not an ONNX model: the protobuf message is malformed or truncated");
  Importer importer(model, path, options);
  try {
    return importer.Run();
  } catch (const Error& e) {
    // Every error names the file: a node's (converting, folding) names the
    // node only where it is raised.
    const std::string message = e.what();
    if (message.find(path) != std::string::npos) throw;
    ThrowError(e.kind(), path + ": " + message);
  }
}

ImportResult ImportOnnx(const std::string& path, const ImportOptions& options) {
  std::error_code ec;
  NABLA_ENFORCE(std::filesystem::is_regular_file(path, ec), kNotFound, path, ": no such file");
  const auto size = std::filesystem::file_size(path, ec);
  NABLA_ENFORCE(!ec && size <= kMaxModelBytes, kInvalidArgument, path, ": ", size,
                " bytes is more than a protobuf message may hold (2 GiB)");
  std::ifstream in(path, std::ios::binary);
  NABLA_ENFORCE(in.good(), kExternal, path, ": cannot open the file");
  std::string bytes(size, '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(size));
  NABLA_ENFORCE(in.good() || size == 0, kExternal, path, ": cannot read the file");
  return ImportOnnxBytes(bytes, path, options);
}

}  // namespace nabla::onnx_io
