// The op plugin frozen at version 3 of nabla's C ABI (tests/plugins/abi_v3):
// what version 3 added, each used once.
//   abi_v3_linear: Out = X * W through the CPU backend's GEMM (cpu_gemm);
//   abi_v3_gelu: Out = gelu(X) through its vector math (cpu_vmath), its
//     gradient through cpu_gelu_grad;
//   abi_v3_fill: a tensor of shape ShapeTensor (or `shape`) filled with
//     `value` (infer_input_values, kernel_input_values, op_kernel_dtype);
//   abi_v3_flatten: X as [N, rest], a view of X's data (tensor_share);
//   abi_v3_scale_tanh: tanh(scale * X + bias), replacing scale + tanh in
//     the fusion pass (op_fuses).
// Never edit this file (README.md).
#include <cmath>
#include <memory>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Shape;
using nabla::Tensor;

// Out = X * W, X [M, K], W [K, N].
template <typename T>
void LinearKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const int64_t m = x.GetShape()[0], k = x.GetShape()[1], n = w.GetShape()[1];
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {m, n});
  nabla::cpu::Gemm(false, false, m, n, k, T(1), x.Data<T>(), k, w.Data<T>(), n, T(0), out, n);
}

// dX = dOut * W^T, dW = X^T * dOut.
template <typename T>
void LinearGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const Tensor& dout = ctx.Input("Out@GRAD");
  const int64_t m = x.GetShape()[0], k = x.GetShape()[1], n = w.GetShape()[1];
  if (Tensor* dx = ctx.Output("X@GRAD"))
    nabla::cpu::Gemm(false, true, m, k, n, T(1), dout.Data<T>(), n, w.Data<T>(), n, T(0),
                     dx->Allocate<T>(ctx.GetDevice(), {m, k}), k);
  if (Tensor* dw = ctx.Output("W@GRAD"))
    nabla::cpu::Gemm(true, false, k, n, m, T(1), x.Data<T>(), k, dout.Data<T>(), n, T(0),
                     dw->Allocate<T>(ctx.GetDevice(), {k, n}), n);
}

}  // namespace

