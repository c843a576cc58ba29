// mul: a matrix product of X and Y, each flattened to 2-D first (Paddle's
// `mul`, the op behind fully connected layers).
#include "gemm_grad_passes.h"
#include "gemm_shapes.h"
#include "math_util.h"
#include "nabla/plugin.h"

namespace nabla::math_ops {
namespace {

void CheckNumColDims(const Shape& s, int num_col_dims, const char* attr, const char* slot, const std::string& where) {
  int rank = static_cast<int>(s.size());
  NABLA_ENFORCE(num_col_dims >= 1 && num_col_dims < rank, kInvalidArgument, where, ": attribute ", attr,
                " must be in [1, rank(", slot, ") - 1] = [1, ", rank - 1, "] for ", slot, " of shape ",
                ShapeToString(s), ", but received ", num_col_dims);
}

void InferMulShape(InferShapeContext& c) {
  Shape x = c.InputShape("X"), y = c.InputShape("Y");
  int xn = c.Attr<int>("x_num_col_dims"), yn = c.Attr<int>("y_num_col_dims");
  CheckNumColDims(x, xn, "x_num_col_dims", "X", c.Where());
  CheckNumColDims(y, yn, "y_num_col_dims", "Y", c.Where());
  Flat2D fx = Flatten(x, xn), fy = Flatten(y, yn);
  NABLA_ENFORCE(fx.cols < 0 || fy.rows < 0 || fx.cols == fy.rows, kInvalidArgument, c.Where(),
                ": X flattened by x_num_col_dims=", xn, " is [", fx.rows, ", ", fx.cols, "] (shape ", ShapeToString(x),
                "), so Y flattened by y_num_col_dims=", yn, " must have ", fx.cols, " rows, but received [", fy.rows,
                ", ", fy.cols, "] (shape ", ShapeToString(y), ")");
  Shape out(x.begin(), x.begin() + xn);
  out.insert(out.end(), y.begin() + yn, y.end());
  c.SetOutputShape("Out", out);
  c.SetOutputDType("Out", c.InputDType("X"));
}

template <typename T>
struct MulKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    T* out = AllocOutput<T>(ctx, ctx.Output("Out"));
    cpu::Gemm(false, false, fx.rows, fy.cols, fx.cols, T(1), x.Data<T>(), fx.cols, y.Data<T>(), fy.cols, T(0), out,
              fy.cols);
  }
};

// X@GRAD = Out@GRAD * Y^T and Y@GRAD = X^T * Out@GRAD, on the 2-D views.
template <typename T>
struct MulGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    const Tensor& x = ctx.Input("X");
    const Tensor& y = ctx.Input("Y");
    const T* dout = ctx.Input("Out@GRAD").Data<T>();
    Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
    Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
    int64_t m = fx.rows, k = fx.cols, n = fy.cols;
    if (Tensor* dx = ctx.Output("X@GRAD")) {
      // X@GRAD = AccumulateX + Out@GRAD * Y^T (FuseGradOps's chain of the
      // products reading one input) or the product alone.
      const bool acc = ctx.HasInput(kAccumulateX);
      T* d = acc ? StartAccumulation<T>(ctx, dx, x.GetShape(), kAccumulateX) : AllocOutput<T>(ctx, dx, x.GetShape());
      cpu::Gemm(false, true, m, k, n, T(1), dout, n, y.Data<T>(), n, T(acc ? 1 : 0), d, k);
    }
    if (Tensor* dy = ctx.Output("Y@GRAD")) {
      if (!ctx.HasInput(kAccumulateY)) {
        cpu::Gemm(true, false, k, n, m, T(1), x.Data<T>(), k, dout, n, T(0), AllocOutput<T>(ctx, dy, y.GetShape()), n);
        return;
      }
      // Y@GRAD = AccumulateY + s * X^T * Out@GRAD (FuseGradOps's chain, or
      // its sgd step where s is -LearningRate); X@GRAD has read Y already.
      T* d = StartAccumulation<T>(ctx, dy, y.GetShape());
      cpu::Gemm(true, false, k, n, m, static_cast<T>(YGradScale(ctx)), x.Data<T>(), k, dout, n, T(1), d, n);
    }
  }
};

// bfloat16 (mixed precision, nabla/mixed_precision.h): bfloat16 operands,
// float32 accumulation on oneDNN, results rounded to bfloat16 as PyTorch's
// autocast does; mul_grad's with force_fp32_output written in float32 as
// they are. C = op(A) * op(B) into `out`, allocated with `shape` in the
// op's output dtype.
void GemmBf16Into(const ExecutionContext& ctx, Tensor* out, Shape shape, bool ta, bool tb, int64_t m, int64_t n,
                  int64_t k, const bfloat16* a, int64_t lda, const bfloat16* b, int64_t ldb) {
  if (ForcesFp32Output(ctx))
    cpu::GemmBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, 0.0f, AllocOutput<float>(ctx, out, std::move(shape)), n);
  else
    cpu::GemmBf16(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, AllocOutput<bfloat16>(ctx, out, std::move(shape)), n);
}

