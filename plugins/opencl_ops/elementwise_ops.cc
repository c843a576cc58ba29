// elementwise_add/sub/mul/div/max/min/pow with Paddle's axis broadcasting,
// and the grad ops of add, sub, max, min and pow (mul and div gradients fall
// back to the CPU).
#include "nabla/plugin.h"
#include "ocl_util.h"

namespace nabla::opencl_ops {
namespace {

constexpr size_t kMaxRank = 8;

// X and Y padded to Out's rank the way math_ops' BroadcastElementwise does
// (the lower-rank operand aligned at `axis`, -1 meaning at the end), then
// size-1 dims of Out dropped and neighbours that broadcast alike merged, so
// the kernels see at most a few dims.
struct Broadcast {
  std::vector<int64_t> dims;            // merged dims of Out
  std::vector<int64_t> x_full, y_full;  // 1 where the operand has the dim, 0 where it is broadcast
  std::vector<int64_t> XStrides() const { return Strides(x_full); }
  std::vector<int64_t> YStrides() const { return Strides(y_full); }

 private:
  std::vector<int64_t> Strides(const std::vector<int64_t>& full) const {
    std::vector<int64_t> s(dims.size(), 0);
    int64_t stride = 1;
    for (size_t k = dims.size(); k-- > 0;) {
      if (full[k]) {
        s[k] = stride;
        stride *= dims[k];
      }
    }
    return s;
  }
};

Broadcast MakeBroadcast(const Shape& x, const Shape& y, int axis, const std::string& where) {
  const bool x_big = x.size() >= y.size();
  const Shape& big = x_big ? x : y;
  Shape small = x_big ? y : x;
  const size_t rank = big.size();
  if (axis == -1) axis = static_cast<int>(rank - small.size());
  while (axis >= 0 && static_cast<size_t>(axis) + small.size() > rank && !small.empty() && small.back() == 1)
    small.pop_back();
  NABLA_ENFORCE(axis >= 0 && static_cast<size_t>(axis) + small.size() <= rank, kInvalidArgument, where,
                ": attribute axis ", axis, " does not align X ", ShapeToString(x), " with Y ", ShapeToString(y));
  Shape padded(rank, 1);
  for (size_t i = 0; i < small.size(); ++i) padded[axis + i] = small[i];
  const Shape& px = x_big ? big : padded;
  const Shape& py = x_big ? padded : big;
  Broadcast b;
  for (size_t i = 0; i < rank; ++i) {
    const int64_t out = std::max(px[i], py[i]);
    NABLA_ENFORCE((px[i] == out || px[i] == 1) && (py[i] == out || py[i] == 1), kInvalidArgument, where, ": X ",
                  ShapeToString(x), " and Y ", ShapeToString(y), " cannot be broadcast with axis ", axis);
    if (out == 1) continue;
    const int64_t xf = px[i] == out, yf = py[i] == out;
    if (!b.dims.empty() && b.x_full.back() == xf && b.y_full.back() == yf) {
      b.dims.back() *= out;
    } else {
      b.dims.push_back(out);
      b.x_full.push_back(xf);
      b.y_full.push_back(yf);
    }
  }
  NABLA_ENFORCE(b.dims.size() <= kMaxRank, kUnimplemented, where, ": OpenCL elementwise kernels take at most ",
                kMaxRank, " broadcast dims after merging, but X ", ShapeToString(x), " and Y ", ShapeToString(y),
                " need ", b.dims.size());
  return b;
}

template <typename T, int kOp>
struct ElementwiseKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Broadcast b = MakeBroadcast(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), "op '" + ctx.Op().Type() + "'");
    KernelArg xa = s.Arg(x), ya = s.Arg(y);
    Tensor* out = ctx.Output("Out");
    void* ob = Out<T>(ctx, out, out->GetShape());
    const int64_t n = out->Numel();
    Run<T>(dev, "ew_binary",
           {xa, ya, KernelArg::Buffer(ob), KernelArg(n), KernelArg(static_cast<int32_t>(b.dims.size())), Long8(b.dims),
            Long8(b.XStrides()), Long8(b.YStrides()), KernelArg(int32_t{kOp})},
           n);
  }
};

// Class templates, not alias templates: with `using MulKernel = ...` here,
// RegisterFloatKernels<MulKernel> of this file and of gemm_ops.cc ended up as
// one symbol in the plugin, and `mul` ran the elementwise kernel.
template <typename T>
struct AddKernel : ElementwiseKernel<T, 0> {};
template <typename T>
struct SubKernel : ElementwiseKernel<T, 1> {};
template <typename T>
struct ElementwiseMulKernel : ElementwiseKernel<T, 2> {};
template <typename T>
struct DivKernel : ElementwiseKernel<T, 3> {};

template <typename T>
struct MaxKernel : ElementwiseKernel<T, 4> {};
template <typename T>
struct MinKernel : ElementwiseKernel<T, 5> {};
template <typename T>
struct PowKernel : ElementwiseKernel<T, 6> {};

