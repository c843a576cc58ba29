#pragma once
// A device exposes resources (memory, copies, synchronisation); kernels are
// registered against a DeviceType, never as virtuals here.
#include <cstddef>
#include <string>

#include "nabla/export.h"
#include "nabla/types.h"

namespace nabla {

class NABLA_API Device {
 public:
  virtual ~Device();
  virtual DeviceType Type() const = 0;
  virtual int Id() const { return 0; }
  virtual std::string Name() const = 0;  // "cpu", "opencl:0 (pthread-...)"

  // Memory of this device. For the CPU it is host memory aligned to 64 bytes.
  // Allocate never returns null: failure throws an Error naming the size.
  virtual void* Allocate(size_t bytes) = 0;
  virtual void Free(void* ptr, size_t bytes) = 0;

  // Explicit copies between host memory and this device's memory.
  virtual void CopyFromHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  virtual void Synchronize() {}
};

// The process-wide CPU device (defined in backends/cpu, registered at start).
NABLA_API Device& HostDevice();
// Installed once by the CPU backend; the core only stores the pointer.
NABLA_API void SetHostDevice(Device* device);

}  // namespace nabla
