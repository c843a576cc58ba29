// `nabla`: picks OpenBLAS's kernels before anything else, then runs the
// command line and turns every failure into one stderr line and an exit code
// (docs/cli.md): 0 success, 1 runtime failure, 2 bad input or usage.
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "command.h"
#include "nabla/cpu/cpu.h"
#include "nabla/error.h"

namespace {

// Debian's OpenBLAS 0.3.21 does not recognise recent Xeons and falls back to
// its SSE3 "Prescott" kernels, 4-5x slower. It reads
// OPENBLAS_CORETYPE in a library constructor, before main runs, so setting it
// here only helps a fresh image of this process: re-exec ourselves once.
void ChooseBlasKernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  __builtin_cpu_init();
  const char* core = nullptr;
  if (__builtin_cpu_supports("avx512f")) {
    core = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2")) {
    core = "Haswell";
  }
  if (core == nullptr) return;
  // Set even when exec fails, so nothing downstream tries again.
  setenv("OPENBLAS_CORETYPE", core, 1);
  execv("/proc/self/exe", argv);
  // exec failed (no /proc, say): run on with the kernels OpenBLAS picked.
}

int Fail(const std::string& message, int code) {
  std::cout.flush();
  std::cerr << "nabla: error: " << nabla::OneLineMessage(message) << std::endl;
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  // oneDNN (float32 conv2d/pool2d in plugins/nn_ops) runs on OpenMP, whose
  // idle workers otherwise spin after every parallel region on a core the
  // executor's threads need. libgomp reads this when it loads, with that
  // plugin, after main has started; a user's own setting wins.
  setenv("OMP_WAIT_POLICY", "PASSIVE", 0);
  ChooseBlasKernels(argv);
  // Past a file-size limit (ulimit -f) write() then fails with EFBIG, which
  // the writers report naming the file, instead of the process dying mute.
  std::signal(SIGXFSZ, SIG_IGN);
  try {
    nabla::cpu::InitCpuBackend();
    return nabla::app::RunCli(argc, argv);
  } catch (const nabla::Error& e) {
    return Fail(e.what(), e.IsBadInput() ? 2 : 1);
  } catch (const std::bad_alloc&) {
    return Fail("out of memory", 1);
  } catch (const std::exception& e) {
    return Fail(e.what(), 1);
  } catch (...) {
    return Fail("unknown failure (a non-standard exception escaped)", 1);
  }
}
