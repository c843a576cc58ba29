// Ops with one planted bug each, the mistakes a plugin author makes, for
// `nabla opcheck`, `nabla gradcheck`, `nabla backward` and the executor's
// error lines to catch (plugin_cli_test). Each op is Out = X^3 on float32
// and float64 with one GradCheck case, right except for its bug:
//   planted_ok            no bug (opcheck must stay silent on it)
//   planted_small_infer   inference gives Out one element fewer than the kernel writes
//   planted_writes_input  the kernel scales its input X in place
//   planted_grad_slot     the grad maker names input slot Out@GARD, which the grad op lacks
//   planted_threads       the kernel's result depends on the thread count
//   planted_f32_grad      the float32 grad kernel is off by 10 % (float64 is right)
//   planted_infer_throws  inference throws std::runtime_error
//   planted_kernel_throws the kernel throws an int
#include <atomic>
#include <stdexcept>

#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"
#include "nabla/tensor.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;

enum class Bug { kNone, kSmallInfer, kWritesInput, kGradSlot, kThreads, kF32Grad, kInferThrows, kKernelThrows };

template <typename T>
void Cube(const ExecutionContext& ctx, Bug bug) {
  const nabla::Tensor& x = ctx.Input("X");
  const T* in = x.Data<T>();
  nabla::Tensor* out_t = ctx.Output("Out");
  // Sized as inference left it, as kernels that trust inference do.
  T* out = static_cast<T*>(out_t->Allocate(ctx.GetDevice()));
  const int64_t n = x.Numel();
  if (bug == Bug::kKernelThrows) throw 42;
  if (bug == Bug::kThreads) {
    // Scales by the number of chunks the parallel loop ran in: one with one
    // thread, more with two (a per-chunk partial result).
    std::atomic<int> chunks{0};
    nabla::cpu::ParallelFor(n, 1, [&](int64_t, int64_t) { ++chunks; });
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] * in[i] * in[i] * static_cast<T>(chunks.load());
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] * in[i] * in[i];
  if (bug == Bug::kWritesInput) const_cast<T*>(in)[0] *= T(2);
}

template <typename T>
void CubeGrad(const ExecutionContext& ctx, Bug bug) {
  const nabla::Tensor& x = ctx.Input("X");
  const T* in = x.Data<T>();
  const T* dout = ctx.Input("Out@GRAD").Data<T>();
  T* dx = ctx.Output("X@GRAD")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  const T factor = bug == Bug::kF32Grad && sizeof(T) == 4 ? T(2.7) : T(3);
  for (int64_t i = 0; i < x.Numel(); ++i) dx[i] = dout[i] * factor * in[i] * in[i];
}

// Names Out@GARD where the grad op declares Out@GRAD.
class MisspelledGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<nabla::OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<nabla::OpDesc>> ops;
    ops.push_back(std::make_unique<nabla::OpDesc>(
        ForwardOp().Type() + "_grad",
        nabla::VarNameMap{{"X", Input("X")}, {"Out", Output("Out")}, {"Out@GARD", OutputGrad("Out")}},
        nabla::VarNameMap{{"X@GRAD", InputGrad("X")}}, Attrs()));
    return ops;
  }
};

void Register(nabla::Registrar& registrar, const std::string& type, Bug bug) {
  nabla::GradCheckSpec spec;
  spec.name = "vector";
  nabla::GradCheckInput x;
  x.slot = "X";
  x.shape = {6};
  spec.inputs = {x};
  auto& op = registrar.Op(type, __FILE__, __LINE__)
                 .Doc("Out = X^3 (a test op with a planted bug)")
                 .Input("X", "(Tensor) input")
                 .Output("Out", "(Tensor) X cubed")
                 .InferShape([bug](InferShapeContext& c) {
                   if (bug == Bug::kInferThrows) throw std::runtime_error("planted: inference gave up");
                   c.ShareShapeAndDType("X", "Out");
                   if (bug == Bug::kSmallInfer) {
                     nabla::Shape s = c.InputShape("X");
                     if (!s.empty() && s[0] > 0) s[0] -= 1;
                     c.SetOutputShape("Out", s);
                   }
                 })
                 .GradCheck(spec);
  if (bug == Bug::kGradSlot) {
    op.GradMaker<MisspelledGradMaker>();
  } else {
    op.GradMaker<nabla::DefaultGradOpDescMaker>();
  }
  registrar.DefaultGradOp(type, __FILE__, __LINE__).InferShape([](InferShapeContext& c) {
    c.ShareShapeAndDType("X", "X@GRAD");
  });
  registrar.Kernel(
      type, nabla::DeviceType::kCPU, DType::kFloat32, [bug](const ExecutionContext& c) { Cube<float>(c, bug); },
      __FILE__, __LINE__);
  registrar.Kernel(
      type, nabla::DeviceType::kCPU, DType::kFloat64, [bug](const ExecutionContext& c) { Cube<double>(c, bug); },
      __FILE__, __LINE__);
  registrar.Kernel(
      type + "_grad", nabla::DeviceType::kCPU, DType::kFloat32,
      [bug](const ExecutionContext& c) { CubeGrad<float>(c, bug); }, __FILE__, __LINE__);
  registrar.Kernel(
      type + "_grad", nabla::DeviceType::kCPU, DType::kFloat64,
      [bug](const ExecutionContext& c) { CubeGrad<double>(c, bug); }, __FILE__, __LINE__);
}

}  // namespace

NABLA_REGISTER_OPS(planted_ok) { Register(registrar, "planted_ok", Bug::kNone); }
NABLA_REGISTER_OPS(planted_small_infer) { Register(registrar, "planted_small_infer", Bug::kSmallInfer); }
NABLA_REGISTER_OPS(planted_writes_input) { Register(registrar, "planted_writes_input", Bug::kWritesInput); }
NABLA_REGISTER_OPS(planted_grad_slot) { Register(registrar, "planted_grad_slot", Bug::kGradSlot); }
NABLA_REGISTER_OPS(planted_threads) { Register(registrar, "planted_threads", Bug::kThreads); }
NABLA_REGISTER_OPS(planted_f32_grad) { Register(registrar, "planted_f32_grad", Bug::kF32Grad); }
NABLA_REGISTER_OPS(planted_infer_throws) { Register(registrar, "planted_infer_throws", Bug::kInferThrows); }
NABLA_REGISTER_OPS(planted_kernel_throws) { Register(registrar, "planted_kernel_throws", Bug::kKernelThrows); }

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
