#pragma once
// Private to core/src/eager: what an eager tensor, a grad node and a tape hold.
//
// Ownership is a DAG, never a cycle: a result's TensorImpl owns its grad node
// (grad_fn); a node owns the nodes that produced its inputs and the leaves it
// sends gradients to, plus copies of the core tensors its grad ops read (the
// buffers, not the TensorImpls). A node sees its outputs only through
// weak_ptrs, and a Tape owns its entries but nothing points back at it.
//
// Speed: an op's grad ops depend on its slots, attributes and which args need
// no gradient, never on the tensors. So each prepared forward call asks the
// op's GradOpDescMaker once per such signature, over its canonical arg names,
// and keeps the result as a GradTemplate: grad ops prepared like forward
// calls, their args resolved to indices of a per-node tensor array. A
// recorded call stores the template and its tensors; Backward runs the
// template's grad ops with no names or registry lookups.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "nabla/block_pool.h"
#include "nabla/eager.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "prepared_op.h"
#include "registry_internal.h"

namespace nabla::eager::detail {

// Nodes and tensors, made and freed by the thousand (nabla/block_pool.h).
template <typename T>
std::shared_ptr<T> MakePooled() {
  return std::allocate_shared<T>(PoolAllocator<T>());
}

using VersionCounter = std::shared_ptr<std::atomic<uint64_t>>;
using SlotArgs = std::vector<std::pair<std::string, std::vector<bool>>>;

// A TensorMap as SlotInputs (pointers into it), on the stack for the usual
// handful of slots.
class SlotInputs {
 public:
  explicit SlotInputs(const TensorMap& map) {
    SlotInput* out = map.size() <= kInline ? inline_ : (heap_.resize(map.size()), heap_.data());
    size_t i = 0;
    for (const auto& [slot, tensors] : map) out[i++] = SlotInput{&slot, tensors.data(), tensors.size()};
    data_ = out;
    size_ = map.size();
  }
  const SlotInput* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  static constexpr size_t kInline = 8;
  SlotInput inline_[kInline];
  std::vector<SlotInput> heap_;
  const SlotInput* data_ = nullptr;
  size_t size_ = 0;
};

struct TensorImpl {
  nabla::Tensor data;
  uint64_t id = 0;           // unique in the process
  mutable std::string name;  // the user's name; "t<id>" once asked for when none was given
  bool requires_grad = false;
  bool retain_grad = false;
  // Null until something must share it (Detach, a saved tensor, an
  // in-place write): null reads as version 0. Most results are never
  // written or saved, and one allocation less per call shows.
  VersionCounter version;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::shared_ptr<TensorImpl> grad;

  const std::string& Name() const {
    if (name.empty()) name = "t" + std::to_string(id);
    return name;
  }
  const VersionCounter& SharedVersion() {
    if (!version) version = std::allocate_shared<std::atomic<uint64_t>>(PoolAllocator<std::atomic<uint64_t>>(), 0);
    return version;
  }
  uint64_t VersionNow() const { return version ? version->load() : 0; }
  static std::shared_ptr<TensorImpl> Make(nabla::Tensor data, const std::string& name, bool requires_grad);
  // Tensor's private parts (TensorImpl is its friend).
  static Tensor Wrap(std::shared_ptr<TensorImpl> impl) { return Tensor(std::move(impl)); }
  static const std::shared_ptr<TensorImpl>& Of(const Tensor& t) { return t.impl_; }
};

class PreparedCall;

// What Outputs needs to find a call's tensors by slot: the same for every
// call of a PreparedCall, so shared, not rebuilt.
struct OutputLayout {
  std::string type;
  struct Slot {
    std::string name;
    size_t begin = 0, size = 0;
    bool duplicable = false;
  };
  std::vector<Slot> slots;  // the desc's (sorted) order
  size_t total = 0;
};

// The grad ops of one forward signature. Env layout: [0, n_args) the forward
// args (inputs then outputs, each in the op desc's slot order), then one
// gradient per forward output, then what the grad ops write.
struct GradTemplate {
  OpDesc fwd;  // canonical arg names
  size_t n_inputs = 0, n_outputs = 0;
  bool no_grad_maker = false;  // the op registers no GradOpDescMaker
  struct GradOp {
    std::unique_ptr<OpDesc> desc;  // canonical names (for ToDot and messages)
    std::shared_ptr<PreparedCall> call;
    std::vector<std::vector<int>> in, out;  // env index per slot and arg; -1 for @EMPTY@
  };
  std::vector<GradOp> ops;
  int n_env = 0;
  std::vector<int> saved;                     // forward args the grad ops read
  std::vector<std::vector<int>> input_grads;  // per input arg: env indices of its gradient parts
  std::vector<bool> output_grad_read;         // per output arg: a grad op reads its gradient

