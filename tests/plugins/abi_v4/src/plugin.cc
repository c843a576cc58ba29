// The op plugin frozen at version 4 of nabla's C ABI (tests/plugins/abi_v4):
// what version 4 added, each used once.
//   abi_v4_copy: Out = a copy of X with storage of its own (tensor_copy);
//   abi_v4_zeros_like: zeros of X's shape and dtype, X a no-buffer input
//     (op_input_no_buffer, kernel_input_var);
//   abi_v4_shift: Out = X + Shift, whose program pass folds a constant
//     Shift into a scale op (op_rewrites and the pass_* functions, with
//     pass_evaluate_on_host);
//   abi_v4_softmax, abi_v4_layer_norm(_grad), abi_v4_dot, abi_v4_sum,
//     abi_v4_bf16: the CPU backend's row kernels (RowMax, ExpShiftedSum,
//     ScaleRow, SoftmaxGradRow, LayerNormRow, LayerNormGradRow, DotRow),
//     SumArrays and the bfloat16 conversions;
//   abi_v4_gemm_bf16: the backend's bfloat16 GEMM (GemmBf16);
//   abi_v4_onednn: what the backend shares between oneDNN calls
//     (HasBf16Gemm, DnnlThreadBudget, DnnlScratchpad).
// Never edit this file (README.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Tensor;

// Before backward, where scale is registered: where every op Shift depends
// on is constant, replaces abi_v4_shift by scale (scale 1, bias = Shift's
// value: the same bits), gives the scale's Out X's dtype and shape, and
// removes the ops that computed Shift, and their vars, when nothing else
// reads what they wrote.
size_t FoldShift(nabla::ProgramDesc& program, const std::unordered_set<std::string>& keep) {
  if (!nabla::CurrentRegistry()->Find("scale")) return 0;  // no op to fold into
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

// Softmax of each row of X [rows, n] (RowMax, ExpShiftedSum, ScaleRow), or
// with `grad`, X being softmax's Out, its gradient (SoftmaxGradRow).
void SoftmaxKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t rows = x.Dim(0), n = x.Dim(1);
  float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
  const float* dy = ctx.Attr<bool>("grad") ? ctx.Input("Out@GRAD").Data<float>() : nullptr;
  for (int64_t r = 0; r < rows && n > 0; ++r) {
    const float* xr = x.Data<float>() + r * n;
    float* yr = out + r * n;
    if (dy) {
      nabla::cpu::SoftmaxGradRow(xr, dy + r * n, yr, n);
    } else {
      const float sum = nabla::cpu::ExpShiftedSum(xr, nabla::cpu::RowMax(xr, n), yr, n);
      nabla::cpu::ScaleRow(yr, 1.0f / sum, n);
    }
  }
}

// layer_norm over each row of X [rows, n] (LayerNormRow).
void LayerNormKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t rows = x.Dim(0), n = x.Dim(1);
  float* y = ctx.Output("Y")->Allocate<float>(ctx.GetDevice(), x.GetShape());
  float* mean = ctx.Output("Mean")->Allocate<float>(ctx.GetDevice(), {rows});
  float* var = ctx.Output("Variance")->Allocate<float>(ctx.GetDevice(), {rows});
  for (int64_t r = 0; r < rows; ++r)
    nabla::cpu::LayerNormRow(x.Data<float>() + r * n, n, ctx.Input("Scale").Data<float>(),
                             ctx.Input("Bias").Data<float>(), ctx.Attr<float>("epsilon"), y + r * n, mean + r, var + r);
}

// Its gradient (LayerNormGradRow), rstd = 1 / sqrt(variance + epsilon).
void LayerNormGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t rows = x.Dim(0), n = x.Dim(1);
  float* dx = ctx.Output("X@GRAD")->Allocate<float>(ctx.GetDevice(), x.GetShape());
  float* dscale = ctx.Output("Scale@GRAD")->Allocate<float>(ctx.GetDevice(), {n});
  float* dbias = ctx.Output("Bias@GRAD")->Allocate<float>(ctx.GetDevice(), {n});
  std::fill(dscale, dscale + n, 0.0f);
  std::fill(dbias, dbias + n, 0.0f);
  const float eps = ctx.Attr<float>("epsilon");
  for (int64_t r = 0; r < rows; ++r) {
    const float mean = ctx.Input("Mean").Data<float>()[r];
    const float rstd = 1.0f / std::sqrt(ctx.Input("Variance").Data<float>()[r] + eps);
    nabla::cpu::LayerNormGradRow(x.Data<float>() + r * n, ctx.Input("Y@GRAD").Data<float>() + r * n, n, mean, rstd,
                                 ctx.Input("Scale").Data<float>(), dx + r * n, dscale, dbias);
  }
}

