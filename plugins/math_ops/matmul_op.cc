// matmul: (batched) matrix product with optional transposes and scaling
// (Paddle's `matmul`).
#include "gemm_grad_passes.h"
#include "gemm_shapes.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void InferMatmulShape(InferShapeContext& c) {
  MatmulDims d = ComputeMatmulDims(c.InputShape("X"), c.InputShape("Y"), c.Attr<bool>("transpose_X"),
                                   c.Attr<bool>("transpose_Y"), c.Where());
  c.SetOutputShape("Out", d.out);
  c.SetOutputDType("Out", c.InputDType("X"));
}

MatmulDims KernelDims(const ExecutionContext& ctx, const Tensor& x, const Tensor& y) {
  return ComputeMatmulDims(x.GetShape(), y.GetShape(), ctx.Attr<bool>("transpose_X"), ctx.Attr<bool>("transpose_Y"),
                           StrCat("op '", ctx.Op().Type(), "'"));
}

// X's batches stacked are one [batch * M, K] matrix when X is not
// transposed and Y has no batch of its own (a linear layer on [B, T, D], the
// logits against a tied embedding): one GEMM instead of a loop of `batch`
// small ones, and Y@GRAD one GEMM over K = batch * M instead of `batch`
// accumulations over M.
bool StacksIntoOneGemm(const MatmulDims& d, bool tx) {
  return !tx && ProductOf(d.y_batch, 0, d.y_batch.size()) == 1 &&
         ProductOf(d.x_batch, 0, d.x_batch.size()) == ProductOf(d.out_batch, 0, d.out_batch.size());
}

template <typename T>
struct MatmulKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
    T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
    MatmulDims d = KernelDims(ctx, x, y);
    const T* xd = x.Data<T>();
    const T* yd = y.Data<T>();
    T* o = AllocOutput<T>(ctx, ctx.Output("Out"), d.out);
    int64_t m = d.m, k = d.k, n = d.n;
    if (StacksIntoOneGemm(d, tx)) {
      const int64_t rows = ProductOf(d.out_batch, 0, d.out_batch.size()) * m;
      cpu::Gemm(false, ty, rows, n, k, alpha, xd, k, yd, ty ? k : n, T(0), o, n);
      return;
    }
    BroadcastIndexer(d.out_batch, d.x_batch, d.y_batch).ForEach([&](int64_t io, int64_t ix, int64_t iy) {
      cpu::Gemm(tx, ty, m, n, k, alpha, xd + ix * m * k, tx ? m : k, yd + iy * k * n, ty ? k : n, T(0), o + io * m * n,
                n);
    });
  }
};

// With Out = alpha * op(X) op(Y):
//   X@GRAD = alpha * dOut op(Y)^T   (or its transpose when transpose_X)
//   Y@GRAD = alpha * op(X)^T dOut   (or its transpose when transpose_Y)
// accumulated over the batches an input was broadcast to.
template <typename T>
struct MatmulGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
    T alpha = static_cast<T>(ctx.Attr<float>("alpha"));
    MatmulDims d = KernelDims(ctx, x, y);
    const T* xd = x.Data<T>();
    const T* yd = y.Data<T>();
    const T* dod = ctx.Input("Out@GRAD").Data<T>();
    Tensor* dx = ctx.Output("X@GRAD");
    Tensor* dy = ctx.Output("Y@GRAD");
    const bool stacked = StacksIntoOneGemm(d, tx);
    T* gx = dx ? AllocOutput<T>(ctx, dx, x.GetShape()) : nullptr;
    if (gx && !stacked) std::fill(gx, gx + dx->Numel(), T(0));
    // Y@GRAD starts from AccumulateY where given (FuseGradOps's chain).
    const bool accumulate = dy && ctx.HasInput(kAccumulateY);
    T* gy = !dy          ? nullptr
            : accumulate ? StartAccumulation<T>(ctx, dy, y.GetShape())
                         : AllocOutput<T>(ctx, dy, y.GetShape());
    if (gy && !accumulate && !stacked) std::fill(gy, gy + dy->Numel(), T(0));
    // -LearningRate * alpha where the op applies sgd (FuseGradOps); X@GRAD
    // reads Y before any part of Y@GRAD is written.
    const T alpha_y = alpha * static_cast<T>(YGradScale(ctx));
    int64_t m = d.m, k = d.k, n = d.n, ldx = tx ? m : k, ldy = ty ? k : n;
    if (stacked) {  // one GEMM each, written (or accumulated) in place: no zero fill first
      const int64_t rows = ProductOf(d.out_batch, 0, d.out_batch.size()) * m;
      if (gx) cpu::Gemm(false, !ty, rows, k, n, alpha, dod, n, yd, ldy, T(0), gx, k);
      const T beta = accumulate ? T(1) : T(0);
      if (gy && !ty) cpu::Gemm(true, false, k, n, rows, alpha_y, xd, k, dod, n, beta, gy, n);
      if (gy && ty) cpu::Gemm(true, false, n, k, rows, alpha_y, dod, n, xd, k, beta, gy, k);
      return;
    }
    const BroadcastIndexer batches(d.out_batch, d.x_batch, d.y_batch);
    // Every X@GRAD before any Y@GRAD: applying sgd, Y@GRAD is Y itself.
    if (gx)
      batches.ForEach([&](int64_t io, int64_t ix, int64_t iy) {
        const T* yb = yd + iy * k * n;
        const T* db = dod + io * m * n;
        T* g = gx + ix * m * k;
        if (!tx)
          cpu::Gemm(false, !ty, m, k, n, alpha, db, n, yb, ldy, T(1), g, k);
        else
          cpu::Gemm(ty, true, k, m, n, alpha, yb, ldy, db, n, T(1), g, m);
      });
    if (gy)
      batches.ForEach([&](int64_t io, int64_t ix, int64_t iy) {
        const T* xb = xd + ix * m * k;
        const T* db = dod + io * m * n;
        T* g = gy + iy * k * n;
        if (!ty)
          cpu::Gemm(!tx, false, k, n, m, alpha_y, xb, ldx, db, n, T(1), g, n);
        else
          cpu::Gemm(true, tx, n, k, m, alpha_y, db, n, xb, ldx, T(1), g, k);
      });
  }
};

