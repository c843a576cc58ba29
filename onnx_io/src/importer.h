#pragma once
// The importer's state, shared by the driver (import.cc), the converter table
// (converters.cc) and the constant folder (fold.cc). One ONNX value name is
// one nabla var name; what is known of a value at import time (its constant
// value, its inferred shape and dtype) lives here.
#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/onnx.h"
#include "nabla/program.h"
#include "nabla/tensor.h"

namespace nabla::onnx_io {

// A small host-side tensor for folding shape arithmetic; long double holds
// every int64 (INT64_MAX ends of Slice included) and every float exactly.
struct ConstValue {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> dims;
  std::vector<long double> data;
  int64_t Numel() const { return static_cast<int64_t>(data.size()); }
};

ConstValue ToConst(const Tensor& t);
Tensor ToTensor(const ConstValue& c);

// The dtypes nabla has, for messages about the ones it lacks.
inline constexpr const char* kNablaDTypes = "float32, float64, bfloat16, int32, int64, bool";

// ONNX's TensorProto element type as a nabla dtype; false when nabla has none.
bool OnnxToDType(int onnx_type, DType* out);
int DTypeToOnnx(DType d);
std::string OnnxTypeName(int onnx_type);

// One node as its converter sees it: attributes with defaults, inputs by
// position (an absent optional input is ""), and failures that name it.
class Node {
 public:
  explicit Node(const onnx::NodeProto& proto) : p_(proto) {}
  const onnx::NodeProto& Proto() const { return p_; }
  const std::string& OpType() const { return p_.op_type(); }
  // "node 'name' (OpType)", or its first output when it has no name.
  std::string Describe() const;
  int NumInputs() const { return p_.input_size(); }
  int NumOutputs() const { return p_.output_size(); }
  bool HasInput(int i) const { return i < p_.input_size() && !p_.input(i).empty(); }
  bool HasOutput(int i) const { return i < p_.output_size() && !p_.output(i).empty(); }
  const std::string& Input(int i) const;
  const std::string& Output(int i) const;

  bool HasAttr(const std::string& name) const { return Find(name) != nullptr; }
  int64_t Int(const std::string& name, int64_t def) const;
  float Float(const std::string& name, float def) const;
  std::string String(const std::string& name, const std::string& def) const;
  std::vector<int64_t> Ints(const std::string& name, const std::vector<int64_t>& def = {}) const;
  std::vector<float> Floats(const std::string& name) const;
  const onnx::TensorProto* TensorAttr(const std::string& name) const;
  // A graph attribute (Loop's body, If's branches); error when absent.
  const onnx::GraphProto& GraphAttr(const std::string& name) const;

  [[noreturn]] void Fail(ErrorKind kind, const std::string& what) const;
  // kUnimplemented: "no converter for ... : what".
  [[noreturn]] void Unsupported(const std::string& what) const;

 private:
  const onnx::AttributeProto* Find(const std::string& name) const;
  const onnx::NodeProto& p_;
};

// A 1-D (or scalar) int64 value known element by element: shape arithmetic
// on a shape with dynamic dims. An unknown element may still be known to
// equal a dim: of a value (Shape's input and the position), and/or of every
// value whose dim carries the same dim_param.
struct PartialDims {
  struct Elem {
    bool known = false;
    int64_t value = 0;
    std::string of;  // the value whose dim this is ("" when none)
    int64_t dim = -1;
    std::string param;  // its dim_param ("" when none)
  };
  std::vector<Elem> elems;
  bool scalar = false;
};

class Importer {
 public:
  Importer(const onnx::ModelProto& model, const std::string& path, const ImportOptions& options);
  ImportResult Run();

  int Opset() const { return opset_; }

  // What converters ask of an input ------------------------------------------
  // The var holding input i; a constant becomes a persistable var on first use.
  std::string In(const Node& n, int i);
  // The constant value of input i, or null when it is computed at run time.
  const Tensor* Const(const Node& n, int i) const;
  const Tensor* ConstOf(const std::string& value) const;
  // Input i's values, which must be constant ("what" names them in errors).
  std::vector<int64_t> ConstInts(const Node& n, int i, const std::string& what) const;
  std::vector<float> ConstFloats(const Node& n, int i, const std::string& what) const;
  // An initializer of the graph: a parameter, trained when fine-tuning.
  bool IsInitializer(const std::string& value) const { return initializers_.count(value) != 0; }
  bool HasShape(const std::string& value) const;
  // The inferred shape (-1: unknown dim); error naming the node when unknown.
  std::vector<int64_t> ShapeOf(const Node& n, const std::string& value) const;
  int64_t RankOf(const Node& n, const std::string& value) const;
  bool HasDType(const std::string& value) const;
  DType DTypeOf(const Node& n, const std::string& value) const;

