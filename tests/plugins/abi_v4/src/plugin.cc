// The op plugin frozen at version 4 of nabla's C ABI (tests/plugins/abi_v4):
// what version 4 added, each used once.
//   abi_v4_copy: Out = a copy of X with storage of its own (tensor_copy);
//   abi_v4_zeros_like: zeros of X's shape and dtype, X a no-buffer input
//     (op_input_no_buffer, kernel_input_var);
//   abi_v4_shift: Out = X + Shift, whose program pass folds a constant
//     Shift into a scale op (op_rewrites and the pass_* functions, with
//     pass_evaluate_on_host).
// Never edit this file (README.md).
#include <algorithm>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Tensor;

// Before backward: where every op Shift depends on is constant, replaces
// abi_v4_shift by scale (scale 1, bias = Shift's value: the same bits),
// gives the scale's Out X's dtype and shape, and removes the ops that
// computed Shift, and their vars, when nothing else reads what they wrote.
size_t FoldShift(nabla::ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  nabla::BlockDesc& block = *program.Root();
  size_t changed = 0;
  for (size_t i = 0; i < block.OpSize(); ++i) {
    if (block.Op(i)->Type() != "abi_v4_shift") continue;
    const std::string x = block.Op(i)->Input("X").at(0), shift = block.Op(i)->Input("Shift").at(0),
                      out = block.Op(i)->Output("Out").at(0);
    // The ops before i that Shift depends on, in program order.
    std::set<std::string> needed = {shift}, written;
    std::vector<size_t> producers;
    for (size_t j = i; j-- > 0;) {
      const OpDesc& p = *block.Op(j);
      const std::vector<std::string> outs = p.OutputArgumentNames();
      if (std::none_of(outs.begin(), outs.end(), [&](const std::string& n) { return needed.count(n) != 0; })) continue;
      producers.insert(producers.begin(), j);
      written.insert(outs.begin(), outs.end());
      for (const std::string& n : p.InputArgumentNames()) needed.insert(n);
    }
    if (producers.empty()) continue;  // a fed Shift
    float value = 0.0f;
    try {
      const auto& t = nabla::EvaluateOnHost(block, producers, shift);
      if (t.GetDType() != DType::kFloat32 || t.Numel() != 1) continue;
      value = t.Data<float>()[0];
    } catch (const nabla::Error&) {
      continue;  // not constant (a feed, a parameter, random numbers)
    }
    block.RemoveOps(i, i + 1);
    OpDesc* scale = block.InsertOp(i, std::make_unique<OpDesc>(OpDesc("scale", {{"X", {x}}}, {{"Out", {out}}}, {})));
    scale->SetAttr("scale", 1.0f);
    scale->SetAttr("bias", value);
    scale->SetAttr("bias_after_scale", true);
    nabla::FillDefaultAttrs(*scale, *nabla::CurrentRegistry());
    if (const nabla::VarDesc* xv = block.FindVarRecursive(x)) {
      nabla::VarDesc* ov = block.Var(out);
      ov->SetDType(xv->GetDType());
      ov->MarkDTypeKnown(xv->HasDType());
      ov->SetShape(xv->GetShape());
    }
    bool dead = true;
    for (const std::string& n : written) {
      const nabla::VarDesc* v = block.FindVarRecursive(n);
      dead = dead && !keep.count(n) && !(v && v->Persistable());
    }
    for (size_t b = 0; b < program.Size(); ++b)
      for (size_t k = 0; k < program.Block(b)->OpSize(); ++k) {
        if (b == 0 && std::binary_search(producers.begin(), producers.end(), k)) continue;
        for (const std::string& n : program.Block(b)->Op(k)->InputArgumentNames()) dead = dead && !written.count(n);
      }
    if (dead) {
      for (size_t j = producers.size(); j-- > 0;) block.RemoveOps(producers[j], producers[j] + 1);
      for (const std::string& n : written) block.RemoveVar(n);
      i -= producers.size();
    }
    ++changed;
  }
  return changed;
}

}  // namespace

NABLA_REGISTER_OPS(abi_v4) {
  registrar.Op("abi_v4_copy", __FILE__, __LINE__)
      .Doc("Out = a copy of X, float32.")
      .Input("X", "(Tensor) float32")
      .Output("Out", "(Tensor) X's values, in storage of its own")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel(
      "abi_v4_copy", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X"), ctx.GetDevice()); }, __FILE__,
      __LINE__);

  registrar.Op("abi_v4_zeros_like", __FILE__, __LINE__)
      .Doc("Out = zeros of X's shape and dtype; X's values are not read.")
      .Input("X", "(Tensor) gives the shape and dtype")
      .Output("Out", "(Tensor) zeros")
      .NoBufferInput("X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  for (const DType dtype : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel(
        "abi_v4_zeros_like", nabla::DeviceType::kCPU, dtype,
        [](const ExecutionContext& ctx) {
          const Tensor& x = ctx.InputVar("X")->GetTensor();
          Tensor* out = ctx.Output("Out");
          void* p = out->Allocate(ctx.GetDevice(), x.GetDType(), x.GetShape());
          if (out->Bytes() != 0) std::memset(p, 0, out->Bytes());
        },
        __FILE__, __LINE__);

  registrar.Op("abi_v4_shift", __FILE__, __LINE__)
      .Doc("Out = X + Shift, float32; a constant Shift is folded into a scale op before backward.")
      .Input("X", "(Tensor) float32")
      .Input("Shift", "(Tensor) float32, one element")
      .Output("Out", "(Tensor) X's shape")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>()
      .RewritesBeforeBackward({"fold_shift", &FoldShift});
  registrar.Kernel(
      "abi_v4_shift", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        const Tensor& shift = ctx.Input("Shift");
        NABLA_ENFORCE(shift.Numel() == 1, kInvalidArgument, "abi_v4_shift: Shift must hold one element, not ",
                      shift.Numel());
        const float s = shift.Data<float>()[0];
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        for (int64_t i = 0; i < x.Numel(); ++i) out[i] = x.Data<float>()[i] + s;
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
