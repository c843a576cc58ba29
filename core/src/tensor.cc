#include "nabla/tensor.h"

#include <cstdint>
#include <utility>

#include "checked_internal.h"
#include "nabla/block_pool.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"

namespace nabla {

// Checked mode guards host memory only: the canaries are read and written
// by the host, which other devices' memory is not. A guarded buffer frees
// through release_, as adopted memory does (release_ is set in the body:
// it is constructed after data_).
Buffer::Buffer(Device* device, size_t bytes) : device_(device), data_(nullptr), bytes_(bytes) {
  data_ = checked::On() && device->Type() == DeviceType::kCPU ? checked::AllocateGuarded(bytes, &release_)
                                                              : device->Allocate(bytes);
}

Buffer::Buffer(Device* device, void* data, size_t bytes, std::function<void()> release)
    : device_(device), data_(data), bytes_(bytes), release_(std::move(release)) {}

Buffer::~Buffer() {
  if (release_) {
    release_();
  } else {
    device_->Free(data_, bytes_);
  }
}

namespace {

// In checked mode a host tensor reuses only a guarded buffer of exactly its
// size, so the canaries sit right at its end (one allocated before checked
// mode came on has none).
bool Guarded(const Buffer& b, size_t need) {
  return b.GetDevice()->Type() != DeviceType::kCPU || checked::IsGuardedExactly(b.Data(), need);
}

}  // namespace

int64_t Tensor::Numel() const {
  int64_t n = NumElements(shape_);
  return n < 0 ? 0 : n;
}

void* Tensor::Allocate(Device& device) {
  // The element count once: every op output comes through here.
  const int64_t numel = NumElements(shape_);
  NABLA_ENFORCE(numel >= 0, kInvalidArgument, "cannot allocate a tensor of unknown shape ", ShapeToString(shape_));
  NABLA_ENFORCE(static_cast<uint64_t>(numel) <= SIZE_MAX / DTypeSize(dtype_), kOutOfRange, "a ", DTypeName(dtype_),
                ShapeToString(shape_), " tensor needs more bytes than memory can address");
  const size_t need = static_cast<size_t>(numel) * DTypeSize(dtype_);
  if (buffer_ && buffer_->GetDevice() == &device && buffer_.use_count() == 1 && buffer_->Bytes() >= need &&
      (!checked::kAddressSanitizer || buffer_->Bytes() == need) && (!checked::On() || Guarded(*buffer_, need))) {
    offset_ = 0;
    return buffer_->Data();
  }
  // The Buffer and its count from the per-thread block lists: one per op
  // output, freed as fast as made.
  buffer_ = std::allocate_shared<Buffer>(PoolAllocator<Buffer>(), &device, need);
  offset_ = 0;
  return buffer_->Data();
}

Tensor Tensor::FromBuffer(std::shared_ptr<Buffer> buffer, DType dtype, Shape shape) {
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  NABLA_ENFORCE(NumElements(t.shape_) >= 0 && buffer && buffer->Bytes() >= t.Bytes(), kInvalidArgument, "a buffer of ",
                buffer ? buffer->Bytes() : 0, " bytes cannot hold a tensor ", t.DebugString());
  t.buffer_ = std::move(buffer);
  return t;
}

void* Tensor::RawData() const {
  NABLA_ENFORCE(buffer_ != nullptr, kPreconditionNotMet, "tensor ", DebugString(), " is not allocated");
  return static_cast<char*>(buffer_->Data()) + offset_;
}

void Tensor::CheckAccess(DType wanted) const {
  NABLA_ENFORCE(dtype_ == wanted, kInvalidArgument, "tensor holds ", DTypeName(dtype_), " but was read as ",
                DTypeName(wanted));
  NABLA_ENFORCE(buffer_ != nullptr, kPreconditionNotMet, "tensor ", DebugString(), " is not allocated");
}

void Tensor::ShareDataWith(const Tensor& other) {
  shape_ = other.shape_;
  dtype_ = other.dtype_;
  buffer_ = other.buffer_;
  offset_ = other.offset_;
}

void Tensor::CopyFrom(const Tensor& src, Device& device) {
  Shape shape = src.shape_;
  DType dtype = src.dtype_;
  if (&src == this) return;
  Allocate(device, dtype, shape);
  size_t bytes = Bytes();
  if (bytes == 0) return;
  Device* from = src.GetDevice();
  NABLA_ENFORCE(!IsDryRun(*from) || IsDryRun(device), kPreconditionNotMet, "tensor ", src.DebugString(),
                " is on the null device: a dry run has shapes and dtypes but no data to copy");
  const void* s = src.RawData();
  void* d = RawData();
  if (from == &device) {
    device.CopyOnDevice(d, s, bytes);
  } else if (from->Type() == DeviceType::kCPU) {
    device.CopyFromHost(d, s, bytes);
  } else if (device.Type() == DeviceType::kCPU) {
    from->CopyToHost(d, s, bytes);
  } else {
    // Between two accelerators: stage through the host.
    std::vector<char> host(bytes);
    from->CopyToHost(host.data(), s, bytes);
    device.CopyFromHost(d, host.data(), bytes);
  }
}

Tensor HostCopy(const Tensor& t) {
  if (!t.IsInitialized() || t.GetDevice()->Type() == DeviceType::kCPU) return t;
  Tensor h;
  h.CopyFrom(t, HostDevice());
  return h;
}

std::string Tensor::DebugString() const { return StrCat(DTypeName(dtype_), ShapeToString(shape_)); }

}  // namespace nabla
