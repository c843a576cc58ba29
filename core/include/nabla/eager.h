#pragma once
// Eager mode: ops run as they are called, on the same OpInfoMap the static
// executors use, and a tape of grad nodes makes gradients from each op's own
// GradOpDescMaker (the grad ops `append_backward` would append). Any op a
// plugin registers, third-party ones included, runs eagerly and gets its
// gradient with no eager-specific code. See docs/eager.md.
//
//   using namespace nabla::eager;
//   Tensor x = Tensor::FromVector<float>({1, 2, 3, 4}, {2, 2}, /*requires_grad=*/true, "x");
//   Tensor y = Call("tanh", {{"X", {x}}})["Out"];
//   Tensor loss = Call("mean", {{"X", {y}}})["Out"];
//   loss.Backward();
//   std::vector<float> dx = x.Grad().ToVector<float>();
//
// Threading: recording state (NoGradGuard, active Tapes, the Call cache) is
// per thread. A Tensor handle may be shared between threads for reading;
// calls that write one tensor must not race with other uses of it.
//
// This header is the stable surface the Python module binds; it includes only
// the core's public headers and the standard library.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/export.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {
class Device;
}  // namespace nabla

namespace nabla::eager {

namespace detail {
struct TensorImpl;
struct Node;
struct TapeImpl;
struct OutputLayout;
class PreparedCall;
}  // namespace detail

// The device new tensors and calls use when none is named: the host CPU
// unless SetDefaultDevice changed it (per thread).
NABLA_API Device& DefaultDevice();
NABLA_API void SetDefaultDevice(Device* device);  // null: back to the host

// A handle to an eager tensor; copies share the tensor (like torch.Tensor).
// A default-constructed handle is undefined: accessors of its data or
// gradient throw naming what was asked (Defined(), Id() and ToString() do not).
class NABLA_API Tensor {
 public:
  Tensor();
  ~Tensor();
  Tensor(const Tensor&);
  Tensor& operator=(const Tensor&);
  Tensor(Tensor&&) noexcept;
  Tensor& operator=(Tensor&&) noexcept;

  // ---- creation (all leaves: no grad node)
  // Copies `bytes` = numel * size(dtype) bytes of host memory onto `device`
  // (DefaultDevice() when null).
  static Tensor FromHost(const void* data, DType dtype, const Shape& shape, bool requires_grad = false,
                         const std::string& name = "", Device* device = nullptr);
  template <typename T>
  static Tensor FromVector(const std::vector<T>& values, const Shape& shape, bool requires_grad = false,
                           const std::string& name = "", Device* device = nullptr) {
    CheckCount(values.size(), shape);
    if constexpr (std::is_same_v<T, bool>) {  // vector<bool> has no data()
      std::vector<unsigned char> bytes(values.begin(), values.end());
      return FromHost(bytes.data(), DType::kBool, shape, requires_grad, name, device);
    } else {
      return FromHost(values.data(), DTypeOf<T>::value, shape, requires_grad, name, device);
    }
  }
  // A .npy file (errors name the file); the name defaults to the file's stem.
  static Tensor FromNpy(const std::string& path, bool requires_grad = false, const std::string& name = "",
                        Device* device = nullptr);
  // Runs an initializer op (`fill_constant`, `uniform_random`,
  // `gaussian_random`, `xavier_uniform`, ... any op with no inputs writing
  // `Out`) with `shape` and `dtype` set as the startup program sets them.
  static Tensor Init(const std::string& op_type, const Shape& shape, DType dtype = DType::kFloat32,
                     const AttributeMap& attrs = {}, bool requires_grad = false, const std::string& name = "");
  // Wraps a core tensor without copying (the buffer is shared).
  static Tensor FromCore(const nabla::Tensor& data, bool requires_grad = false, const std::string& name = "");

  // ---- what it is
  bool Defined() const { return impl_ != nullptr; }
  const Shape& GetShape() const;
  DType GetDType() const;
  int64_t Numel() const;
  Device& GetDevice() const;
  // The user's name, or "t<id>" when none was given.
  const std::string& Name() const;
  void SetName(const std::string& name);
  // The core tensor (shares the buffer; read only).
  const nabla::Tensor& Data() const;
  // Host copies of the data; the dtype must match T.
  template <typename T>
  std::vector<T> ToVector() const {
    if constexpr (std::is_same_v<T, bool>) {
      std::vector<unsigned char> bytes(static_cast<size_t>(Numel()));
      CopyToHost(bytes.data(), DType::kBool);
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(static_cast<size_t>(Numel()));
      CopyToHost(out.data(), DTypeOf<T>::value);
      return out;
    }
  }
  void CopyToHost(void* dst, DType expected) const;  // throws when the dtype differs
  void WriteNpy(const std::string& path) const;
  std::string ToString() const;  // "Tensor 'x' float32[2, 2] requires_grad"

