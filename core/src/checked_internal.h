#pragma once
// Private: checked mode's guarded host buffers and its fault report (see
// nabla/checked.h). tensor.cc allocates through it, executor.cc verifies.
#include <atomic>
#include <cstddef>
#include <functional>
#include <string>

#include "nabla/checked.h"

namespace nabla::checked {

// Under AddressSanitizer a tensor reuses only a buffer of exactly its size
// (Tensor::Allocate): in a larger one, a write past the tensor's end lands
// in bytes ASan knows as allocated and goes unreported. Reallocating costs
// the sanitizer build a malloc per shape change; poisoning the tail of a
// reused buffer (__asan_poison_memory_region) would save it, but then every
// path that regrows or frees such a buffer would have to unpoison it first,
// while an exact buffer from ASan's own allocator (cpu_device.cc) needs
// nothing more. GCC defines __SANITIZE_ADDRESS__; clang answers __has_feature.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

extern std::atomic<bool> g_on;
// Inline: the one test every allocation and dispatch pays when it is off.
inline bool On() { return g_on.load(std::memory_order_relaxed); }

// Host memory for `bytes` behind a canary and before a canary tail and an
// inaccessible page; `release` frees it. Returns the (64-byte aligned) data.
void* AllocateGuarded(size_t bytes, std::function<void()>* release);
// Whether `data` is a guarded buffer of exactly `bytes`.
bool IsGuardedExactly(const void* data, size_t bytes);

struct GuardCheck {
  bool guarded = false;
  size_t overwritten_before = 0;  // canary bytes changed in front of the data
  size_t overwritten_after = 0;   // how far past the end the farthest changed tail byte lies
};
GuardCheck CheckGuards(const void* data);

// What an op whose kernel is running says when a kernel runs into a
// buffer's inaccessible page: given that buffer's data, the error line
// (without "nabla: error: "), or "" when the buffer is none of the op's
// outputs. The fault may come on any thread of the kernel's parallel loop,
// so every running op's reporter is asked.
class FaultReporter {
 public:
  virtual std::string Describe(const void* buffer_data) const = 0;

 protected:
  ~FaultReporter() = default;
};
// Adds (active) or removes the reporter of a running kernel.
void SetFaultReporter(const FaultReporter* reporter, bool active);

}  // namespace nabla::checked
