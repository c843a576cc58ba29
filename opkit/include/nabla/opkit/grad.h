#pragma once
// Grad makers and grad-op shape inference that many ops share: building ops
// for a maker, emitting one grad op only when the gradient is wanted, the
// grad ops that read forward inputs only (views, slices), outputs only
// (activations) or the output gradient only (zero gradients), and grad ops
// whose dX takes the shape of a forward slot. Header-only: plugins on the C
// ABI (nabla/sdk/opkit.h) compile these same definitions against the SDK.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nabla/op_registry.h"

namespace nabla::opkit {

// One op for a grad maker that expresses a gradient with existing ops.
inline std::unique_ptr<OpDesc> MakeOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                      AttributeMap attrs = {}) {
  return std::make_unique<OpDesc>(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs));
}

// A maker's result holding the one op `op`.
inline std::vector<std::unique_ptr<OpDesc>> OneOp(std::unique_ptr<OpDesc> op) {
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::move(op));
  return ops;
}
inline std::vector<std::unique_ptr<OpDesc>> OneOp(std::string type, VarNameMap inputs, VarNameMap outputs,
                                                  AttributeMap attrs = {}) {
  return OneOp(MakeOp(std::move(type), std::move(inputs), std::move(outputs), std::move(attrs)));
}

// True when a gradient list names a var someone needs (not @EMPTY@, the name
// the backward builder gives gradients of no-grad vars).
inline bool GradWanted(const std::vector<std::string>& grads) { return !grads.empty() && grads[0] != kEmptyVarName; }

// The forward op as a grad maker reads it, for makers written as lambdas.
class GradContext final : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::Attr;
  using GradOpDescMakerBase::Attrs;
  using GradOpDescMakerBase::ForwardOp;
  using GradOpDescMakerBase::GradOpDescMakerBase;
  using GradOpDescMakerBase::Input;
  using GradOpDescMakerBase::InputGrad;
  using GradOpDescMakerBase::Output;
  using GradOpDescMakerBase::OutputGrad;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
};

// The maker of ops whose gradient is one op writing `slot`@GRAD:
// build(const GradContext&, dx) makes it when dx is wanted; otherwise no op
// is emitted, so an input in the no-grad set costs nothing.
//   .GradMaker(opkit::OneGradOpIfWanted("X", [](const opkit::GradContext& g, const auto& dx) {
//     return opkit::MakeOp("assign", {{"X", g.OutputGrad("Out")}}, {{"Out", dx}});
//   }))
// The maker's arguments after `fwd` are whatever GradOpMakerFn passes (the
// core's and the C ABI SDK's differ); they go to GradContext as they are.
template <typename Build>
GradOpMakerFn OneGradOpIfWanted(std::string slot, Build build) {
  return [slot = std::move(slot), build](const OpDesc& fwd, auto&&... rest) {
    GradContext g(fwd, rest...);
    std::vector<std::string> dx = g.InputGrad(slot);
    if (!GradWanted(dx)) return std::vector<std::unique_ptr<OpDesc>>{};
    return OneOp(build(g, dx));
  };
}

// `<type>_grad` reading every forward input and every output gradient, but
// no forward output: ops whose gradient needs X's shape (and index inputs)
// only, so Out can be freed after the forward pass, as in Paddle's
// slice_grad, gather_grad, stack_grad, squeeze_grad, expand_grad.
class GradFromInputsMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    auto op = std::make_unique<OpDesc>();
    op->SetType(ForwardOp().Type() + "_grad");
    for (const auto& slot : InputSlots()) {
      op->SetInput(slot, Input(slot));
      if (!IsNoGradInput(slot)) op->SetOutput(GradVarName(slot), InputGrad(slot));
    }
    for (const auto& slot : OutputSlots()) op->SetInput(GradVarName(slot), OutputGrad(slot));
    op->MutableAttrs() = Attrs();
    return OneOp(std::move(op));
  }
};

// `<type>_grad` reading only Out and Out@GRAD: activations whose derivative
// is a function of their output (relu, sigmoid, tanh, softmax), so X can be
// freed after the forward pass, as in Paddle.
class GradFromOutMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp(ForwardOp().Type() + "_grad", {{"Out", Output("Out")}, {GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

// `<type>_grad` reading only Out@GRAD: ops whose gradient is zero wherever
// it exists (Paddle's ceil, floor, round), so neither X nor Out is kept for
// the backward pass.
class GradFromOutGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp(ForwardOp().Type() + "_grad", {{GradVarName("Out"), OutputGrad("Out")}},
                 {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

// X@GRAD[i] takes the shape and dtype of X[i], for every gradient output slot
// of a grad op whose forward input slot is also one of its inputs.
inline void InferGradShapes(InferShapeContext& c) {
  for (const auto& [slot, args] : c.Op().Outputs()) {
    if (!IsGradVarName(slot)) continue;
    std::string fwd = StripGradSuffix(slot);
    if (!c.HasInput(fwd)) continue;
    for (size_t i = 0; i < args.size(); ++i) {
      if (args[i] == kEmptyVarName) continue;
      c.ShareShapeAndDType(fwd, slot, i, i);
    }
  }
}

// `out` (if present) takes the shape and dtype of input `in`.
inline void InferSameAs(InferShapeContext& c, const std::string& in, const std::string& out) {
  if (c.HasOutput(out)) c.ShareShapeAndDType(in, out);
}

// Grad ops read their dtype from the incoming gradient: their first input
// slots may be absent (dispensable) or integer (Label, Ids).
inline KernelDTypeFn DTypeOfInput(std::string slot) {
  return [slot](const ExecutionContext& c) { return c.Input(slot).GetDType(); };
}

}  // namespace nabla::opkit
