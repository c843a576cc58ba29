#include "nabla/opkit/grad.h"

namespace nabla::opkit {

std::vector<std::unique_ptr<OpDesc>> OneOp(std::unique_ptr<OpDesc> op) {
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::move(op));
  return ops;
}

std::vector<std::unique_ptr<OpDesc>> GradFromInputsMaker::operator()() const {
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

std::vector<std::unique_ptr<OpDesc>> GradFromOutMaker::operator()() const {
  return OneOp(ForwardOp().Type() + "_grad", {{"Out", Output("Out")}, {GradVarName("Out"), OutputGrad("Out")}},
               {{GradVarName("X"), InputGrad("X")}}, Attrs());
}

std::vector<std::unique_ptr<OpDesc>> GradFromOutGradMaker::operator()() const {
  return OneOp(ForwardOp().Type() + "_grad", {{GradVarName("Out"), OutputGrad("Out")}},
               {{GradVarName("X"), InputGrad("X")}}, Attrs());
}

void InferGradShapes(InferShapeContext& c) {
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

KernelDTypeFn DTypeOfInput(std::string slot) {
  return [slot](const ExecutionContext& c) { return c.Input(slot).GetDType(); };
}

}  // namespace nabla::opkit
