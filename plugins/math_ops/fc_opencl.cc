// OpenCL kernel of fc: the product through CLBlast on the device's queue
// (as mul's), then bias and activation in place in one pass (fc.cl). The
// grad ops fc's maker emits have kernels of their own.
#include "fc_cl.h"
#include "gemm_shapes.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

// fc.cl's numbering of the activations.
int32_t ActCode(const std::string& act) {
  if (act.empty()) return 0;
  if (act == "relu") return 1;
  if (act == "tanh") return 2;
  if (act == "sigmoid") return 3;
  NABLA_THROW(kInvalidArgument,
              "op 'fc': attribute activation_type must be \"\", relu, tanh or sigmoid, but received \"", act, "\"");
}

template <typename T>
struct FcKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("Input");
    const Tensor& w = ctx.Input("W");
    const int xn = ctx.Attr<int>("in_num_col_dims");
    const Flat2D fx = Flatten(x.GetShape(), xn);
    const int64_t m = fx.rows, k = fx.cols, n = w.GetShape().back();
    NABLA_ENFORCE(w.GetShape().size() == 2 && w.GetShape()[0] == k, kInvalidArgument, "op 'fc': W must be [", k,
                  ", N] for Input of shape ", ShapeToString(x.GetShape()), ", but received ",
                  ShapeToString(w.GetShape()));
    const int32_t act = ActCode(ctx.Attr<std::string>("activation_type"));
    const bool has_bias = ctx.HasInput("Bias");
    if (has_bias)
      NABLA_ENFORCE(ctx.Input("Bias").Numel() == n, kInvalidArgument, "op 'fc': Bias must have ", n,
                    " elements, but received shape ", ShapeToString(ctx.Input("Bias").GetShape()));
    const void* xb = s.In(x);
    const void* wb = s.In(w);
    // One Shape: the C ABI's GetShape returns a copy each call.
    const Shape xs = x.GetShape();
    Shape out_shape(xs.begin(), xs.begin() + xn);
    out_shape.push_back(n);
    void* ob = AllocateOutput<T>(ctx, ctx.Output("Out"), out_shape);
    dev.Gemm(false, false, m, n, k, T(1), xb, 0, k, wb, 0, n, T(0), ob, 0, n);
    if (!has_bias && act == 0) return;
    const KernelArg bias = has_bias ? s.Arg(ctx.Input("Bias")) : KernelArg::Buffer(ob);
    Run<T>(dev, cl_source::fc(), "fc_bias_act",
           {KernelArg::Buffer(ob), bias, KernelArg(m * n), KernelArg(n), KernelArg(static_cast<int32_t>(has_bias)),
            KernelArg(act)},
           m * n);
  }
};

}  // namespace

NABLA_REGISTER_OPS(fc_opencl) { RegisterOpenClKernels<FcKernel>(registrar, "fc", __FILE__, __LINE__); }

}  // namespace nabla::math_ops
