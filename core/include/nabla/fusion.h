#pragma once
// Op fusion as a program pass. Ops declare the chains they can replace
// (OpBuilder::Fuses, a FusionPattern: `fused_elemwise_activation` replaces
// elementwise_add followed by an activation, `softmax_with_cross_entropy`
// replaces softmax followed by cross_entropy); the pass only matches the
// declared types, so no op name lives in the core.
#include <cstddef>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/export.h"
#include "nabla/program.h"
#include "nabla/tensor.h"

namespace nabla {

// Replaces every declared chain in every block of `program` by its fused op,
// where it is safe: each link var (the output one op passes to the next: the
// one of its outputs the next op reads, the others the fused op writes) is
// written once, read only by the next op of the chain (in any block), is not
// persistable and not in `keep` (fetched vars, say); no op in between writes
// what the chain reads or touches what it writes. Run it before
// AppendBackward: the fused op brings its own gradient. Then runs every op's
// before-backward rewrite (OpBuilder::RewritesBeforeBackward), ops in name
// order. Returns how many chains and places were fused.
//
// `bf16_next`: the bfloat16 mixed-precision pass (nabla/mixed_precision.h)
// runs on the program next. A chain with a GEMM-bound op (OpPrecision::kLow)
// is then fused only into an op that runs in bfloat16 too (kLow, with a cpu
// bfloat16 kernel): otherwise the fusion would keep that GEMM in float32.
NABLA_API size_t FuseOps(ProgramDesc& program, const std::unordered_set<std::string>& keep = {},
                         bool bf16_next = false);

// Runs every op's after-backward rewrite (OpBuilder::RewritesAfterBackward),
// ops in name order, each pass once: after AppendBackward (and the bf16
// fold) and after the optimizer, if any, is appended (a grad op may take
// over an update). `keep` as for FuseOps. Returns how many places the
// passes changed.
NABLA_API size_t FuseGradOps(ProgramDesc& program, const std::unordered_set<std::string>& keep = {});

// For passes that fold constants (flash_attn's causal-mask check): runs ops
// `ops` of `block` (indices, ascending) once on the host in a scratch scope
// and returns a host copy of `var`. Refused (kInvalidArgument, nothing run)
// when an op is not constant: it reads a var no earlier op of the list
// writes (a feed, a parameter), draws random numbers, owns a block or runs
// control flow; an op failing is rethrown.
NABLA_API Tensor EvaluateOnHost(const BlockDesc& block, const std::vector<size_t>& ops, const std::string& var);

}  // namespace nabla
