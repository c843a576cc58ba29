#pragma once
// Per-thread free lists of small blocks, for what is made and freed once per
// op call: eager tensors and grad nodes, tensor buffers and the host memory
// of small tensors. A chain of tiny ops frees thousands of them at once,
// which overflows the C allocator's per-thread cache and sends every free
// down its slow path; these lists take them instead and hand them to the
// next call.
//
// Blocks are grouped by size, rounded up to 64 bytes, up to kMaxPooledBytes;
// every block is 64-byte aligned. A block may be freed on another thread (it
// joins that thread's list). Bounded: past 8 MiB per thread, blocks go
// back to the C allocator. Sanitizer builds allocate every block afresh
// (plain new and delete), so a use after free or a leak is still caught.
#include <cstddef>

#include "nabla/export.h"

namespace nabla {

inline constexpr size_t kMaxPooledBytes = 4096;

// `bytes` of memory aligned to 64; never null (throws std::bad_alloc).
NABLA_API void* PoolAllocate(size_t bytes);
// Frees a block of PoolAllocate, given the same `bytes`.
NABLA_API void PoolFree(void* p, size_t bytes) noexcept;

// A standard allocator over the pool (std::allocate_shared).
template <typename T>
struct PoolAllocator {
  using value_type = T;
  PoolAllocator() = default;
  template <typename U>
  PoolAllocator(const PoolAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(PoolAllocate(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { PoolFree(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
  template <typename U>
  bool operator!=(const PoolAllocator<U>&) const {
    return false;
  }
};

}  // namespace nabla
