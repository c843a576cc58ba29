#pragma once
// Op fusion as a program pass. Ops declare the chains they can replace
// (OpBuilder::Fuses, a FusionPattern: `fused_elemwise_activation` replaces
// elementwise_add followed by an activation, `softmax_with_cross_entropy`
// replaces softmax followed by cross_entropy); the pass only matches the
// declared types, so no op name lives in the core.
#include <cstddef>
#include <string>
#include <unordered_set>

#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

// Replaces every declared chain in every block of `program` by its fused op,
// where it is safe: each link var (the output one op passes to the next: the
// one of its outputs the next op reads, the others the fused op writes) is
// written once, read only by the next op of the chain (in any block), is not
// persistable and not in `keep` (fetched vars, say); no op in between writes
// what the chain reads or touches what it writes. Run it before
// AppendBackward: the fused op brings its own gradient. Then runs the
// forward fusions of registered ops (RegisterForwardFusion). Returns how
// many chains and places were fused.
NABLA_API size_t FuseOps(ProgramDesc& program, const std::unordered_set<std::string>& keep = {});

// A rewrite an op brings for programs without their backward part, for what
// a chain cannot express: `flash_attn` replaces attention written with
// matmul and softmax, whose q, k and v come from transposes outside the
// chain. `run` rewrites `program` in place under FuseOps' rules (every var
// in `keep`, every persistable var and every result read later stays as it
// was) and returns how many places it changed. A plain function pointer, not
// a std::function: the table outlives plugins, and nothing of a plugin's
// code may run at its teardown.
using ForwardFusionFn = size_t (*)(ProgramDesc& program, const std::unordered_set<std::string>& keep);
// Called from an op's registration (NABLA_REGISTER_OPS): FuseOps runs `run`
// after the chains while `op_type` is registered (so its plugin is loaded);
// registering the same (op_type, name) again replaces the function.
NABLA_API void RegisterForwardFusion(const std::string& op_type, const std::string& name, ForwardFusionFn run);

// Runs every op's after-backward rewrite (OpBuilder::RewritesAfterBackward),
// ops in name order, each pass once: after AppendBackward (and the bf16
// fold) and after the optimizer, if any, is appended (a grad op may take
// over an update). `keep` as for FuseOps. Returns how many places the
// passes changed.
NABLA_API size_t FuseGradOps(ProgramDesc& program, const std::unordered_set<std::string>& keep = {});

}  // namespace nabla