// Out[r] = sum(X[r] * Y[r]) over rows of [rows, n] (DotRow).
void DotKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const int64_t rows = x.Dim(0), n = x.Dim(1);
  float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), {rows});
  for (int64_t r = 0; r < rows; ++r)
    out[r] = nabla::cpu::DotRow(x.Data<float>() + r * n, ctx.Input("Y").Data<float>() + r * n, n);
}

// What the CPU backend shares between oneDNN calls: Out = [HasBf16Gemm,
// the team a thread budget grants, whether a scratchpad of `bytes` is
// 64-byte aligned].
void OneDnnKernel(const ExecutionContext& ctx) {
  float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), {3});
  nabla::cpu::DnnlThreadBudget budget;
  out[0] = nabla::cpu::HasBf16Gemm() ? 1.0f : 0.0f;
  out[1] = static_cast<float>(budget.Granted());
  const auto bytes = static_cast<size_t>(ctx.Attr<int>("bytes"));
  out[2] = reinterpret_cast<uintptr_t>(nabla::cpu::DnnlScratchpad(bytes)) % 64 == 0 ? 1.0f : 0.0f;
}

// Out = X * W with bfloat16 X [M, K] and W [K, N], float32 Out (GemmBf16).
void GemmBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const int64_t m = x.Dim(0), k = x.Dim(1), n = w.Dim(1);
  float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), {m, n});
  nabla::cpu::GemmBf16(false, false, m, n, k, 1.0f, x.Data<nabla::bfloat16>(), k, w.Data<nabla::bfloat16>(), n, 0.0f,
                       out, n);
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

  registrar.Op("abi_v4_softmax", __FILE__, __LINE__)
      .Doc("Out = softmax of each row of X [rows, n], float32; with `grad`, X is softmax's Out and Out its gradient.")
      .Input("X", "(Tensor) [rows, n]")
      .Input("Out@GRAD", "(Tensor, optional) with `grad`: dy", nabla::kDispensable)
      .Output("Out", "(Tensor) X's shape")
      .Attr<bool>("grad", false, "(bool) compute the gradient instead")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
  registrar.Kernel("abi_v4_softmax", nabla::DeviceType::kCPU, DType::kFloat32, SoftmaxKernel, __FILE__, __LINE__);

  registrar.Op("abi_v4_layer_norm", __FILE__, __LINE__)
      .Doc("Y = layer_norm of each row of X [rows, n], float32, with each row's Mean and Variance.")
      .Input("X", "(Tensor) [rows, n]")
      .Input("Scale", "(Tensor) [n]")
      .Input("Bias", "(Tensor) [n]")
      .Output("Y", "(Tensor) X's shape")
      .Output("Mean", "(Tensor) [rows]")
      .Output("Variance", "(Tensor) [rows], biased")
      .Attr<float>("epsilon", 1e-5f, "(float) added to the variance")
      .InferShape([](InferShapeContext& c) {
        c.ShareShapeAndDType("X", "Y");
        for (const char* out : {"Mean", "Variance"}) {
          c.SetOutputShape(out, {c.InputShape("X")[0]});
          c.SetOutputDType(out, DType::kFloat32);
        }
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v4_layer_norm", nabla::DeviceType::kCPU, DType::kFloat32, LayerNormKernel, __FILE__, __LINE__);
  registrar.Op("abi_v4_layer_norm_grad", __FILE__, __LINE__)
      .Doc("Gradient of abi_v4_layer_norm.")
      .Input("X", "(Tensor) [rows, n]")
      .Input("Scale", "(Tensor) [n]")
      .Input("Mean", "(Tensor) [rows]")
      .Input("Variance", "(Tensor) [rows]")
      .Input("Y@GRAD", "(Tensor) [rows, n]")
      .Output("X@GRAD", "(Tensor) [rows, n]")
      .Output("Scale@GRAD", "(Tensor) [n]")
      .Output("Bias@GRAD", "(Tensor) [n]")
      .Attr<float>("epsilon", 1e-5f, "(float) added to the variance")
      .InferShape([](InferShapeContext& c) {
        c.ShareShapeAndDType("X", "X@GRAD");
        c.ShareShapeAndDType("Scale", "Scale@GRAD");
        c.ShareShapeAndDType("Scale", "Bias@GRAD");
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v4_layer_norm_grad", nabla::DeviceType::kCPU, DType::kFloat32, LayerNormGradKernel, __FILE__,
                   __LINE__);

  registrar.Op("abi_v4_sum", __FILE__, __LINE__)
      .Doc("Out = X[0] + X[1] + ..., in that order, float32.")
      .Input("X", "(Tensor) float32, one shape", nabla::kDuplicable)
      .Output("Out", "(Tensor) X[0]'s shape")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel(
      "abi_v4_sum", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        std::vector<const float*> xs;
        for (const Tensor* x : ctx.MultiInput("X")) xs.push_back(x->Data<float>());
        const Tensor& x0 = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x0.GetShape());
        nabla::cpu::SumArrays(xs.data(), static_cast<int64_t>(xs.size()), out, x0.Numel());
      },
      __FILE__, __LINE__);

  registrar.Op("abi_v4_bf16", __FILE__, __LINE__)
      .Doc("Out = X rounded to bfloat16; Back = Out as float32.")
      .Input("X", "(Tensor) float32")
      .Output("Out", "(Tensor) bfloat16")
      .Output("Back", "(Tensor) float32")
      .InferShape([](InferShapeContext& c) {
        c.ShareShapeAndDType("X", "Back");
        c.SetOutputShape("Out", c.InputShape("X"));
        c.SetOutputDType("Out", DType::kBFloat16);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel(
      "abi_v4_bf16", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        nabla::bfloat16* out = ctx.Output("Out")->Allocate<nabla::bfloat16>(ctx.GetDevice(), x.GetShape());
        nabla::cpu::ConvertToBf16(x.Data<float>(), out, x.Numel());
        float* back = ctx.Output("Back")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        nabla::cpu::ConvertFromBf16(out, back, x.Numel());
      },
      __FILE__, __LINE__);

  registrar.Op("abi_v4_dot", __FILE__, __LINE__)
      .Doc("Out[r] = sum(X[r] * Y[r]) for each row of X, Y [rows, n], float32.")
      .Input("X", "(Tensor) [rows, n]")
      .Input("Y", "(Tensor) [rows, n]")
      .Output("Out", "(Tensor) [rows]")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {c.InputShape("X")[0]});
        c.SetOutputDType("Out", DType::kFloat32);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v4_dot", nabla::DeviceType::kCPU, DType::kFloat32, DotKernel, __FILE__, __LINE__);

  registrar.Op("abi_v4_onednn", __FILE__, __LINE__)
      .Doc("Out = [oneDNN runs bfloat16 GEMMs natively, a oneDNN call's team, a scratchpad is 64-byte aligned].")
      .Output("Out", "(Tensor) float32 [3]")
      .Attr<int>("bytes", 256, "(int) the scratchpad's size")
      .KernelDType([](const ExecutionContext&) { return DType::kFloat32; })
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {3});
        c.SetOutputDType("Out", DType::kFloat32);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v4_onednn", nabla::DeviceType::kCPU, DType::kFloat32, OneDnnKernel, __FILE__, __LINE__);

  registrar.Op("abi_v4_gemm_bf16", __FILE__, __LINE__)
      .Doc("Out = X * W, X [M, K] and W [K, N] bfloat16, Out float32.")
      .Input("X", "(Tensor) bfloat16 [M, K]")
      .Input("W", "(Tensor) bfloat16 [K, N]")
      .Output("Out", "(Tensor) float32 [M, N]")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {c.InputShape("X")[0], c.InputShape("W")[1]});
        c.SetOutputDType("Out", DType::kFloat32);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v4_gemm_bf16", nabla::DeviceType::kCPU, DType::kBFloat16, GemmBf16Kernel, __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
