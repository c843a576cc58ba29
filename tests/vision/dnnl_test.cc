// oneDNN's float32 conv2d and pool2d, forward and grad ops, against the
// reference kernels (NABLA_DNNL=0: im2col + GEMM, loops) on every GradCheck
// case the ops register (strides, 4-value paddings, dilation, groups,
// depthwise, SAME/VALID, ceil_mode, exclusive, adaptive, global) and on
// layer-sized cases where oneDNN picks its blocked-layout kernels. The
// float64 gradient checks cover the reference; this covers the glue.
#include <gtest/gtest.h>

#include <cstdlib>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

using Ints = std::vector<int>;

class DnnlAgainstReference : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }
  void SetUp() override {
#ifndef NABLA_TEST_WITH_DNNL
    GTEST_SKIP() << "built without oneDNN: float32 runs the reference kernels already";
#endif
  }
  static void Compare(const std::string& type, const GradCheckSpec& spec) {
    SCOPED_TRACE(type + "/" + spec.name);
    const op_case::Case c = op_case::BuildCase(type, spec);
    setenv("NABLA_DNNL", "0", 1);
    const op_case::Result reference = op_case::RunOps(c.ops, c.inputs, HostDevice());
    unsetenv("NABLA_DNNL");
    op_case::ExpectSame(reference, op_case::RunOps(c.ops, c.inputs, HostDevice()), type + "/" + spec.name);
  }
};

GradCheckSpec Case(std::string name, std::vector<std::pair<std::string, Shape>> inputs, AttributeMap attrs,
                   std::string out) {
  GradCheckSpec s;
  s.name = std::move(name);
  for (auto& [slot, shape] : inputs) {
    GradCheckInput in;
    in.slot = slot;
    in.shape = shape;
    s.inputs.push_back(in);
  }
  s.outputs = {{out, 1}};
  s.attrs = std::move(attrs);
  return s;
}

TEST_F(DnnlAgainstReference, RegisteredCases) {
  int cases = 0;
  for (const char* type : {"conv2d", "pool2d"})
    for (const GradCheckSpec& spec : CurrentRegistry()->Get(type).grad_checks) {
      Compare(type, spec);
      ++cases;
    }
  EXPECT_GE(cases, 10);
}

TEST_F(DnnlAgainstReference, LayerSizedConvolutions) {
  Compare("conv2d", Case("blocked_pad1", {{"Input", {4, 16, 10, 10}}, {"Filter", {32, 16, 3, 3}}},
                         {{"paddings", Ints{1, 1}}}, "Output"));
  Compare("conv2d", Case("first_layer", {{"Input", {4, 1, 12, 12}}, {"Filter", {16, 1, 3, 3}}},
                         {{"paddings", Ints{1, 1}}}, "Output"));
  Compare("conv2d", Case("groups2_stride2_asym", {{"Input", {2, 32, 9, 9}}, {"Filter", {32, 16, 3, 3}}},
                         {{"groups", 2}, {"strides", Ints{2, 2}}, {"paddings", Ints{0, 1, 1, 2}}}, "Output"));
  Compare("conv2d", Case("depthwise_dilation2", {{"Input", {2, 32, 9, 9}}, {"Filter", {32, 1, 3, 3}}},
                         {{"groups", 32}, {"dilations", Ints{2, 2}}, {"paddings", Ints{2, 2}}}, "Output"));
}

TEST_F(DnnlAgainstReference, LayerSizedPooling) {
  const std::string max = "max", avg = "avg";
  Compare("pool2d", Case("max_2x2", {{"X", {4, 32, 8, 8}}},
                         {{"pooling_type", max}, {"ksize", Ints{2, 2}}, {"strides", Ints{2, 2}}}, "Out"));
  Compare("pool2d", Case("max_3x3_pad_ceil", {{"X", {2, 16, 9, 9}}},
                         {{"pooling_type", max},
                          {"ksize", Ints{3, 3}},
                          {"strides", Ints{2, 2}},
                          {"paddings", Ints{1, 1}},
                          {"ceil_mode", true}},
                         "Out"));
  Compare("pool2d", Case("avg_exclusive_pad_ceil", {{"X", {2, 16, 9, 9}}},
                         {{"pooling_type", avg},
                          {"ksize", Ints{3, 3}},
                          {"strides", Ints{2, 2}},
                          {"paddings", Ints{1, 1}},
                          {"ceil_mode", true}},
                         "Out"));
  Compare("pool2d", Case("avg_inclusive", {{"X", {2, 16, 9, 9}}},
                         {{"pooling_type", avg},
                          {"ksize", Ints{3, 3}},
                          {"strides", Ints{2, 2}},
                          {"paddings", Ints{1, 1}},
                          {"exclusive", false}},
                         "Out"));
  // One more window than the floor formula, overhanging the padding.
  Compare("pool2d", Case("avg_inclusive_ceil", {{"X", {2, 16, 10, 10}}},
                         {{"pooling_type", avg},
                          {"ksize", Ints{3, 3}},
                          {"strides", Ints{2, 2}},
                          {"paddings", Ints{1, 1}},
                          {"exclusive", false},
                          {"ceil_mode", true}},
                         "Out"));
  Compare("pool2d", Case("max_ceil", {{"X", {2, 16, 10, 10}}},
                         {{"pooling_type", max},
                          {"ksize", Ints{3, 3}},
                          {"strides", Ints{2, 2}},
                          {"paddings", Ints{1, 1}},
                          {"ceil_mode", true}},
                         "Out"));
  Compare("pool2d",
          Case("global_max", {{"X", {2, 16, 5, 7}}}, {{"pooling_type", max}, {"global_pooling", true}}, "Out"));
}

}  // namespace
}  // namespace nabla