// bfloat16 (mixed precision): bfloat16 operands, float32 accumulation on
// oneDNN, results rounded to bfloat16 as PyTorch's autocast does.
void MatmulBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  float alpha = ctx.Attr<float>("alpha");
  MatmulDims d = KernelDims(ctx, x, y);
  const bfloat16* xd = x.Data<bfloat16>();
  const bfloat16* yd = y.Data<bfloat16>();
  bfloat16* o = AllocOutput<bfloat16>(ctx, ctx.Output("Out"), d.out);
  int64_t m = d.m, k = d.k, n = d.n;
  if (StacksIntoOneGemm(d, tx)) {  // as the float32 kernel: one GEMM over the stacked batches
    const int64_t rows = ProductOf(d.out_batch, 0, d.out_batch.size()) * m;
    cpu::GemmBf16(false, ty, rows, n, k, alpha, xd, k, yd, ty ? k : n, o, n);
    return;
  }
  BroadcastIndexer(d.out_batch, d.x_batch, d.y_batch).ForEach([&](int64_t io, int64_t ix, int64_t iy) {
    cpu::GemmBf16(tx, ty, m, n, k, alpha, xd + ix * m * k, tx ? m : k, yd + iy * k * n, ty ? k : n, o + io * m * n, n);
  });
}

// MatmulGradBf16Kernel where X's batches stack (StacksIntoOneGemm), as the
// float32 kernel does it: one GEMM for X@GRAD and one over K = batch * M
// for Y@GRAD, each written (or, from AccumulateY, accumulated) in place,
// no zero fill and no scratch. The loop of per-batch GEMMs (each adding
// into zero-filled sums) it replaces took 0.48 ms a step for the GPT's
// logits' gradient against a tied embedding (B = 16 GEMMs of M = 64 at
// T = 64), these two 0.42 ms.
void MatmulGradBf16Stacked(const ExecutionContext& ctx, const MatmulDims& d, bool ty, float alpha, bool f32) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const bfloat16* xd = x.Data<bfloat16>();
  const bfloat16* yd = y.Data<bfloat16>();
  const bfloat16* dod = ctx.Input("Out@GRAD").Data<bfloat16>();
  Tensor* dx = ctx.Output("X@GRAD");
  Tensor* dy = ctx.Output("Y@GRAD");
  const int64_t rows = ProductOf(d.out_batch, 0, d.out_batch.size()) * d.m, k = d.k, n = d.n;
  // X@GRAD first: applying sgd, Y@GRAD is Y itself.
  if (dx && f32)
    cpu::GemmBf16(false, !ty, rows, k, n, alpha, dod, n, yd, ty ? k : n, 0.0f,
                  AllocOutput<float>(ctx, dx, x.GetShape()), k);
  else if (dx)
    cpu::GemmBf16(false, !ty, rows, k, n, alpha, dod, n, yd, ty ? k : n, AllocOutput<bfloat16>(ctx, dx, x.GetShape()),
                  k);
  if (!dy) return;
  // Y@GRAD = alpha op(X)^T dOut: [K, N] from X^T dOut, or [N, K] from dOut^T X.
  const float alpha_y = alpha * static_cast<float>(YGradScale(ctx));
  const bfloat16* a = ty ? dod : xd;
  const bfloat16* b = ty ? xd : dod;
  const int64_t gm = ty ? n : k, gn = ty ? k : n;
  if (f32) {
    const bool accumulate = ctx.HasInput(kAccumulateY);
    float* g = accumulate ? StartAccumulation<float>(ctx, dy, y.GetShape()) : AllocOutput<float>(ctx, dy, y.GetShape());
    cpu::GemmBf16(true, false, gm, gn, rows, alpha_y, a, gm, b, gn, accumulate ? 1.0f : 0.0f, g, gn);
  } else {
    cpu::GemmBf16(true, false, gm, gn, rows, alpha_y, a, gm, b, gn, AllocOutput<bfloat16>(ctx, dy, y.GetShape()), gn);
  }
}