  size_t NArgs() const { return n_inputs + n_outputs; }
  int OutputGradIndex(size_t j) const { return static_cast<int>(NArgs() + j); }
};

// A vector whose first element lives inline: a node is made per recorded
// call and nearly every one has one input edge and one output, so its lists
// cost no allocation of their own. Contiguous either way (one element
// inline, or all of them on the heap).
template <typename T>
class OneInlineVector {
 public:
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  T* begin() { return n_ > 1 ? heap_.data() : &one_; }
  T* end() { return begin() + n_; }
  const T* begin() const { return n_ > 1 ? heap_.data() : &one_; }
  const T* end() const { return begin() + n_; }
  T& operator[](size_t i) { return begin()[i]; }
  const T& operator[](size_t i) const { return begin()[i]; }
  T& front() { return *begin(); }
  const T& front() const { return *begin(); }
  void reserve(size_t n) {
    if (n > 1) heap_.reserve(n);
  }
  // A default element added in place (filled by the caller: no move of a
  // node's large entries).
  T& emplace_back() {
    if (n_++ == 0) return one_;
    if (n_ == 2) heap_.push_back(std::move(one_));
    return heap_.emplace_back();
  }
  // Drops every element and the heap list's memory.
  void clear() {
    one_ = T{};
    std::vector<T>().swap(heap_);
    n_ = 0;
  }
  void push_back(T value) {
    if (n_ == 0) {
      one_ = std::move(value);
    } else {
      if (n_ == 1) heap_.push_back(std::move(one_));
      heap_.push_back(std::move(value));
    }
    ++n_;
  }

 private:
  T one_{};
  std::vector<T> heap_;
  size_t n_ = 0;
};

// A shape a node keeps for a zero gradient it may have to make: inline up
// to kInline dims, so recording a call allocates no vector per output.
class SmallShape {
 public:
  SmallShape& operator=(const Shape& shape) {
    rank_ = shape.size();
    if (rank_ <= kInline) {
      for (size_t i = 0; i < rank_; ++i) dims_[i] = shape[i];
      more_.clear();
    } else {
      more_ = shape;
    }
    return *this;
  }
  Shape Get() const { return rank_ <= kInline ? Shape(dims_, dims_ + rank_) : more_; }

 private:
  static constexpr size_t kInline = 6;
  int64_t dims_[kInline] = {};
  size_t rank_ = 0;
  Shape more_;
};

// A core tensor a grad op reads, with the version it had when saved.
struct SavedVar {
  int arg = 0;
  nabla::Tensor data;
  VersionCounter version;
  uint64_t saved_version = 0;
  std::weak_ptr<TensorImpl> tensor;  // for its current name in messages
  std::string name;                  // its name when saved, if it is gone
};

// Where the gradient of one distinct input tensor that requires grad goes.
struct InputEdge {
  uint64_t id = 0;
  int first_arg = 0;           // its first input arg index
  std::vector<int> more_args;  // any further ones (mul(x, x)): rare, so not in the first allocation
  SmallShape shape;            // leaves only (their zero gradient)
  DType dtype = DType::kFloat32;
  Device* device = nullptr;
  std::shared_ptr<Node> producer;    // the node that made it, or null
  size_t producer_output = 0;        // which of producer->outputs it is
  std::shared_ptr<TensorImpl> leaf;  // a leaf, or null
};

struct OutputInfo {
  uint64_t id = 0;
  SmallShape shape;
  DType dtype = DType::kFloat32;
  Device* device = nullptr;
  std::weak_ptr<TensorImpl> tensor;  // for RetainGrad; weak: the tensor owns this node
  // Backward's scratch: the gradient parts of this output made so far, in
  // order (the first inline: most tensors get one), so no hash map by
  // tensor id is kept per Backward.
  nabla::Tensor first_part;
  std::vector<nabla::Tensor> more_parts;
  size_t n_parts = 0;
  void ClearParts() {
    first_part = nabla::Tensor();
    more_parts.clear();
    n_parts = 0;
  }
  void AddPart(nabla::Tensor part) {
    if (n_parts++ == 0) {
      first_part = std::move(part);
    } else {
      more_parts.push_back(std::move(part));
    }
  }
};

struct Node {
  uint64_t seq = 0;  // call order: reverse seq is a reverse topological order
  std::shared_ptr<const GradTemplate> tmpl;
  OneInlineVector<InputEdge> inputs;
  OneInlineVector<OutputInfo> outputs;  // one per output arg
  OneInlineVector<SavedVar> saved;      // most grad ops read one forward tensor
  bool released = false;                // saved tensors freed by a Backward without retain_graph
  // Backward's scratch, instead of a hash map of nodes per Backward: the walk
  // that counted this node last, and how many of that walk's consumers it
  // still waits for. Two Backwards through one graph at once were never
  // supported (each frees the saved tensors and accumulates the leaves).
  uint64_t walk = 0;
  int waiting = 0;
  const std::string& Type() const { return tmpl->fwd.Type(); }
};

// An op with its slots fixed, resolved once against the registry: a private
// scope whose variables a call binds to the tensors it is given.
class PreparedCall {
 public:
  // `out_args` null: every output slot of the schema, with `counts` tensors
  // (default 1).
  PreparedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs* out_args, const AttributeMap& attrs,
               const OutputCounts& counts);
  const OpDesc& Desc() const { return desc_; }
  const OpInfo& Info() const { return *prepared_.info; }
  // Asked on every call: the generation, not a copy of the registry.
  bool Stale() const { return RegistryGeneration() != generation_; }
  // Whether a Call with these arguments is this prepared call.
  bool Matches(const SlotInput* slots, size_t n, const AttributeMap& attrs, const OutputCounts& counts) const;
  bool MatchesSlots(const SlotInput* slots, size_t n) const;
  // inputs[s][i] / outputs[s][i] in the desc's slot order; null entries
  // stand for @EMPTY@. An output that holds a tensor is written in place
  // when the kernel's allocation fits it (CallInPlace); else it gets a fresh
  // buffer.
  void Run(const std::vector<std::vector<const nabla::Tensor*>>& inputs,
           const std::vector<std::vector<nabla::Tensor*>>& outputs, Device& device);
  // A grad op's run over a node's tensor array. Serialised: a template's
  // grad ops may run from any thread's Backward.
  void RunEnv(std::vector<nabla::Tensor>& env, const std::vector<std::vector<int>>& in,
              const std::vector<std::vector<int>>& out, Device& device);
  // Call's path: eager tensors in, new eager tensors out, recorded when needed.
  // `slots` in ascending name order, as MatchesSlots accepted them.
  Outputs Invoke(const SlotInput* slots, size_t n);

