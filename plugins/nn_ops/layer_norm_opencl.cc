// OpenCL kernels of layer_norm and layer_norm_grad (layer_norm.cl), so that
// a transformer's normalizations stay on the device instead of going to the
// host and back every step.
#include <algorithm>
#include <vector>

#include "layer_norm_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/opkit/axis.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// Work items the Scale and Bias gradients' first stage aims at.
constexpr int64_t kWorkItems = 4096;

// X as [left, right] at begin_norm_axis (InferShape checked the axis).
void RowsOf(const ExecutionContext& ctx, const Shape& shape, int64_t* left, int64_t* right) {
  const int begin = ctx.Attr<int>("begin_norm_axis");
  NABLA_ENFORCE(begin >= 0 && static_cast<size_t>(begin) <= shape.size(), kInvalidArgument, "op '", ctx.Op().Type(),
                "': begin_norm_axis ", begin, " is outside X's rank ", shape.size());
  *left = opkit::ProductOf(shape, 0, begin);
  *right = opkit::ProductOf(shape, begin, shape.size());
}

// An optional input's buffer, or `fallback` (never read: its flag is 0) so
// that every kernel argument is a buffer.
KernelArg Optional(const ExecutionContext& ctx, Staging& s, const char* slot, const KernelArg& fallback) {
  return ctx.HasInput(slot) ? s.Arg(ctx.Input(slot)) : fallback;
}

template <typename T>
struct LayerNormClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    int64_t left, right;
    RowsOf(ctx, x.GetShape(), &left, &right);
    const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
    KernelArg xa = s.Arg(x);
    void* y = AllocateOutput<T>(ctx, ctx.Output("Y"), x.GetShape());
    void* mean = AllocateOutput<T>(ctx, ctx.Output("Mean"), {left});
    void* var = AllocateOutput<T>(ctx, ctx.Output("Variance"), {left});
    Run<T>(dev, cl_source::layer_norm(), "ln_stats",
           {xa, KernelArg::Buffer(mean), KernelArg::Buffer(var), KernelArg(left), KernelArg(right)}, left);
    Run<T>(
        dev, cl_source::layer_norm(), "ln_apply",
        {xa, KernelArg::Buffer(mean), KernelArg::Buffer(var), Optional(ctx, s, "Scale", xa),
         Optional(ctx, s, "Bias", xa), KernelArg::Buffer(y), KernelArg(x.Numel()), KernelArg(right), KernelArg(eps),
         KernelArg(static_cast<int32_t>(ctx.HasInput("Scale"))), KernelArg(static_cast<int32_t>(ctx.HasInput("Bias")))},
        x.Numel());
  }
};

template <typename T>
struct LayerNormGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    int64_t left, right;
    RowsOf(ctx, x.GetShape(), &left, &right);
    const T eps = static_cast<T>(ctx.Attr<float>("epsilon"));
    Tensor* dx = ctx.Output(GradVarName("X"));
    Tensor* dscale = ctx.Output(GradVarName("Scale"));
    Tensor* dbias = ctx.Output(GradVarName("Bias"));
    const bool has_acc = ctx.HasInput("AccumulateX");
    if (has_acc) {
      const Tensor& acc = ctx.Input("AccumulateX");
      NABLA_ENFORCE(acc.GetShape() == x.GetShape(), kInvalidArgument, "op 'layer_norm_grad': AccumulateX has shape ",
                    ShapeToString(acc.GetShape()), " but X has ", ShapeToString(x.GetShape()));
      NABLA_ENFORCE(dx != nullptr, kInvalidArgument, "op 'layer_norm_grad': AccumulateX needs an X@GRAD to add to");
    }
    KernelArg xa = s.Arg(x), dya = s.Arg(ctx.Input(GradVarName("Y")));
    KernelArg mean = s.Arg(ctx.Input("Mean")), var = s.Arg(ctx.Input("Variance"));
    const KernelArg scale = Optional(ctx, s, "Scale", xa);
    const auto has_scale = static_cast<int32_t>(ctx.HasInput("Scale"));
    if (dx) {
      // The partial before X@GRAD is allocated: X@GRAD may take its buffer.
      const KernelArg acc = has_acc ? s.Arg(ctx.Input("AccumulateX")) : xa;
      // Per row: mean(g) and mean(g * xhat).
      Scratch<T> mg_buf(dev), mgx_buf(dev);
      void* mg = mg_buf.Allocate(left);
      void* mgx = mgx_buf.Allocate(left);
      Run<T>(dev, cl_source::layer_norm(), "ln_grad_rows",
             {xa, dya, mean, var, scale, KernelArg::Buffer(mg), KernelArg::Buffer(mgx), KernelArg(left),
              KernelArg(right), KernelArg(eps), KernelArg(has_scale)},
             left);
      void* g = AllocateOutput<T>(ctx, dx, x.GetShape());
      Run<T>(dev, cl_source::layer_norm(), "ln_grad_dx",
             {xa, dya, mean, var, scale, KernelArg::Buffer(mg), KernelArg::Buffer(mgx), acc, KernelArg::Buffer(g),
              KernelArg(x.Numel()), KernelArg(right), KernelArg(eps), KernelArg(has_scale),
              KernelArg(static_cast<int32_t>(has_acc))},
             x.Numel());
    }
    if ((dscale || dbias) && right > 0) {
      void* ds = dscale ? AllocateOutput<T>(ctx, dscale, {right}) : nullptr;
      void* db = dbias ? AllocateOutput<T>(ctx, dbias, {right}) : nullptr;
      if (left == 0) {
        if (ds) Zero<T>(dev, ds, right);
        if (db) Zero<T>(dev, db, right);
        return;
      }
      // Blocks of rows: about kWorkItems work items in the first stage.
      int64_t blocks = std::clamp<int64_t>(kWorkItems / right, 1, left);
      const int64_t chunk = (left + blocks - 1) / blocks;
      blocks = (left + chunk - 1) / chunk;
      Scratch<T> ps_buf(dev), pb_buf(dev);
      void* ps = ps_buf.Allocate(blocks * right);
      void* pb = pb_buf.Allocate(blocks * right);
      Run<T>(dev, cl_source::layer_norm(), "ln_grad_cols",
             {xa, dya, mean, var, KernelArg::Buffer(ps), KernelArg::Buffer(pb), KernelArg(left), KernelArg(right),
              KernelArg(chunk), KernelArg(blocks), KernelArg(eps), KernelArg(static_cast<int32_t>(ds != nullptr))},
             blocks * right);
      Run<T>(dev, cl_source::layer_norm(), "ln_grad_cols_join",
             {KernelArg::Buffer(ps), KernelArg::Buffer(pb), ds ? KernelArg::Buffer(ds) : xa,
              db ? KernelArg::Buffer(db) : xa, KernelArg(right), KernelArg(blocks),
              KernelArg(static_cast<int32_t>(ds != nullptr)), KernelArg(static_cast<int32_t>(db != nullptr))},
             right);
    } else if (dscale || dbias) {
      if (dscale) AllocateOutput<T>(ctx, dscale, {right});
      if (dbias) AllocateOutput<T>(ctx, dbias, {right});
    }
  }
};

}  // namespace

NABLA_REGISTER_OPS(layer_norm_opencl) {
  RegisterOpenClKernels<LayerNormClKernel>(registrar, "layer_norm", __FILE__, __LINE__);
  RegisterOpenClKernels<LayerNormGradClKernel>(registrar, "layer_norm_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