// As MatmulGradKernel; the sums over broadcast batches accumulate in
// float32 and are rounded to bfloat16 once (with force_fp32_output, never).
void MatmulGradBf16Kernel(const ExecutionContext& ctx) {
  if (!ForcesFp32Output(ctx)) RefuseAccumulate(ctx, "bfloat16 (without force_fp32_output)");
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  bool tx = ctx.Attr<bool>("transpose_X"), ty = ctx.Attr<bool>("transpose_Y");
  float alpha = ctx.Attr<float>("alpha");
  MatmulDims d = KernelDims(ctx, x, y);
  const bfloat16* xd = x.Data<bfloat16>();
  const bfloat16* yd = y.Data<bfloat16>();
  const bfloat16* dod = ctx.Input("Out@GRAD").Data<bfloat16>();
  Tensor* dx = ctx.Output("X@GRAD");
  Tensor* dy = ctx.Output("Y@GRAD");
  const bool f32 = ForcesFp32Output(ctx);
  if (StacksIntoOneGemm(d, tx)) {
    MatmulGradBf16Stacked(ctx, d, ty, alpha, f32);
    return;
  }
  // The float32 sums: the outputs themselves with force_fp32_output, else scratch.
  std::vector<float> sx, sy;
  auto sums = [&](Tensor* out, const Tensor& like, std::vector<float>& scratch) -> float* {
    if (!out) return nullptr;
    const auto count = static_cast<size_t>(like.Numel());
    if (!f32) {
      scratch.assign(count, 0.0f);
      return scratch.data();
    }
    float* p = AllocOutput<float>(ctx, out, like.GetShape());
    std::fill(p, p + count, 0.0f);
    return p;
  };
  float* gx = sums(dx, x, sx);
  // Y@GRAD starts from AccumulateY where given (float32 outputs only, above).
  float* gy = dy && ctx.HasInput(kAccumulateY) ? StartAccumulation<float>(ctx, dy, y.GetShape()) : sums(dy, y, sy);
  const float alpha_y = alpha * static_cast<float>(YGradScale(ctx));
  int64_t m = d.m, k = d.k, n = d.n, ldx = tx ? m : k, ldy = ty ? k : n;
  BroadcastIndexer(d.out_batch, d.x_batch, d.y_batch).ForEach([&](int64_t io, int64_t ix, int64_t iy) {
    const bfloat16* xb = xd + ix * m * k;
    const bfloat16* yb = yd + iy * k * n;
    const bfloat16* db = dod + io * m * n;
    if (dx) {
      float* g = gx + ix * m * k;
      if (!tx)
        cpu::GemmBf16(false, !ty, m, k, n, alpha, db, n, yb, ldy, 1.0f, g, k);
      else
        cpu::GemmBf16(ty, true, k, m, n, alpha, yb, ldy, db, n, 1.0f, g, m);
    }
    if (dy) {
      float* g = gy + iy * k * n;
      if (!ty)
        cpu::GemmBf16(!tx, false, k, n, m, alpha_y, xb, ldx, db, n, 1.0f, g, n);
      else
        cpu::GemmBf16(true, tx, n, k, m, alpha_y, db, n, xb, ldx, 1.0f, g, k);
    }
  });
  if (f32) return;
  if (dx) cpu::ConvertToBf16(gx, AllocOutput<bfloat16>(ctx, dx, x.GetShape()), x.Numel());
  if (dy) cpu::ConvertToBf16(gy, AllocOutput<bfloat16>(ctx, dy, y.GetShape()), y.Numel());
}

