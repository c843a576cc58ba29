// A plugin on the C ABI through the C++ SDK that computes with the CPU
// backend's math (nabla/cpu/cpu.h and vmath.h, which the SDK maps to
// nabla/sdk/cpu.h; C ABI version 3, the row kernels version 4) and makes
// views:
//   toy_gemm: Out = alpha * op(X) * op(Y), float32 and float64 (cpu::Gemm);
//     `bad_ld` hands the table a too short leading dimension; `bf16` 1 or 2
//     (float32): X and Y rounded to bfloat16 and multiplied by
//     cpu::GemmBf16 into a float32 Out (1) or a bfloat16 product widened
//     back (2) (C ABI version 4);
//   toy_gemm_bias_act: Out = act(X * Y + Bias) by cpu::GemmBiasAct (C ABI
//     version 5) with toy_gemm_epilogue.h's epilogue, `lib` the forced
//     library (-1: none), `fail` an epilogue that throws;
//   toy_vmath: Out = tanh / gelu / gelu's tanh form of X, or gelu's
//     gradient with Y as dy (fn 3, 4), float32;
//   toy_view: Out = X with shape `shape`, sharing X's data;
//   toy_rows: the row kernels of nabla/cpu/vmath.h, SumArrays and the
//     bfloat16 conversions (C ABI version 4) row by row over X [rows, n]
//     and Y [rows, n], and what oneDNN users share (toy_rows.h says what
//     each fn writes).
// c_abi_test compares each with nabla's own cpu:: functions, bit for bit.
#include <type_traits>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/plugin.h"
#include "toy_gemm_epilogue.h"
#include "toy_rows.h"

namespace {

template <typename T>
void GemmKernel(const nabla::ExecutionContext& ctx) {
  const nabla::Tensor& x = ctx.Input("X");
  const nabla::Tensor& y = ctx.Input("Y");
  const bool ta = ctx.Attr<bool>("trans_x"), tb = ctx.Attr<bool>("trans_y");
  const nabla::Shape xs = x.GetShape(), ys = y.GetShape();
  const int64_t m = ta ? xs[1] : xs[0], k = ta ? xs[0] : xs[1], n = tb ? ys[0] : ys[1];
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {m, n});
  const int64_t lda = ctx.Attr<bool>("bad_ld") ? 0 : xs[1];
  if constexpr (std::is_same_v<T, float>) {
    if (const int bf16 = ctx.Attr<int>("bf16")) {
      std::vector<nabla::bfloat16> xb(x.Numel()), yb(y.Numel()), ob(m * n);
      nabla::cpu::ConvertToBf16(x.Data<float>(), xb.data(), x.Numel());
      nabla::cpu::ConvertToBf16(y.Data<float>(), yb.data(), y.Numel());
      if (bf16 == 1) {
        nabla::cpu::GemmBf16(ta, tb, m, n, k, ctx.Attr<float>("alpha"), xb.data(), lda, yb.data(), ys[1], 0.0f, out, n);
      } else {
        nabla::cpu::GemmBf16(ta, tb, m, n, k, ctx.Attr<float>("alpha"), xb.data(), lda, yb.data(), ys[1], ob.data(), n);
        nabla::cpu::ConvertFromBf16(ob.data(), out, m * n);
      }
      return;
    }
  }
  nabla::cpu::Gemm(ta, tb, m, n, k, static_cast<T>(ctx.Attr<float>("alpha")), x.Data<T>(), lda, y.Data<T>(), ys[1],
                   T(0), out, n);
}

