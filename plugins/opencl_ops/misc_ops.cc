// scale, sum, fill_constant, fill_zeros_like, concat (+grad) and split.
#include <algorithm>

#include "nabla/plugin.h"
#include "ocl_util.h"

namespace nabla::opencl_ops {
namespace {

template <typename T>
struct ScaleKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    KernelArg xa = s.Arg(x);
    void* out = Out<T>(ctx, ctx.Output("Out"), x.GetShape());
    Run<T>(dev, "scale",
           {xa, KernelArg::Buffer(out), KernelArg(x.Numel()), KernelArg(static_cast<T>(ctx.Attr<float>("scale"))),
            KernelArg(static_cast<T>(ctx.Attr<float>("bias"))),
            KernelArg(static_cast<int32_t>(ctx.Attr<bool>("bias_after_scale")))},
           x.Numel());
  }
};

// Out may be one of the inputs (the backward builder accumulates in place),
// so an aliased sum goes through a scratch buffer.
template <typename T>
struct SumKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    std::vector<const Tensor*> xs = ctx.MultiInput("X");
    xs.erase(std::remove(xs.begin(), xs.end(), nullptr), xs.end());
    NABLA_ENFORCE(!xs.empty(), kInvalidArgument, "op 'sum': expected at least one input in X, but received none");
    Tensor* out = ctx.Output("Out");
    const Shape shape = xs[0]->GetShape();
    const int64_t n = xs[0]->Numel();
    std::vector<const void*> in;
    for (const Tensor* x : xs) {
      NABLA_ENFORCE(x->Numel() == n, kInvalidArgument, "op 'sum': every input must have the shape of X[0], ",
                    ShapeToString(shape), ", but received ", ShapeToString(x->GetShape()));
      in.push_back(s.In(*x));
    }
    const bool aliased = std::find(xs.begin(), xs.end(), out) != xs.end();
    Tensor scratch;
    void* acc = aliased ? scratch.Allocate(dev, DTypeOf<T>::value, shape) : Out<T>(ctx, out, shape);
    dev.CopyOnDevice(acc, in[0], n * sizeof(T));
    for (size_t i = 1; i < in.size(); ++i)
      Run<T>(dev, "add_to", {KernelArg::Buffer(acc), KernelArg::Buffer(in[i]), KernelArg(n)}, n);
    if (aliased) dev.CopyOnDevice(Out<T>(ctx, out, shape), acc, n * sizeof(T));
  }
};

// fill_constant and fill_zeros_like: clEnqueueFillBuffer with the value's
// bytes, for every dtype.
template <typename V>
void FillWith(OpenClDevice& dev, Tensor* out, DType dtype, const Shape& shape, V value) {
  void* buf = out->Allocate(dev, dtype, shape);
  dev.Fill(buf, 0, out->Bytes(), &value, sizeof value);
}

void FillTyped(OpenClDevice& dev, Tensor* out, DType dtype, const Shape& shape, float value) {
  switch (dtype) {
    case DType::kFloat32: return FillWith(dev, out, dtype, shape, value);
    case DType::kFloat64: return FillWith(dev, out, dtype, shape, static_cast<double>(value));
    case DType::kInt32: return FillWith(dev, out, dtype, shape, static_cast<int32_t>(value));
    case DType::kInt64: return FillWith(dev, out, dtype, shape, static_cast<int64_t>(value));
    case DType::kBool: return FillWith(dev, out, dtype, shape, static_cast<uint8_t>(value != 0.0f));
  }
}

DType DTypeAttr(const ExecutionContext& ctx) {
  DType d;
  const std::string& name = ctx.Attr<std::string>("dtype");
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument, "op '", ctx.Op().Type(),
                "': attribute dtype must be one of float32, float64, int32, int64, bool, but received '", name, "'");
  return d;
}

void FillConstantKernel(const ExecutionContext& ctx) {
  const std::vector<int>& dims = ctx.Attr<std::vector<int>>("shape");
  FillTyped(Dev(ctx), ctx.Output("Out"), DTypeAttr(ctx), Shape(dims.begin(), dims.end()), ctx.Attr<float>("value"));
}

void FillZerosLikeKernel(const ExecutionContext& ctx) {
  // Only X's shape and dtype are read; its buffer may be gone.
  const Tensor& x = ctx.InputVar("X")->GetTensor();
  FillTyped(Dev(ctx), ctx.Output("Out"), x.GetDType(), x.GetShape(), 0.0f);
}

