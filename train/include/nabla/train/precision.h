#pragma once
// The `precision` of a run (`precision:` in a run config, `--precision` of
// exec, backward and graph): fp32, or bf16 for mixed precision (the pass in
// nabla/mixed_precision.h). One function so every command falls back to
// fp32 the same way and says so in the same words.
#include <ostream>
#include <string>

#include "nabla/program.h"
#include "nabla/types.h"

namespace nabla::train {

// Checks `precision` ("fp32" or "bf16"; anything else is an Error naming
// `where`). For bf16 applies the mixed-precision pass to `program` when
// `device` can run it: the OpenCL device stays fp32, and so does a CPU whose
// oneDNN lacks bf16 instructions; either prints one line to `note`. Run it
// before AppendBackward. Returns whether the program now runs in bf16; then
// run FoldBf16Casts (nabla/mixed_precision.h) after AppendBackward.
bool ApplyPrecision(ProgramDesc& program, const std::string& precision, DeviceType device, std::ostream& note,
                    const std::string& where = "--precision");

}  // namespace nabla::train
