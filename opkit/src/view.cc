#include "nabla/opkit/view.h"

#include <utility>

#include "nabla/error.h"

namespace nabla::opkit {

void ViewAs(const ExecutionContext& ctx, const std::string& in_slot, const std::string& out_slot, Shape shape) {
  const Tensor& x = ctx.Input(in_slot);
  Tensor* out = ctx.Output(out_slot);
  NABLA_ENFORCE(NumElements(shape) == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': ", out_slot,
                " of shape ", ShapeToString(shape), " cannot view ", in_slot, " of shape ",
                ShapeToString(x.GetShape()));
  out->ShareDataWith(x);
  out->Resize(std::move(shape));
}

void ViewGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output("X@GRAD");
  if (!dx) return;
  const Tensor& x = ctx.Input("X");
  const Tensor& dout = ctx.Input("Out@GRAD");
  NABLA_ENFORCE(dout.Numel() == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': expected Out@GRAD with ",
                x.Numel(), " elements (X shape ", ShapeToString(x.GetShape()), "), but received shape ",
                ShapeToString(dout.GetShape()));
  Shape shape = x.GetShape();
  dx->ShareDataWith(dout);
  dx->Resize(shape);
}

}  // namespace nabla::opkit
