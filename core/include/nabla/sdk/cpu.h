#pragma once
// nabla/cpu/cpu.h's parallel loop for plugins on the C ABI (nabla/sdk/plugin.h),
// header-only: cpu::ParallelFor over the core's api->parallel_for, so a
// kernel's loop splits over the executor's threads as the core's own does.
#include <cstdint>
#include <exception>
#include <memory>
#include <type_traits>

#include "nabla/sdk/plugin.h"

namespace nabla {
inline namespace c_sdk {
namespace cpu {

// Elements per chunk of cheap elementwise work: the CPU backend's value, so
// loops split from the same sizes on.
inline constexpr int64_t kParallelGrain = 32768;

// body(begin, end) over chunks of [0, n) of at least `grain` indices, split
// by the core's cpu::ParallelFor (in place below 2 * grain). body must write
// disjoint outputs for disjoint ranges. Nothing may unwind through the core:
// an exception thrown by body is carried over the core's threads (the first
// one; the chunks that see it skip their work) and rethrown here.
template <typename F>
void ParallelFor(int64_t n, int64_t grain, F&& body) {
  struct Job {
    std::remove_reference_t<F>* body;
    std::exception_ptr error;
    bool failed;  // set by the first failing chunk; a chunk that sees it skips its work
  } job{std::addressof(body), nullptr, false};
  Api().parallel_for(
      n, grain,
      [](void* user, int64_t begin, int64_t end) {
        Job& j = *static_cast<Job*>(user);
        if (__atomic_load_n(&j.failed, __ATOMIC_ACQUIRE)) return;
        try {
          (*j.body)(begin, end);
        } catch (...) {
          if (!__atomic_exchange_n(&j.failed, true, __ATOMIC_ACQ_REL)) j.error = std::current_exception();
        }
      },
      &job);
  if (job.error) std::rethrow_exception(job.error);
}

}  // namespace cpu
}  // namespace c_sdk
}  // namespace nabla
