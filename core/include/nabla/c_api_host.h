#pragma once
// The core's side of the C ABI that backends fill in (nabla/c_api.h is the
// plugins' side).
#include <cstdint>

#include "nabla/c_api.h"
#include "nabla/export.h"

namespace nabla {

// The C ABI's parallel_for runs chunks through `fn` when set: the CPU
// backend sets it to its executor-arena loop; until then chunks run inline.
using CApiParallelFor = void (*)(int64_t n, int64_t grain, nabla_range_fn body, void* user);
NABLA_API void SetCApiParallelFor(CApiParallelFor fn);

}  // namespace nabla