template <typename T>
void GemmBiasActKernel(const nabla::ExecutionContext& ctx) {
  const nabla::Tensor& x = ctx.Input("X");
  const nabla::Tensor& y = ctx.Input("Y");
  const int64_t m = x.GetShape()[0], k = x.GetShape()[1], n = y.GetShape()[1];
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {m, n});
  const T* bias = ctx.HasInput("Bias") ? ctx.Input("Bias").Data<T>() : nullptr;
  const int act = ctx.Attr<int>("act"), lib = ctx.Attr<int>("lib");
  nabla::toy::BiasActEpilogue<T> e{out, n, bias, act, ctx.Attr<bool>("fail")};
  const nabla::cpu::GemmLib forced = lib == 1 ? nabla::cpu::GemmLib::kOneDnn : nabla::cpu::GemmLib::kOpenBlas;
  nabla::cpu::GemmBiasAct(lib < 0 ? nullptr : &forced, m, n, k, x.Data<T>(), k, y.Data<T>(), n, bias,
                          static_cast<nabla::cpu::GemmAct>(act), out, n, &nabla::toy::BiasActEpilogue<T>::Run, &e);
}

}  // namespace

NABLA_REGISTER_OPS(toy_sdk_cpu_math) {
  registrar.Op("toy_gemm_bias_act", __FILE__, __LINE__)
      .Doc("Out = act(X * Y + Bias), X [M, K], Y [K, N], Bias [N].")
      .Input("X", "(Tensor) [M, K]")
      .Input("Y", "(Tensor) [K, N]")
      .Input("Bias", "(Tensor, optional) [N]", nabla::kDispensable)
      .Output("Out", "(Tensor) [M, N]")
      .Attr<int>("act", 0, "(int) 0 identity, 1 relu, 2 tanh, 3 sigmoid")
      .Attr<int>("lib", -1, "(int) the forced library: -1 none, 0 OpenBLAS, 1 oneDNN")
      .Attr<bool>("fail", false, "(bool) the epilogue throws")
      .InferShape([](nabla::InferShapeContext& c) {
        c.SetOutputShape("Out", {c.InputShape("X")[0], c.InputShape("Y")[1]});
        c.SetOutputDType("Out", c.InputDType("X"));
      });
  registrar.Kernel("toy_gemm_bias_act", nabla::DeviceType::kCPU, nabla::DType::kFloat32, GemmBiasActKernel<float>,
                   __FILE__, __LINE__);
  registrar.Kernel("toy_gemm_bias_act", nabla::DeviceType::kCPU, nabla::DType::kFloat64, GemmBiasActKernel<double>,
                   __FILE__, __LINE__);

  registrar.Op("toy_gemm", __FILE__, __LINE__)
      .Doc("Out = alpha * op(X) * op(Y), X and Y 2-D.")
      .Input("X", "(Tensor) [M, K], or [K, M] with trans_x")
      .Input("Y", "(Tensor) [K, N], or [N, K] with trans_y")
      .Output("Out", "(Tensor) [M, N]")
      .Attr<bool>("trans_x", false, "(bool) transpose X")
      .Attr<bool>("trans_y", false, "(bool) transpose Y")
      .Attr<float>("alpha", 1.0f, "(float) the product's scale")
      .Attr<bool>("bad_ld", false, "(bool) pass lda = 0, for the error path")
      .Attr<int>("bf16", 0, "(int) float32 only: 1 bfloat16 GEMM into float32, 2 into bfloat16")
      .InferShape([](nabla::InferShapeContext& c) {
        const nabla::Shape x = c.InputShape("X"), y = c.InputShape("Y");
        const bool ta = c.Attr<bool>("trans_x"), tb = c.Attr<bool>("trans_y");
        c.SetOutputShape("Out", {ta ? x[1] : x[0], tb ? y[0] : y[1]});
        c.SetOutputDType("Out", c.InputDType("X"));
      });
  registrar.Kernel("toy_gemm", nabla::DeviceType::kCPU, nabla::DType::kFloat32, GemmKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("toy_gemm", nabla::DeviceType::kCPU, nabla::DType::kFloat64, GemmKernel<double>, __FILE__, __LINE__);

  registrar.Op("toy_vmath", __FILE__, __LINE__)
      .Doc("Out = f(X) by fn: 0 tanh, 1 gelu, 2 gelu (tanh form), 3 and 4 their gradients with Y as dy.")
      .Input("X", "(Tensor) float32")
      .Input("Y", "(Tensor, optional) dy for fn 3 and 4", nabla::kDispensable)
      .Output("Out", "(Tensor) f(X)")
      .Attr<int>("fn", 0, "(int) the function")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
  registrar.Kernel(
      "toy_vmath", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        const int fn = ctx.Attr<int>("fn");
        const int64_t n = x.Numel();
        if (fn == 0) nabla::cpu::Tanh(x.Data<float>(), out, n);
        if (fn == 1 || fn == 2) nabla::cpu::Gelu(x.Data<float>(), out, n, fn == 2);
        if (fn == 3 || fn == 4) nabla::cpu::GeluGrad(x.Data<float>(), ctx.Input("Y").Data<float>(), out, n, fn == 4);
      },
      __FILE__, __LINE__);

  registrar.Op("toy_rows", __FILE__, __LINE__)
      .Doc("Row kernels by fn over the rows of X and Y (tests/plugins/toy_sdk_cpu_math.cc, RowRun).")
      .Input("X", "(Tensor) float32 [rows, n]")
      .Input("Y", "(Tensor) float32 [rows, n]")
      .Output("Out", "(Tensor) [rows, 2 n + 3]")
      .Output("Acc", "(Tensor) [2, n]: fn 7's dscale and dbias")
      .Attr<int>("fn", 0, "(int) the kernel")
      .Attr<float>("shift", 0.0f, "(float) ExpShifted's shift, ScaleRow's scale")
      .InferShape([](nabla::InferShapeContext& c) {
        const nabla::Shape x = c.InputShape("X");
        c.SetOutputShape("Out", {x[0], 2 * x[1] + 3});
        c.SetOutputShape("Acc", {2, x[1]});
        c.SetOutputDType("Out", c.InputDType("X"));
        c.SetOutputDType("Acc", c.InputDType("X"));
      });
  registrar.Kernel(
      "toy_rows", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        const int64_t rows = x.GetShape()[0], n = x.GetShape()[1], w = 2 * n + 3;
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), {rows, w});
        float* acc = ctx.Output("Acc")->Allocate<float>(ctx.GetDevice(), {2, n});
        for (int64_t i = 0; i < rows * w; ++i) out[i] = 0.0f;
        for (int64_t i = 0; i < 2 * n; ++i) acc[i] = 0.0f;
        const float *px = x.Data<float>(), *py = ctx.Input("Y").Data<float>();
        const int fn = ctx.Attr<int>("fn");
        const float shift = ctx.Attr<float>("shift");
        auto row = [&](int64_t r) {
          nabla::toy::RowRun(fn, shift, px + r * n, py + r * n, py + (r + 1) % rows * n, n, out + r * w, acc);
        };
        if (fn == 7 || fn == 10) {  // rows add into Acc, or take budgets: in order
          for (int64_t r = 0; r < rows; ++r) row(r);
        } else {
          nabla::cpu::ParallelFor(rows, 1, [&](int64_t b, int64_t e) {
            for (int64_t r = b; r < e; ++r) row(r);
          });
        }
      },
      __FILE__, __LINE__);

  registrar.Op("toy_view", __FILE__, __LINE__)
      .Doc("Out = X with shape `shape` (as many elements), sharing X's data.")
      .Input("X", "(Tensor) input")
      .Output("Out", "(Tensor) the view")
      .Attr<std::vector<int>>("shape", {}, "(list of int) the view's shape")
      .InferShape([](nabla::InferShapeContext& c) {
        const std::vector<int> s = c.Attr<std::vector<int>>("shape");
        c.SetOutputShape("Out", nabla::Shape(s.begin(), s.end()));
        c.SetOutputDType("Out", c.InputDType("X"));
      });
  registrar.Kernel(
      "toy_view", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const std::vector<int> s = ctx.Attr<std::vector<int>>("shape");
        nabla::Tensor* out = ctx.Output("Out");
        out->ShareDataWith(ctx.Input("X"));
        out->Resize(nabla::Shape(s.begin(), s.end()));
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
