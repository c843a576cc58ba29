// The op test table on OpenCL: every op with an OpenCL kernel runs its
// declared check cases (the GradCheck specs next to its registration) in
// float32 on the CPU and on the OpenCL device, forward op and grad ops
// together, and every output must agree. The optimizers and fills, which
// have no gradient cases, get their own cases. Then the numeric gradient
// checks run on the OpenCL device in float64 (PoCL has cl_khr_fp64).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/op_case.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/opencl/opencl.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

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

using op_case::Doubles;
using op_case::ExpectSame;
using op_case::Input;
using op_case::Result;
using op_case::RunOps;

void RunCase(const std::string& type, const GradCheckSpec& spec, Device& cl) {
  const op_case::Case c = op_case::BuildCase(type, spec);
  ExpectSame(RunOps(c.ops, c.inputs, HostDevice()), RunOps(c.ops, c.inputs, cl), type + "/" + spec.name);
}

// The ops the MLP, softmax-regression, RNN and CNN examples and the
// optimizers need; each must have an OpenCL float32 kernel whenever the op is loaded.
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
                                             "batch_norm_grad"};

TEST_F(OpenClOps, EveryDeviceOpHasAnOpenClKernel) {
  auto registry = CurrentRegistry();
  ASSERT_NE(registry->Find("mul"), nullptr) << "math_ops is not loaded";
  for (const std::string& type : kDeviceOps) {
    if (!registry->Find(type)) continue;
    EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat32), nullptr) << type;
    EXPECT_NE(registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat64), nullptr) << type;
  }
}

TEST_F(OpenClOps, EveryKernelMatchesTheCpuOnItsCheckCases) {
  auto registry = CurrentRegistry();
  int cases = 0;
  for (const std::string& type : registry->OpTypes()) {
    if (!registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat32)) continue;
    for (const GradCheckSpec& spec : registry->Get(type).grad_checks) {
      SCOPED_TRACE(type + "/" + spec.name);
      RunCase(type, spec, Cl());
      ++cases;
    }
  }
  EXPECT_GE(cases, 10);
}

Input Random(const std::string& name, Shape shape, double lo = -1.0, double hi = 1.0, uint64_t seed = 3) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Input in{name, DType::kFloat32, shape, {}};
  for (int64_t i = 0; i < NumElements(shape); ++i) in.values.push_back(u(rng));
  return in;
}

OpDesc Op(const std::string& type, VarNameMap in, VarNameMap out, AttributeMap attrs = {}) {
  OpDesc op(type, std::move(in), std::move(out), std::move(attrs));
  FillDefaultAttrs(op, *CurrentRegistry());
  return op;
}

void ExpectSameOnBoth(const std::vector<OpDesc>& ops, const std::vector<Input>& inputs, Device& cl,
                      const std::string& what) {
  ExpectSame(RunOps(ops, inputs, HostDevice()), RunOps(ops, inputs, cl), what);
}

TEST_F(OpenClOps, OptimizersMatchTheCpuInPlace) {
  if (!CurrentRegistry()->Find("adam")) GTEST_SKIP() << "nn_ops is not loaded";
  std::vector<Input> in = {Random("p", {5, 7}, -1, 1, 1),
                           Random("g", {5, 7}, -1, 1, 2),
                           Random("v", {5, 7}, -1, 1, 3),
                           Random("m2", {5, 7}, 0, 1, 4),
                           {"lr", DType::kFloat32, {1}, {0.1}},
                           {"b1p", DType::kFloat32, {1}, {0.9 * 0.9}},
                           {"b2p", DType::kFloat32, {1}, {0.999 * 0.999}}};
  ExpectSameOnBoth({Op("sgd", {{"Param", {"p"}}, {"Grad", {"g"}}, {"LearningRate", {"lr"}}}, {{"ParamOut", {"p"}}})},
                   in, Cl(), "sgd");
  for (bool nesterov : {false, true}) {
    ExpectSameOnBoth({Op("momentum", {{"Param", {"p"}}, {"Grad", {"g"}}, {"Velocity", {"v"}}, {"LearningRate", {"lr"}}},
                         {{"ParamOut", {"p"}}, {"VelocityOut", {"v"}}},
                         {{"mu", 0.9f},
                          {"use_nesterov", nesterov},
                          {"regularization_method", std::string("l2_decay")},
                          {"regularization_coeff", 0.01f}})},
                     in, Cl(), nesterov ? "momentum nesterov" : "momentum");
  }
  ExpectSameOnBoth({Op("adam",
                       {{"Param", {"p"}},
                        {"Grad", {"g"}},
                        {"LearningRate", {"lr"}},
                        {"Moment1", {"v"}},
                        {"Moment2", {"m2"}},
                        {"Beta1Pow", {"b1p"}},
                        {"Beta2Pow", {"b2p"}}},
                       {{"ParamOut", {"p"}},
                        {"Moment1Out", {"v"}},
                        {"Moment2Out", {"m2"}},
                        {"Beta1PowOut", {"b1p"}},
                        {"Beta2PowOut", {"b2p"}}})},
                   in, Cl(), "adam");
}

