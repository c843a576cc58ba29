// OpenCL kernels of softmax, log_softmax and softmax_with_cross_entropy, with
// their grad ops: one work item per softmax row.
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nn_util.h"
#include "softmax_cl.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// softmax and log_softmax walk the same rows: one work item per row along
// the op's axis; a row of nothing (a zero-sized axis) reads nothing.
template <typename T>
void RowsForward(const ExecutionContext& ctx, const char* kernel) {
  OpenClDevice& dev = DeviceOf(ctx);
  Staging s(dev);
  const Tensor& x = ctx.Input("X");
  const AxisView v = ViewAround(x.GetShape(), NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "axis", ctx.Op().Type()));
  KernelArg xa = s.Arg(x);
  void* out = AllocateOutput<T>(ctx, ctx.Output("Out"), x.GetShape());
  const int64_t rows = v.dim == 0 ? 0 : v.outer * v.inner;
  Run<T>(dev, cl_source::softmax(), kernel,
         {xa, KernelArg::Buffer(out), KernelArg(rows), KernelArg(v.dim), KernelArg(v.inner)}, rows);
}

template <typename T>
void RowsBackward(const ExecutionContext& ctx, const char* kernel) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;
  OpenClDevice& dev = DeviceOf(ctx);
  Staging s(dev);
  const Tensor& out = ctx.Input("Out");
  const AxisView v =
      ViewAround(out.GetShape(), NormalizeAxis(ctx.Attr<int>("axis"), out.Rank(), "axis", ctx.Op().Type()));
  KernelArg oa = s.Arg(out), da = s.Arg(ctx.Input(GradVarName("Out")));
  void* g = AllocateOutput<T>(ctx, dx, out.GetShape());
  const int64_t rows = v.dim == 0 ? 0 : v.outer * v.inner;
  Run<T>(dev, cl_source::softmax(), kernel,
         {oa, da, KernelArg::Buffer(g), KernelArg(rows), KernelArg(v.dim), KernelArg(v.inner)}, rows);
}

template <typename T>
struct SoftmaxKernel {
  void operator()(const ExecutionContext& ctx) const { RowsForward<T>(ctx, "softmax_fwd"); }
};
template <typename T>
struct SoftmaxGradKernel {
  void operator()(const ExecutionContext& ctx) const { RowsBackward<T>(ctx, "softmax_bwd"); }
};
template <typename T>
struct LogSoftmaxKernel {
  void operator()(const ExecutionContext& ctx) const { RowsForward<T>(ctx, "log_softmax_fwd"); }
};
template <typename T>
struct LogSoftmaxGradKernel {
  void operator()(const ExecutionContext& ctx) const { RowsBackward<T>(ctx, "log_softmax_bwd"); }
};

// Hard labels are int64 (or int32); soft labels have T's dtype.
const char* LabelSuffix(const Tensor& label, bool soft, const std::string& op) {
  if (soft) return "soft";
  if (label.GetDType() == DType::kInt64) return "i64";
  NABLA_ENFORCE(label.GetDType() == DType::kInt32, kInvalidArgument, "op '", op,
                "': a hard Label must be int64 (or int32), but received ", DTypeName(label.GetDType()));
  return "i32";
}

// swce_<fwd_|bwd_><label kind>, or swce_prob_... when use_softmax is false
// (Logits are probabilities).
std::string KernelName(const ExecutionContext& ctx, const char* pass, const Tensor& label, bool soft) {
  return std::string(ctx.Attr<bool>("use_softmax") ? "swce_" : "swce_prob_") + pass +
         LabelSuffix(label, soft, ctx.Op().Type());
}

template <typename T>
struct SoftmaxWithCrossEntropyKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& logits = ctx.Input("Logits");
    const Tensor& label = ctx.Input("Label");
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), logits.Rank(), "axis", "softmax_with_cross_entropy");
    const bool soft = ctx.Attr<bool>("soft_label");
    const AxisView v = ViewAround(logits.GetShape(), axis);
    KernelArg xa = s.Arg(logits), la = s.Arg(label);
    void* sm = AllocateOutput<T>(ctx, ctx.Output("Softmax"), logits.GetShape());
    void* loss = AllocateOutput<T>(ctx, ctx.Output("Loss"),
                                   SoftmaxCrossEntropyLossShape(logits.GetShape(), label.GetShape(), axis));
    const int64_t rows = v.outer * v.inner;
    std::vector<KernelArg> args = {
        xa, la, KernelArg::Buffer(sm), KernelArg::Buffer(loss), KernelArg(rows), KernelArg(v.dim), KernelArg(v.inner)};
    if (!soft) args.push_back(KernelArg(static_cast<int32_t>(ctx.Attr<int>("ignore_index"))));
    Run<T>(dev, cl_source::softmax(), KernelName(ctx, "fwd_", label, soft).c_str(), args, rows);
  }
};

template <typename T>
struct SoftmaxWithCrossEntropyGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("Logits"));
    if (!dx) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& sm = ctx.Input("Softmax");
    const Tensor& label = ctx.Input("Label");
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), sm.Rank(), "axis", "softmax_with_cross_entropy_grad");
    const bool soft = ctx.Attr<bool>("soft_label");
    const AxisView v = ViewAround(sm.GetShape(), axis);
    KernelArg sa = s.Arg(sm), la = s.Arg(label), da = s.Arg(ctx.Input(GradVarName("Loss")));
    void* g = AllocateOutput<T>(ctx, dx, sm.GetShape());
    const int64_t rows = v.outer * v.inner;
    std::vector<KernelArg> args = {
        sa, la, da, KernelArg::Buffer(g), KernelArg(rows), KernelArg(v.dim), KernelArg(v.inner)};
    if (!soft) args.push_back(KernelArg(static_cast<int32_t>(ctx.Attr<int>("ignore_index"))));
    Run<T>(dev, cl_source::softmax(), KernelName(ctx, "bwd_", label, soft).c_str(), args, rows);
  }
};

}  // namespace

NABLA_REGISTER_OPS(softmax_opencl) {
  RegisterOpenClKernels<SoftmaxKernel>(registrar, "softmax", __FILE__, __LINE__);
  RegisterOpenClKernels<SoftmaxGradKernel>(registrar, "softmax_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<LogSoftmaxKernel>(registrar, "log_softmax", __FILE__, __LINE__);
  RegisterOpenClKernels<LogSoftmaxGradKernel>(registrar, "log_softmax_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<SoftmaxWithCrossEntropyKernel>(registrar, "softmax_with_cross_entropy", __FILE__, __LINE__);
  RegisterOpenClKernels<SoftmaxWithCrossEntropyGradKernel>(registrar, "softmax_with_cross_entropy_grad", __FILE__,
                                                           __LINE__);
}

}  // namespace nabla::nn
