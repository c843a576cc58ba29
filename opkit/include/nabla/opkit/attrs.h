#pragma once
// Attribute helpers of ops that take a shape and a dtype name as attributes
// (fill_constant, the random initializers, cast, one_hot): parsing with
// errors that name the attribute, and checkers that reject a bad value when
// the program is loaded rather than when the op first runs.
#include <string>
#include <vector>

#include "nabla/mixed_precision.h"
#include "nabla/op_registry.h"
#include "nabla/types.h"

namespace nabla::opkit {

inline Shape ShapeFromAttr(const std::vector<int>& dims) { return Shape(dims.begin(), dims.end()); }

// The dtype attribute `attr` = `name`; an unknown name is an error at `where`.
DType ParseDTypeAttr(const std::string& name, const std::string& attr, const std::string& where);

// Checkers for OpBuilder::Attr: a dtype name, a shape of non-negative dims.
void CheckDTypeName(const std::string& name);
void CheckShapeAttr(const std::vector<int>& shape);

// Ops with no input pick their kernel by their `dtype` attribute.
DType KernelDTypeFromAttr(const ExecutionContext& ctx);

// Out gets the shape of attribute `shape` (or of input ShapeTensor or
// ShapeTensorList where the op has them: CreatedShape, attr_tensor.h) and
// the dtype of attribute `dtype`.
void InferFromShapeAndDTypeAttrs(InferShapeContext& c);

// Grad ops whose bfloat16 kernel can write float32 gradients declare the
// bool attribute force_fp32_output (kForceFp32OutputAttr,
// nabla/mixed_precision.h; the FoldBf16Casts pass sets it), documented by
// kForceFp32GradsDoc. Call after the op's own inference: with the attribute
// set and input `slot` bfloat16, every output the op writes is float32
// (other dtypes have no such kernel; the attribute means nothing there).
inline constexpr const char* kForceFp32GradsDoc =
    "(bool, default false) with bfloat16 inputs, write the gradients in float32, unrounded; the mixed-precision "
    "pass (FoldBf16Casts) sets it where each gradient was cast to float32 at once";
void ForceFp32Outputs(InferShapeContext& c, const std::string& slot);
inline bool ForcesFp32Output(const ExecutionContext& ctx) { return ctx.Attr<bool>(kForceFp32OutputAttr); }

}  // namespace nabla::opkit
