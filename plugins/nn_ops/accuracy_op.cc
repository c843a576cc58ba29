// accuracy: the fraction of rows whose Label appears among the row's top-k
// Indices (from top_k). Outputs follow Paddle: Accuracy float32, Correct and
// Total int32. A metric, so it has no gradient.
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

void AccuracyKernel(const ExecutionContext& ctx) {
  const Tensor& indices = ctx.Input("Indices");
  const IndexReader indices_at(indices);
  const Tensor& label = ctx.Input("Label");
  const IndexReader label_at(label);
  const int64_t rows = indices.Rank() == 0 ? 1 : indices.Dim(0);
  const int64_t k = rows == 0 ? 0 : indices.Numel() / rows;
  NABLA_ENFORCE(label.Numel() == rows, kInvalidArgument, "Label must hold one class per row of Indices (", rows,
                "), but received shape ", ShapeToString(label.GetShape()));
  int64_t correct = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t l = label_at[r];
    for (int64_t j = 0; j < k; ++j) {
      if (indices_at[r * k + j] == l) {
        ++correct;
        break;
      }
    }
  }
  Device& dev = ctx.GetDevice();
  ctx.Output("Accuracy")->Allocate<float>(dev, {1})[0] =
      rows == 0 ? 0.0f : static_cast<float>(static_cast<double>(correct) / static_cast<double>(rows));
  if (Tensor* t = ctx.Output("Correct")) t->Allocate<int32_t>(dev, {1})[0] = static_cast<int32_t>(correct);
  if (Tensor* t = ctx.Output("Total")) t->Allocate<int32_t>(dev, {1})[0] = static_cast<int32_t>(rows);
}

void InferAccuracy(InferShapeContext& c) {
  const Shape out = c.InputShape("Out");
  const Shape idx = c.InputShape("Indices");
  const Shape label = c.InputShape("Label");
  EnforceIndexDType(c.InputDType("Indices"), c.Where(), "Indices");
  EnforceIndexDType(c.InputDType("Label"), c.Where(), "Label");
  NABLA_ENFORCE(idx.size() == 2 && out.size() == 2 && DimsCompatible(out[0], idx[0]) && DimsCompatible(out[1], idx[1]),
                kInvalidArgument, c.Where(), ": Out and Indices must both be [N, k] (from top_k), but received Out ",
                ShapeToString(out), " and Indices ", ShapeToString(idx));
  NABLA_ENFORCE(label.size() == 2 && DimsCompatible(label[0], idx[0]) && DimsCompatible(label[1], 1), kInvalidArgument,
                c.Where(), ": Label must be [N, 1] with N = ", idx[0], ", but received ", ShapeToString(label));
  c.SetOutputShape("Accuracy", {1});
  c.SetOutputDType("Accuracy", DType::kFloat32);
  c.SetOutputShape("Correct", {1});
  c.SetOutputDType("Correct", DType::kInt32);
  c.SetOutputShape("Total", {1});
  c.SetOutputDType("Total", DType::kInt32);
}

}  // namespace

NABLA_REGISTER_OPS(accuracy) {
  registrar.Op("accuracy", __FILE__, __LINE__)
      .Doc("Top-k accuracy: the fraction of rows whose Label is among their Indices. No gradient.")
      .Input("Out", "(Tensor) the top-k values, shape [N, k] (read for its shape and dtype only)", kNoBuffer)
      .Input("Indices", "(Tensor) int64 top-k class indices, shape [N, k]")
      .Input("Label", "(Tensor) int64 true classes, shape [N, 1]")
      .Output("Accuracy", "(Tensor) float32 [1], correct / total (0 for an empty batch)")
      .Output("Correct", "(Tensor) int32 [1], rows whose label was found", kDispensable)
      .Output("Total", "(Tensor) int32 [1], rows seen", kDispensable)
      .InferShape(InferAccuracy)
      .GradMaker<EmptyGradOpDescMaker>();
  registrar.Kernel("accuracy", DeviceType::kCPU, DType::kFloat32, AccuracyKernel, __FILE__, __LINE__);
  registrar.Kernel("accuracy", DeviceType::kCPU, DType::kFloat64, AccuracyKernel, __FILE__, __LINE__);
}

}  // namespace nabla::nn
