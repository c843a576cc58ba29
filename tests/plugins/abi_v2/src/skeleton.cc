// skeleton: the smallest device plugin. Its device's memory is host memory
// that the plugin allocates itself, so everything here runs on the CPU; a
// real device would call its driver where this calls aligned_alloc and
// memcpy. The plugin registers the backend (`--device skeleton`), and
// kernels on it for three standard ops: fill_constant (vars initialised
// with it), elementwise_add and relu. Any other op
// on this device is an error naming the op and the device: host_fallback is
// off, so nothing silently runs on the CPU.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nabla/plugin.h"

NABLA_PLUGIN(NABLA_PLUGIN_NAME);

namespace skeleton {
namespace {

using nabla::ExecutionContext;
using nabla::Shape;
using nabla::Tensor;

// How much memory the device has: NABLA_SKELETON_MEMORY bytes (unlimited
// when unset), to show what an allocation failure looks like.
size_t MemoryLimit() {
  const char* v = std::getenv("NABLA_SKELETON_MEMORY");
  return v && *v ? static_cast<size_t>(std::strtoull(v, nullptr, 10)) : SIZE_MAX;
}

class SkeletonDevice final : public nabla::BackendDevice {
 public:
  void* Allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;  // aligned_alloc wants a multiple of the alignment
    NABLA_ENFORCE(used_ + rounded <= limit_, kExternal, "the skeleton device has ", limit_,
                  " bytes (NABLA_SKELETON_MEMORY), ", used_.load(), " in use, and cannot give ", bytes, " more");
    void* p = std::aligned_alloc(64, rounded);
    NABLA_ENFORCE(p, kExternal, "the skeleton device is out of host memory (", bytes, " bytes)");
    used_ += rounded;
    return p;
  }
  void Free(void* p, size_t bytes) override {
    std::free(p);
    used_ -= (bytes + 63) / 64 * 64;
  }
  void CopyFromHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyToHost(void* dst, const void* src, size_t n) override { std::memcpy(dst, src, n); }
  void CopyOnDevice(void* dst, const void* src, size_t n) override { std::memmove(dst, src, n); }

 private:
  const size_t limit_ = MemoryLimit();
  std::atomic<size_t> used_{0};
};

// Out = X + Y, with Y's dims matching X's from `axis` on (Paddle's
// broadcast; axis -1 aligns Y with X's trailing dims). The CPU kernel also
// broadcasts X onto a larger Y; this device does not, and says so.
template <typename T>
void AddKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const Shape xs = x.GetShape(), ys = y.GetShape();
  int axis = ctx.Attr<int>("axis");
  if (axis < 0) axis = static_cast<int>(xs.size()) - static_cast<int>(ys.size());
  bool aligned = axis >= 0 && static_cast<size_t>(axis) + ys.size() <= xs.size();
  for (size_t i = 0; aligned && i < ys.size(); ++i) aligned = xs[axis + i] == ys[i];
  NABLA_ENFORCE(aligned, kUnimplemented, "elementwise_add on the skeleton device: Y ", y.DebugString(),
                " must match X ", x.DebugString(), "'s dims from axis ", axis, " on");
  int64_t pre = 1, n = 1, post = 1;
  for (int i = 0; i < axis; ++i) pre *= xs[i];
  for (int64_t d : ys) n *= d;
  for (size_t i = axis + ys.size(); i < xs.size(); ++i) post *= xs[i];
  const T* px = x.Data<T>();
  const T* py = y.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), xs);
  for (int64_t i = 0; i < pre; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t k = 0; k < post; ++k) {
        const int64_t at = (i * n + j) * post + k;
        out[at] = px[at] + py[j];
      }
}

// fill_constant with its shape and value from attributes: what the startup
// program runs for a var initialised with `init: {type: fill_constant}`.
template <typename T>
void FillKernel(const ExecutionContext& ctx) {
  NABLA_ENFORCE(!ctx.HasInput("ShapeTensor") && !ctx.HasInput("ShapeTensorList") && !ctx.HasInput("ValueTensor"),
                kUnimplemented, "fill_constant on the skeleton device takes its shape and value from attributes only");
  Shape shape;
  for (int d : ctx.Attr<std::vector<int>>("shape")) shape.push_back(d);
  const T value = static_cast<T>(ctx.Attr<float>("value"));
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), shape);
  std::fill(out, out + nabla::NumElements(shape), value);
}

template <typename T>
void ReluKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T* px = x.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  for (int64_t i = 0; i < x.Numel(); ++i) out[i] = px[i] > T(0) ? px[i] : T(0);
}

}  // namespace
}  // namespace skeleton

NABLA_REGISTER_OPS(skeleton_device) {
  nabla::DeviceBackendSpec spec;
  spec.name = "skeleton";
  spec.enumerate = [] {
    return std::vector<nabla::DeviceInfo>{
        {{"skeleton device: host memory the plugin allocates", "an example device plugin"}, /*fp64=*/true}};
  };
  spec.open = [](int index) -> std::unique_ptr<nabla::BackendDevice> {
    NABLA_ENFORCE(index == 0, kNotFound, "the skeleton backend has one device, skeleton:0");
    return std::make_unique<skeleton::SkeletonDevice>();
  };
  spec.host_fallback = false;  // an op without a kernel here is an error, not a silent CPU run
  const nabla::DeviceType device = registrar.DeviceBackend(std::move(spec));

  // Kernels for standard ops (math_ops' fill_constant and elementwise_add, nn_ops' relu):
  // a device plugin may register them on its own device type.
  registrar.Kernel("elementwise_add", device, nabla::DType::kFloat32, skeleton::AddKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("elementwise_add", device, nabla::DType::kFloat64, skeleton::AddKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("fill_constant", device, nabla::DType::kFloat32, skeleton::FillKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("fill_constant", device, nabla::DType::kFloat64, skeleton::FillKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("relu", device, nabla::DType::kFloat32, skeleton::ReluKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("relu", device, nabla::DType::kFloat64, skeleton::ReluKernel<double>, __FILE__, __LINE__);
}