  // ---- autograd
  bool RequiresGrad() const;
  // Only on leaves (a result's requires_grad follows its inputs).
  void SetRequiresGrad(bool requires_grad);
  // True for tensors no recorded call produced.
  bool IsLeaf() const;
  // The accumulated gradient: leaves that require grad, and results that
  // called RetainGrad() (last backward's value). Undefined before any.
  Tensor Grad() const;
  void ZeroGrad();  // drops the accumulated gradient (Grad() is undefined after)
  // Keep this non-leaf's gradient in Grad() during Backward (torch's retain_grad).
  void RetainGrad();
  // Backward from this tensor, which must hold exactly one element (the seed
  // is 1 of its dtype). Runs the grad ops of every recorded call it depends
  // on, in reverse order, and adds the results to the leaves' Grad(). Without
  // `retain_graph` the nodes' saved tensors are freed and a second Backward
  // through them is an error.
  void Backward(bool retain_graph = false) const;
  // Same tensor data, no grad node, requires_grad false.
  Tensor Detach() const;
  // Bumped by every in-place write; Backward checks the versions it saved.
  uint64_t Version() const;

  // ---- in-place writes (bump Version()). Refused on a leaf that requires
  // grad while gradients are recorded (use NoGradGuard, as for an optimizer step).
  void CopyFrom(const Tensor& src);  // same shape and dtype
  void CopyFromHost(const void* data, DType dtype, const Shape& shape);

  // Identity of the shared tensor (for maps and tests).
  const void* Id() const { return impl_.get(); }

 private:
  friend struct detail::TensorImpl;
  friend class detail::PreparedCall;
  friend class Tape;
  explicit Tensor(std::shared_ptr<detail::TensorImpl> impl);
  static void CheckCount(size_t count, const Shape& shape);
  const detail::TensorImpl& Impl(const char* what) const;
  detail::TensorImpl& MutableImpl(const char* what);
  std::shared_ptr<detail::TensorImpl> impl_;
};

// Inputs of a call: slot name -> tensors (several for a duplicable slot).
using TensorMap = std::map<std::string, std::vector<Tensor>>;

// Outputs of a call: every output slot of the op, by slot name.
class NABLA_API Outputs {
 public:
  Outputs();
  ~Outputs();
  Outputs(const Outputs&);
  Outputs& operator=(const Outputs&);
  Outputs(Outputs&&) noexcept;
  Outputs& operator=(Outputs&&) noexcept;

  // The only tensor of `slot`; an error naming the slot when it is absent or holds several.
  const Tensor& operator[](const std::string& slot) const;
  const std::vector<Tensor>& List(const std::string& slot) const;
  bool Has(const std::string& slot) const;
  // Duplicable in the op's schema (the Python module returns a list for it).
  bool IsDuplicable(const std::string& slot) const;
  // Built at the first call (a call's outputs are kept flat: most callers
  // take one tensor by name), so the first call must not race with another.
  const std::map<std::string, std::vector<Tensor>>& Slots() const;
  const std::string& OpType() const;

  // The slots by index, in the op desc's (sorted) order, without maps.
  size_t NumSlots() const;
  const std::string& SlotName(size_t i) const;
  // The tensors of slot i: SlotSize(i) of them from SlotData(i).
  const Tensor* SlotData(size_t i) const;
  size_t SlotSize(size_t i) const;
  // The index of `slot`, or NumSlots() when the op has no such output slot.
  size_t SlotIndex(const std::string& slot) const;

