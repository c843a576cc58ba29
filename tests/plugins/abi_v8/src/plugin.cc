// The op plugin frozen at version 8 of nabla's C ABI (tests/plugins/abi_v8):
// what version 8 added, used once.
//   abi_v8_bias_relu: Out = max(X + Y, 0), Y [n] added to every row of X
//     [..., n]. Its bfloat16 kernel computes in float32 and rounds Out once,
//     and takes Y in float32 as well (op_bf16_takes_float32); its grad
//     kernel takes Y and Out@GRAD in either dtype. So mixed precision runs
//     it between two bfloat16 GEMMs without the casts around it, its bias
//     and the gradient the GEMM after it hands back staying float32.
//   abi_v8_copy: Out = X, declared as an op that moves data (MovesData: a
//     dtype cast commutes with it).
// Never edit this file (README.md).
#include <cstdint>
#include <type_traits>
#include <vector>

#include "nabla/plugin.h"

namespace {

using nabla::bfloat16;
using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::Tensor;

// A float32 or bfloat16 tensor's values as float32.
std::vector<float> Wide(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.Numel()));
  for (int64_t i = 0; i < t.Numel(); ++i)
    v[i] = t.GetDType() == DType::kFloat32 ? t.Data<float>()[i] : nabla::Bf16ToFloat(t.Data<bfloat16>()[i]);
  return v;
}

void InferBiasRelu(InferShapeContext& c) {
  const nabla::Shape x = c.InputShape("X"), y = c.InputShape("Y");
  NABLA_ENFORCE(!x.empty() && y.size() == 1 && y[0] == x.back(), kInvalidArgument, c.Where(),
                ": Y must be [n] for X [..., n]");
  const DType dx = c.InputDType("X"), dy = c.InputDType("Y");
  NABLA_ENFORCE(dx == dy || (dx == DType::kBFloat16 && dy == DType::kFloat32), kInvalidArgument, c.Where(),
                ": Y must have X's dtype, or float32 for a bfloat16 X");
  c.SetOutputShape("Out", x);
  c.SetOutputDType("Out", dx);
}

// T: the storage of X, Out and X@GRAD; sums and gradients in float32.
template <typename T>
T Store(float v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return nabla::FloatToBf16(v);
}
template <typename T>
float Load(T v) {
  if constexpr (std::is_same_v<T, float>)
    return v;
  else
    return nabla::Bf16ToFloat(v);
}

template <typename T>
void BiasReluKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const std::vector<float> y = Wide(ctx.Input("Y"));
  const int64_t n = static_cast<int64_t>(y.size());
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) {
    const float s = Load(x.Data<T>()[i]) + y[i % n];
    out[i] = Store<T>(s > 0.0f ? s : 0.0f);
  }
}

template <typename T>
void BiasReluGradKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& ty = ctx.Input("Y");
  const std::vector<float> y = Wide(ty);
  const std::vector<float> dout = Wide(ctx.Input("Out@GRAD"));
  const int64_t n = static_cast<int64_t>(y.size());
  std::vector<float> gy(static_cast<size_t>(n), 0.0f);
  T* gx = ctx.Output("X@GRAD")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) {
    const float d = Load(x.Data<T>()[i]) + y[i % n] > 0.0f ? dout[i] : 0.0f;
    gx[i] = Store<T>(d);
    gy[i % n] += d;
  }
  Tensor* dy = ctx.Output("Y@GRAD");
  if (ty.GetDType() == DType::kFloat32) {
    float* g = dy->Allocate<float>(ctx.GetDevice(), ty.GetShape());
    for (int64_t j = 0; j < n; ++j) g[j] = gy[j];
  } else {
    bfloat16* g = dy->Allocate<bfloat16>(ctx.GetDevice(), ty.GetShape());
    for (int64_t j = 0; j < n; ++j) g[j] = nabla::FloatToBf16(gy[j]);
  }
}

}  // namespace

NABLA_REGISTER_OPS(abi_v8_ops) {
  registrar.Op("abi_v8_bias_relu", __FILE__, __LINE__)
      .Doc("Out = max(X + Y, 0), Y [n] added to every row of X [..., n].")
      .Input("X", "(Tensor) float32 or bfloat16")
      .Input("Y", "(Tensor) [n]: X's dtype, or float32 for a bfloat16 X")
      .Output("Out", "(Tensor) X's shape and dtype")
      .InferShape(InferBiasRelu)
      .Bf16TakesFloat32({"Y"})
      .GradMaker<nabla::DefaultGradOpDescMaker>();
  registrar.DefaultGradOp("abi_v8_bias_relu", __FILE__, __LINE__)
      .InferShape([](InferShapeContext& c) {
        c.ShareShapeAndDType("X", "X@GRAD");
        c.ShareShapeAndDType("Y", "Y@GRAD");
      })
      .Bf16TakesFloat32({"Y", "Out@GRAD"});
  registrar.Op("abi_v8_copy", __FILE__, __LINE__)
      .Doc("Out = X.")
      .Input("X", "(Tensor)")
      .Output("Out", "(Tensor) X")
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .MovesData()
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel(
      "abi_v8_copy", nabla::DeviceType::kCPU, DType::kFloat32,
      [](const ExecutionContext& ctx) {
        const Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        for (int64_t i = 0; i < x.Numel(); ++i) out[i] = x.Data<float>()[i];
      },
      __FILE__, __LINE__);
  registrar.Kernel("abi_v8_bias_relu", nabla::DeviceType::kCPU, DType::kFloat32, BiasReluKernel<float>, __FILE__,
                   __LINE__);
  registrar.Kernel("abi_v8_bias_relu", nabla::DeviceType::kCPU, DType::kBFloat16, BiasReluKernel<bfloat16>, __FILE__,
                   __LINE__);
  registrar.Kernel("abi_v8_bias_relu_grad", nabla::DeviceType::kCPU, DType::kFloat32, BiasReluGradKernel<float>,
                   __FILE__, __LINE__);
  registrar.Kernel("abi_v8_bias_relu_grad", nabla::DeviceType::kCPU, DType::kBFloat16, BiasReluGradKernel<bfloat16>,
                   __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
