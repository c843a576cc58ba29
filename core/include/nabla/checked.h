#pragma once
// Checked mode, for tests and for hunting a kernel that writes where it
// should not. While it is on:
//   - every host buffer a tensor allocates sits at the end of its own pages:
//     64 canary bytes before it, canary bytes up to the next 64-byte
//     boundary after it, then an inaccessible page, and a tensor reuses a
//     buffer only of exactly its size;
//   - each op's dispatch (executors, RunOp, eager calls, gradient checks)
//     runs shape inference, then the kernel, then verifies the canaries of
//     every output, that every output has the shape and dtype inference gave
//     it, and that no host input the op only reads changed.
// A kernel that writes into the canaries or an input fails its op with an
// Error naming the op, the slot, the var and the inferred shape and dtype;
// one that runs into the inaccessible page ends the process with that line
// on stderr (exit code 1). Off, it costs one flag test per allocation and
// per op. NABLA_CHECKED=1 in the environment turns it on at start;
// `nabla exec --checked` and tests call SetCheckedMode.
#include "nabla/export.h"

namespace nabla {

NABLA_API void SetCheckedMode(bool on);
NABLA_API bool CheckedMode();
// Whether a tensor reuses only a buffer of exactly its size: in checked
// mode, and always in AddressSanitizer builds, whose host memory then comes
// from ASan's allocator at the exact size asked (no tbbmalloc, no rounding),
// so ASan sees a write one byte past any tensor.
NABLA_API bool ExactBuffers();

}  // namespace nabla
