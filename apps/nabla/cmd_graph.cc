// `nabla graph PROGRAM.yaml`: the program as a Graphviz graph, the seed
// post's tape.show() for programs. Ops are boxes, vars ellipses; gradient
// ops, gradient vars and the edges of gradient ops are red and dashed,
// parameters blue. Sub-blocks are drawn as clusters inside their parent.
//
// DOT needs nothing; .svg and .png run Graphviz's `dot`. Every output is
// complete before it replaces FILE (temp file + rename).
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "command.h"
#include "nabla/backward.h"
#include "nabla/error.h"
#include "nabla/mixed_precision.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/train/pipeline.h"
#include "nabla/types.h"
#include "output_file.h"

extern char** environ;

namespace nabla::app {
namespace {

namespace fs = std::filesystem;

struct GraphOptions {
  std::string program;
  std::string backward_loss;
  std::vector<std::string> params;
  std::vector<std::string> no_grad;
  std::string out;
  std::string precision = "fp32";
};

enum class Format { kDot, kSvg, kPng };

// Where the drawing goes, decided before the program is even read.
Format FormatOf(const std::string& out) {
  if (out.empty()) return Format::kDot;
  const std::string ext = fs::path(out).extension().string();
  if (ext == ".dot" || ext == ".gv") return Format::kDot;
  if (ext == ".svg") return Format::kSvg;
  if (ext == ".png") return Format::kPng;
  NABLA_THROW(kInvalidArgument, "-o ", out, ": expected a file ending in .dot, .gv, .svg or .png but received ",
              ext.empty() ? std::string("no extension") : "'" + ext + "'");
}

// Graphviz's `dot` from PATH, or a one-line error saying what to install.
std::string FindDot(const std::string& out) {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/dot";
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate)) return candidate;
  }
  NABLA_THROW(kNotFound, "-o ", out, ": drawing ", fs::path(out).extension().string(),
              " needs Graphviz's 'dot', which is not on PATH: install it (apt-get install graphviz) or write .dot");
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::string Quoted(const std::string& s) { return "\"" + Escape(s) + "\""; }

bool IsGradName(const std::string& name) { return name.find(kGradSuffix) != std::string::npos; }

class DotWriter {
 public:
  // `first_grad_op[b]`: ops of block b from this index on were appended by
  // backward in this run (OpSize() when none or unknown).
  DotWriter(const ProgramDesc& program, std::vector<size_t> first_grad_op, std::string title)
      : program_(program), first_grad_op_(std::move(first_grad_op)), title_(std::move(title)) {}

  std::string Write() {
    out_ << "digraph program {\n"
         << "  compound=true;\n"
         << "  rankdir=TB;\n"
         << "  label=" << Quoted(title_) << ";\n"
         << "  labelloc=t;\n"
         << "  fontname=\"Helvetica\";\n"
         << "  node [fontname=\"Helvetica\", fontsize=10];\n"
         << "  edge [fontname=\"Helvetica\", fontsize=8];\n";
    WriteBlock(0, "  ");
    for (const std::string& edge : edges_) out_ << "  " << edge << "\n";
    out_ << "}\n";
    return out_.str();
  }

 private:
  // An op is a gradient op when backward appended it in this run, or when it
  // writes a gradient (x@GRAD, x@GRAD@RENAME@0): grad ops, the seeding
  // fill_constant, the sums and fill_zeros_like of a saved backward program.
  bool IsGradOp(int block, size_t i) const {
    if (i >= first_grad_op_[static_cast<size_t>(block)]) return true;
    for (const std::string& name : program_.Block(static_cast<size_t>(block))->Op(i)->OutputArgumentNames())
      if (IsGradName(name)) return true;
    return false;
  }

  // The block that declares `name`, searching up from `block`; the var is
  // drawn once, there (sub-blocks read their parents' vars).
  int OwnerBlock(int block, const std::string& name) const {
    for (const BlockDesc* b = program_.Block(static_cast<size_t>(block)); b != nullptr; b = b->Parent())
      if (b->HasVar(name)) return b->Idx();
    return block;
  }

  static std::string OpId(int block, size_t i) { return "op_" + std::to_string(block) + "_" + std::to_string(i); }
  static std::string VarId(int block, const std::string& name) {
    return Quoted("var_" + std::to_string(block) + "_" + name);
  }

