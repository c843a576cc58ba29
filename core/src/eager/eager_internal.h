#pragma once
// Private to core/src/eager: what an eager tensor, a grad node and a tape hold.
//
// Ownership is a DAG, never a cycle: a result's TensorImpl owns its grad node
// (grad_fn); a node owns the nodes that produced its inputs and the leaves it
// sends gradients to, plus copies of the core tensors its grad ops read (the
// buffers, not the TensorImpls). A node sees its outputs only through
// weak_ptrs, and a Tape owns its entries but nothing points back at it.
#include <atomic>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "nabla/eager.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "prepared_op.h"

namespace nabla::eager::detail {

using VersionCounter = std::shared_ptr<std::atomic<uint64_t>>;

struct TensorImpl {
  nabla::Tensor data;
  std::string name;  // the user's name, or "t<id>"
  std::string var;   // unique in the process: the arg name in recorded ops
  bool requires_grad = false;
  bool retain_grad = false;
  VersionCounter version = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::shared_ptr<TensorImpl> grad;

  static std::shared_ptr<TensorImpl> Make(nabla::Tensor data, const std::string& name, bool requires_grad);
  // Tensor's private parts (TensorImpl is its friend).
  static Tensor Wrap(std::shared_ptr<TensorImpl> impl) { return Tensor(std::move(impl)); }
  static const std::shared_ptr<TensorImpl>& Of(const Tensor& t) { return t.impl_; }
};

// A core tensor a grad op reads, with the version it had when saved.
struct SavedVar {
  std::string var, name;
  nabla::Tensor data;
  VersionCounter version;
  uint64_t saved_version = 0;
  std::weak_ptr<TensorImpl> tensor;  // for its current name in messages
};

// Where the gradient of one (distinct) input goes.
struct InputEdge {
  std::string var, name;
  Shape shape;
  DType dtype = DType::kFloat32;
  Device* device = nullptr;
  std::shared_ptr<Node> producer;    // the node that made it, or null
  std::shared_ptr<TensorImpl> leaf;  // a leaf that requires grad, or null
};

struct OutputInfo {
  std::string var, name;
  Shape shape;
  DType dtype = DType::kFloat32;
  Device* device = nullptr;
  std::weak_ptr<TensorImpl> tensor;  // for RetainGrad; weak: the tensor owns this node
};

struct Node {
  uint64_t seq = 0;  // call order: reverse seq is a reverse topological order
  OpDesc fwd;        // args are TensorImpl::var names
  std::vector<std::unique_ptr<OpDesc>> grad_ops;
  std::vector<InputEdge> inputs;  // only the inputs that require grad
  std::vector<OutputInfo> outputs;
  std::vector<SavedVar> saved;
  bool no_grad_maker = false;  // the op registers no GradOpDescMaker
  bool released = false;       // saved tensors freed by a Backward without retain_graph
};

using SlotArgs = std::vector<std::pair<std::string, std::vector<bool>>>;

// An op with its slots fixed, resolved once against the registry: a private
// scope whose variables the call binds to the tensors it is given. Not
// reentrant; Call keeps one cache per thread.
class PreparedCall {
 public:
  // `in_args` / `out_args`: per slot, one flag per argument, false for @EMPTY@.
  // `out_args` null: every output slot of the schema, with `counts` tensors
  // (default 1).
  PreparedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs* out_args, const AttributeMap& attrs,
               const OutputCounts& counts);
  const OpDesc& Desc() const { return desc_; }
  const OpInfo& Info() const { return *prepared_.info; }
  bool Stale() const { return CurrentRegistry() != registry_; }
  // Whether `inputs` have the slots and arities this call was prepared for.
  bool Matches(const TensorMap& inputs) const;
  // inputs[s][i] / outputs[s][i] in the order given at construction; null
  // entries stand for @EMPTY@. An output that holds a tensor is written in
  // place when the kernel's allocation fits it (CallInPlace); else it gets a
  // fresh buffer.
  void Run(const std::vector<std::vector<const nabla::Tensor*>>& inputs,
           const std::vector<std::vector<nabla::Tensor*>>& outputs, Device& device);
  // Call's path: eager tensors in, new eager tensors out, recorded when needed.
  Outputs Invoke(const TensorMap& inputs);

 private:
  OpDesc desc_;
  Scope scope_;
  PreparedOp prepared_;
  std::shared_ptr<const OpRegistry> registry_;
  std::vector<std::string> in_slots_, out_slots_;
  std::vector<std::string> duplicable_outputs_;
};

// The cached PreparedCall of a grad op, a sum, or a forward call.
PreparedCall& CachedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs& out_args,
                         const AttributeMap& attrs);

// Runs `op` (a grad op) over tensors looked up by arg name; writes its
// outputs back under their names.
void RunByName(const OpDesc& op, std::unordered_map<std::string, nabla::Tensor>& env, Device& device);

// Tensors of the shape and dtype with every element 0 or 1, on `device`.
nabla::Tensor Filled(const Shape& shape, DType dtype, Device& device, double value);
// parts[0] + parts[1] + ... in this order, through the registry's `sum`.
nabla::Tensor SumInOrder(const std::vector<nabla::Tensor>& parts, Device& device);

// Records a call that has an input requiring grad.
// `in_tensors` / `outputs`: one per arg of fwd's inputs / outputs, in order.
void Record(const OpDesc& fwd, const OpInfo& info, const std::vector<const Tensor*>& in_tensors,
            const std::vector<std::shared_ptr<TensorImpl>>& outputs);

void RunBackward(const std::shared_ptr<TensorImpl>& root, bool retain_graph);

struct TapeEntry {
  std::shared_ptr<Node> node;
  std::vector<Tensor> inputs;   // every input arg, in fwd's input order
  std::vector<Tensor> outputs;  // every output arg, in fwd's output order
};

struct TapeImpl {
  std::vector<TapeEntry> entries;
  bool recording = true;
};

// The tapes recording on this thread.
std::vector<TapeImpl*>& ActiveTapes();

}  // namespace nabla::eager::detail
