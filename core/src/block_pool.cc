#include "nabla/block_pool.h"

#include <new>

namespace nabla {

namespace {

// GCC defines __SANITIZE_ADDRESS__ / __SANITIZE_THREAD__; clang answers
// __has_feature. Under TSan too: blocks handed between threads through the
// lists would be reuse TSan cannot see ordered.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kPooling = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
constexpr bool kPooling = false;
#else
constexpr bool kPooling = true;
#endif
#else
constexpr bool kPooling = true;
#endif

constexpr size_t kAlign = 64;
constexpr size_t kClasses = kMaxPooledBytes / kAlign;
constexpr size_t kMaxBytes = size_t{8} << 20;  // kept per thread, all classes together

void* Fresh(size_t bytes) { return ::operator new(bytes, std::align_val_t(kAlign)); }
void Release(void* p) noexcept { ::operator delete(p, std::align_val_t(kAlign)); }

size_t ClassOf(size_t bytes) { return bytes == 0 ? 0 : (bytes - 1) / kAlign; }
size_t ClassBytes(size_t c) { return (c + 1) * kAlign; }

// A class's free blocks as an intrusive list: each free block holds the
// next one's address, so taking or giving one back is a few instructions.
struct FreeBlock {
  FreeBlock* next;
};

struct Pool {
  FreeBlock* head[kClasses] = {};
  size_t bytes = 0;
  ~Pool() {
    for (FreeBlock* b : head)
      while (b != nullptr) {
        FreeBlock* next = b->next;
        Release(b);
        b = next;
      }
  }
};

// Plain pointers, no guards: one thread-local block, reached with one TLS
// lookup per call. The pool itself is made on a thread's first use and
// freed at its exit by Reaper; after that the thread's blocks go straight
// to the C allocator.
thread_local Pool* t_pool = nullptr;
thread_local bool t_pool_gone = false;

struct Reaper {
  ~Reaper() {
    delete t_pool;
    t_pool = nullptr;
    t_pool_gone = true;
  }
};

Pool* MakePool() {
  thread_local Reaper reaper;  // registers the pool's destruction at thread exit
  (void)reaper;
  t_pool = new Pool;
  return t_pool;
}

}  // namespace

void* PoolAllocate(size_t bytes) {
  if (!kPooling || bytes > kMaxPooledBytes) return Fresh(bytes);
  const size_t c = ClassOf(bytes);
  if (Pool* pool = t_pool) {
    if (FreeBlock* b = pool->head[c]) {
      pool->head[c] = b->next;
      pool->bytes -= ClassBytes(c);
      return b;
    }
  } else if (!t_pool_gone) {
    MakePool();
  }
  return Fresh(ClassBytes(c));
}

void PoolFree(void* p, size_t bytes) noexcept {
  if (p == nullptr) return;
  if (!kPooling || bytes > kMaxPooledBytes) {
    Release(p);
    return;
  }
  const size_t c = ClassOf(bytes);
  Pool* pool = t_pool;
  if (pool == nullptr && !t_pool_gone) {
    try {
      pool = MakePool();
    } catch (...) {  // no memory for the pool: free the block instead
    }
  }
  if (pool != nullptr && pool->bytes + ClassBytes(c) <= kMaxBytes) {
    FreeBlock* b = static_cast<FreeBlock*>(p);
    b->next = pool->head[c];
    pool->head[c] = b;
    pool->bytes += ClassBytes(c);
    return;
  }
  Release(p);
}

}  // namespace nabla
