#include "nabla/opkit/elementwise.h"

namespace nabla::opkit {

OpBuilder& GradFromOutSchema(Registrar& registrar, const std::string& type, const std::string& doc, const char* file,
                             int line) {
  return registrar.DefaultGradOp(type, file, line)
      .Doc(doc)
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "Out", GradVarName("X")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
}

}  // namespace nabla::opkit
