#include "nabla/cpu/cpu.h"

int main() {
  nabla::cpu::InitCpuBackend();
  return 0;
}
