#pragma once
// Debian's libtbb is not built with ThreadSanitizer, so the hand-offs inside
// it (a task spawned on one thread and run on another, a waiter woken) are
// invisible to TSan. HappensBefore/HappensAfter tell TSan what TBB
// guarantees at the places nabla relies on it, and nothing more; they are
// empty without TSan.
#if defined(__SANITIZE_THREAD__)
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace nabla::cpu {

// Everything this thread did so far happens before what a thread does after
// HappensAfter(sync) on the same address.
inline void HappensBefore(const char* sync) {
#if defined(__SANITIZE_THREAD__)
  __tsan_release(const_cast<char*>(sync));
#else
  (void)sync;
#endif
}
inline void HappensAfter(const char* sync) {
#if defined(__SANITIZE_THREAD__)
  __tsan_acquire(const_cast<char*>(sync));
#else
  (void)sync;
#endif
}

// A fork-join (tbb::parallel_for): the caller's work happens before every
// chunk, and every chunk before the caller goes on. Chunks are not ordered
// among themselves, so TSan still sees two chunks that touch the same data.
struct ForkJoinSync {
  char start = 0, done = 0;
  void Fork() const { HappensBefore(&start); }
  void ChunkBegins() const { HappensAfter(&start); }
  void ChunkEnds() const { HappensBefore(&done); }
  void Joined() const { HappensAfter(&done); }
};

}  // namespace nabla::cpu