  // A shape input with dynamic dims, element by element (null when nothing
  // is known of it); and the dim_params of a value's shape.
  const PartialDims* PartialOf(const std::string& value) const;
  std::vector<std::string> ParamsOf(const std::string& value) const;
  // A Reshape of `input` to `p` as Paddle's shape attribute: an element equal
  // to the input's dim at its position is 0 (copy), one unknown one -1;
  // false when more than one stays unknown.
  bool PartialReshapeDims(const std::string& input, const PartialDims& p, std::vector<int64_t>* out) const;

  // What converters produce --------------------------------------------------
  void Emit(const std::string& type, VarNameMap inputs, VarNameMap outputs, AttributeMap attrs = {});
  std::string Temp(const std::string& hint);
  // A folded value: output `value` is known at import time.
  void SetConst(const std::string& value, Tensor t);
  // A constant as a fresh persistable var (not trainable).
  std::string ConstVar(const Tensor& t, const std::string& hint);
  // A var a converter made and hands to another converter as an input.
  void AddVar(const std::string& var) { vars_.insert(var); }
  // Running statistics and other state: persistable but never trained.
  void Freeze(const std::string& var) { program_.Root()->Var(var)->SetStopGradient(true); }
  // Records a shape/dtype for a value a converter made (for later converters).
  void SetInfo(const std::string& value, std::vector<int64_t> shape, DType dtype);
  // Declares `value` as a var of the current block with its inferred dtype
  // and shape (a value only a sub-block writes needs it declared outside).
  void DeclareVar(const Node& n, const std::string& value);
  // `to` is a copy of `from` (an unrolled step's value): same shape and dtype.
  void CopyInfo(const std::string& from, const std::string& to) {
    auto it = info_.find(from);
    if (it != info_.end()) info_[to] = it->second;
  }

  // Sub-blocks (Loop, If) ---------------------------------------------------
  // Ops go to the current block; BeginBlock makes a child of it current and
  // returns the block it replaced, for EndBlock.
  BlockDesc* CurrentBlock() const { return block_; }
  BlockDesc* BeginBlock();
  void EndBlock(BlockDesc* previous) { block_ = previous; }
  // A subgraph's nodes into the current block: its initializers and the nodes
  // whose inputs are constants fold, the rest convert. The caller binds the
  // subgraph's inputs (AddVar) first.
  void ConvertGraph(const onnx::GraphProto& g);
  // The vars of outer blocks that `block`'s ops read and write (the slots of
  // the op that runs it), in first-use order.
  void OuterVars(const BlockDesc& block, std::vector<std::string>* reads, std::vector<std::string>* writes) const;

 private:
  void ReadInitializers();
  void ReadGraphInputs();
  void InferShapes();
  void FoldConstants();
  void RecordValueInfo(const onnx::ValueInfoProto& vi);
  void ConvertNode(const onnx::NodeProto& node, size_t index);
  bool TryFold(const Node& n);
  bool TryFoldPartial(const Node& n);
  void FuseGelu();
  void FusePads();
  void FinishOutputs();
  std::string Materialize(const std::string& value, bool trainable);

  const onnx::ModelProto& model_;
  std::string path_;
  ImportOptions options_;
  int opset_ = 0;
  ProgramDesc program_;
  BlockDesc* block_ = nullptr;  // where Emit appends
  NamedTensors weights_;
  std::map<std::string, Tensor> consts_;  // host tensors
  std::set<std::string> initializers_;    // trainable constants
  std::set<std::string> vars_;            // values that are vars of the program
  std::set<std::string> names_;           // every ONNX value name (temps avoid them)
  struct Info {
    std::vector<int64_t> shape;
    std::vector<std::string> params;  // dim_param of each unknown dim ("" when none)
    bool has_shape = false;
    DType dtype = DType::kFloat32;
    bool has_dtype = false;
    int onnx_type = 0;  // the element type as ONNX gives it (one nabla may lack)
  };
  std::map<std::string, Info> info_;
  std::map<std::string, PartialDims> partials_;
  std::set<size_t> fused_;                          // node indices a pattern replaced
  std::map<size_t, onnx::NodeProto> replacements_;  // node index -> the node it becomes
  int temp_counter_ = 0;
};

// The converter table (converters.cc) and the folding table (fold.cc).
using Converter = void (*)(const Node&, Importer&);
const Converter* FindConverter(const std::string& op_type);
// Why an ONNX op has no converter yet ("" when it has one or is unknown).
std::string MissingConverterReason(const std::string& op_type);
using Folder = std::vector<ConstValue> (*)(const Node&, const std::vector<const ConstValue*>&, const Importer&);
const Folder* FindFolder(const std::string& op_type);
// Shape and Size fold from the input's inferred shape alone.
bool FoldsFromShape(const std::string& op_type);

// Reads a TensorProto into a host tensor: sizes checked against the data
// (and an external file's size) before anything is allocated. `where` starts
// every error message.
Tensor ReadTensorProto(const onnx::TensorProto& t, const std::string& model_dir, const std::string& where);

}  // namespace nabla::onnx_io
