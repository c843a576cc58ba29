// Tape: the recorded calls, drawn as DOT or written as a program.
#include <filesystem>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

#include "eager_internal.h"
#include "nabla/program_io.h"

namespace nabla::eager {

using detail::TapeImpl;
using detail::TensorImpl;

namespace {

// Program names for the tensors a tape saw: the tensors' names, made unique
// with a suffix in the order first seen; leaves are the inputs no recorded
// call of this tape produced.
struct Naming {
  std::unordered_map<uint64_t, std::string> name;  // TensorImpl::id -> program name
  std::vector<Tape::Leaf> leaves;
  std::unordered_set<uint64_t> produced;

  explicit Naming(const TapeImpl& tape) {
    std::unordered_set<std::string> used;
    auto assign = [&](const Tensor& t) {
      const auto& impl = *TensorImpl::Of(t);
      if (name.count(impl.id)) return false;
      std::string n = impl.Name();
      for (int k = 1; used.count(n); ++k) n = StrCat(impl.Name(), "_", k);
      used.insert(n);
      name[impl.id] = n;
      return true;
    };
    for (const auto& e : tape.entries) {
      for (const auto& t : e.inputs)
        if (assign(t) && !produced.count(TensorImpl::Of(t)->id))
          leaves.push_back(Tape::Leaf{name[TensorImpl::Of(t)->id], t, t.RequiresGrad()});
      for (const auto& t : e.outputs) {
        assign(t);
        produced.insert(TensorImpl::Of(t)->id);
      }
    }
  }
};

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Tape::Tape() : impl_(std::make_shared<TapeImpl>()) { detail::ActiveTapes().push_back(impl_.get()); }

Tape::~Tape() { Stop(); }

void Tape::Stop() {
  auto& tapes = detail::ActiveTapes();
  for (auto it = tapes.begin(); it != tapes.end(); ++it)
    if (*it == impl_.get()) {
      tapes.erase(it);
      break;
    }
  impl_->recording = false;
}

bool Tape::Recording() const { return impl_->recording; }
size_t Tape::Size() const { return impl_->entries.size(); }
void Tape::Clear() { impl_->entries.clear(); }

std::vector<Tape::Leaf> Tape::Leaves() const { return Naming(*impl_).leaves; }

std::string Tape::VarName(const Tensor& tensor) const {
  NABLA_ENFORCE(tensor.Defined(), kInvalidArgument, "eager: Tape::VarName of an undefined tensor");
  Naming naming(*impl_);
  auto it = naming.name.find(TensorImpl::Of(tensor)->id);
  NABLA_ENFORCE(it != naming.name.end(), kNotFound, "eager: the tape recorded no call that reads or writes '",
                tensor.Name(), "'");
  return it->second;
}

ProgramDesc Tape::ToProgram() const {
  Naming naming(*impl_);
  ProgramDesc program;
  BlockDesc& block = *program.Root();
  auto declare = [&](const Tensor& t, bool leaf) {
    const std::string& n = naming.name.at(TensorImpl::Of(t)->id);
    if (block.HasVar(n)) return;
    VarDesc& v = *block.Var(n);
    v.SetShape(t.GetShape());
    v.SetDType(t.GetDType());
    v.MarkDTypeKnown();
    v.SetDeclared(true);
    if (leaf) {
      v.SetPersistable(t.RequiresGrad());
      v.SetStopGradient(!t.RequiresGrad());
    }
  };
  for (const auto& leaf : naming.leaves) declare(leaf.tensor, true);
  for (const auto& e : impl_->entries) {
    // The template's canonical args, in order, are the entry's tensors.
    OpDesc op = e.node->tmpl->fwd;
    size_t k = 0;
    for (auto& [slot, args] : op.MutableInputs())
      for (auto& a : args) a = naming.name.at(TensorImpl::Of(e.inputs[k++])->id);
    k = 0;
    for (auto& [slot, args] : op.MutableOutputs())
      for (auto& a : args) a = naming.name.at(TensorImpl::Of(e.outputs[k++])->id);
    for (const auto& t : e.outputs) declare(t, false);
    block.AppendOp(std::move(op));
  }
  return program;
}

std::string Tape::Save(const std::string& dir) const {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  NABLA_ENFORCE(!ec, kExternal, "eager: cannot create folder '", dir, "': ", ec.message());
  const std::string program_path = (fs::path(dir) / "program.yaml").string();
  SaveProgram(ToProgram(), program_path);
  std::string args = program_path;
  for (const auto& leaf : Leaves()) {
    std::string path = (fs::path(dir) / (leaf.name + ".npy")).string();
    leaf.tensor.WriteNpy(path);
    args += StrCat(" --feed ", leaf.name, "=", path);
  }
  return args;
}

std::string Tape::ToDot() const {
  Naming naming(*impl_);
  std::ostringstream out;
  out << "digraph tape {\n  rankdir=TB;\n  node [fontname=\"Helvetica\"];\n";
  std::unordered_set<std::string> drawn;
  std::unordered_set<std::string> leaves;
  for (const auto& l : naming.leaves) leaves.insert(l.name);
  auto var_node = [&](const Tensor& t) {
    const std::string& n = naming.name.at(TensorImpl::Of(t)->id);
    if (!drawn.insert(n).second) return Quoted("v:" + n);
    std::string style;
    if (leaves.count(n) && t.RequiresGrad()) {
      style = "style=\"filled,bold\", color=\"#08519c\", fillcolor=\"#c6dbef\", penwidth=2";
    } else if (t.RequiresGrad()) {
      style = "style=filled, fillcolor=white";
    } else {
      style = "style=\"filled\", fillcolor=\"#f0f0f0\", fontcolor=gray30";
    }
    out << "  " << Quoted("v:" + n)
        << " [shape=ellipse, label=" << Quoted(n + "\\n" + DTypeName(t.GetDType()) + ShapeToString(t.GetShape()))
        << ", " << style << "];\n";
    return Quoted("v:" + n);
  };
  std::vector<std::string> edges;
  for (size_t i = 0; i < impl_->entries.size(); ++i) {
    const auto& e = impl_->entries[i];
    const OpDesc& op = e.node->tmpl->fwd;
    std::string id = Quoted(StrCat("op:", i));
    out << "  " << id << " [shape=box, label=" << Quoted(op.Type()) << ", style=\"filled\", fillcolor=\"#e5e5e5\"];\n";
    size_t k = 0;
    for (const auto& [slot, args] : op.Inputs())
      for (size_t j = 0; j < args.size(); ++j) {
        const Tensor& t = e.inputs[k++];
        edges.push_back(StrCat(var_node(t), " -> ", id, " [label=", Quoted(slot), "];"));
      }
    k = 0;
    for (const auto& [slot, args] : op.Outputs())
      for (size_t j = 0; j < args.size(); ++j) {
        const Tensor& t = e.outputs[k++];
        edges.push_back(StrCat(id, " -> ", var_node(t), " [label=", Quoted(slot), "];"));
      }
    // Gradient flow, as the seed's red arrows: from the op's outputs back to
    // every input that requires grad, through the op's grad ops.
    std::string grad_label;
    for (const auto& g : e.node->tmpl->ops) grad_label += (grad_label.empty() ? "" : "\\n") + g.desc->Type();
    if (grad_label.empty()) grad_label = e.node->tmpl->no_grad_maker ? "(no gradient)" : "(zero)";
    for (const auto& in : e.node->inputs) {
      const std::string& n = naming.name.at(in.id);
      edges.push_back(StrCat(id, " -> ", Quoted("v:" + n), " [color=red, style=dashed, fontcolor=red, label=",
                             Quoted(grad_label), ", constraint=false];"));
    }
  }
  for (const auto& e : edges) out << "  " << e << "\n";
  out << "}\n";
  return out.str();
}

}  // namespace nabla::eager
