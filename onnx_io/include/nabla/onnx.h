#pragma once
// ONNX models in and out of nabla programs (docs/onnx.md). The importer turns
// an ONNX graph into a program with Paddle's op names, one converter per ONNX
// op type; the exporter turns a forward program into an ONNX graph, one
// exporter per nabla op type. Both tables are open: a plugin adds the rows
// for its own ops (RegisterOnnxExporter) without touching this library.
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "nabla/program.h"
#include "nabla/tensor.h"

namespace nabla::onnx_io {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

struct ImportOptions {
  // --input-shape x=8,3,32,32: fixes the dims of a graph input (dynamic ones
  // included), so shape arithmetic on it folds to constants.
  std::map<std::string, std::vector<int64_t>> input_shapes;
};

struct ImportResult {
  ProgramDesc program;   // block 0: the graph; graph inputs and outputs keep their ONNX names
  NamedTensors weights;  // the persistable vars (initializers, constants), host tensors
};

// Reads an ONNX file (external data resolved beside it). Every error is one
// line naming the node (name and op type) and what is missing; a model whose
// ops, attribute values or dtypes have no converter is kUnimplemented.
ImportResult ImportOnnx(const std::string& path, const ImportOptions& options = {});
// The same from bytes; `path` names them in errors and locates external data.
ImportResult ImportOnnxBytes(const std::string& bytes, const std::string& path, const ImportOptions& options = {});

// The ONNX op types with a converter, sorted; and those the importer knows
// but cannot convert yet, each with the reason (the nabla op it needs).
std::vector<std::string> ConvertibleOnnxOps();
std::vector<std::pair<std::string, std::string>> UnconvertibleOnnxOps();

struct ExportOptions {
  // Graph outputs; empty: every var that block 0 writes and no op reads.
  std::vector<std::string> outputs;
  int opset = 17;
};

// The model bytes of block 0's ops that lead to the outputs, for inference
// (dropout and batch_norm as in test mode), checked with onnx's checker and
// shape inference. `weights` gives every persistable var it reads.
std::string ExportOnnxBytes(const ProgramDesc& program, const NamedTensors& weights, const ExportOptions& options = {});
// Writes atomically: nothing is written when the export fails.
void ExportOnnx(const ProgramDesc& program, const NamedTensors& weights, const std::string& path,
                const ExportOptions& options = {});

// ---- the exporter table, for plugins ----------------------------------------

using OnnxAttr = std::variant<int64_t, float, std::string, std::vector<int64_t>, std::vector<float>>;

// What an exporter sees: the op, what is known of its vars, and a way to add
// ONNX nodes and constants. Kept free of protobuf types so plugins need no
// ONNX headers.
class ExportContext {
 public:
  virtual ~ExportContext() = default;
  virtual const OpDesc& Op() const = 0;
  // The var's shape as the program infers it (-1: unknown) and its dtype.
  virtual Shape ShapeOf(const std::string& var) const = 0;
  virtual DType DTypeOf(const std::string& var) const = 0;
  // Adds a node of the default domain; returns its (unique) name.
  virtual std::string AddNode(const std::string& op_type, const std::vector<std::string>& inputs,
                              const std::vector<std::string>& outputs,
                              const std::map<std::string, OnnxAttr>& attrs = {}) = 0;
  // An int64 or float constant initializer; returns its name.
  virtual std::string AddInt64s(const std::vector<int64_t>& values, const std::vector<int64_t>& dims) = 0;
  virtual std::string AddFloats(const std::vector<float>& values, const std::vector<int64_t>& dims) = 0;
  // A fresh name for an intermediate value.
  virtual std::string Temp(const std::string& hint) = 0;
  // kUnimplemented naming the op and `what`.
  [[noreturn]] virtual void Fail(const std::string& what) const = 0;
};

using OpExporter = std::function<void(ExportContext&)>;
// Adds or replaces the exporter of `op_type` (a plugin calls this when it
// loads, beside its op registrations).
void RegisterOnnxExporter(const std::string& op_type, OpExporter exporter);
bool HasOnnxExporter(const std::string& op_type);

}  // namespace nabla::onnx_io
