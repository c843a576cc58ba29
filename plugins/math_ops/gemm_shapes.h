#pragma once
// The shapes of mul's and matmul's products, for their CPU kernels (mul_op.cc,
// matmul_op.cc) and their OpenCL kernels (gemm_opencl.cc) alike.
#include <string>

#include "math_util.h"

namespace nabla::math_ops {

// X of shape [d0, ..., dn] flattens to [d0 * ... * d(c-1), dc * ... * dn].
struct Flat2D {
  int64_t rows, cols;
};

// mul_grad's and matmul_grad's inference: each gradient like its forward
// input, float32 with force_fp32_output (opkit::ForceFp32Outputs).
inline void InferGemmGradShapes(InferShapeContext& c) {
  InferGradShapes(c);
  ForceFp32Outputs(c, "X");
  // A partial Y@GRAD to add to (FuseGradOps's chain) has Y's shape.
  if (c.HasInput("AccumulateY")) {
    const Shape acc = c.InputShape("AccumulateY"), y = c.InputShape("Y");
    bool same = acc.size() == y.size();
    for (size_t i = 0; same && i < acc.size(); ++i) same = acc[i] < 0 || y[i] < 0 || acc[i] == y[i];
    NABLA_ENFORCE(same, kInvalidArgument, c.Where(), ": AccumulateY must have Y's shape ", ShapeToString(y),
                  " but has ", ShapeToString(acc));
  }
  // An sgd step in the GEMM (FuseGradOps): a one-element learning rate,
  // and a weight to step from.
  if (c.HasInput("LearningRate")) {
    NABLA_ENFORCE(c.HasInput("AccumulateY"), kInvalidArgument, c.Where(),
                  ": LearningRate needs AccumulateY, the parameter the sgd step starts from");
    const Shape lr = c.InputShape("LearningRate");
    int64_t n = 1;
    for (int64_t d : lr) n = d < 0 || n < 0 ? -1 : n * d;
    NABLA_ENFORCE(n == 1 || n < 0, kInvalidArgument, c.Where(), ": LearningRate must have one element but has shape ",
                  ShapeToString(lr));
  }
}

inline Flat2D Flatten(const Shape& s, int num_col_dims) {
  return {ProductOf(s, 0, num_col_dims), ProductOf(s, num_col_dims, s.size())};
}

// The product as a batch of M x K times K x N GEMMs. 1-D X is a row [1, K],
// 1-D Y a column [K, 1], before the transposes apply (Paddle's matmul). Out
// drops M where X is 1-D and M is 1, and N where Y is 1-D and N is 1: a
// transposed 1-D X ([K] -> [K, 1]) keeps M = K, so X[3]^T Y[1, 4] is [3, 4].
// Batch dims broadcast numpy style.
struct MatmulDims {
  Shape x_batch, y_batch, out_batch;  // padded to one rank
  int64_t m = 0, k = 0, n = 0;
  Shape out;
};

inline MatmulDims ComputeMatmulDims(const Shape& x, const Shape& y, bool tx, bool ty, const std::string& where) {
  NABLA_ENFORCE(!x.empty() && !y.empty(), kInvalidArgument, where,
                ": X and Y must have rank >= 1, but received X shape ", ShapeToString(x), " and Y shape ",
                ShapeToString(y));
  Shape xm = x.size() == 1 ? Shape{1, x[0]} : x;
  Shape ym = y.size() == 1 ? Shape{y[0], 1} : y;
  int64_t xr = xm[xm.size() - 2], xc = xm.back(), yr = ym[ym.size() - 2], yc = ym.back();
  MatmulDims d;
  d.m = tx ? xc : xr;
  d.k = tx ? xr : xc;
  int64_t ky = ty ? yc : yr;
  d.n = ty ? yr : yc;
  NABLA_ENFORCE(d.k < 0 || ky < 0 || d.k == ky, kInvalidArgument, where, ": the contracted dims must match: X",
                tx ? "^T" : "", " (shape ", ShapeToString(x), ") has ", d.k, " columns, so Y", ty ? "^T" : "",
                " must have ", d.k, " rows, but received Y shape ", ShapeToString(y));
  BroadcastShapes b = BroadcastElementwise(Shape(xm.begin(), xm.end() - 2), Shape(ym.begin(), ym.end() - 2), -1,
                                           where + " (batch dims)");
  d.x_batch = b.x;
  d.y_batch = b.y;
  d.out_batch = b.out;
  d.out = b.out;
  // The GEMMs write batch * M * N values: Out must hold all of them.
  if (x.size() != 1 || d.m != 1) d.out.push_back(d.m);
  if (y.size() != 1 || d.n != 1) d.out.push_back(d.n);
  if (d.out.empty()) d.out.push_back(1);
  return d;
}

}  // namespace nabla::math_ops