  void WriteVar(const std::string& indent, const BlockDesc& block, const std::string& name) {
    if (!drawn_vars_.insert(std::to_string(block.Idx()) + "/" + name).second) return;
    const VarDesc* var = block.FindVar(name);
    // Escaped here, not by Quoted: "\\n" is DOT's line break.
    std::string label = Escape(name);
    if (var != nullptr && var->Type() == VarType::kDense && (var->HasDType() || !var->GetShape().empty()))
      label += "\\n" + ShapeToString(var->GetShape()) +
               (var->HasDType() ? std::string(" ") + DTypeName(var->GetDType()) : "");
    std::string style;
    if (IsGradName(name)) {
      style = "style=\"filled,dashed\", color=red, fillcolor=\"#fde0dd\"";
    } else if (var != nullptr && var->Persistable()) {
      style = "style=\"filled,bold\", color=\"#08519c\", fillcolor=\"#c6dbef\", penwidth=2";
    } else {
      style = "style=filled, fillcolor=white";
    }
    out_ << indent << VarId(block.Idx(), name) << " [shape=ellipse, label=\"" << label << "\", " << style << "];\n";
  }

  void WriteBlock(int idx, const std::string& indent) {
    const BlockDesc& block = *program_.Block(static_cast<size_t>(idx));
    // Vars declared here that no op touches are still part of the program.
    for (const auto& var : block.AllVars()) {
      if (var->Name() != kEmptyVarName) WriteVar(indent, block, var->Name());
    }
    for (size_t i = 0; i < block.OpSize(); ++i) {
      const OpDesc& op = *block.Op(i);
      const bool grad = IsGradOp(idx, i);
      out_ << indent << OpId(idx, i) << " [shape=box, label=" << Quoted(op.Type()) << ", "
           << (grad ? "style=\"filled,dashed\", color=red, fillcolor=\"#fcbba1\""
                    : "style=\"filled\", fillcolor=\"#e5e5e5\"")
           << "];\n";
      const std::string edge_style = grad ? ", color=red, style=dashed, fontcolor=red" : "";
      for (const auto& [slot, args] : op.Inputs()) {
        for (const std::string& name : args) {
          if (name == kEmptyVarName) continue;
          const int owner = OwnerBlock(idx, name);
          if (owner == idx) WriteVar(indent, block, name);
          edges_.push_back(VarId(owner, name) + " -> " + OpId(idx, i) + " [label=" + Quoted(slot) + edge_style + "];");
        }
      }
      for (const auto& [slot, args] : op.Outputs()) {
        for (const std::string& name : args) {
          if (name == kEmptyVarName) continue;
          const int owner = OwnerBlock(idx, name);
          if (owner == idx) WriteVar(indent, block, name);
          edges_.push_back(OpId(idx, i) + " -> " + VarId(owner, name) + " [label=" + Quoted(slot) + edge_style + "];");
        }
      }
      // An op that runs a sub-block points at the cluster drawing it.
      for (const auto& [attr, value] : op.Attrs()) {
        const BlockRef* ref = std::get_if<BlockRef>(&value);
        if (ref == nullptr || ref->idx <= 0 || static_cast<size_t>(ref->idx) >= program_.Size()) continue;
        const BlockDesc& sub = *program_.Block(static_cast<size_t>(ref->idx));
        if (sub.OpSize() == 0) continue;
        edges_.push_back(OpId(idx, i) + " -> " + OpId(ref->idx, 0) + " [lhead=cluster_" + std::to_string(ref->idx) +
                         ", style=dotted, label=" + Quoted(attr) + (grad ? ", color=red" : "") + "];");
      }
    }
    for (size_t b = 0; b < program_.Size(); ++b) {
      const BlockDesc& child = *program_.Block(b);
      if (child.ParentIdx() != idx || child.Idx() == idx) continue;
      const bool grad_block = first_grad_op_[b] == 0 && child.OpSize() > 0;
      out_ << indent << "subgraph cluster_" << child.Idx() << " {\n"
           << indent << "  label=" << Quoted("block " + std::to_string(child.Idx())) << ";\n"
           << indent << "  style=" << (grad_block ? "dashed" : "rounded") << ";\n"
           << indent << "  color=" << (grad_block ? "red" : "gray50") << ";\n";
      WriteBlock(child.Idx(), indent + "  ");
      out_ << indent << "}\n";
    }
  }

  const ProgramDesc& program_;
  std::vector<size_t> first_grad_op_;
  std::string title_;
  std::ostringstream out_;
  std::vector<std::string> edges_;  // after all nodes, so each node sits in its cluster
  std::set<std::string> drawn_vars_;
};