  void Unbind();  // drops the bound tensors

 private:
  void Dispatch(Device& device);
  std::shared_ptr<const GradTemplate> Template(const std::vector<bool>& no_grad);

  OpDesc desc_;
  Scope scope_;
  PreparedOp prepared_;
  uint64_t generation_;  // read before registry_: a publish in between only makes it stale early
  std::shared_ptr<const OpRegistry> registry_;
  std::shared_ptr<const OutputLayout> layout_;
  // Duplicable output slots that got one tensor for want of a count (no
  // output_counts entry, no OutputCount trait), for error messages.
  std::string unsized_outputs_;
  // Invoke's scratch, kept for its capacity (a PreparedCall runs on one
  // thread at a time: Call's cache is per thread, an Op is not shared).
  std::vector<bool> no_grad_;
  std::vector<const Tensor*> in_handles_;
  std::vector<std::shared_ptr<TensorImpl>> out_impls_;
  // The last template Template() gave, for the common repeat.
  std::vector<bool> last_no_grad_;
  std::shared_ptr<const GradTemplate> last_template_;
  // What Call matched on.
  std::vector<std::pair<std::string, size_t>> key_inputs_;
  AttributeMap key_attrs_;
  OutputCounts key_counts_;
  std::map<std::vector<bool>, std::shared_ptr<const GradTemplate>> templates_;
  std::mutex run_mutex_;
};

// The cached PreparedCall of a sum or an in-place call (per thread).
PreparedCall& CachedCall(const std::string& type, const SlotArgs& in_args, const SlotArgs& out_args,
                         const AttributeMap& attrs);

// Tensors of the shape and dtype with every element `value`, on `device`.
nabla::Tensor Filled(const Shape& shape, DType dtype, Device& device, double value);
// parts[0] + parts[1] + ... in this order, through the registry's `sum`.
nabla::Tensor SumInOrder(const std::vector<nabla::Tensor>& parts, Device& device);

// Builds the grad template of `fwd` (canonical names) for the args in `no_grad`.
std::shared_ptr<const GradTemplate> BuildGradTemplate(const OpDesc& fwd, const OpInfo& info,
                                                      const std::vector<bool>& no_grad);

// Records a call that has an input requiring grad. `in_tensors` / `outputs`:
// one per arg of the template's inputs / outputs, in order.
void Record(std::shared_ptr<const GradTemplate> tmpl, const std::vector<const Tensor*>& in_tensors,
            const std::vector<std::shared_ptr<TensorImpl>>& outputs);

void RunBackward(const std::shared_ptr<TensorImpl>& root, bool retain_graph);

struct TapeEntry {
  std::shared_ptr<Node> node;
  std::vector<Tensor> inputs;   // every input arg, in the template's order
  std::vector<Tensor> outputs;  // every output arg, in the template's order
};

struct TapeImpl {
  std::vector<TapeEntry> entries;
  bool recording = true;
};

// The tapes recording on this thread.
std::vector<TapeImpl*>& ActiveTapes();

}  // namespace nabla::eager::detail
