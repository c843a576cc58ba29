#pragma once
// Checks shared by every front end that feeds tensors into block 0 of a
// program and fetches vars after a run (the CLI's `exec`, the Python
// Executor), so both report a bad feed the same way.
#include <functional>
#include <string>

#include "nabla/export.h"
#include "nabla/program.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"

namespace nabla {

// `tensor` fed into the declared var `var` of `program`: its dtype and shape
// (-1 matches any dim) must be the declared ones. `source` starts the message
// ("x.npy: feed 'x'").
NABLA_API void CheckFeedMatchesVar(const ProgramDesc& program, const VarDesc& var, const Tensor& tensor,
                                   const std::string& source);

// A declared, non-persistable var that an op of block 0 reads before any op
// writes it must be in `scope` already; saying so beats a kernel's "tensor not
// allocated". `how_to_feed(name)` tells the user how to provide it in their
// front end ("pass --feed x=FILE.npy").
NABLA_API void CheckInputsProvided(const ProgramDesc& program, const Scope& scope,
                                   const std::function<std::string(const std::string&)>& how_to_feed);

// The dense tensor a run left in var `name`, on the host (shared, not copied,
// when it is already there). `what` starts the message when there is none.
NABLA_API Tensor FetchToHost(const ProgramDesc& program, const Scope& scope, const std::string& name,
                             const std::string& what);

}  // namespace nabla
