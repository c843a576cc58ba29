#pragma once
// What some nn_ops op files share beyond nn_util.h: tensor-valued attribute
// inputs, optimizer shape inference, the softmax-like schema. Private to
// this plugin; like nn_util.h it builds over the C ABI SDK too.
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nn_util.h"

namespace nabla::nn {

// adam's beta1 or beta2 (`attr`): input `slot` (Beta1Tensor, Beta2Tensor)
// where given, else the attribute; in [0, 1). Its CPU and OpenCL kernels
// read it so.
inline double AdamBeta(const ExecutionContext& ctx, const std::string& slot, const std::string& attr) {
  const auto b = FloatAttrOrTensor(ctx, slot, attr);
  NABLA_ENFORCE_VALUE(*b >= 0.0 && *b < 1.0, b, "op '", ctx.Op().Type(), "': ", b.source,
                      " must be in [0, 1), but received ", *b);
  return *b;
}

// adam's (and adamw's) epsilon: input EpsilonTensor where given, else the
// attribute; >= 0. Their CPU and OpenCL kernels read it so.
inline double AdamEpsilon(const ExecutionContext& ctx) {
  const auto e = FloatAttrOrTensor(ctx, "EpsilonTensor", "epsilon");
  NABLA_ENFORCE_VALUE(*e >= 0.0, e, "op '", ctx.Op().Type(), "': ", e.source, " must be >= 0, but received ", *e);
  return *e;
}

// batch_norm's (and fused_batch_norm_act's) momentum: input MomentumTensor
// where given, else the attribute; in [0, 1]. Their CPU and OpenCL kernels
// read it so.
inline double BatchNormMomentum(const ExecutionContext& ctx) {
  const auto m = FloatAttrOrTensor(ctx, "MomentumTensor", "momentum");
  NABLA_ENFORCE_VALUE(*m >= 0.0 && *m <= 1.0, m, "op '", ctx.Op().Type(), "': ", m.source,
                      " must be in [0, 1], but received ", *m);
  return *m;
}

// Shape inference shared by the optimizers: ParamOut (and every other
// `<slot>Out` named in `state`) takes its input's shape and dtype; Grad must
// have Param's shape and LearningRate one element.
inline void InferOptimizer(InferShapeContext& c, const std::vector<std::string>& state) {
  const Shape param = c.InputShape("Param");
  const Shape grad = c.InputShape("Grad");
  EnforceFloatDType(c.InputDType("Param"), c.Where(), "Param");
  NABLA_ENFORCE(c.InputDType("Grad") == c.InputDType("Param"), kInvalidArgument, c.Where(),
                ": Grad must have Param's dtype ", DTypeName(c.InputDType("Param")), ", but received ",
                DTypeName(c.InputDType("Grad")));
  bool same = param.size() == grad.size();
  for (size_t i = 0; same && i < param.size(); ++i) same = DimsCompatible(param[i], grad[i]);
  NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": Grad must have Param's shape ", ShapeToString(param),
                ", but received ", ShapeToString(grad));
  const Shape lr = c.InputShape("LearningRate");
  const int64_t lr_n = NumElements(lr);
  NABLA_ENFORCE(lr_n == 1 || lr_n < 0, kInvalidArgument, c.Where(),
                ": LearningRate must hold exactly one element, but received shape ", ShapeToString(lr));
  EnforceFloatDType(c.InputDType("LearningRate"), c.Where(), "LearningRate");
  c.ShareShapeAndDType("Param", "ParamOut");
  for (const auto& slot : state) {
    const Shape s = c.InputShape(slot);
    NABLA_ENFORCE(NumElements(s) < 0 || NumElements(param) < 0 || NumElements(s) == NumElements(param),
                  kInvalidArgument, c.Where(), ": ", slot, " must have Param's shape ", ShapeToString(param),
                  ", but received ", ShapeToString(s));
    c.ShareShapeAndDType(slot, slot + "Out");
  }
}

// The schema softmax and log_softmax share: X -> Out (X's shape) along
// attribute `axis`, a gradient that reads Out only, and that grad op's schema.
inline OpBuilder& AlongAxisSchema(Registrar& registrar, const std::string& type, const std::string& doc,
                                  const std::string& out_doc, const std::string& grad_doc, const char* file, int line) {
  OpBuilder& b =
      registrar.Op(type, file, line)
          .Doc(doc)
          .Input("X", "(Tensor) input of rank >= 1, float32 or float64")
          .Output("Out", out_doc)
          .Attr<int>("axis", -1, "(int, default -1) the axis to normalize over; negative counts from the end")
          .InferShape([](InferShapeContext& c) {
            NormalizeAxis(c.Attr<int>("axis"), c.InputShape("X").size(), "axis", c.Where());
            c.ShareShapeAndDType("X", "Out");
          })
          .GradMaker<GradFromOutMaker>();
  GradFromOutSchema(registrar, type, grad_doc, file, line);
  return b;
}

}  // namespace nabla::nn
