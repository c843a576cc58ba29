// lookup_table: gathers rows of the embedding table W by Ids. Its gradient
// is a dense W@GRAD (zeros except the looked-up rows, where the rows of
// Out@GRAD add up), so every optimizer can treat it like any other gradient.
#include <algorithm>

#include "nabla/plugin.h"
#include "nabla/scope.h"
#include "nn_core_util.h"

namespace nabla::nn {
namespace {

constexpr int kNoPadding = -1;

int64_t CheckedId(const IndexReader& ids, int64_t i, int64_t rows) {
  const int64_t id = ids[i];
  NABLA_ENFORCE(id >= 0 && id < rows, kOutOfRange, "Ids[", i, "] must be a row of W, in [0, ", rows, "), but received ",
                id);
  return id;
}

template <typename T>
void LookupTableKernel(const ExecutionContext& ctx) {
  const Tensor& w = ctx.Input("W");
  const Tensor& ids = ctx.Input("Ids");
  const IndexReader ids_at(ids);
  Tensor* out = ctx.Output("Out");
  const int64_t rows = w.Dim(0);
  const int64_t width = w.Dim(1);
  const int padding = ctx.Attr<int>("padding_idx");
  const T* pw = w.Data<T>();
  T* po = out->Allocate<T>(ctx.GetDevice(), out->GetShape());
  const int64_t n = ids.Numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = CheckedId(ids_at, i, rows);
    if (padding != kNoPadding && id == padding)
      std::fill(po + i * width, po + (i + 1) * width, T(0));
    else
      std::copy(pw + id * width, pw + (id + 1) * width, po + i * width);
  }
}

template <typename T>
void LookupTableGradKernel(const ExecutionContext& ctx) {
  Tensor* dw = ctx.Output(GradVarName("W"));
  if (!dw) return;
  const Shape& w_shape = ctx.InputVar("W")->GetTensor().GetShape();
  const Tensor& ids = ctx.Input("Ids");
  const IndexReader ids_at(ids);
  const Tensor& dout = ctx.Input(GradVarName("Out"));
  const int64_t rows = w_shape[0];
  const int64_t width = w_shape[1];
  const int padding = ctx.Attr<int>("padding_idx");
  const T* pd = dout.Data<T>();
  T* pdw = dw->Allocate<T>(ctx.GetDevice(), w_shape);
  std::fill(pdw, pdw + rows * width, T(0));
  const int64_t n = ids.Numel();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = CheckedId(ids_at, i, rows);
    if (padding != kNoPadding && id == padding) continue;
    T* dst = pdw + id * width;
    const T* src = pd + i * width;
    for (int64_t j = 0; j < width; ++j) dst[j] += src[j];
  }
}

// Ids is [..., 1] for lookup_table and any shape for lookup_table_v2; Out
// replaces that trailing 1 with, or appends, W's width.
void InferLookupTable(InferShapeContext& c, bool ids_trailing_one) {
  const Shape w = c.InputShape("W");
  const Shape ids = c.InputShape("Ids");
  EnforceFloatDType(c.InputDType("W"), c.Where(), "W");
  EnforceIndexDType(c.InputDType("Ids"), c.Where(), "Ids");
  NABLA_ENFORCE(w.size() == 2, kInvalidArgument, c.Where(), ": W must be a [rows, width] table, but received shape ",
                ShapeToString(w));
  NABLA_ENFORCE(!ids_trailing_one || (!ids.empty() && DimsCompatible(ids.back(), 1)), kInvalidArgument, c.Where(),
                ": Ids must have shape [..., 1], but received ", ShapeToString(ids));
  const int padding = c.Attr<int>("padding_idx");
  NABLA_ENFORCE(padding == kNoPadding || (padding >= 0 && (w[0] < 0 || padding < w[0])), kOutOfRange, c.Where(),
                ": padding_idx must be -1 (none) or a row of W in [0, ", w[0], "), but received ", padding);
  Shape out(ids.begin(), ids.end() - (ids_trailing_one ? 1 : 0));
  out.push_back(w[1]);
  c.SetOutputShape("Out", out);
  c.SetOutputDType("Out", c.InputDType("W"));
}

}  // namespace

OpBuilder& RegisterLookupTable(Registrar& registrar, const std::string& type, bool ids_trailing_one, const char* file,
                               int line) {
  const std::string grad_type = type + "_grad";
  OpBuilder& op =
      registrar.Op(type, file, line)
          .Input("W", "(Tensor) the table, shape [rows, width], float32 or float64")
          .Input("Ids", ids_trailing_one ? "(Tensor) int64 row indices, shape [..., 1]"
                                         : "(Tensor) int64 row indices, any shape")
          .Output("Out", ids_trailing_one
                             ? "(Tensor) the rows, shape [..., width] (Ids' shape with its last dim replaced)"
                             : "(Tensor) the rows, shape Ids.shape + [width]")
          .Attr<int>("padding_idx", kNoPadding,
                     "(int, default -1) a row index whose lookups give zeros and no gradient; -1 means none")
          .InferShape([ids_trailing_one](InferShapeContext& c) { InferLookupTable(c, ids_trailing_one); })
          // The maker's arguments after fwd are what the build's GradOpMakerFn
          // passes (the core's and the C ABI SDK's differ); GradContext takes either.
          .GradMaker([grad_type](const OpDesc& fwd, auto&&... rest) {
            GradContext g(fwd, rest...);
            return OneOp(grad_type,
                         {{"W", g.Input("W")}, {"Ids", g.Input("Ids")}, {GradVarName("Out"), g.OutputGrad("Out")}},
                         {{GradVarName("W"), g.InputGrad("W")}}, g.Attrs());
          });
  OpBuilder& grad = registrar.DefaultGradOp(type, file, line);
  grad.Doc("Gradient of " + type + ": a dense W@GRAD in which each looked-up row sums its Out@GRAD rows.")
      .InferShape([](InferShapeContext& c) { InferSameAs(c, "W", GradVarName("W")); })
      .KernelDType(DTypeOfInput(GradVarName("Out")));
  grad.NoBufferInput("W");
  RegisterFloatKernels(registrar, type, LookupTableKernel<float>, LookupTableKernel<double>, file, line);
  RegisterFloatKernels(registrar, grad_type, LookupTableGradKernel<float>, LookupTableGradKernel<double>, file, line);
  return op;
}

NABLA_REGISTER_OPS(lookup_table) {
  GradCheckSpec repeated =
      CheckCase("repeated_ids", {CheckInput("W", {5, 3}), IndexIn("Ids", {2, 3, 1}, 5, {0, 4, 2, 4, 4, 1})});
  GradCheckSpec padded = repeated;
  padded.name = "padding_idx";
  padded.attrs = {{"padding_idx", 4}};
  RegisterLookupTable(registrar, "lookup_table", true, __FILE__, __LINE__)
      .Doc("Embedding lookup: Out[i] = W[Ids[i]], zeros where Ids[i] equals padding_idx.")
      .GradCheck(repeated)
      .GradCheck(padded);
}

}  // namespace nabla::nn
