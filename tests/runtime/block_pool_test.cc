// nabla/block_pool.h: per-thread lists of small blocks, and the host device's
// small tensors that come from them.
#include "nabla/block_pool.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

bool Aligned64(const void* p) { return reinterpret_cast<uintptr_t>(p) % 64 == 0; }

TEST(BlockPool, BlocksAreAlignedWritableAndFreedBySize) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{4095}, kMaxPooledBytes,
                       kMaxPooledBytes + 1, size_t{1} << 20}) {
    void* p = PoolAllocate(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    EXPECT_TRUE(Aligned64(p)) << bytes;
    std::memset(p, 0xab, bytes);
    PoolFree(p, bytes);
  }
  PoolFree(nullptr, 64);  // a no-op, as delete of null is
}

TEST(BlockPool, LiveBlocksAreNeverHandedOutTwice) {
  std::vector<void*> live;
  for (int i = 0; i < 256; ++i) {
    void* p = PoolAllocate(100);
    std::memset(p, i, 100);
    live.push_back(p);
    if (i % 3 == 0) {  // free some as we go, so later ones may reuse them
      PoolFree(live.front(), 100);
      live.erase(live.begin());
    }
  }
  for (size_t i = 0; i < live.size(); ++i)
    for (size_t j = i + 1; j < live.size(); ++j) ASSERT_NE(live[i], live[j]);
  for (void* p : live) PoolFree(p, 100);
}

TEST(BlockPool, BlocksMayBeFreedOnAnotherThread) {
  std::vector<void*> blocks;
  for (int i = 0; i < 100; ++i) blocks.push_back(PoolAllocate(200));
  std::thread t([&] {
    for (void* p : blocks) PoolFree(p, 200);
    void* q = PoolAllocate(200);  // from that thread's list; gone with it at exit
    PoolFree(q, 200);
  });
  t.join();
}

TEST(BlockPool, SmallHostTensorsAreAlignedAndIndependent) {
  cpu::InitCpuBackend();
  Device& host = HostDevice();
  std::vector<Tensor> ts;
  for (int i = 0; i < 32; ++i) {
    Tensor t;
    float* p = t.Allocate<float>(host, {static_cast<int64_t>(i + 1)});
    EXPECT_TRUE(Aligned64(p));
    for (int k = 0; k <= i; ++k) p[k] = static_cast<float>(i);
    ts.push_back(t);
    if (i % 4 == 3) ts.erase(ts.begin());  // freed buffers return to the lists
  }
  for (const Tensor& t : ts) {
    const float* p = t.Data<float>();
    for (int64_t k = 0; k < t.Numel(); ++k) ASSERT_EQ(p[k], static_cast<float>(t.Numel() - 1));
  }
}

}  // namespace
}  // namespace nabla
