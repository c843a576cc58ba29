// The op plugin frozen at version 9 of nabla's C ABI (tests/plugins/abi_v9):
// what version 9 added, used once.
//   abi_v9_rows: X and G [rows, n] (n >= 1) through each rows kernel:
//     Y, Mean, Var    layer_norm of X's rows (no scale or bias, eps 1e-5);
//     DX              layer_norm's gradient of those rows for G, with G
//                     added as the partial (acc), DScale and DBias summed
//                     over the rows;
//     Max, P, Sums    the causal softmax numerators of X: row r sees its
//                     first min(r + 1, n) elements, P = exp(X - Max) there
//                     and 0 past them, Sums their sum;
//     Dots            sum(X * G) per row.
//   `bad` 1 to 5 makes one call the table refuses instead (a row longer
//   than its width, a short ld, n = 0 layer_norm rows, acc without dx, a
//   short lda): its error reaches the caller.
// Never edit this file (README.md).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "nabla/cpu/vmath.h"
#include "nabla/plugin.h"

namespace {

using nabla::DType;
using nabla::ExecutionContext;
using nabla::InferShapeContext;

void InferRows(InferShapeContext& c) {
  const nabla::Shape x = c.InputShape("X");
  NABLA_ENFORCE(x.size() == 2 && x[1] >= 1 && c.InputShape("G") == x, kInvalidArgument, c.Where(),
                ": X and G must be [rows, n] with n >= 1");
  for (const char* out : {"Y", "DX", "P"}) c.SetOutputShape(out, x);
  for (const char* out : {"Mean", "Var", "Max", "Sums", "Dots"}) c.SetOutputShape(out, {x[0]});
  for (const char* out : {"DScale", "DBias"}) c.SetOutputShape(out, {x[1]});
  for (const char* out : {"Y", "Mean", "Var", "DX", "DScale", "DBias", "Max", "P", "Sums", "Dots"})
    c.SetOutputDType(out, DType::kFloat32);
}

// The call `bad` names, which the table refuses.
void RefusedCall(int bad, const float* x, float* y) {
  const int64_t lens[2] = {2, 5};
  const float zeros[2] = {0.0f, 0.0f}, ones[2] = {1.0f, 1.0f};
  float out[2];
  switch (bad) {
    case 1:  // row 1 is 5 long in a width of 4
      return nabla::cpu::ExpShiftedRows(x, 4, y, 4, 2, lens, 4, zeros, nullptr);
    case 2:  // ld 3 for rows of up to 5
      return nabla::cpu::RowMaxRows(x, 3, 2, lens, out);
    case 3:  // layer_norm of rows of no elements
      return nabla::cpu::LayerNormRows(x, 2, 0, nullptr, nullptr, 1e-5f, y, out, out);
    case 4:  // a partial to add, but no dx
      return nabla::cpu::LayerNormGradRows(x, x, 2, 4, zeros, ones, nullptr, x, nullptr, nullptr, nullptr);
    default:  // lda 3 for rows of 4
      return nabla::cpu::DotRows(x, 3, x, 4, 2, 4, out);
  }
}

void RowsKernel(const ExecutionContext& ctx) {
  const nabla::Tensor& tx = ctx.Input("X");
  const int64_t rows = tx.Dim(0), n = tx.Dim(1);
  const float* x = tx.Data<float>();
  const float* g = ctx.Input("G").Data<float>();
  if (const int bad = ctx.Attr<int>("bad")) {
    std::vector<float> scratch(16, 0.0f);
    return RefusedCall(bad, scratch.data(), scratch.data() + 8);
  }
  nabla::Device& dev = ctx.GetDevice();
  auto out = [&](const char* slot, nabla::Shape shape) { return ctx.Output(slot)->Allocate<float>(dev, shape); };
  float* y = out("Y", {rows, n});
  float* mean = out("Mean", {rows});
  float* var = out("Var", {rows});
  nabla::cpu::LayerNormRows(x, rows, n, nullptr, nullptr, 1e-5f, y, mean, var);
  std::vector<float> rstd(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) rstd[r] = 1.0f / std::sqrt(var[r] + 1e-5f);
  float* dscale = out("DScale", {n});
  float* dbias = out("DBias", {n});
  std::fill(dscale, dscale + n, 0.0f);
  std::fill(dbias, dbias + n, 0.0f);
  nabla::cpu::LayerNormGradRows(x, g, rows, n, mean, rstd.data(), nullptr, g, out("DX", {rows, n}), dscale, dbias);
  std::vector<int64_t> lens(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) lens[r] = std::min(r + 1, n);
  float* max = out("Max", {rows});
  nabla::cpu::RowMaxRows(x, n, rows, lens.data(), max);
  nabla::cpu::ExpShiftedRows(x, n, out("P", {rows, n}), n, rows, lens.data(), n, max, out("Sums", {rows}));
  nabla::cpu::DotRows(x, n, g, n, rows, n, out("Dots", {rows}));
}

}  // namespace

NABLA_REGISTER_OPS(abi_v9_ops) {
  registrar.Op("abi_v9_rows", __FILE__, __LINE__)
      .Doc("X and G [rows, n] through each of the CPU backend's rows kernels (C ABI version 9).")
      .Input("X", "(Tensor) float32 [rows, n]")
      .Input("G", "(Tensor) float32 [rows, n]")
      .Output("Y", "(Tensor) layer_norm of X's rows")
      .Output("Mean", "(Tensor) [rows]")
      .Output("Var", "(Tensor) [rows]")
      .Output("DX", "(Tensor) G + layer_norm's gradient for G")
      .Output("DScale", "(Tensor) [n]")
      .Output("DBias", "(Tensor) [n]")
      .Output("Max", "(Tensor) [rows]: the largest of row r's first min(r + 1, n)")
      .Output("P", "(Tensor) exp(X - Max) over those, 0 past them")
      .Output("Sums", "(Tensor) [rows]")
      .Output("Dots", "(Tensor) [rows]: sum(X * G)")
      .Attr<int>("bad", 0, "(int) 1 to 5: make one call the table refuses (RefusedCall)")
      .InferShape(InferRows)
      .GradMaker<nabla::EmptyGradOpDescMaker>();
  registrar.Kernel("abi_v9_rows", nabla::DeviceType::kCPU, DType::kFloat32, RowsKernel, __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
