// OpenCL kernel of sum: Out = X[0] + X[1] + ..., accumulated in place.
#include <algorithm>

#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "sum_cl.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

// Out may be one of the inputs (the backward builder accumulates in place),
// so an aliased sum goes through a scratch buffer.
template <typename T>
struct SumKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
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
    Scratch<T> scratch(dev);
    void* acc = aliased ? scratch.Allocate(n) : AllocateOutput<T>(ctx, out, shape);
    dev.CopyOnDevice(acc, in[0], n * sizeof(T));
    for (size_t i = 1; i < in.size(); ++i)
      Run<T>(dev, cl_source::sum(), "add_to", {KernelArg::Buffer(acc), KernelArg::Buffer(in[i]), KernelArg(n)}, n);
    if (aliased) dev.CopyOnDevice(AllocateOutput<T>(ctx, out, shape), acc, n * sizeof(T));
  }
};

}  // namespace

NABLA_REGISTER_OPS(sum_opencl) { RegisterOpenClKernels<SumKernel>(registrar, "sum", __FILE__, __LINE__); }

}  // namespace nabla::math_ops
