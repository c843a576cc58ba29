#pragma once
// A dense tensor: shape, dtype and a (shared) buffer on one device.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "nabla/error.h"
#include "nabla/export.h"
#include "nabla/types.h"

namespace nabla {

class Device;

// Owns one allocation; frees it through its device when the last tensor
// sharing it goes away.
class NABLA_API Buffer {
 public:
  Buffer(Device* device, size_t bytes);
  // Adopts memory that something else owns (a NumPy array): `release` runs
  // instead of Device::Free when the last tensor sharing it goes away, so the
  // owner lives as long as any tensor does and no byte is copied.
  Buffer(Device* device, void* data, size_t bytes, std::function<void()> release);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void* Data() const { return data_; }
  size_t Bytes() const { return bytes_; }
  Device* GetDevice() const { return device_; }

 private:
  Device* device_;  // non-owning; devices outlive tensors
  void* data_;
  size_t bytes_;
  std::function<void()> release_;  // set for adopted memory only
};

class NABLA_API Tensor {
 public:
  Tensor() = default;

  const Shape& GetShape() const { return shape_; }
  int64_t Numel() const;
  size_t Rank() const { return shape_.size(); }
  int64_t Dim(size_t i) const { return shape_.at(i); }
  DType GetDType() const { return dtype_; }
  size_t Bytes() const { return static_cast<size_t>(Numel()) * DTypeSize(dtype_); }
  bool IsInitialized() const { return buffer_ != nullptr; }
  Device* GetDevice() const { return buffer_ ? buffer_->GetDevice() : nullptr; }

  // Sets shape and dtype without touching memory; the next Allocate sizes it.
  void Resize(Shape shape) { shape_ = std::move(shape); }
  void SetDType(DType dtype) { dtype_ = dtype; }

  // Makes sure the buffer holds Bytes() on `device`, reusing the current one
  // when it is large enough and on the same device. Returns the data.
  void* Allocate(Device& device);
  // The shape by reference: assigning it reuses shape_'s storage, where a
  // copy per call (a kernel allocating its output like an input) cost a
  // malloc and a free on every op.
  void* Allocate(Device& device, DType dtype, const Shape& shape) {
    dtype_ = dtype;
    if (shape_ != shape) shape_ = shape;
    return Allocate(device);
  }
  template <typename T>
  T* Allocate(Device& device, const Shape& shape) {
    return static_cast<T*>(Allocate(device, DTypeOf<T>::value, shape));
  }

  // Typed views; the dtype must match (checked) and the tensor be allocated.
  template <typename T>
  const T* Data() const {
    CheckAccess(DTypeOf<T>::value);
    return static_cast<const T*>(RawData());
  }
  template <typename T>
  T* MutableData() {
    CheckAccess(DTypeOf<T>::value);
    return static_cast<T*>(RawData());
  }
  void* RawData() const;

  // A tensor over `buffer` (e.g. adopted memory), which must hold its bytes.
  static Tensor FromBuffer(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape);

  // Shares the buffer of `other` (no copy): shape and dtype follow it.
  void ShareDataWith(const Tensor& other);
  // Deep copy onto `device`.
  void CopyFrom(const Tensor& src, Device& device);
  // Drops the buffer (keeps shape and dtype).
  void Release() {
    buffer_.reset();
    offset_ = 0;
  }

  std::string DebugString() const;  // "float32[2, 3]"

 private:
  void CheckAccess(DType wanted) const;

  Shape shape_;
  DType dtype_ = DType::kFloat32;
  std::shared_ptr<Buffer> buffer_;
  size_t offset_ = 0;
};

// `t` readable on the host: `t` itself when it lives there, else a copy read
// back from its device (OpenCL). For the small tensors whose values steer an
// op (tensor-valued attributes: a shape, a rate), which shape inference and
// kernels of every device read the same way. A tensor on the null device
// (a dry run) has no values: an error.
NABLA_API Tensor HostCopy(const Tensor& t);

}  // namespace nabla
