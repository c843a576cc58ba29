// OpenCL kernels of concat (+grad) and split: row copies between buffers,
// for every dtype (the gradient float only).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "concat_split_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// Copies `rows` rows of `cols` elements between row-major buffers (offsets
// and strides in elements). Integer and bool elements move as bytes, since
// kernels build for float32 or float64 only.
template <typename T>
void CopyRows(OpenClDevice& dev, const void* src, int64_t src_offset, int64_t src_stride, void* dst, int64_t dst_offset,
              int64_t dst_stride, int64_t rows, int64_t cols) {
  if constexpr (std::is_floating_point_v<T>) {
    Run<T>(dev, cl_source::concat_split(), "copy_rows",
           {KernelArg::Buffer(src), KernelArg(src_offset), KernelArg(src_stride), KernelArg::Buffer(dst),
            KernelArg(dst_offset), KernelArg(dst_stride), KernelArg(rows), KernelArg(cols)},
           rows * cols);
  } else {
    const int64_t width = sizeof(T);
    Run<float>(dev, cl_source::concat_split(), "copy_rows_bytes",
               {KernelArg::Buffer(src), KernelArg(src_offset), KernelArg(src_stride), KernelArg::Buffer(dst),
                KernelArg(dst_offset), KernelArg(dst_stride), KernelArg(rows), KernelArg(cols), KernelArg(width)},
               rows * cols * width);
  }
}

// Joins `parts` (each [outer, dim_i, inner]) into `whole` along the axis, or
// splits it when `split`; null parts are skipped.
template <typename T>
void JoinOrSplit(const ExecutionContext& ctx, Staging& s, const Tensor& whole, void* whole_buf,
                 const std::vector<const Tensor*>& shapes, const std::vector<Tensor*>& split_outs, bool split,
                 int axis) {
  OpenClDevice& dev = DeviceOf(ctx);
  AxisView w = ViewAround(whole.GetShape(), axis);
  int64_t offset = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Tensor& part = *shapes[i];
    const int64_t dim = part.GetShape()[axis];
    const int64_t cols = dim * w.inner;
    if (!split) {
      CopyRows<T>(dev, s.In(part), 0, cols, whole_buf, offset * w.inner, w.dim * w.inner, w.outer, cols);
    } else if (split_outs[i]) {
      void* dst = AllocateOutput<T>(ctx, split_outs[i], part.GetShape());
      CopyRows<T>(dev, whole_buf, offset * w.inner, w.dim * w.inner, dst, 0, cols, w.outer, cols);
    }
    offset += dim;
  }
}

template <typename T>
struct ConcatKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(DeviceOf(ctx));
    std::vector<const Tensor*> xs = ctx.MultiInput("X");
    Tensor* out = ctx.Output("Out");
    const int axis = opkit::AxisAttrOrTensor(ctx, "AxisTensor", "axis", out->Rank());
    void* ob = AllocateOutput<T>(ctx, out, out->GetShape());
    JoinOrSplit<T>(ctx, s, *out, ob, xs, {}, false, axis);
  }
};

// X[i]@GRAD are the slices of Out@GRAD shaped like X[i].
template <typename T>
struct ConcatGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(DeviceOf(ctx));
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    std::vector<const Tensor*> xs;
    for (size_t i = 0; i < ctx.InputSize("X"); ++i) xs.push_back(&ctx.InputVar("X", i)->GetTensor());
    std::vector<Tensor*> dxs = ctx.MultiOutput(GradVarName("X"));
    const int axis = opkit::AxisAttrOrTensor(ctx, "AxisTensor", "axis", dout.Rank());
    JoinOrSplit<T>(ctx, s, dout, const_cast<void*>(s.In(dout)), xs, dxs, true, axis);
  }
};

// The parts' shapes come from runtime shape inference.
template <typename T>
struct SplitKernel {
  void operator()(const ExecutionContext& ctx) const {
    Staging s(DeviceOf(ctx));
    const Tensor& x = ctx.Input("X");
    std::vector<Tensor*> outs = ctx.MultiOutput("Out");
    const int axis = opkit::AxisAttrOrTensor(ctx, "AxisTensor", "axis", x.Rank());
    std::vector<const Tensor*> shapes(outs.begin(), outs.end());
    for (const Tensor* t : shapes)
      NABLA_ENFORCE(t != nullptr, kUnimplemented, "op 'split' on OpenCL needs every output named");
    JoinOrSplit<T>(ctx, s, x, const_cast<void*>(s.In(x)), shapes, outs, true, axis);
  }
};

}  // namespace

NABLA_REGISTER_OPS(concat_split_opencl) {
  RegisterOpenClKernels<ConcatKernel>(registrar, "concat", __FILE__, __LINE__);
  RegisterOpenClKernels<ConcatGradKernel>(registrar, "concat_grad", __FILE__, __LINE__);
  RegisterOpenClKernels<SplitKernel>(registrar, "split", __FILE__, __LINE__);
  // Integer and bool tensors (no gradient): the same copies, bytewise.
  registrar.Kernel("concat", DeviceType::kOpenCL, DType::kInt32, ConcatKernel<int32_t>{}, __FILE__, __LINE__);
  registrar.Kernel("concat", DeviceType::kOpenCL, DType::kInt64, ConcatKernel<int64_t>{}, __FILE__, __LINE__);
  registrar.Kernel("concat", DeviceType::kOpenCL, DType::kBool, ConcatKernel<bool>{}, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kOpenCL, DType::kInt32, SplitKernel<int32_t>{}, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kOpenCL, DType::kInt64, SplitKernel<int64_t>{}, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kOpenCL, DType::kBool, SplitKernel<bool>{}, __FILE__, __LINE__);
}

}  // namespace nabla::nn
