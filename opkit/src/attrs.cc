#include "nabla/opkit/attrs.h"

#include "nabla/error.h"
#include "nabla/opkit/attr_tensor.h"

namespace nabla::opkit {

DType ParseDTypeAttr(const std::string& name, const std::string& attr, const std::string& where) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument, where, ": attribute ", attr,
                " must be one of float32, float64, int32, int64, bool, bfloat16, but received '", name, "'");
  return d;
}

void CheckDTypeName(const std::string& name) {
  DType d;
  NABLA_ENFORCE(ParseDType(name, &d), kInvalidArgument,
                "dtype must be one of float32, float64, int32, int64, bool, bfloat16, but received '", name, "'");
}

void CheckShapeAttr(const std::vector<int>& shape) {
  for (int d : shape)
    NABLA_ENFORCE(d >= 0, kInvalidArgument, "every dim of attribute shape must be >= 0, but received ",
                  ShapeToString(ShapeFromAttr(shape)));
}

DType KernelDTypeFromAttr(const ExecutionContext& ctx) {
  return ParseDTypeAttr(ctx.Attr<std::string>("dtype"), "dtype", StrCat("op '", ctx.Op().Type(), "'"));
}

void InferFromShapeAndDTypeAttrs(InferShapeContext& c) {
  c.SetOutputShape("Out", CreatedShape(c));
  c.SetOutputDType("Out", ParseDTypeAttr(c.Attr<std::string>("dtype"), "dtype", c.Where()));
}

void ForceFp32Outputs(InferShapeContext& c, const std::string& slot) {
  if (!c.Attr<bool>(kForceFp32OutputAttr) || c.InputDType(slot) != DType::kBFloat16) return;
  for (const auto& [out, args] : c.Op().Outputs())
    for (size_t i = 0; i < args.size(); ++i)
      if (args[i] != kEmptyVarName) c.SetOutputDType(out, DType::kFloat32, i);
}

}  // namespace nabla::opkit
