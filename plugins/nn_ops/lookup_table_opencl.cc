// OpenCL kernels of lookup_table and lookup_table_v2 and their gradients
// (lookup_table.cl): the embedding of a transformer's tokens stays on the
// device. The ids are read on the host (they are a feed, or small), checked
// there with the CPU kernel's message, and uploaded as int64; the gradient
// gets each row's positions in order (a counting sort on the host), so it
// sums as the CPU kernel does, without atomics.
#include <cstdint>
#include <vector>

#include "lookup_table_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla::nn {
namespace {

using namespace opencl;

constexpr int kNoPadding = -1;

// Ids as int64 on the host, each checked to be a row of W; padding ids as -1.
std::vector<int64_t> CheckedIds(const ExecutionContext& ctx, int64_t rows) {
  const auto ids = ctx.InputHostTensor("Ids");  // a Tensor, or (C ABI) the SDK's HostTensor
  const DType dtype = ids.GetDType();
  NABLA_ENFORCE(dtype == DType::kInt64 || dtype == DType::kInt32, kInvalidArgument, "op '", ctx.Op().Type(),
                "': Ids must be int64 or int32, but received ", DTypeName(dtype));
  const int padding = ctx.Attr<int>("padding_idx");
  const int64_t n = ids.Numel();
  std::vector<int64_t> out(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = dtype == DType::kInt64 ? ids.template Data<int64_t>()[i] : ids.template Data<int32_t>()[i];
    NABLA_ENFORCE(id >= 0 && id < rows, kOutOfRange, "Ids[", i, "] must be a row of W, in [0, ", rows,
                  "), but received ", id);
    out[i] = padding != kNoPadding && id == padding ? -1 : id;
  }
  return out;
}

// int64 values in a device buffer that `buf` owns (8-byte elements: the
// kernels read it as long).
void* Upload(OpenClDevice& dev, Scratch<double>& buf, const std::vector<int64_t>& values) {
  void* b = buf.Allocate(static_cast<int64_t>(values.size()));
  if (!values.empty()) dev.CopyFromHost(b, values.data(), values.size() * sizeof(int64_t));
  return b;
}

template <typename T>
struct LookupClKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& w = ctx.Input("W");
    const int64_t rows = w.Dim(0), width = w.Dim(1);
    const std::vector<int64_t> ids = CheckedIds(ctx, rows);
    Tensor* out = ctx.Output("Out");
    void* o = AllocateOutput<T>(ctx, out, out->GetShape());
    if (ids.empty() || width == 0) return;
    Scratch<double> ids_buf(dev);
    const int64_t n = static_cast<int64_t>(ids.size()) * width;
    Run<T>(
        dev, cl_source::lookup_table(), "lookup_fwd",
        {s.Arg(w), KernelArg::Buffer(Upload(dev, ids_buf, ids)), KernelArg::Buffer(o), KernelArg(n), KernelArg(width)},
        n);
  }
};

template <typename T>
struct LookupGradClKernel {
  void operator()(const ExecutionContext& ctx) const {
    Tensor* dw = ctx.Output(GradVarName("W"));
    if (!dw) return;
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Shape& w_shape = ctx.InputVar("W")->GetTensor().GetShape();
    const int64_t rows = w_shape[0], width = w_shape[1];
    const std::vector<int64_t> ids = CheckedIds(ctx, rows);
    // Each row's positions, in increasing order: start[r] .. start[r + 1].
    std::vector<int64_t> start(static_cast<size_t>(rows) + 1, 0), pos;
    for (int64_t id : ids)
      if (id >= 0) ++start[id + 1];
    for (int64_t r = 0; r < rows; ++r) start[r + 1] += start[r];
    pos.resize(static_cast<size_t>(start[rows]));
    std::vector<int64_t> next(start.begin(), start.end() - 1);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] >= 0) pos[next[ids[i]]++] = static_cast<int64_t>(i);
    void* g = AllocateOutput<T>(ctx, dw, w_shape);
    const int64_t n = rows * width;
    if (n == 0) return;
    // An empty position list still needs a buffer to pass: one unread element.
    if (pos.empty()) pos.push_back(0);
    Scratch<double> start_buf(dev), pos_buf(dev);
    Run<T>(dev, cl_source::lookup_table(), "lookup_bwd",
           {s.Arg(ctx.Input(GradVarName("Out"))), KernelArg::Buffer(Upload(dev, start_buf, start)),
            KernelArg::Buffer(Upload(dev, pos_buf, pos)), KernelArg::Buffer(g), KernelArg(n), KernelArg(width)},
           n);
  }
};

}  // namespace

NABLA_REGISTER_OPS(lookup_table_opencl) {
  for (const char* type : {"lookup_table", "lookup_table_v2"}) {
    RegisterOpenClKernels<LookupClKernel>(registrar, type, __FILE__, __LINE__);
    RegisterOpenClKernels<LookupGradClKernel>(registrar, std::string(type) + "_grad", __FILE__, __LINE__);
  }
}

}  // namespace nabla::nn
