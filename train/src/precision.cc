#include "nabla/train/precision.h"

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"
#include "nabla/mixed_precision.h"

namespace nabla::train {

bool ApplyPrecision(ProgramDesc& program, const std::string& precision, DeviceType device, std::ostream& note,
                    const std::string& where) {
  NABLA_ENFORCE(precision == "fp32" || precision == "bf16", kInvalidArgument, where,
                ": precision must be one of fp32, bf16, but received '", precision, "'");
  if (precision == "fp32") return false;
  if (device != DeviceType::kCPU) {
    note << "nabla: precision bf16 runs on the cpu device only; the " << DeviceTypeName(device) << " device runs fp32"
         << std::endl;
    return false;
  }
  if (!cpu::HasBf16Gemm()) {
    note << "nabla: this CPU has no bf16 instructions (oneDNN's ISA is below avx512_core_bf16); running fp32"
         << std::endl;
    return false;
  }
  ApplyBf16MixedPrecision(program, device);
  return true;
}

}  // namespace nabla::train
