#pragma once
// What c_allreduce_sum and c_broadcast share: their schema's common part,
// shape inference, and the packing of several tensors into one buffer (a
// bucket: one collective for many small gradients).
#include <cstring>
#include <string>
#include <vector>

#include "communicator.h"
#include "nabla/opkit/kernels.h"
#include "nabla/plugin.h"

namespace nabla::collective {

// Out[i] takes X[i]'s shape and dtype; the slots pair up one to one.
inline void InferLikeX(InferShapeContext& c) {
  NABLA_ENFORCE(c.InputSize("X") == c.OutputSize("Out"), kInvalidArgument, c.Where(),
                ": X and Out must list the same number of vars, but X has ", c.InputSize("X"), " and Out ",
                c.OutputSize("Out"));
  for (size_t i = 0; i < c.InputSize("X"); ++i) {
    NABLA_ENFORCE(c.InputDType("X", i) == c.InputDType("X", 0), kInvalidArgument, c.Where(),
                  ": every X must have X[0]'s dtype ", DTypeName(c.InputDType("X", 0)), ", but X[", i, "] is ",
                  DTypeName(c.InputDType("X", i)));
    c.ShareShapeAndDType("X", "Out", i, i);
  }
}

inline OpBuilder& CommonSchema(OpBuilder& b) {
  return b.Input("X", "(Tensor) the local tensors; several form one fused collective (a bucket)", kDuplicable)
      .Output("Out", "(Tensor) the results, one per X, of X's shape; may be the X vars themselves (in place)",
              kDuplicable)
      .Attr<int>("ring_id", 0, "(int, default 0) the communicator; 0 is the MPI world, the only one",
                 [](const int& r) {
                   NABLA_ENFORCE(r == 0, kInvalidArgument, "ring_id must be 0 (the MPI world), but received ", r);
                 })
      .Attr<float>(
          "timeout_s", 0.0f,
          "(float, default 0) fail after waiting this many seconds for the other ranks; 0 waits forever",
          [](const float& t) { NABLA_ENFORCE(t >= 0, kInvalidArgument, "timeout_s must be >= 0, but received ", t); })
      .InferShape(InferLikeX)
      .GradMaker<EmptyGradOpDescMaker>()
      .Collective()
      .UpdatesInPlace();  // Out may be X (in place, as Paddle)
}

// "c_allreduce_sum [w@GRAD, b@GRAD]": how errors name the op.
inline std::string Describe(const ExecutionContext& ctx) {
  std::string s = ctx.Op().Type() + " [";
  const auto& xs = ctx.Op().Input("X");
  for (size_t i = 0; i < xs.size(); ++i) s += (i ? ", " : "") + xs[i];
  return s + "]";
}

// Runs `collective(buffer, count, dtype)` over every X as one buffer and
// leaves the result in every Out. One tensor, in place, is reduced where
// it lies; otherwise the tensors go through one packed buffer.
template <typename Fn>
void OverBucket(const ExecutionContext& ctx, Fn&& collective) {
  // The schema's checker runs where programs are verified; a kernel may be
  // reached without that (RunOp), so the one ring is checked here too.
  const int ring = ctx.Attr<int>("ring_id");
  NABLA_ENFORCE(ring == 0, kInvalidArgument, Describe(ctx), ": ring_id must be 0 (the MPI world), but received ", ring);
  std::vector<const Tensor*> xs = ctx.MultiInput("X");
  std::vector<Tensor*> outs = ctx.MultiOutput("Out");
  NABLA_ENFORCE(xs.size() == outs.size() && !xs.empty(), kInvalidArgument, ctx.Op().Type(),
                ": X and Out must list the same number of vars");
  const DType dtype = xs[0]->GetDType();
  int64_t total = 0;
  for (const Tensor* x : xs) {
    NABLA_ENFORCE(x->GetDType() == dtype, kInvalidArgument, Describe(ctx), ": every X must be ", DTypeName(dtype),
                  ", but one is ", x->DebugString());
    total += x->Numel();
  }
  Device& device = ctx.GetDevice();
  if (xs.size() == 1) {
    if (outs[0] != xs[0]) outs[0]->CopyFrom(*xs[0], device);
    collective(outs[0]->RawData(), total, dtype);
    return;
  }
  const size_t elem = DTypeSize(dtype);
  std::vector<char> packed(static_cast<size_t>(total) * elem);
  size_t off = 0;
  for (const Tensor* x : xs) {
    if (x->Bytes()) std::memcpy(packed.data() + off, x->RawData(), x->Bytes());
    off += x->Bytes();
  }
  collective(packed.data(), total, dtype);
  off = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const size_t bytes = xs[i]->Bytes();
    void* dst = outs[i]->Allocate(device, dtype, xs[i]->GetShape());
    if (bytes) std::memcpy(dst, packed.data() + off, bytes);
    off += bytes;
  }
}

}  // namespace nabla::collective