// Copies `rows` rows of `cols` elements between row-major buffers.
template <typename T>
void CopyRows(OpenClDevice& dev, const void* src, int64_t src_offset, int64_t src_stride, void* dst,
              int64_t dst_offset, int64_t dst_stride, int64_t rows, int64_t cols) {
  Run<T>(dev, "copy_rows",
         {KernelArg::Buffer(src), KernelArg(src_offset), KernelArg(src_stride), KernelArg::Buffer(dst),
          KernelArg(dst_offset), KernelArg(dst_stride), KernelArg(rows), KernelArg(cols)},
         rows * cols);
}

// Joins `parts` (each [outer, dim_i, inner]) into `whole` along the axis, or
// splits it when `split`; null parts are skipped.
template <typename T>
void JoinOrSplit(const ExecutionContext& ctx, Staging& s, const Tensor& whole, void* whole_buf,
                 const std::vector<const Tensor*>& shapes, const std::vector<Tensor*>& split_outs, bool split,
                 int axis) {
  OpenClDevice& dev = Dev(ctx);
  AxisView w = ViewAround(whole.GetShape(), axis);
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor& part = *shapes[i];
    const int64_t dim = part.GetShape()[axis];
    const int64_t cols = dim * w.inner;
    if (!split) {
      CopyRows<T>(dev, s.In(part), 0, cols, whole_buf, offset * w.inner, w.dim * w.inner, w.outer, cols);
    } else if (split_outs[i]) {
      void* dst = Out<T>(ctx, split_outs[i], part.GetShape());
      CopyRows<T>(dev, whole_buf, offset * w.inner, w.dim * w.inner, dst, 0, cols, w.outer, cols);
    }
    offset += dim;
  }
}

template <typename T>
struct ConcatKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(Dev(ctx));
    std::vector<const Tensor*> xs = ctx.MultiInput("X");
    Tensor* out = ctx.Output("Out");
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), out->Rank(), "concat");
    void* ob = Out<T>(ctx, out, out->GetShape());
    JoinOrSplit<T>(ctx, s, *out, ob, xs, {}, false, axis);
  }
};

// X[i]@GRAD are the slices of Out@GRAD shaped like X[i].
template <typename T>
struct ConcatGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(Dev(ctx));
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    std::vector<const Tensor*> xs;
    for (size_t i = 0; i < ctx.InputSize("X"); ++i) xs.push_back(&ctx.InputVar("X", i)->GetTensor());
    std::vector<Tensor*> dxs = ctx.MultiOutput(GradVarName("X"));
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), dout.Rank(), "concat_grad");
    JoinOrSplit<T>(ctx, s, dout, const_cast<void*>(s.In(dout)), xs, dxs, true, axis);
  }
};

// The parts' shapes come from runtime shape inference.
template <typename T>
struct SplitKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(Dev(ctx));
    const Tensor& x = ctx.Input("X");
    std::vector<Tensor*> outs = ctx.MultiOutput("Out");
    const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "split");
    std::vector<const Tensor*> shapes(outs.begin(), outs.end());
    for (const Tensor* t : shapes)
      NABLA_ENFORCE(t != nullptr, kUnimplemented, "op 'split' on OpenCL needs every output named");
    JoinOrSplit<T>(ctx, s, x, const_cast<void*>(s.In(x)), shapes, outs, true, axis);
  }
};

}  // namespace

NABLA_REGISTER_OPS(opencl_misc) {
  RegisterFloatKernels<ScaleKernel>(registrar, "scale", __FILE__, __LINE__);
  RegisterFloatKernels<SumKernel>(registrar, "sum", __FILE__, __LINE__);
  RegisterFloatKernels<ConcatKernel>(registrar, "concat", __FILE__, __LINE__);
  RegisterFloatKernels<ConcatGradKernel>(registrar, "concat_grad", __FILE__, __LINE__);
  RegisterFloatKernels<SplitKernel>(registrar, "split", __FILE__, __LINE__);
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool}) {
    if (OpExists("fill_constant"))
      registrar.Kernel("fill_constant", DeviceType::kOpenCL, d, FillConstantKernel, __FILE__, __LINE__);
    if (OpExists("fill_zeros_like"))
      registrar.Kernel("fill_zeros_like", DeviceType::kOpenCL, d, FillZerosLikeKernel, __FILE__, __LINE__);
  }
}

}  // namespace nabla::opencl_ops
