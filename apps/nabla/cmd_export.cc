// `nabla export PROGRAM.yaml -o MODEL.onnx`: a forward program, for
// inference, as an ONNX model; persistable vars from their init: ops, then
// --weights. The work is nabla::onnx_io's (onnx_io/).
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/onnx.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/train/weights.h"
#include "output_file.h"

namespace nabla::app {

Command ExportCommand() {
  struct Args {
    std::string program, out, weights;
    std::vector<std::string> outputs;
    int opset = 17;
  };
  auto a = std::make_shared<Args>();
  Command c("export", "Write a forward program (for inference) as an ONNX model");
  c.Positional("PROGRAM", &a->program, "The program file (YAML)").Required();
  c.Option("-o,--out", &a->out, "The ONNX model to write", "MODEL.onnx").Required();
  c.Option("--weights", &a->weights, "Persistable vars from a safetensors file (else their init: values)",
           "FILE.safetensors");
  c.Option("--output", &a->outputs, "Graph outputs (default: every var written and never read)", "NAME,...")
      .Delimiter(',');
  c.Option("--opset", &a->opset, "The ONNX opset to write (13 to 17)", "N");
  c.SetRun([a](const GlobalOptions&) {
    CheckOutputFolder("-o", a->out);
    ProgramDesc program = LoadProgram(a->program);
    // The persistable vars' values: their init: ops, then --weights.
    Device& device = ResolveDevice("cpu");
    std::unique_ptr<Executor> exec = CreateExecutor("sequential", device, ExecutorOptions{});
    Scope scope;
    exec->Run(BuildStartupProgram(program), 0, scope);
    if (!a->weights.empty()) train::LoadWeights(a->weights, program, scope, device);
    onnx_io::NamedTensors weights;
    for (const auto& v : program.Root()->AllVars()) {
      if (!v->Persistable()) continue;
      const Variable* var = scope.FindVar(v->Name());
      if (var && var->Type() == VarType::kDense && var->GetTensor().IsInitialized()) {
        weights.emplace_back(v->Name(), var->GetTensor());
      }
    }
    onnx_io::ExportOptions opts;
    opts.outputs = a->outputs;
    opts.opset = a->opset;
    onnx_io::ExportOnnx(program, weights, a->out, opts);
    std::cout << a->out << ": written\n";
    return 0;
  });
  return c;
}

}  // namespace nabla::app
