// OpenCL kernels of the elementwise binary ops, with Paddle's axis
// broadcasting: one row of kBinaryOps per op, whose OpenCL C expressions
// become that op's kernels (elementwise.cl holds the skeletons). Adding an op
// here is adding its row.
#include <algorithm>
#include <optional>

#include "elementwise_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

// Expressions in OpenCL C over T: `out` of a (X's element) and b (Y's), and
// the gradient parts dx, dy of a, b and d (Out@GRAD's element), summed onto
// broadcast operands afterwards. No dx/dy: the grad op runs on the CPU.
struct BinaryOp {
  const char* type;
  const char* out;
  const char* dx = nullptr;
  const char* dy = nullptr;
};

// Ties of max and min split the gradient evenly, and pow's Y@GRAD is 0 where
// X == 0 <= Y: the CPU kernels' rules.
const BinaryOp kBinaryOps[] = {
    {"elementwise_add", "a + b", "d", "d"},
    {"elementwise_sub", "a - b", "d", "-d"},
    {"elementwise_mul", "a * b"},
    {"elementwise_div", "a / b"},
    {"elementwise_max", "a > b ? a : b", "a > b ? d : (a == b ? d / (T)2 : (T)0)",
     "b > a ? d : (a == b ? d / (T)2 : (T)0)"},
    {"elementwise_min", "a < b ? a : b", "a < b ? d : (a == b ? d / (T)2 : (T)0)",
     "b < a ? d : (a == b ? d / (T)2 : (T)0)"},
    {"elementwise_pow", "pow(a, b)", "d * b * pow(a, b - (T)1)",
     "(a == (T)0 && b >= (T)0) ? (T)0 : d * pow(a, b) * log(a)"},
};

// elementwise.cl followed by every row's functions and kernels.
const std::string& Source() {
  static const std::string source = [] {
    std::string s = cl_source::elementwise();
    for (const BinaryOp& op : kBinaryOps) {
      const std::string name = op.type;
      s += "\nT " + name + "_out(T a, T b) { return " + op.out + "; }\nEW_BINARY(" + name + ")\n";
      if (!op.dx) continue;
      s += "T " + name + "_dx(T a, T b, T d) { return " + op.dx + "; }\n";
      s += "T " + name + "_dy(T a, T b, T d) { return " + op.dy + "; }\nEW_BINARY_GRAD(" + name + ")\n";
    }
    return s;
  }();
  return source;
}

constexpr size_t kMaxRank = 8;

// X and Y padded to Out's rank the way the CPU kernels broadcast (the
// lower-rank operand aligned at `axis`, -1 meaning at the end), then size-1
// dims of Out dropped and neighbours that broadcast alike merged, so the
// kernels see at most a few dims.
struct Broadcast {
  std::vector<int64_t> dims;            // merged dims of Out
  std::vector<int64_t> x_full, y_full;  // 1 where the operand has the dim, 0 where it is broadcast
  int64_t Numel() const {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
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
  // The leading kernel arguments after the buffers: n, rank, D, XS, YS.
  std::vector<KernelArg> Args() const {
    return {KernelArg(Numel()), KernelArg(static_cast<int32_t>(dims.size())), Long8(dims), Long8(Strides(x_full)),
            Long8(Strides(y_full))};
  }
};

Broadcast MakeBroadcast(const ExecutionContext& ctx) {
  const Shape& x = ctx.Input("X").GetShape();
  const Shape& y = ctx.Input("Y").GetShape();
  const std::string where = "op '" + ctx.Op().Type() + "'";
  int axis = ctx.Attr<int>("axis");
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

std::vector<KernelArg> Concat(std::vector<KernelArg> a, const std::vector<KernelArg>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

template <typename T>
struct BinaryKernel {
  const BinaryOp* op;
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Broadcast b = MakeBroadcast(ctx);
    KernelArg xa = s.Arg(ctx.Input("X")), ya = s.Arg(ctx.Input("Y"));
    Tensor* out = ctx.Output("Out");
    void* ob = AllocateOutput<T>(ctx, out, out->GetShape());
    Run<T>(dev, Source(), (std::string(op->type) + "_fwd").c_str(), Concat({xa, ya, KernelArg::Buffer(ob)}, b.Args()),
           out->Numel());
  }
};

// A gradient part written `d` or `-d` is Out@GRAD itself, summed straight
// from it (add and sub need no per-element pass).
std::optional<int> LinearSign(const char* expr) {
  const std::string e = expr;
  if (e == "d") return 1;
  if (e == "-d") return -1;
  return std::nullopt;
}

// X@GRAD and Y@GRAD: the row's per-element parts over Out's elements (kernel
// <op>_bwd), each summed onto its operand's shape by reduce_to.
template <typename T>
struct BinaryGradKernel {
  const BinaryOp* op;
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dx = ctx.Output(GradVarName("X"));
    Tensor* dy = ctx.Output(GradVarName("Y"));
    if (!dx && !dy) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const Tensor& dout = ctx.Input(GradVarName("Out"));
    const Broadcast b = MakeBroadcast(ctx);
    const int64_t n = b.Numel();
    NABLA_ENFORCE(dout.Numel() == n, kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD with ", n,
                  " elements but received shape ", ShapeToString(dout.GetShape()));
    KernelArg da = s.Arg(dout);
    const std::optional<int> sx = LinearSign(op->dx), sy = LinearSign(op->dy);
    KernelArg gx = da, gy = da;
    Scratch<T> gx_full(dev), gy_full(dev);
    if (!sx || !sy) {
      gx = KernelArg::Buffer(gx_full.Allocate(n));
      gy = KernelArg::Buffer(gy_full.Allocate(n));
      Run<T>(dev, Source(), (std::string(op->type) + "_bwd").c_str(),
             Concat({s.Arg(x), s.Arg(y), da, gx, gy}, b.Args()), n);
    }
    auto reduce = [&](Tensor* grad, const Tensor& operand, const std::vector<int64_t>& full, KernelArg src, T sign) {
      if (!grad) return;
      void* g = AllocateOutput<T>(ctx, grad, operand.GetShape());
      Run<T>(dev, Source(), "reduce_to",
             {src, KernelArg::Buffer(g), KernelArg(operand.Numel()), KernelArg(static_cast<int32_t>(b.dims.size())),
              Long8(b.dims), Long8(full), KernelArg(sign)},
             operand.Numel());
    };
    const bool linear = sx && sy;
    reduce(dx, x, b.x_full, gx, linear ? T(*sx) : T(1));
    reduce(dy, y, b.y_full, gy, linear ? T(*sy) : T(1));
  }
};

}  // namespace

NABLA_REGISTER_OPS(elementwise_opencl) {
  for (const BinaryOp& op : kBinaryOps) {
    RegisterOpenClKernels<BinaryKernel>(registrar, op.type, __FILE__, __LINE__, &op);
    if (op.dx)
      RegisterOpenClKernels<BinaryGradKernel>(registrar, std::string(op.type) + "_grad", __FILE__, __LINE__, &op);
  }
}

}  // namespace nabla::math_ops
