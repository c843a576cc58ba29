// The standard plugins on OpenCL, beyond the op table (tests/ops runs every
// op's rows and check cases on this device against the CPU): which ops must
// have an OpenCL kernel for the examples and optimizers to stay on the
// device, and where outputs live when an op falls back to the CPU.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/op_registry.h"
#include "nabla/opencl/opencl.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

class OpenClOps : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }
  Device& Cl() { return opencl::GetDevice(0); }
};

using op_case::ExpectSame;
using op_case::Input;
using op_case::Result;
using op_case::RunOps;

Input Random(const std::string& name, Shape shape) {
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Input in{name, DType::kFloat32, shape, {}};
  for (int64_t i = 0; i < NumElements(shape); ++i) in.values.push_back(u(rng));
  return in;
}

OpDesc Op(const std::string& type, VarNameMap in, VarNameMap out) {
  OpDesc op(type, std::move(in), std::move(out), {});
  FillDefaultAttrs(op, *CurrentRegistry());
  return op;
}

// The ops the MLP, softmax-regression, RNN, CNN and GPT examples (and a
// transformer block written with matmul / softmax, a norm written with
// reductions) and the optimizers need;
// each must have an OpenCL float32 kernel whenever the op is loaded.
const std::vector<std::string> kDeviceOps = {"mul",
                                             "mul_grad",
                                             "matmul",
                                             "matmul_grad",
                                             "elementwise_add",
                                             "elementwise_add_grad",
                                             "relu",
                                             "relu_grad",
                                             "tanh",
                                             "tanh_grad",
                                             "sigmoid",
                                             "sigmoid_grad",
                                             "softmax",
                                             "softmax_grad",
                                             "softmax_with_cross_entropy",
                                             "softmax_with_cross_entropy_grad",
                                             "mean",
                                             "mean_grad",
                                             "scale",
                                             "sum",
                                             "fill_constant",
                                             "fill_zeros_like",
                                             "concat",
                                             "concat_grad",
                                             "split",
                                             "sgd",
                                             "momentum",
                                             "adam",
                                             "adamw",
                                             "elementwise_max",
                                             "elementwise_max_grad",
                                             "elementwise_min",
                                             "elementwise_min_grad",
                                             "elementwise_pow",
                                             "elementwise_pow_grad",
                                             "gelu",
                                             "gelu_grad",
                                             "leaky_relu",
                                             "leaky_relu_grad",
                                             "log_softmax",
                                             "log_softmax_grad",
                                             "conv2d",
                                             "conv2d_grad",
                                             "pool2d",
                                             "pool2d_grad",
                                             "batch_norm",
                                             "batch_norm_grad",
                                             "flash_attn",
                                             "flash_attn_grad",
                                             "layer_norm",
                                             "layer_norm_grad",
                                             "lookup_table_v2",
                                             "lookup_table_v2_grad",
                                             "transpose",
                                             "reshape",
                                             "reshape_grad",
                                             "reduce_sum",
                                             "reduce_sum_grad",
                                             "reduce_mean",
                                             "reduce_mean_grad",
                                             "reduce_max",
                                             "reduce_max_grad",
                                             "reduce_min",
                                             "reduce_min_grad",
                                             "dropout",
                                             "dropout_grad",
                                             "slice",
                                             "slice_grad",
                                             "tril_triu",
                                             "tril_triu_grad",
                                             "squared_l2_norm",
                                             "squared_l2_norm_grad"};

TEST_F(OpenClOps, EveryDeviceOpHasAnOpenClKernel) {
  auto registry = CurrentRegistry();
  ASSERT_NE(registry->Find("mul"), nullptr) << "math_ops is not loaded";
  for (const std::string& type : kDeviceOps) {
    if (!registry->Find(type)) continue;
    EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat32), nullptr) << type;
    EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat64), nullptr) << type;
  }
}

