// The op plugin frozen at version 5 of nabla's C ABI (tests/plugins/abi_v5):
// what version 5 added, each used once.
//   abi_v5_pack: Out = a tensor array whose entries share X[0], X[1], ...
//     plus one entry that holds no data; var-type inference makes Out a
//     tensor array (op_infer_var_type, pass_var_type, pass_var_set_type);
//     the kernel reaches Out's var (kernel_var), sets its type, resizes it
//     and assigns its entries (var_set_type, var_array_resize,
//     var_array_entry, tensor_assign);
//   abi_v5_unpack: Out[i] = a copy of entry i of the tensor array X, and
//     Written[i] = whether entry i holds data, for every entry; inference
//     refuses an X that is not a tensor array (infer_input_var_type), the
//     kernel reads X's type, length and entries (var_type, var_array_size,
//     tensor_initialized) and writes Written through its var's tensor
//     (var_tensor);
//   abi_v5_fc: Out = act(X * W + Bias), the backend's GEMM with a fused bias
//     and activation (cpu_gemm_bias_act), the plugin's own epilogue where
//     the backend does not fuse.
// Never edit this file (README.md).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;
using nabla::Tensor;
using nabla::VarType;

void PackKernel(const ExecutionContext& ctx) {
  nabla::Variable* out = ctx.OutputVar("Out");
  out->SetType(VarType::kTensorArray);
  const std::vector<const Tensor*> xs = ctx.MultiInput("X");
  out->ResizeArray(xs.size() + 1);
  for (size_t i = 0; i < xs.size(); ++i) out->ArrayEntry(i).AssignFrom(*xs[i]);
  out->ArrayEntry(xs.size()).Reset();
}

void UnpackKernel(const ExecutionContext& ctx) {
  const nabla::Variable* x = ctx.InputVar("X");
  NABLA_ENFORCE(x->Type() == VarType::kTensorArray, kInvalidArgument, "abi_v5_unpack: X must be a tensor array, not ",
                nabla::VarTypeName(x->Type()));
  const size_t n = x->ArraySize();
  Tensor& written = ctx.OutputVar("Written")->GetTensor();
  int64_t* w = written.Allocate<int64_t>(ctx.GetDevice(), {static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) w[i] = x->ArrayEntry(i).IsInitialized() ? 1 : 0;
  const std::vector<Tensor*> outs = ctx.MultiOutput("Out");
  NABLA_ENFORCE(outs.size() <= n, kInvalidArgument, "abi_v5_unpack: ", outs.size(), " outputs but the array holds ", n,
                " entries");
  for (size_t i = 0; i < outs.size(); ++i) {
    NABLA_ENFORCE(x->ArrayEntry(i).IsInitialized(), kInvalidArgument, "abi_v5_unpack: entry ", i, " holds no data");
    outs[i]->CopyFrom(x->ArrayEntry(i), ctx.GetDevice());
  }
}

// Adds the bias and applies the activation (0 identity, 1 relu, 2 tanh, 3
// sigmoid) to a block of C, where the backend hands one back.
template <typename T>
struct Epilogue {
  T* c;
  int64_t ldc;
  const T* bias;
  int act;
  static void Run(void* self, int64_t row, int64_t col, int64_t rows, int64_t cols) {
    const Epilogue& e = *static_cast<const Epilogue*>(self);
    for (int64_t r = row; r < row + rows; ++r)
      for (int64_t j = col; j < col + cols; ++j) {
        T& o = e.c[r * e.ldc + j];
        if (e.bias) o += e.bias[j];
        if (e.act == 1) o = o > T(0) ? o : T(0);
        if (e.act == 2) o = std::tanh(o);
        if (e.act == 3) o = T(1) / (T(1) + std::exp(-o));
      }
  }
};

template <typename T>
void FcKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& w = ctx.Input("W");
  const int act = ctx.Attr<int>("act");
  NABLA_ENFORCE(act >= 0 && act <= 3, kInvalidArgument, "abi_v5_fc: act must be 0 to 3, not ", act);
  const nabla::Shape xs = x.GetShape(), ws = w.GetShape();
  const int64_t m = xs.at(0), k = xs.at(1), n = ws.at(1);
  const T* bias = ctx.HasInput("Bias") ? ctx.Input("Bias").Data<T>() : nullptr;
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), {m, n});
  Epilogue<T> e{out, n, bias, act};
  nabla::cpu::GemmBiasAct(nullptr, m, n, k, x.Data<T>(), k, w.Data<T>(), n, bias, static_cast<nabla::cpu::GemmAct>(act),
                          out, n, &Epilogue<T>::Run, &e);
}

}  // namespace

NABLA_REGISTER_OPS(abi_v5_ops) {
  registrar.Op("abi_v5_pack", __FILE__, __LINE__)
      .Doc("Out = a tensor array of X[0], X[1], ... (sharing their data) and one entry that holds none.")
      .Input("X", "(Tensor) one or more", nabla::kDuplicable)
      .Output("Out", "(tensor array) len(X) + 1 entries")
      .InferShape([](InferShapeContext&) {})
      .InferVarType([](const nabla::OpDesc& op, nabla::BlockDesc& block) {
        nabla::VarDesc* out = block.FindVarRecursive(op.Output("Out").at(0));
        const nabla::VarDesc* x = block.FindVarRecursive(op.Input("X").at(0));
        if (out != nullptr && x != nullptr && x->Type() == VarType::kDense) out->SetType(VarType::kTensorArray);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  for (const DType dtype : {DType::kFloat32, DType::kFloat64})
    registrar.Kernel("abi_v5_pack", nabla::DeviceType::kCPU, dtype, PackKernel, __FILE__, __LINE__);

  registrar.Op("abi_v5_unpack", __FILE__, __LINE__)
      .Doc("Out[i] = a copy of entry i of the tensor array X; Written[i] = 1 where entry i holds data, else 0.")
      .Input("X", "(tensor array)")
      .Output("Out", "(Tensor) entries 0, 1, ... of X", nabla::kDuplicable)
      .Output("Written", "(Tensor) int64 [len(X)]")
      .KernelDType([](const ExecutionContext&) { return DType::kFloat32; })
      .InferShape([](InferShapeContext& c) {
        NABLA_ENFORCE(c.InputVarType("X") == VarType::kTensorArray, kInvalidArgument,
                      "abi_v5_unpack: X must be a tensor array, not ", nabla::VarTypeName(c.InputVarType("X")));
        c.SetOutputDType("Written", DType::kInt64);
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v5_unpack", nabla::DeviceType::kCPU, DType::kFloat32, UnpackKernel, __FILE__, __LINE__);

  registrar.Op("abi_v5_fc", __FILE__, __LINE__)
      .Doc("Out = act(X * W + Bias), X [M, K], W [K, N], Bias [N] (optional).")
      .Input("X", "(Tensor) [M, K]")
      .Input("W", "(Tensor) [K, N]")
      .Input("Bias", "(Tensor, optional) [N]", nabla::kDispensable)
      .Output("Out", "(Tensor) [M, N]")
      .Attr<int>("act", 0, "(int) 0 identity, 1 relu, 2 tanh, 3 sigmoid")
      .InferShape([](InferShapeContext& c) {
        c.SetOutputShape("Out", {c.InputShape("X")[0], c.InputShape("W")[1]});
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v5_fc", nabla::DeviceType::kCPU, DType::kFloat32, FcKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("abi_v5_fc", nabla::DeviceType::kCPU, DType::kFloat64, FcKernel<double>, __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
