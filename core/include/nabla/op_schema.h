#pragma once
// What an op declares about itself (part of nabla/op_registry.h): slots and
// their flags, typed attributes with defaults and checkers, traits, the
// mixed-precision class, fusion patterns, program passes and its origin.
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

// ---------------------------------------------------------------- schema

enum SlotFlags : unsigned {
  kNone = 0,
  kDuplicable = 1u << 0,   // the slot takes a list of vars (sum's X)
  kDispensable = 1u << 1,  // the slot may be absent or empty
  kNoBuffer = 1u << 2,     // the kernel reads only the shape/dtype (grad ops)
  // The input gives an attribute's value at run time (a tensor-valued
  // attribute: reshape's Shape, scale's ScaleTensor). It never gets a
  // gradient: grad makers give it @EMPTY@ (GradOpDescMakerBase::InputGrad),
  // whatever its dtype, and DefaultGradOp declares no gradient slot for it.
  kNoGrad = 1u << 3,
};

struct SlotDef {
  std::string name;
  std::string doc;
  bool duplicable = false;
  bool dispensable = false;
  bool no_buffer = false;
  bool no_grad = false;  // kNoGrad
};

struct AttrDef {
  std::string name;
  AttrType type = AttrType::kInt;
  std::optional<Attribute> default_value;         // nullopt: the attribute is required
  std::function<void(const Attribute&)> checker;  // throws Error on a bad value
  std::string doc;
};

struct NABLA_API OpSchema {
  std::string type;
  std::string doc;
  std::vector<SlotDef> inputs;
  std::vector<SlotDef> outputs;
  std::vector<AttrDef> attrs;

  const SlotDef* FindInput(const std::string& name) const;
  const SlotDef* FindOutput(const std::string& name) const;
  const AttrDef* FindAttr(const std::string& name) const;
};

// How an op takes part in mixed precision (nabla/mixed_precision.h): the
// op declares it, so the pass that inserts casts names no op.
enum class OpPrecision {
  kFollowInputs,  // runs in the dtype its inputs come in (elementwise, shape ops)
  kLow,           // GEMM-bound, worth bfloat16 inputs (mul, matmul, conv2d); needs a bf16 kernel
  kFloat32,       // accuracy needs float32 (reductions, softmax, losses, norms, optimizers)
};
NABLA_API const char* OpPrecisionName(OpPrecision p);  // "follow_inputs", "low", "float32"

// What the backward builder and executors need to know about an op without
// knowing its name.
struct OpTraits {
  bool has_sub_block = false;  // set automatically when the schema has a block attr
  bool control_flow = false;   // runs blocks itself through ExecutionContext::RunBlock
  bool random = false;         // output depends on a seed
  // Reads or writes a tensor_array: a GradCheck case feeds dense tensors to
  // one op, so these ops have their gradients checked through programs.
  bool array_io = false;
  // A collective (allreduce, broadcast): every rank must run these in the
  // same order, so executors keep them in program order relative to each
  // other even where no var orders them (two collectives started in
  // different orders on two ranks deadlock).
  bool collective = false;
  // Writes an output that is also one of its inputs on purpose (an optimizer's
  // ParamOut, batch_norm's MeanOut): the backward builder's overwrite pass
  // leaves such writes alone instead of versioning or rejecting them.
  bool updates_in_place = false;
  // Converts X into Out of attribute out_dtype (from in_dtype): the op the
  // mixed-precision pass (nabla/mixed_precision.h) inserts.
  bool dtype_cast = false;
  // Its outputs are elements of its one floating input, unchanged (reshape,
  // transpose): a dtype cast after it may run before it instead
  // (ElideBf16Casts).
  bool moves_data = false;
  OpPrecision precision = OpPrecision::kFollowInputs;
  // Input slots that the op's bfloat16 kernel also takes in float32 (a
  // bias kept float32, a gradient a GEMM wrote in float32): the
  // mixed-precision passes may leave those float32 when the op runs in
  // bfloat16 (ElideBf16Casts, FoldBf16Casts in nabla/mixed_precision.h).
  std::vector<std::string> bf16_float32_inputs;
};

// A chain of ops that an op can replace (fusion, see nabla/fusion.h): the op
// types in program order, each linked to the next through the one of its
// outputs that the next reads and nothing else reads (its other outputs the
// fused op writes as it did). `fuse` builds the replacing op from the matched
// ops (same order), or returns null to leave that match alone. The op that
// declares the pattern knows the names; the core only matches them.
struct FusionPattern {
  using Fuse = std::function<std::unique_ptr<OpDesc>(const std::vector<const OpDesc*>& matched)>;
  using Applies = std::function<bool(const BlockDesc& block, const std::vector<const OpDesc*>& matched)>;
  FusionPattern(std::vector<std::string> chain, Fuse fuse, Applies applies = nullptr)
      : chain(std::move(chain)), fuse(std::move(fuse)), applies(std::move(applies)) {}
  std::vector<std::string> chain;
  Fuse fuse;
  // Optional, asked before `fuse`: whether the matched chain may be fused,
  // for a fused op that is exact only for some shapes of the chain's vars
  // (fc: a 2-D weight, a bias over the last dim), looked up in `block`, the
  // block of the chain. Unset: every match may be fused.
  Applies applies;
};

// A rewrite an op brings for programs without their backward part (FuseOps,
// after the chains; OpBuilder::RewritesBeforeBackward), for what a chain
// cannot express: flash_attn replaces attention written with matmul and
// softmax, whose q, k and v come from transposes outside any chain. `run`
// follows FuseOps' rules: every var in `keep`, every persistable var and
// every result read later stays as it was; it returns how many places it
// changed. The fused ops bring their own gradients.
//
// A rewrite an op brings for programs that already hold their backward part
// and optimizer (FuseGradOps, nabla/fusion.h), for what a chain cannot
// express: grad ops of several forward ops that share work, say one operand
// computed once for all of them, or a grad op taking over the update of the
// weight it differentiates. `run` rewrites `program` in place and returns
// how many places it changed; it must leave every var in `keep`, every
// updated parameter and every other result the program computed as it was
// (a gradient only its update reads may go), and only change how the
// program computes them.
struct ProgramPass {
  std::string name;
  std::function<size_t(ProgramDesc& program, const std::unordered_set<std::string>& keep)> run;
};

struct NABLA_API Origin {
  std::string plugin;  // plugin name ("" for ops registered in-process)
  std::string path;    // plugin file
  std::string file;    // source file of the registration
  int line = 0;
  std::string ToString() const;  // "math_ops (…/libmath_ops.so) at mul_op.cc:42"
};

}  // namespace nabla