// Paddle's activation_op family, one row each in nn_ops' and math_ops' unary
// tables: a row lost would fall back to the CPU silently in the op table.
TEST_F(OpenClOps, EveryUnaryTableOpHasAnOpenClKernel) {
  auto registry = CurrentRegistry();
  for (const char* op : {"logsigmoid", "tanh_shrink", "hard_shrink",  "softshrink", "brelu",
                         "relu6",      "hard_swish",  "hard_sigmoid", "swish",      "soft_relu",
                         "elu",        "stanh",       "softplus",     "softsign",   "thresholded_relu",
                         "sin",        "cos",         "atan",         "asin",       "acos",
                         "ceil",       "floor",       "round",        "rsqrt",      "reciprocal",
                         "log1p",      "pow",         "exp",          "log",        "sqrt",
                         "square",     "abs"}) {
    for (const std::string& type : {std::string(op), std::string(op) + "_grad"}) {
      ASSERT_NE(registry->Find(type), nullptr) << type;
      EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat32), nullptr) << type;
      EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat64), nullptr) << type;
    }
  }
}

// With one key every probability is 1 and the gradients of q and k are
// exactly 0. The device's flash_attn_grad takes D from the probabilities for
// few keys, as the CPU does, so they come out 0 there too (rowsum(dO * O)
// left rounding noise), float32 and float64, with and without dropout.
TEST_F(OpenClOps, FlashAttnWithOneKeyGivesExactlyZeroQAndKGradients) {
  for (DType dt : {DType::kFloat32, DType::kFloat64})
    for (float dropout : {0.0f, 0.3f}) {
      std::vector<Input> in = {Random("q", {2, 37, 3, 20}), Random("k", {2, 1, 3, 20}), Random("v", {2, 1, 3, 12}),
                               Random("dout", {2, 37, 3, 12})};
      for (Input& i : in) i.dtype = dt;
      OpDesc fwd = Op("flash_attn", {{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}},
                      {{"out", {"out"}}, {"softmax_lse", {"lse"}}, {"seed_offset", {"seed"}}});
      fwd.SetAttr("dropout", dropout);
      OpDesc bwd = Op("flash_attn_grad",
                      {{"q", {"q"}},
                       {"k", {"k"}},
                       {"v", {"v"}},
                       {"out", {"out"}},
                       {"softmax_lse", {"lse"}},
                       {"seed_offset", {"seed"}},
                       {GradVarName("out"), {"dout"}}},
                      {{GradVarName("q"), {"dq"}}, {GradVarName("k"), {"dk"}}, {GradVarName("v"), {"dv"}}});
      bwd.SetAttr("dropout", dropout);
      const std::string what = std::string(DTypeName(dt)) + " dropout " + std::to_string(dropout);
      const Result cpu = RunOps({fwd, bwd}, in, HostDevice());
      const Result cl = RunOps({fwd, bwd}, in, Cl());
      for (const Result* r : {&cpu, &cl})
        for (const char* name : {"dq", "dk"}) {
          const op_case::Doubles& g = r->values.at(name);
          for (size_t i = 0; i < g.size(); ++i)
            ASSERT_EQ(g[i], 0.0) << what << (r == &cl ? " on OpenCL: " : " on the CPU: ") << name << "[" << i << "]";
        }
      ExpectSame(cpu, cl, what);
    }
}

// An op without an OpenCL kernel runs on the CPU with copies of its inputs.
// A fresh output stays on the host (an OpenCL kernel reading it uploads
// it); an output whose var lived on the device goes back there.
TEST_F(OpenClOps, OpsWithoutAnOpenClKernelFallBackToTheCpu) {
  auto registry = CurrentRegistry();
  ASSERT_NE(registry->Find("assign"), nullptr);
  ASSERT_EQ(registry->FindKernel("assign", DeviceType::kOpenCL, DType::kFloat32), nullptr)
      << "pick another op without an OpenCL kernel for this test";
  std::vector<OpDesc> ops = {Op("assign", {{"X", {"x"}}}, {{"Out", {"e"}}}),
                             Op("relu", {{"X", {"e"}}}, {{"Out", {"r"}}}),
                             Op("assign", {{"X", {"r"}}}, {{"Out", {"r"}}})};
  const std::vector<Input> in = {Random("x", {3, 4})};
  Result cl = RunOps(ops, in, Cl());
  ExpectSame(RunOps(ops, in, HostDevice()), cl, "fallback");
  EXPECT_EQ(cl.devices.at("e"), &HostDevice());
  EXPECT_EQ(cl.devices.at("r"), &Cl()) << "relu wrote r on the device, so the in-place assign puts it back there";
}

}  // namespace
}  // namespace nabla