// X@GRAD = Out@GRAD and Y@GRAD = sign * Out@GRAD, each summed over the dims
// its operand was broadcast along.
template <typename T, int kYSign>
struct AddSubGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    Broadcast b = MakeBroadcast(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), "op '" + ctx.Op().Type() + "'");
    int64_t out_n = 1;
    for (int64_t d : b.dims) out_n *= d;
    NABLA_ENFORCE(dout.Numel() == out_n, kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD with ", out_n,
                  " elements but received shape ", ShapeToString(dout.GetShape()));
    KernelArg da = s.Arg(dout);
    auto reduce = [&](Tensor* grad, const Tensor& operand, const std::vector<int64_t>& full, T sign) {
      if (!grad) return;
      void* g = Out<T>(ctx, grad, operand.GetShape());
      Run<T>(dev, "reduce_to",
             {da, KernelArg::Buffer(g), KernelArg(operand.Numel()), KernelArg(static_cast<int32_t>(b.dims.size())),
              Long8(b.dims), Long8(full), KernelArg(sign)},
             operand.Numel());
    };
    reduce(ctx.Output(GradVarName("X")), x, b.x_full, T(1));
    reduce(ctx.Output(GradVarName("Y")), y, b.y_full, T(kYSign));
  }
};

// max, min and pow: per-element gradients over Out's elements (kernel
// ew_binary_grad), then each summed onto its operand's shape by reduce_to.
template <typename T, int kOp>
struct BinaryGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    Tensor* dy = ctx.Output(GradVarName("Y"));
    if (!dx && !dy) return;
    OpenClDevice& dev = Dev(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    Broadcast b = MakeBroadcast(x.GetShape(), y.GetShape(), ctx.Attr<int>("axis"), "op '" + ctx.Op().Type() + "'");
    int64_t n = 1;
    for (int64_t d : b.dims) n *= d;
    NABLA_ENFORCE(dout.Numel() == n, kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD with ", n,
                  " elements but received shape ", ShapeToString(dout.GetShape()));
    Tensor gx_full, gy_full;
    void* gx = gx_full.Allocate(dev, DTypeOf<T>::value, {n});
    void* gy = gy_full.Allocate(dev, DTypeOf<T>::value, {n});
    Run<T>(dev, "ew_binary_grad",
           {s.Arg(x), s.Arg(y), s.Arg(dout), KernelArg::Buffer(gx), KernelArg::Buffer(gy), KernelArg(n),
            KernelArg(static_cast<int32_t>(b.dims.size())), Long8(b.dims), Long8(b.XStrides()), Long8(b.YStrides()),
            KernelArg(int32_t{kOp})},
           n);
    auto reduce = [&](Tensor* grad, const Tensor& operand, const std::vector<int64_t>& full, void* per_element) {
      if (!grad) return;
      void* g = Out<T>(ctx, grad, operand.GetShape());
      Run<T>(dev, "reduce_to",
             {KernelArg::Buffer(per_element), KernelArg::Buffer(g), KernelArg(operand.Numel()),
              KernelArg(static_cast<int32_t>(b.dims.size())), Long8(b.dims), Long8(full), KernelArg(T(1))},
             operand.Numel());
    };
    reduce(dx, x, b.x_full, gx);
    reduce(dy, y, b.y_full, gy);
  }
};

template <typename T>
struct MaxGradKernel : BinaryGradKernel<T, 4> {};
template <typename T>
struct MinGradKernel : BinaryGradKernel<T, 5> {};
template <typename T>
struct PowGradKernel : BinaryGradKernel<T, 6> {};

template <typename T>
struct AddGradKernel : AddSubGradKernel<T, 1> {};
template <typename T>
struct SubGradKernel : AddSubGradKernel<T, -1> {};

}  // namespace

NABLA_REGISTER_OPS(opencl_elementwise) {
  RegisterFloatKernels<AddKernel>(registrar, "elementwise_add", __FILE__, __LINE__);
  RegisterFloatKernels<SubKernel>(registrar, "elementwise_sub", __FILE__, __LINE__);
  RegisterFloatKernels<ElementwiseMulKernel>(registrar, "elementwise_mul", __FILE__, __LINE__);
  RegisterFloatKernels<DivKernel>(registrar, "elementwise_div", __FILE__, __LINE__);
  RegisterFloatKernels<AddGradKernel>(registrar, "elementwise_add_grad", __FILE__, __LINE__);
  RegisterFloatKernels<SubGradKernel>(registrar, "elementwise_sub_grad", __FILE__, __LINE__);
  RegisterFloatKernels<MaxKernel>(registrar, "elementwise_max", __FILE__, __LINE__);
  RegisterFloatKernels<MinKernel>(registrar, "elementwise_min", __FILE__, __LINE__);
  RegisterFloatKernels<PowKernel>(registrar, "elementwise_pow", __FILE__, __LINE__);
  RegisterFloatKernels<MaxGradKernel>(registrar, "elementwise_max_grad", __FILE__, __LINE__);
  RegisterFloatKernels<MinGradKernel>(registrar, "elementwise_min_grad", __FILE__, __LINE__);
  RegisterFloatKernels<PowGradKernel>(registrar, "elementwise_pow_grad", __FILE__, __LINE__);
}

}  // namespace nabla::opencl_ops