std::string FirstLine(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `dot -Tsvg|-Tpng` into a temp file next to `out`, then renames it.
void RenderWithDot(const std::string& dot, const std::string& text, Format format, const std::string& out) {
  const fs::path target(out);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string suffix = ".tmp" + std::to_string(::getpid());
  const fs::path input = dir / ("." + target.filename().string() + suffix + ".dot");
  const fs::path rendered = dir / ("." + target.filename().string() + suffix);
  const fs::path log = dir / ("." + target.filename().string() + suffix + ".log");
  struct Cleanup {
    std::vector<fs::path> paths;
    ~Cleanup() {
      std::error_code ec;
      for (const fs::path& p : paths) fs::remove(p, ec);
    }
  } cleanup{{input, rendered, log}};

  {
    std::ofstream f(input, std::ios::binary);
    f << text;
    NABLA_ENFORCE(f.good(), kExternal, "-o ", out, ": cannot write the temporary file ", input.string());
  }
  const std::string type = format == Format::kSvg ? "-Tsvg" : "-Tpng";
  std::vector<std::string> args = {dot, type, "-o", rendered.string(), input.string()};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int spawn_rc = posix_spawn(&pid, dot.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  NABLA_ENFORCE(spawn_rc == 0, kExternal, "-o ", out, ": cannot run ", dot, ": ", std::strerror(spawn_rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    NABLA_ENFORCE(errno == EINTR, kExternal, "-o ", out, ": waiting for ", dot, " failed: ", std::strerror(errno));
  }
  const bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!ok) {
    const std::string why = FirstLine(Slurp(log));
    NABLA_THROW(kExternal, "-o ", out, ": ", dot, " ", type, " failed (",
                WIFEXITED(status) ? "exit " + std::to_string(WEXITSTATUS(status))
                                  : "signal " + std::to_string(WTERMSIG(status)),
                ")", why.empty() ? "" : ": " + why);
  }
  std::error_code ec;
  fs::rename(rendered, target, ec);
  NABLA_ENFORCE(!ec, kExternal, "-o ", out, ": cannot move the drawing into place: ", ec.message());
}

int RunGraph(const GraphOptions& opts) {
  const Format format = FormatOf(opts.out);
  if (!opts.out.empty()) CheckOutputFolder("-o", opts.out);
  const std::string dot = format == Format::kDot ? "" : FindDot(opts.out);

  ProgramDesc program = LoadProgram(opts.program);
  NABLA_ENFORCE(!opts.backward_loss.empty() || (opts.params.empty() && opts.no_grad.empty()), kInvalidArgument,
                "--params and --no-grad only apply with --backward LOSS");
  train::PassPipelineOptions po;
  po.precision = opts.precision;
  po.loss = opts.backward_loss;
  po.params = opts.params;
  po.no_grad.insert(opts.no_grad.begin(), opts.no_grad.end());
  std::vector<size_t> first_grad_op;
  // What is there before the backward part is drawn as the forward part.
  po.before_backward = [&](ProgramDesc& p) {
    for (size_t b = 0; b < p.Size(); ++b) first_grad_op.push_back(p.Block(b)->OpSize());
  };
  train::ApplyPassPipeline(program, po);
  std::string title = opts.program;
  if (!opts.backward_loss.empty()) {
    // Blocks the builder added hold only gradient ops.
    first_grad_op.resize(program.Size(), 0);
    title += " with the backward part of " + opts.backward_loss;
  }
  const std::string text = DotWriter(program, std::move(first_grad_op), title).Write();

  switch (format) {
    case Format::kDot:
      if (opts.out.empty()) {
        std::cout << text;
        std::cout.flush();
      } else {
        WriteFileAtomically(opts.out, text);
      }
      break;
    case Format::kSvg:
    case Format::kPng:
      RenderWithDot(dot, text, format, opts.out);
      break;
  }
  return 0;
}

}  // namespace

Command GraphCommand() {
  auto opts = std::make_shared<GraphOptions>();
  Command c("graph",
            "Draw a program as a Graphviz graph: ops as boxes, vars as ellipses, gradient ops and edges in red");
  c.Positional("PROGRAM", &opts->program, "The program file (YAML; docs/program-format.md)").Required();
  c.Option("--backward", &opts->backward_loss, "Append the backward part of LOSS before drawing", "LOSS");
  c.Option("--params", &opts->params, "With --backward: the parameters to differentiate (default: all)", "P,...")
      .Delimiter(',');
  c.Option("--no-grad", &opts->no_grad, "With --backward: vars that get no gradient", "V,...").Delimiter(',');
  c.Option("--precision", &opts->precision,
           "fp32 (default) or bf16: mixed precision, casts inserted around bf16 ops (before any backward part)",
           "fp32|bf16");
  c.Option("-o,--out", &opts->out, "Write DOT (.dot, .gv) or draw with Graphviz (.svg, .png); default: DOT on stdout",
           "FILE");
  c.SetRun([opts](const GlobalOptions&) { return RunGraph(*opts); });
  return c;
}

}  // namespace nabla::app
