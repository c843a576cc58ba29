// OpenCL kernels of the unary math ops and their grad ops: one row of
// kUnaryOps per op, whose OpenCL C expressions become that op's kernels
// (the table machinery is nabla/opencl/unary.h's, shared with nn_ops'
// activations). Adding a unary op here is adding its row.
#include "nabla/opencl/kernel.h"
#include "nabla/opencl/unary.h"
#include "nabla/plugin.h"
#include "unary_cl.h"

namespace nabla::math_ops {
namespace {

using namespace opencl;

// v is the element of the input the grad op reads (Paddle's
// ActBwdOpFwdDeps); p is the attribute named last. OpenCL's round, like
// std::round, takes halves away from zero.
const UnaryOp kUnaryOps[] = {
    {"sin", "sin(x)", "X", "d * cos(v)"},
    {"cos", "cos(x)", "X", "-d * sin(v)"},
    {"atan", "atan(x)", "X", "d / ((T)1 + v * v)"},
    {"asin", "asin(x)", "X", "d / sqrt((T)1 - v * v)"},
    {"acos", "acos(x)", "X", "-d / sqrt((T)1 - v * v)"},
    {"ceil", "ceil(x)", "Out@GRAD", "(T)0"},
    {"floor", "floor(x)", "Out@GRAD", "(T)0"},
    {"round", "round(x)", "Out@GRAD", "(T)0"},
    {"rsqrt", "rsqrt(x)", "Out", "(T)-0.5 * d * v * v * v"},
    {"reciprocal", "(T)1 / x", "Out", "-d * v * v"},
    {"log1p", "log1p(x)", "X", "d / ((T)1 + v)"},
    {"pow", "pow(x, p)", "X", "d * p * pow(v, p - (T)1)", {"factor"}},
    {"exp", "exp(x)", "Out", "d * v"},
    {"log", "log(x)", "X", "d / v"},
    {"sqrt", "sqrt(x)", "Out", "d * (T)0.5 / v"},
    {"square", "x * x", "X", "d * (T)2 * v"},
    {"abs", "fabs(x)", "X", "v > (T)0 ? d : (v < (T)0 ? -d : (T)0)"},
};

}  // namespace

NABLA_REGISTER_OPS(unary_opencl) {
  static const std::string source = UnaryTableSource(cl_source::unary(), kUnaryOps);
  RegisterUnaryOpenClKernels(registrar, kUnaryOps, source, __FILE__, __LINE__);
}

}  // namespace nabla::math_ops