NABLA_REGISTER_OPS(abi_v3) {
  nabla::GradCheckSpec matrix;
  matrix.name = "matrix";
  matrix.inputs.resize(2);
  matrix.inputs[0].slot = "X";
  matrix.inputs[0].shape = {3, 4};
  matrix.inputs[1].slot = "W";
  matrix.inputs[1].shape = {4, 2};
  registrar.Op("abi_v3_linear", __FILE__, __LINE__)
      .Doc("Out = X * W.")
      .Input("X", "(Tensor) [M, K]")
      .Input("W", "(Tensor) [K, N]")
      .Output("Out", "(Tensor) [M, N]")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {c.InputShape("X")[0], c.InputShape("W")[1]});
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .GradMaker([](const OpDesc& fwd, nabla_grad_context* g) {
        std::vector<std::unique_ptr<OpDesc>> ops;
        const nabla_api& api = nabla::Api();
        ops.push_back(std::make_unique<OpDesc>(
            "abi_v3_linear_grad",
            nabla::VarNameMap{
                {"X", fwd.Input("X")}, {"W", fwd.Input("W")}, {"Out@GRAD", {api.grad_name(g, 1, "Out", 0)}}},
            nabla::VarNameMap{{"X@GRAD", {api.grad_name(g, 0, "X", 0)}}, {"W@GRAD", {api.grad_name(g, 0, "W", 0)}}},
            nabla::AttributeMap{}));
        return ops;
      })
      .GradCheck(matrix);
  registrar.Op("abi_v3_linear_grad", __FILE__, __LINE__)
      .Doc("Gradient of abi_v3_linear.")
      .Input("X", "(Tensor) [M, K]")
      .Input("W", "(Tensor) [K, N]")
      .Input("Out@GRAD", "(Tensor) [M, N]")
      .Output("X@GRAD", "(Tensor) [M, K]", nabla::kDispensable)
      .Output("W@GRAD", "(Tensor) [K, N]", nabla::kDispensable)
      .InferShape([](InferShapeContext& c) {
        if (c.HasOutput("X@GRAD")) c.ShareShapeAndDType("X", "X@GRAD");
        if (c.HasOutput("W@GRAD")) c.ShareShapeAndDType("W", "W@GRAD");
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  for (const char* type : {"abi_v3_linear", "abi_v3_linear_grad"}) {
    const bool grad = type[13] == '_';
    registrar.Kernel(type, nabla::DeviceType::kCPU, DType::kFloat32,
                     grad ? nabla::KernelFn(LinearGradKernel<float>) : nabla::KernelFn(LinearKernel<float>), __FILE__,
                     __LINE__);
    registrar.Kernel(type, nabla::DeviceType::kCPU, DType::kFloat64,
                     grad ? nabla::KernelFn(LinearGradKernel<double>) : nabla::KernelFn(LinearKernel<double>), __FILE__,
                     __LINE__);
  }

  registrar.Op("abi_v3_gelu", __FILE__, __LINE__)
      .Doc("Out = gelu(X), float32.")
      .Input("X", "(Tensor) float32")
      .Input("Out@GRAD", "(Tensor, optional) with `grad`: dy", nabla::kDispensable)
      .Output("Out", "(Tensor) gelu(X), or with `grad` dy * gelu'(X)")
      .Attr<bool>("grad", false, "(bool) compute the gradient instead")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
  registrar.Kernel(
      "abi_v3_gelu", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        if (ctx.Attr<bool>("grad"))
          nabla::cpu::GeluGrad(x.Data<float>(), ctx.Input("Out@GRAD").Data<float>(), out, x.Numel(), false);
        else
          nabla::cpu::Gelu(x.Data<float>(), out, x.Numel(), false);
      },
      __FILE__, __LINE__);

  registrar.Op("abi_v3_fill", __FILE__, __LINE__)
      .Doc("Out = a float32 tensor of shape ShapeTensor (else `shape`), every element `value`.")
      .Input("ShapeTensor", "(Tensor, optional) the shape, 1-D int64", nabla::kDispensable | nabla::kNoGrad)
      .Output("Out", "(Tensor) float32")
      .Attr<std::vector<int>>("shape", {}, "(list of int) the shape without ShapeTensor")
      .Attr<float>("value", 0.0f, "(float) the value")
      .KernelDType([](const ExecutionContext&) { return DType::kFloat32; })
      .InferShape([](InferShapeContext& c) {
        Shape shape;
        if (!c.HasInput("ShapeTensor")) {
          const std::vector<int> s = c.Attr<std::vector<int>>("shape");
          shape.assign(s.begin(), s.end());
        } else if (c.IsRuntime()) {
          shape = Shape(static_cast<size_t>(c.InputShape("ShapeTensor")[0]));
          NABLA_ENFORCE(c.InputDType("ShapeTensor") == DType::kInt64, kInvalidArgument, c.Where(),
                        ": ShapeTensor must be int64");
          const nabla::HostTensor t = c.InputHostTensor("ShapeTensor");
          shape.assign(t.Data<int64_t>(), t.Data<int64_t>() + t.Numel());
        } else {
          shape = Shape(static_cast<size_t>(c.InputShape("ShapeTensor")[0]), -1);
        }
        c.SetOutputShape("Out", shape);
        c.SetOutputDType("Out", DType::kFloat32);
      });
  registrar.Kernel(
      "abi_v3_fill", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        Shape shape;
        if (ctx.HasInput("ShapeTensor")) {
          const nabla::HostTensor t = ctx.InputHostTensor("ShapeTensor");
          shape.assign(t.Data<int64_t>(), t.Data<int64_t>() + t.Numel());
        } else {
          const std::vector<int> s = ctx.Attr<std::vector<int>>("shape");
          shape.assign(s.begin(), s.end());
        }
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), shape);
        for (int64_t i = 0; i < nabla::NumElements(shape); ++i) out[i] = ctx.Attr<float>("value");
      },
      __FILE__, __LINE__);

  registrar.Op("abi_v3_flatten", __FILE__, __LINE__)
      .Doc("Out = X as [dim 0, the product of the rest], sharing X's data.")
      .Input("X", "(Tensor) rank >= 1")
      .Output("Out", "(Tensor) rank 2")
      .InferShape([](InferShapeContext& c) {
        const Shape x = c.InputShape("X");
        int64_t rest = 1;
        for (size_t i = 1; i < x.size(); ++i) rest = (rest < 0 || x[i] < 0) ? -1 : rest * x[i];
        c.SetOutputShape("Out", {x[0], rest});
        c.SetOutputDType("Out", c.InputDType("X"));
      });
  registrar.Kernel(
      "abi_v3_flatten", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        Tensor* out = ctx.Output("Out");
        out->ShareDataWith(x);
        out->Resize({x.GetShape()[0], x.Numel() / x.GetShape()[0]});
      },
      __FILE__, __LINE__);

  registrar.Op("abi_v3_scale_tanh", __FILE__, __LINE__)
      .Doc("Out = tanh(scale * X + bias), float32; replaces scale + tanh.")
      .Input("X", "(Tensor) float32")
      .Output("Out", "(Tensor) X's shape")
      .Attr<float>("scale", 1.0f, "(float) the factor")
      .Attr<float>("bias", 0.0f, "(float) added after scaling")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .Fuses(nabla::FusionPattern(
          {"scale", "tanh"},
          [](const std::vector<const OpDesc*>& m) -> std::unique_ptr<OpDesc> {
            if (!m[0]->Attr<bool>("bias_after_scale") || !m[0]->Input("ScaleTensor").empty()) return nullptr;
            return std::make_unique<OpDesc>(
                "abi_v3_scale_tanh", nabla::VarNameMap{{"X", m[0]->Input("X")}},
                nabla::VarNameMap{{"Out", m[1]->Output("Out")}},
                nabla::AttributeMap{{"scale", m[0]->Attr<float>("scale")}, {"bias", m[0]->Attr<float>("bias")}});
          },
          [](const nabla::BlockDesc& block, const std::vector<const OpDesc*>& m) {
            const nabla::VarDesc* x = block.FindVarRecursive(m[0]->Input("X").at(0));
            return x && x->HasDType() && x->GetDType() == DType::kFloat32;
          }));
  registrar.Kernel(
      "abi_v3_scale_tanh", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        const float s = ctx.Attr<float>("scale"), b = ctx.Attr<float>("bias");
        for (int64_t i = 0; i < x.Numel(); ++i) out[i] = x.Data<float>()[i] * s + b;
        nabla::cpu::Tanh(out, out, x.Numel());
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