 private:
  friend class detail::PreparedCall;
  std::shared_ptr<const detail::OutputLayout> layout_;
  // Every slot's tensors, slot after slot: the only one in one_ (most ops
  // have one output, and a call should not allocate for the list), else all
  // of them in many_.
  const Tensor* Data() const { return many_.empty() ? &one_ : many_.data(); }
  void Add(Tensor t);
  Tensor one_;
  std::vector<Tensor> many_;
  size_t n_ = 0;
  mutable std::unique_ptr<std::map<std::string, std::vector<Tensor>>> slots_;
};

// How many tensors a duplicable output slot gets (split's Out); every other
// output slot gets one.
using OutputCounts = std::map<std::string, int>;

// One input slot of a call made without a TensorMap (Op::Run): `size`
// tensors from `tensors`. Pointers only: nothing is copied or allocated.
struct SlotInput {
  const std::string* slot;
  const Tensor* tensors;
  size_t size;
};

// Runs op `type` now: the executors' dispatch path (run-time shape
// inference, kernel by (device, dtype)) on the inputs' device. Attributes
// the call leaves out take the schema's defaults; unknown or ill-typed ones
// are errors naming the op. Prepared ops are cached per thread by (type,
// slots and arities, attributes), so a repeated call does no registry or
// name lookups. When gradients are enabled and an input requires grad, the
// call is recorded with its GradOpDescMaker's grad ops and its outputs
// require grad. Ops that run sub-blocks (while, conditional_block) are
// refused: eager control flow is plain C++.
NABLA_API Outputs Call(const std::string& type, const TensorMap& inputs, const AttributeMap& attrs = {},
                       const OutputCounts& output_counts = {});

// Runs op `type` writing into existing tensors (an optimizer step: sgd with
// ParamOut = Param). Never recorded; refused while gradients are recorded if
// an input or output requires grad. Bumps the outputs' versions.
NABLA_API void CallInPlace(const std::string& type, const TensorMap& inputs, const TensorMap& outputs,
                           const AttributeMap& attrs = {});

// A prepared op held by the caller: the cheapest way to call one op type with
// fixed attributes in a loop (Call's cache does the same behind a lookup).
// One thread at a time may call an Op.
class NABLA_API Op {
 public:
  Op(const std::string& type, const AttributeMap& attrs = {}, const OutputCounts& output_counts = {});
  ~Op();
  Op(Op&&) noexcept;
  Op& operator=(Op&&) noexcept;
  Outputs operator()(const TensorMap& inputs) const;
  // The same call with the slots given as an array in ascending slot-name
  // order (the order a TensorMap keeps): the path for bindings and hot
  // loops, with no map built per call.
  Outputs Run(const SlotInput* slots, size_t n) const;
  const std::string& Type() const;

 private:
  std::string type_;
  AttributeMap attrs_;
  OutputCounts counts_;
  // Built at the first call (slot arities come from the inputs), rebuilt when
  // they or the registry change.
  mutable std::unique_ptr<detail::PreparedCall> prepared_;
};

// Whether calls on this thread are recorded (false inside a NoGradGuard).
NABLA_API bool GradEnabled();

// Disables recording on this thread while alive (torch.no_grad()); nests.
class NABLA_API NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

// Records, while alive (or until Stop()), every call on this thread that is
// recorded for gradients, in call order. Gradients do not need a Tape (the
// grad nodes hang off the tensors); a Tape is for seeing and keeping what
// ran. Tapes nest; each records. C++ control flow is unrolled: a loop of
// calls is recorded as the calls it made.
class NABLA_API Tape {
 public:
  Tape();
  ~Tape();
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;
  void Stop();  // stops recording (idempotent); what was recorded stays
  bool Recording() const;
  size_t Size() const;  // recorded calls
  void Clear();         // forgets the recorded calls (gradients are unaffected)

  // Graphviz DOT of the recorded DAG in `nabla graph`'s style: tensors and
  // ops as nodes, forward edges solid; gradient edges, from each op back to
  // the inputs it sends a gradient to and labelled with its grad ops, red
  // and dashed.
  std::string ToDot() const;

  // The recorded calls as a program (block 0, call order). Tensors that no
  // recorded call produced become vars: persistable parameters when they
  // require grad, feeds (stop_gradient) otherwise; everything else is an op
  // output. Names are the tensors' names, made unique with a suffix.
  // `nabla exec PROGRAM --backward LOSS --feed NAME=NAME.npy ...` with the
  // values from Leaves() computes the same loss and gradients.
  ProgramDesc ToProgram() const;

  struct Leaf {
    std::string name;  // the var name in ToProgram()
    Tensor tensor;
    bool parameter;  // requires grad: persistable in the program
  };
  std::vector<Leaf> Leaves() const;
  // The program var name of a tensor the tape saw (for --backward/--fetch);
  // an error when it saw no such tensor.
  std::string VarName(const Tensor& tensor) const;
  // Writes DIR/program.yaml and DIR/<leaf>.npy for every leaf (DIR is
  // created) and returns the `nabla exec` arguments that feed them
  // ("DIR/program.yaml --feed x=DIR/x.npy ...").
  std::string Save(const std::string& dir) const;

 private:
  std::shared_ptr<detail::TapeImpl> impl_;
};

}  // namespace nabla::eager
