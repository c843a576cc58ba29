// `nabla import MODEL.onnx -o PROGRAM.yaml`: an ONNX model as a nabla
// program and its weights (safetensors). The work is nabla::onnx_io's
// (onnx_io/); this file parses options and writes both files, only after
// everything succeeded.
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/error.h"
#include "nabla/onnx.h"
#include "nabla/program_io.h"
#include "nabla/train/checkpoint.h"
#include "output_file.h"

namespace nabla::app {
namespace {

// "x=8,3,32,32"
void ParseInputShape(const std::string& spec, onnx_io::ImportOptions* opts) {
  const size_t eq = spec.find('=');
  NABLA_ENFORCE(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(), kInvalidArgument,
                "--input-shape: expected NAME=D0,D1,... but received '", spec, "'");
  std::vector<int64_t> dims;
  size_t pos = eq + 1;
  while (pos <= spec.size()) {
    const size_t comma = std::min(spec.find(',', pos), spec.size());
    const std::string d = spec.substr(pos, comma - pos);
    NABLA_ENFORCE(!d.empty() && d.size() < 12 && d.find_first_not_of("0123456789") == std::string::npos,
                  kInvalidArgument, "--input-shape ", spec, ": expected non-negative dims but received '", d, "'");
    dims.push_back(std::stoll(d));
    pos = comma + 1;
  }
  NABLA_ENFORCE(opts->input_shapes.emplace(spec.substr(0, eq), dims).second, kInvalidArgument, "--input-shape ",
                spec.substr(0, eq), ": given twice");
}

std::string WeightsPathFor(const std::string& program) {
  std::filesystem::path p(program);
  p.replace_extension(".safetensors");
  return p.string();
}

}  // namespace

Command ImportCommand() {
  struct Args {
    std::string model, out, weights;
    std::vector<std::string> input_shapes;
    bool list = false;
  };
  auto a = std::make_shared<Args>();
  Command c("import", "Convert an ONNX model to a nabla program and its weights (safetensors)");
  c.Positional("MODEL", &a->model, "The ONNX model (.onnx; external data beside it)");
  c.Option("-o,--out", &a->out, "The program to write (YAML)", "PROGRAM.yaml");
  c.Option("--weights", &a->weights, "Where the weights go (default: PROGRAM with .safetensors)", "FILE.safetensors");
  c.Option("--input-shape", &a->input_shapes, "Fix a graph input's dims, dynamic ones included (repeatable)",
           "NAME=D0,D1,...");
  c.Flag("--list", &a->list, "Print the ONNX ops with a converter, and those without with the reason, then exit");
  c.SetRun([a](const GlobalOptions&) {
    if (a->list) {
      for (const auto& op : onnx_io::ConvertibleOnnxOps()) std::cout << op << "\n";
      for (const auto& [op, why] : onnx_io::UnconvertibleOnnxOps())
        std::cout << op << "  (not converted: " << why << ")\n";
      return 0;
    }
    NABLA_ENFORCE(!a->model.empty(), kInvalidArgument, "import: MODEL is required");
    NABLA_ENFORCE(!a->out.empty(), kInvalidArgument, "import: -o PROGRAM.yaml is required");
    onnx_io::ImportOptions opts;
    for (const auto& s : a->input_shapes) ParseInputShape(s, &opts);
    const std::string weights = a->weights.empty() ? WeightsPathFor(a->out) : a->weights;
    CheckOutputFolder("-o", a->out);
    CheckOutputFolder("--weights", weights);
    onnx_io::ImportResult r = onnx_io::ImportOnnx(a->model, opts);
    // Both files are complete in memory before either is written.
    const std::string yaml = ProgramToYaml(r.program);
    const std::string st = train::EncodeSafetensors(r.weights, {{"source", a->model}});
    WriteFileAtomically(weights, st);
    WriteFileAtomically(a->out, yaml);
    std::cout << a->out << ": " << r.program.Root()->OpSize() << " ops; " << weights << ": " << r.weights.size()
              << " tensors\n";
    return 0;
  });
  return c;
}

}  // namespace nabla::app