void MulBf16Kernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
  Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
  bfloat16* out = AllocOutput<bfloat16>(ctx, ctx.Output("Out"));
  cpu::GemmBf16(false, false, fx.rows, fy.cols, fx.cols, 1.0f, x.Data<bfloat16>(), fx.cols, y.Data<bfloat16>(), fy.cols,
                out, fy.cols);
}

void MulGradBf16Kernel(const ExecutionContext& ctx) {
  if (!ForcesFp32Output(ctx)) RefuseAccumulate(ctx, "bfloat16 (without force_fp32_output)");
  const Tensor& x = ctx.Input("X");
  const Tensor& y = ctx.Input("Y");
  const bfloat16* dout = ctx.Input("Out@GRAD").Data<bfloat16>();
  Flat2D fx = Flatten(x.GetShape(), ctx.Attr<int>("x_num_col_dims"));
  Flat2D fy = Flatten(y.GetShape(), ctx.Attr<int>("y_num_col_dims"));
  int64_t m = fx.rows, k = fx.cols, n = fy.cols;
  Tensor* dx = ctx.Output("X@GRAD");
  if (dx && ctx.HasInput(kAccumulateX)) {  // float32 (above): as the float32 kernel
    float* d = StartAccumulation<float>(ctx, dx, x.GetShape(), kAccumulateX);
    cpu::GemmBf16(false, true, m, k, n, 1.0f, dout, n, y.Data<bfloat16>(), n, 1.0f, d, k);
  } else if (dx) {
    GemmBf16Into(ctx, dx, x.GetShape(), false, true, m, k, n, dout, n, y.Data<bfloat16>(), n);
  }
  Tensor* dy = ctx.Output("Y@GRAD");
  if (dy && ctx.HasInput(kAccumulateY)) {  // float32 (above): as the float32 kernel
    float* d = StartAccumulation<float>(ctx, dy, y.GetShape());
    cpu::GemmBf16(true, false, k, n, m, static_cast<float>(YGradScale(ctx)), x.Data<bfloat16>(), k, dout, n, 1.0f, d,
                  n);
  } else if (dy) {
    GemmBf16Into(ctx, dy, y.GetShape(), true, false, k, n, m, x.Data<bfloat16>(), k, dout, n);
  }
}

NABLA_REGISTER_OPS(mul) {
  registrar.Op("mul", __FILE__, __LINE__)
      .Doc(
          "Out = X * Y, a matrix product after flattening X to 2-D at x_num_col_dims and Y at y_num_col_dims. "
          "Out's shape is X's first x_num_col_dims dims followed by Y's dims from y_num_col_dims on.")
      .Input("X", "(Tensor) the first operand, of rank > x_num_col_dims")
      .Input("Y", "(Tensor) the second operand, of rank > y_num_col_dims")
      .Output("Out", "(Tensor) the product")
      .Attr<int>("x_num_col_dims", 1,
                 "(int, default 1) X's first x_num_col_dims dims become the rows of the 2-D view, the rest its "
                 "columns")
      .Attr<int>("y_num_col_dims", 1,
                 "(int, default 1) Y's first y_num_col_dims dims become the rows of the 2-D view, the rest its "
                 "columns")
      .InferShape(InferMulShape)
      .Precision(OpPrecision::kLow)
      .GradMaker<GradFromInputsMaker>()
      .RewritesAfterBackward(ShareTransposedWeightsPass("mul_grad"))
      .RewritesAfterBackward(ChainWeightGradientsPass("mul_grad"))
      .RewritesAfterBackward(ChainInputGradientsPass())
      .RewritesAfterBackward(ApplySgdInWeightGradientsPass("mul_grad"))
      .GradCheck(CheckCase("matrix", {CheckInput("X", {3, 4}), CheckInput("Y", {4, 5})}))
      .GradCheck(CheckCase("flatten", {CheckInput("X", {2, 3, 4}), CheckInput("Y", {4, 2, 3})},
                           {{"x_num_col_dims", 2}, {"y_num_col_dims", 1}}))
      .GradCheck(CheckCase("only_x", {CheckInput("X", {2, 3}), NoCheck(CheckInput("Y", {3, 2}))}));
  registrar.DefaultGradOp("mul", __FILE__, __LINE__)
      .Input(kAccumulateX, kAccumulateXDoc, kDispensable)
      .Input(kAccumulateY, kAccumulateYDoc, kDispensable)
      .Input(kSgdLearningRate, kSgdLearningRateDoc, kDispensable)
      .UpdatesInPlace()  // X@GRAD and Y@GRAD accumulate into AccumulateX and AccumulateY
      .Attr<bool>(kForceFp32OutputAttr, false, kForceFp32GradsDoc)
      .InferShape(InferGemmGradShapes);
  RegisterCpuKernels<MulKernel, float, double>(registrar, "mul", __FILE__, __LINE__);
  RegisterCpuKernels<MulGradKernel, float, double>(registrar, "mul_grad", __FILE__, __LINE__);
  registrar.Kernel("mul", DeviceType::kCPU, DType::kBFloat16, MulBf16Kernel, __FILE__, __LINE__);
  registrar.Kernel("mul_grad", DeviceType::kCPU, DType::kBFloat16, MulGradBf16Kernel, __FILE__, __LINE__);
}

}  // namespace
}  // namespace nabla::math_ops
