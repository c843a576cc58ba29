#pragma once
// The overwrite pass of the backward builder (private to core).
//
// A grad op reads forward vars by name, and gradients are named after their
// forward var. When a block writes a var more than once, every version but
// one shares the name, so a grad op would read the wrong value and the
// gradients of two versions would be summed into one. The pass gives every
// version that would be confused a name of its own (`y@VER@1`, ...) before the
// backward part is built. Which version keeps the user's name is the one a
// grad op finds under it when it runs:
//   - in the root block, the last one (feeds, fetches and param_grads are
//     unchanged); but a value the block starts with (fed, a parameter) that
//     is read, overwritten and needs its gradient keeps the name, as a
//     PyTorch leaf does: x@GRAD is its gradient. It is copied aside first
//     and the last value copied back into x at the end of the forward ops;
//   - in a sub-block run once per step (while, conditional_block), a var of
//     the block keeps its last version, but an outer var keeps the value it
//     had before the step, which the step scope saves under its name: a new
//     value that a grad op needs is renamed and copied into the outer var by
//     an `assign` appended to the block.
// Writes that an op declares in place on purpose (the UpdatesInPlace trait,
// and the carried vars of an op that owns a block) are not new versions.
// Where no right gradient exists under the user's names, the pass throws.
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/op_registry.h"
#include "nabla/program.h"

namespace nabla {

// The block index an op owns, or -1. Only ops whose registration declares a
// block attribute (the has_sub_block trait) are looked at.
int SubBlockOf(const OpDesc& op, const OpRegistry& registry);

// Versions the vars of `root` and of every block its ops own, recursively.
// `no_grad` (the user's set) gains the new names of versions of its vars.
// `targets` (the loss) must not be overwritten after being read.
void RenameOverwrittenVars(ProgramDesc& program, BlockDesc& root, const OpRegistry& registry,
                           const std::vector<std::string>& targets, std::unordered_set<std::string>* no_grad);

}  // namespace nabla
