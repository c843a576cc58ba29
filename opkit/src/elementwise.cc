#include "nabla/opkit/elementwise.h"

namespace nabla::opkit {

OpBuilder& GradFromOutSchema(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                             int line) {
  return registrar.DefaultGradOp(type, file, line)
      .Doc(doc)
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Out", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
}

OpBuilder& ActivationGradSchema(Registrar& registrar, const std::string& type, GradReads reads, const char* file,
                                int line) {
  const std::string from = reads == GradReads::kX ? "X" : reads == GradReads::kOut ? "Out" : GradVarName("Out");
  return registrar.DefaultGradOp(type, file, line)
      .Doc("Gradient of " + type + ": X@GRAD from Out@GRAD" + (reads == GradReads::kNothing ? "" : " and " + from) +
           ".")
      .InferShape([from](InferShapeContext& c) { InferSameAs(c, from, GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
}

}  // namespace nabla::opkit
