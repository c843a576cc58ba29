#pragma once
// bfloat16 mixed precision as a program pass. Ops declare at registration
// how they take part (OpBuilder::Precision, an OpPrecision): GEMM-bound ops
// say kLow, ops that need float32 say kFloat32, the rest follow their
// inputs. The pass names no op: it reads those traits, the registry's
// kernels, and inserts the op registered with OpBuilder::DTypeCast().
//
// Placement, chosen so every other op keeps seeing float32: a kLow op with a
// bfloat16 kernel on the device gets a `cast` to bfloat16 before each of its
// float32 inputs (one per input and consumer) and writes bfloat16 outputs
// that a `cast` turns back into the original float32 vars at once; an output
// the op's inference keeps float32 for bfloat16 inputs (a statistic such as
// flash_attn's softmax_lse) it writes into the original var itself. Run it
// before AppendBackward: the casts' own gradients then carry gradients back
// to float32, so parameters (master weights), optimizer state and the
// gradients the optimizer reads all stay float32, and gradient sums happen
// in float32. Ops inside sub-blocks (loops, conditionals) are left alone.
// ElideBf16Casts (below) then lets an op between two bfloat16 ops run in
// bfloat16 without the casts, where fusion is on.
#include <cstddef>
#include <string>
#include <unordered_set>

#include "nabla/export.h"
#include "nabla/mixed_precision_attr.h"
#include "nabla/program.h"
#include "nabla/types.h"

namespace nabla {

struct MixedPrecisionStats {
  size_t low_ops = 0;  // ops now running in bfloat16
  size_t casts = 0;    // cast ops inserted
};

// Rewrites block 0 of `program` as described above for kernels of `device`.
// Cast vars are named `<var>@BF16` (input casts add `@<n>` to stay unique);
// they are neither persistable nor written to checkpoints. Idempotent.
NABLA_API MixedPrecisionStats ApplyBf16MixedPrecision(ProgramDesc& program, DeviceType device = DeviceType::kCPU);

// Run after ApplyBf16MixedPrecision and before AppendBackward, where ops
// may be fused (it removes vars as FuseOps does: none in `keep`, no
// persistable one). It takes the casts out from between bfloat16 ops, in
// three rewrites, none changing a forward value:
//  - a narrowing cast moves up through an op that moves data
//    (OpBuilder::MovesData: reshape), which then runs in bfloat16;
//  - a widening cast whose one reader is a narrowing cast, and that cast,
//    go (flash_attn's output reshaped into the next GEMM);
//  - an op between a widening and a narrowing cast (a bias, or a bias and
//    activation, between two GEMMs) runs in bfloat16 where it follows its
//    inputs' precision (OpPrecision::kFollowInputs) and has a bfloat16
//    kernel, as has its default grad op: it reads the bfloat16 var the
//    widening cast read and writes the one the narrowing cast wrote; both
//    casts go. Its other floating inputs stay float32 where it declares that
//    its bfloat16 kernel takes them so (OpBuilder::Bf16TakesFloat32: the
//    bias); its inference must accept the mix and write bfloat16. Its kernel
//    computes in float32 and rounds once: the float32 op's bits between
//    the casts.
// Each var between the casts must have that one reader and writer. The
// gradients keep their bits too, except a bias's whose gradient reached it
// through a moved cast (the q, k and v biases before flash_attn): its
// terms are rounded to bfloat16 before they are summed (as in PyTorch's
// autocast), where the float32 op summed them unrounded. Returns the
// number of rewrites; idempotent.
NABLA_API size_t ElideBf16Casts(ProgramDesc& program, const std::unordered_set<std::string>& keep,
                                DeviceType device = DeviceType::kCPU);

// kForceFp32OutputAttr ("force_fp32_output"): nabla/mixed_precision_attr.h.

// Run after AppendBackward (the pass above leaves widening casts behind every
// bfloat16 op, the backward part more of them: each weight gradient of a GEMM
// is written in bfloat16 and cast to float32 at once). An op of block 0 that
// declares kForceFp32OutputAttr, and whose every output is a bfloat16 var
// read only by such a cast, writes the casts' float32 vars itself instead:
// the attribute is set, the casts and the bfloat16 vars go. That saves a
// pass over every weight gradient and keeps the gradients' float32 bits.
// An output that ops running their bfloat16 kernels read instead, each
// through a slot it declares with OpBuilder::Bf16TakesFloat32 (the
// gradient that a GEMM's grad op hands a bias and activation's grad op
// after ElideBf16Casts), becomes float32 as it is, provided some other
// output of the op folds a cast.
// Then, the gradients being in place, the narrowing casts of one float32
// var (one per consumer, above) become one: a later cast of a var nothing
// wrote since an earlier cast is dropped and its readers read the earlier
// cast's output (the same bits, a pass and a bfloat16 copy fewer).
// Returns the number of casts removed; idempotent.
NABLA_API size_t FoldBf16Casts(ProgramDesc& program, DeviceType device = DeviceType::kCPU);

}  // namespace nabla