GradCheckSpec MatmulCase(std::string name, Shape x, Shape y, bool tx, bool ty, float alpha = 1.0f) {
  return CheckCase(std::move(name), {CheckInput("X", std::move(x)), CheckInput("Y", std::move(y))},
                   {{"transpose_X", tx}, {"transpose_Y", ty}, {"alpha", alpha}});
}

NABLA_REGISTER_OPS(matmul) {
  registrar.Op("matmul", __FILE__, __LINE__)
      .Doc(
          "Out = alpha * op(X) * op(Y), op transposing the last two dims when asked. Inputs of rank > 2 are "
          "batches of matrices whose batch dims broadcast numpy style. A 1-D X [K] is the row [1, K] and a 1-D Y "
          "the column [K, 1] before the transposes apply; Out drops M where X is 1-D and M is 1, and N where Y "
          "is 1-D and N is 1 (two 1-D inputs give shape [1]; X[3]^T Y[1, 4] gives [3, 4]).")
      .Input("X", "(Tensor) the first operand, [..., M, K] ([..., K, M] when transpose_X)")
      .Input("Y", "(Tensor) the second operand, [..., K, N] ([..., N, K] when transpose_Y)")
      .Output("Out", "(Tensor) the product, [..., M, N]")
      .Attr<bool>("transpose_X", false, "(bool, default false) transpose the last two dims of X first")
      .Attr<bool>("transpose_Y", false, "(bool, default false) transpose the last two dims of Y first")
      .Attr<float>("alpha", 1.0f, "(float, default 1.0) the factor applied to the product")
      .InferShape(InferMatmulShape)
      .Precision(OpPrecision::kLow)
      .GradMaker<GradFromInputsMaker>()
      .RewritesAfterBackward(ShareTransposedWeightsPass("matmul_grad"))
      .RewritesAfterBackward(ChainWeightGradientsPass("matmul_grad"))
      .RewritesAfterBackward(ApplySgdInWeightGradientsPass("matmul_grad"))
      .GradCheck(MatmulCase("plain", {3, 4}, {4, 2}, false, false))
      .GradCheck(MatmulCase("transpose_x", {4, 3}, {4, 2}, true, false))
      .GradCheck(MatmulCase("transpose_y_alpha", {3, 4}, {2, 4}, false, true, 0.5f))
      .GradCheck(MatmulCase("transpose_both", {4, 3}, {2, 4}, true, true))
      .GradCheck(MatmulCase("batched", {2, 3, 4}, {2, 4, 2}, false, false))
      .GradCheck(MatmulCase("batch_broadcast", {2, 3, 4}, {2, 4}, false, true))
      .GradCheck(MatmulCase("vectors", {4}, {4}, false, false))
      .GradCheck(MatmulCase("vector_x_transposed", {3}, {1, 4}, true, false))
      .GradCheck(MatmulCase("vector_y_transposed_batched", {2, 3, 1}, {4}, false, true))
      .GradCheck(MatmulCase("vector_x_transposed_batched_y", {3}, {2, 1, 4}, true, false));
  registrar.DefaultGradOp("matmul", __FILE__, __LINE__)
      .Input(kAccumulateY, kAccumulateYDoc, kDispensable)
      .Input(kSgdLearningRate, kSgdLearningRateDoc, kDispensable)
      .UpdatesInPlace()  // Y@GRAD accumulates into AccumulateY
      .Attr<bool>(kForceFp32OutputAttr, false, kForceFp32GradsDoc)
      .InferShape(InferGemmGradShapes);
  RegisterCpuKernels<MatmulKernel, float, double>(registrar, "matmul", __FILE__, __LINE__);
  RegisterCpuKernels<MatmulGradKernel, float, double>(registrar, "matmul_grad", __FILE__, __LINE__);
  registrar.Kernel("matmul", DeviceType::kCPU, DType::kBFloat16, MatmulBf16Kernel, __FILE__, __LINE__);
  registrar.Kernel("matmul_grad", DeviceType::kCPU, DType::kBFloat16, MatmulGradBf16Kernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
