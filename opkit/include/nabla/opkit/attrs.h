#pragma once
// Attribute helpers of ops that take a shape and a dtype name as attributes
// (fill_constant, the random initializers, cast, one_hot): parsing with
// errors that name the attribute, and checkers that reject a bad value when
// the program is loaded rather than when the op first runs.
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/mixed_precision_attr.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/attr_tensor.h"
#include "nabla/types.h"

namespace nabla::opkit {

inline Shape ShapeFromAttr(const std::vector<int>& dims) { return Shape(dims.begin(), dims.end()); }

// The dtype attribute `attr` = `name`; an unknown name is an error at `where`.
inline DType ParseDTypeAttr(const std::string& name, const std::string& attr, const std::string& where) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument, where, ": attribute ", attr,
                " must be one of float32, float64, int32, int64, bool, bfloat16, but received '", name, "'");
  return d;
}

// Checkers for OpBuilder::Attr: a dtype name, a shape of non-negative dims.
inline void CheckDTypeName(const std::string& name) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument,
                "dtype must be one of float32, float64, int32, int64, bool, bfloat16, but received '", name, "'");
}
inline void CheckShapeAttr(const std::vector<int>& shape) {
  for (int d : shape)
    NABLA_ENFORCE(d >= 0, kInvalidArgument, "every dim of attribute shape must be >= 0, but received ",
                  ShapeToString(ShapeFromAttr(shape)));
}

// Ops with no input pick their kernel by their `dtype` attribute.
inline DType KernelDTypeFromAttr(const ExecutionContext& ctx) {
  return ParseDTypeAttr(ctx.Attr<std::string>("dtype"), "dtype", StrCat("op '", ctx.Op().Type(), "'"));
}

// Out gets the shape of attribute `shape` (or of input ShapeTensor or
// ShapeTensorList where the op has them: CreatedShape, attr_tensor.h) and
// the dtype of attribute `dtype`.
inline void InferFromShapeAndDTypeAttrs(InferShapeContext& c) {
  c.SetOutputShape("Out", CreatedShape(c));
  c.SetOutputDType("Out", ParseDTypeAttr(c.Attr<std::string>("dtype"), "dtype", c.Where()));
}

// Grad ops whose bfloat16 kernel can write float32 gradients declare the
// bool attribute force_fp32_output (kForceFp32OutputAttr,
// nabla/mixed_precision_attr.h; the FoldBf16Casts pass sets it), documented by
// kForceFp32GradsDoc. Call after the op's own inference: with the attribute
// set and input `slot` bfloat16, every output the op writes is float32
// (other dtypes have no such kernel; the attribute means nothing there).
inline constexpr const char* kForceFp32GradsDoc =
    "(bool, default false) with bfloat16 inputs, write the gradients in float32, unrounded; the mixed-precision "
    "pass (FoldBf16Casts) sets it where each gradient was cast to float32 at once";
inline void ForceFp32Outputs(InferShapeContext& c, const std::string& slot) {
  if (!c.Attr<bool>(kForceFp32OutputAttr) || c.InputDType(slot) != DType::kBFloat16) return;
  for (const auto& [out, args] : c.Op().Outputs())
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i] != kEmptyVarName) c.SetOutputDType(out, DType::kFloat32, i);
}
inline bool ForcesFp32Output(const ExecutionContext& ctx) { return ctx.Attr<bool>(kForceFp32OutputAttr); }

}  // namespace nabla::opkit
