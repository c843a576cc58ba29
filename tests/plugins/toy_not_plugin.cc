// A real shared library with no ABI tag and no entry point. Like
// toy_abi_mismatch, it aborts if the loader ever opens it.
#include <cstdio>
#include <cstdlib>

namespace {
struct AbortOnLoad {
  AbortOnLoad() {
    std::fputs("toy_not_plugin: static initialiser ran; the loader opened a library without an ABI tag\n", stderr);
    std::abort();
  }
} abort_on_load;
}  // namespace

extern "C" __attribute__((visibility("default"))) int toy_not_plugin_function() { return 42; }