TEST_F(OpenClOps, FillsMatchTheCpuForEveryDType) {
  std::vector<OpDesc> ops;
  for (const char* dtype : {"float32", "float64", "int32", "int64", "bool"})
    ops.push_back(Op("fill_constant", {}, {{"Out", {std::string("c_") + dtype}}},
                     {{"shape", std::vector<int>{3, 2}}, {"value", 2.5f}, {"dtype", std::string(dtype)}}));
  ops.push_back(Op("fill_zeros_like", {{"X", {"x"}}}, {{"Out", {"z"}}}));
  ExpectSameOnBoth(ops, {Random("x", {4, 3})}, Cl(), "fills");
}

// A sum whose output is one of its inputs: what the backward builder emits
// when it accumulates a shared gradient in place.
TEST_F(OpenClOps, SumMayWriteOneOfItsInputs) {
  ExpectSameOnBoth({Op("sum", {{"X", {"a", "b", "c"}}}, {{"Out", {"b"}}})},
                   {Random("a", {6}, -1, 1, 1), Random("b", {6}, -1, 1, 2), Random("c", {6}, -1, 1, 3)}, Cl(),
                   "sum in place");
}

// MLP-sized GEMMs and bias adds, larger than the check cases.
TEST_F(OpenClOps, LayerSizedMulAndBiasMatchTheCpu) {
  std::vector<OpDesc> ops = {Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"xw"}}}),
                             Op("elementwise_add", {{"X", {"xw"}}, {"Y", {"b"}}}, {{"Out", {"y"}}}, {{"axis", 1}})};
  auto registry = CurrentRegistry();
  std::vector<OpDesc> all = ops;
  for (auto it = ops.rbegin(); it != ops.rend(); ++it)
    for (auto& g : MakeGradOps(*it, {"x"})) {
      FillDefaultAttrs(*g, *registry);
      all.push_back(*g);
    }
  ExpectSameOnBoth(all,
                   {Random("x", {64, 100}, -1, 1, 1), Random("w", {100, 33}, -0.1, 0.1, 2), Random("b", {33}),
                    Random("y@GRAD", {64, 33}, -1, 1, 4)},
                   Cl(), "layer");
}

// An op without an OpenCL kernel runs on the CPU with copies of its inputs.
// A fresh output stays on the host (an OpenCL kernel reading it uploads
// it); an output whose var lived on the device goes back there.
TEST_F(OpenClOps, OpsWithoutAnOpenClKernelFallBackToTheCpu) {
  auto registry = CurrentRegistry();
  ASSERT_NE(registry->Find("exp"), nullptr);
  ASSERT_EQ(registry->FindKernel("exp", DeviceType::kOpenCL, DType::kFloat32), nullptr)
      << "pick another op without an OpenCL kernel for this test";
  std::vector<OpDesc> ops = {Op("exp", {{"X", {"x"}}}, {{"Out", {"e"}}}), Op("relu", {{"X", {"e"}}}, {{"Out", {"r"}}}),
                             Op("exp", {{"X", {"r"}}}, {{"Out", {"r"}}})};
  const std::vector<Input> in = {Random("x", {3, 4})};
  Result cl = RunOps(ops, in, Cl());
  ExpectSame(RunOps(ops, in, HostDevice()), cl, "fallback");
  EXPECT_EQ(cl.devices.at("e"), &HostDevice());
  EXPECT_EQ(cl.devices.at("r"), &Cl()) << "relu wrote r on the device, so the in-place exp puts it back there";
}

TEST_F(OpenClOps, GradientsCheckNumericallyOnTheDevice) {
  auto registry = CurrentRegistry();
  int checked = 0;
  for (const std::string& type : registry->OpTypes()) {
    if (!registry->FindKernel(type, DeviceType::kOpenCL, DType::kFloat64)) continue;
    if (registry->Get(type).grad_checks.empty()) continue;
    for (const GradCheckResult& r : CheckOpGradients(type, Cl())) {
      ++checked;
      EXPECT_TRUE(r.ok) << type << "/" << r.case_name << ": " << (r.failures.empty() ? "" : r.failures.front());
    }
  }
  EXPECT_GE(checked, 10);
}

}  // namespace
}  // namespace nabla
