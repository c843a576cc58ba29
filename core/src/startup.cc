#include <algorithm>
#include <limits>

#include "nabla/executor.h"
#include "nabla/op_registry.h"

namespace nabla {

ProgramDesc BuildStartupProgram(const ProgramDesc& main, const std::vector<std::string>& skip) {
  ProgramDesc startup;
  startup.SetSourceFile(main.SourceFile());
  BlockDesc* block = startup.Root();
  auto registry = CurrentRegistry();
  for (size_t b = 0; b < main.Size(); ++b) {
    for (const auto& var : main.Block(b)->AllVars()) {
      if (!var->Persistable() || !var->Init()) continue;
      if (std::find(skip.begin(), skip.end(), var->Name()) != skip.end()) continue;
      const InitSpec& init = *var->Init();
      NABLA_ENFORCE(NumElements(var->GetShape()) >= 0, kInvalidArgument, main.Where(var->Pos()), ": parameter '",
                    var->Name(), "' has an initializer but an unknown shape ", ShapeToString(var->GetShape()),
                    "; declare every dim");
      *block->Var(var->Name()) = *var;
      OpDesc op;
      op.SetType(init.type);
      op.SetPos(init.pos);
      op.SetOutput("Out", {var->Name()});
      op.MutableAttrs() = init.attrs;
      // Initializers take Paddle's int `shape` attribute: a larger dim would
      // wrap silently (2^62 became 0), so it is an error here.
      for (int64_t d : var->GetShape()) {
        NABLA_ENFORCE(d <= std::numeric_limits<int>::max(), kOutOfRange, main.Where(var->Pos()), ": parameter '",
                      var->Name(), "' has a dim ", d, " in ", ShapeToString(var->GetShape()),
                      ", more than an initializer's int shape attribute holds (", std::numeric_limits<int>::max(), ")");
      }
      std::vector<int> shape(var->GetShape().begin(), var->GetShape().end());
      if (!op.HasAttr("shape")) op.SetAttr("shape", shape);
      if (!op.HasAttr("dtype")) op.SetAttr("dtype", std::string(DTypeName(var->GetDType())));
      FillDefaultAttrs(op, *registry, &startup);
      block->AppendOp(std::move(op));
    }
  }
  return startup;
}

}  // namespace nabla
