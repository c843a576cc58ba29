// OpenCL kernels of the activations and their grad ops: one row of
// kUnaryOps per op, whose OpenCL C expressions become that op's kernels
// (nabla/opencl/unary.h holds the table machinery and the kernel skeletons,
// activation.cl the math the rows call). Adding an activation here is adding
// its row.
#include "activation_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/opencl/unary.h"
#include "nabla/plugin.h"

namespace nabla::nn {
namespace {

using namespace opencl;

// v is the element of the input the grad op reads, as nn_ops defines each
// (Paddle's ActBwdOpFwdDeps); p, q, r are the attributes named last.
const UnaryOp kUnaryOps[] = {
    {"relu", "x < (T)0 ? (T)0 : x", "Out", "v > (T)0 ? d : (T)0"},
    {"tanh", "tanh(x)", "Out", "d * ((T)1 - v * v)"},
    {"sigmoid", "sigmoid_of(x)", "Out", "d * v * ((T)1 - v)"},
    {"gelu",
     "p != (T)0 ? gelu_tanh(x) : gelu_erf(x)",
     "X",
     "d * (p != (T)0 ? gelu_tanh_grad(v) : gelu_erf_grad(v))",
     {"approximate"}},
    {"leaky_relu", "x > (T)0 ? x : p * x", "X", "v > (T)0 ? d : p * d", {"alpha"}},
    {"logsigmoid", "-softplus_of(-x)", "X", "d * sigmoid_of(-v)"},
    {"tanh_shrink", "x - tanh(x)", "X", "d * tanh(v) * tanh(v)"},
    {"hard_shrink", "(x < -p || x > p) ? x : (T)0", "X", "(v < -p || v > p) ? d : (T)0", {"threshold"}},
    {"softshrink",
     "(x > p ? x - p : (T)0) + (x < -p ? x + p : (T)0)",
     "X",
     "(v > p ? d : (T)0) + (v < -p ? d : (T)0)",
     {"lambda"}},
    {"brelu", "clamp_keep_nan(x, p, q)", "X", "(v > p && v < q) ? d : (T)0", {"t_min", "t_max"}},
    {"relu6", "clamp_keep_nan(x, (T)0, p)", "Out", "(v > (T)0 && v < p) ? d : (T)0", {"threshold"}},
    {"hard_swish",
     "x * clamp_keep_nan(x + r, (T)0, p) / q",
     "X",
     "d * (fmin(fmax(v + r, (T)0), p) + (v + r > (T)0 && v + r < p ? v : (T)0)) / q",
     {"threshold", "scale", "offset"}},
    {"hard_sigmoid",
     "clamp_keep_nan(p * x + q, (T)0, (T)1)",
     "Out",
     "(v > (T)0 && v < (T)1) ? d * p : (T)0",
     {"slope", "offset"}},
    {"swish", "x * sigmoid_of(p * x)", "X", "d * swish_grad(v, p)", {"beta"}},
    {"soft_relu",
     "softplus_of(clamp_keep_nan(x, -p, p))",
     "Out",
     "(v > softplus_of(-p) && v < softplus_of(p)) ? -d * expm1(-v) : (T)0",
     {"threshold"}},
    {"elu",
     "isnan(x) ? x : fmax(x, (T)0) + fmin(p * expm1(x), (T)0)",
     "X",
     "d * ((v > (T)0 ? (T)1 : (T)0) + (p * expm1(v) < (T)0 ? p * exp(v) : (T)0))",
     {"alpha"}},
    {"stanh", "q * tanh(p * x)", "X", "d * p * q * ((T)1 - tanh(p * v) * tanh(p * v))", {"scale_a", "scale_b"}},
    {"softplus",
     "p * x > q ? x : softplus_of(p * x) / p",
     "X",
     "p * v > q ? d : d * sigmoid_of(p * v)",
     {"beta", "threshold"}},
    {"softsign", "x / ((T)1 + fabs(x))", "X", "d / (((T)1 + fabs(v)) * ((T)1 + fabs(v)))"},
    {"thresholded_relu", "x > p ? x : (T)0", "X", "v > p ? d : (T)0", {"threshold"}},
};

}  // namespace

NABLA_REGISTER_OPS(activation_opencl) {
  static const std::string source = UnaryTableSource(cl_source::activation(), kUnaryOps);
  RegisterUnaryOpenClKernels(registrar, kUnaryOps, source, __FILE__, __LINE__);
}

}  // namespace nabla::nn
