#pragma once
// View ops (reshape, squeeze, unsqueeze, flatten): Out shares X's buffer
// under a new shape, and the gradient is Out@GRAD seen in X's shape. A kernel
// that later writes Out allocates a fresh buffer because Tensor::Allocate
// never reuses a shared one.
#include <string>
#include <utility>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/grad.h"
#include "nabla/opkit/kernels.h"
#include "nabla/tensor.h"

namespace nabla::opkit {

// Out = X's buffer under `shape`; the element counts must agree.
inline void ViewAs(const ExecutionContext& ctx, const std::string& in_slot, const std::string& out_slot, Shape shape) {
  const Tensor& x = ctx.Input(in_slot);
  Tensor* out = ctx.Output(out_slot);
  NABLA_ENFORCE(NumElements(shape) == x.Numel(), kInvalidArgument, "op '", ctx.Op().Type(), "': ", out_slot,
                " of shape ", ShapeToString(shape), " cannot view ", in_slot, " of shape ",
                ShapeToString(x.GetShape()));
  out->ShareDataWith(x);
  out->Resize(std::move(shape));
}

// The gradient of a view: X@GRAD = Out@GRAD seen in X's shape.
inline void ViewGradKernel(const ExecutionContext& ctx) {
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

// Registers a view op (X -> Out, any dtype) and its `<type>_grad`
// (X, Out@GRAD -> X@GRAD, float dtypes) whose output shape is
// shape_of(X's shape, op attributes, where). add_attrs declares the op's
// attributes (before the grad op copies them).
template <typename ShapeFn, typename AttrFn>
OpBuilder& RegisterViewOp(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                          int line, ShapeFn shape_of, AttrFn add_attrs) {
  OpBuilder& b = registrar.Op(type, file, line);
  add_attrs(b);
  b.Doc(doc)
      .Input("X", "(Tensor) the input")
      .Output("Out", "(Tensor) X's elements in the new shape")
      .InferShape([shape_of](InferShapeContext& c) {
        c.SetOutputShape("Out", shape_of(c.InputShape("X"), c.Op(), c.Where()));
        c.SetOutputDType("Out", c.InputDType("X"));
      })
      .template GradMaker<GradFromInputsMaker>();
  registrar.DefaultGradOp(type, file, line).InferShape(InferGradShapes);
  // A view moves no data: the same kernels serve the CPU and OpenCL (Out
  // shares X's buffer on whichever device X lives).
  for (DeviceType device : {DeviceType::kCPU, DeviceType::kOpenCL}) {
    for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
      registrar.Kernel(
          type, device, t,
          [shape_of](const ExecutionContext& ctx) {
            ViewAs(ctx, "X", "Out",
                   shape_of(ctx.Input("X").GetShape(), ctx.Op(), StrCat("op '", ctx.Op().Type(), "'")));
          },
          file, line);
    for (DType t : {DType::kFloat32, DType::kFloat64})
      registrar.Kernel(type + "_grad", device, t, ViewGradKernel, file, line);
  }
  return b;
}

}  // namespace nabla::opkit
