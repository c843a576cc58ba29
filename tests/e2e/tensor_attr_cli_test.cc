// Tensor-valued attribute inputs through `nabla exec`: a bad value or dtype
// fed to one (a float Shape, a 2-D Shape, a depth of 0, sections that do not
// sum to the axis) is one error line naming the op, the slot and the value,
// never a crash; an out-of-range slice bound is clamped as Paddle does.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

using testing_cli::Quote;
using testing_cli::Result;

struct Feed {
  std::string name;
  DType dtype;
  Shape shape;
  std::vector<double> values;
};

class TensorAttrCliTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  static void Fill(const Feed& f, Tensor& t) {
    void* p = t.Allocate(HostDevice(), f.dtype, f.shape);
    for (size_t i = 0; i < f.values.size(); ++i) {
      switch (f.dtype) {
        case DType::kFloat32:
          static_cast<float*>(p)[i] = static_cast<float>(f.values[i]);
          break;
        case DType::kInt32:
          static_cast<int32_t*>(p)[i] = static_cast<int32_t>(f.values[i]);
          break;
        case DType::kInt64:
          static_cast<int64_t*>(p)[i] = static_cast<int64_t>(f.values[i]);
          break;
        default:
          FAIL() << "unused dtype";
      }
    }
  }

  // `nabla exec` of a program of `ops` (YAML list items) over `feeds`, each
  // declared with its dtype and rank (dims unknown), fetching `fetch`.
  std::string ExecArgs(const std::string& ops, const std::vector<Feed>& feeds, const std::string& fetch) {
    std::string yaml = "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n";
    std::string args;
    for (const Feed& f : feeds) {
      std::string dims;
      for (size_t i = 0; i < f.shape.size(); ++i) dims += i ? ", -1" : "-1";
      yaml += "      " + f.name + ": {shape: [" + dims + "], dtype: " + DTypeName(f.dtype) + "}\n";
      Tensor t;
      Fill(f, t);
      WriteNpy(Path(f.name + ".npy"), t);
      args += " --feed " + Quote(f.name + "=" + Path(f.name + ".npy"));
    }
    yaml += "    ops:\n" + ops;
    std::ofstream(Path("p.yaml")) << yaml;
    return "exec " + Quote(Path("p.yaml")) + args + " --fetch " + fetch;
  }

  Result Nabla(const std::string& args) const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, "", Path("captured"));
  }
  // A bad value a tensor holds at run time is the computation's failure:
  // one line, exit 1 (a bad attribute in the program file is exit 2).
  void ExpectBadValue(const std::string& args, const std::vector<std::string>& fragments) const {
    testing_cli::ExpectOneLineError(Nabla(args), args, fragments, 1);
  }

  test_util::TempDir dir_{"nabla_tensor_attr_cli_test"};
};

const Feed kX{"x", DType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6}};
const char* const kReshapeS = "      - {type: reshape, inputs: {X: [x], Shape: [s]}, outputs: {Out: [y]}}\n";

TEST_F(TensorAttrCliTest, ReshapeRejectsAFloatShape) {
  ExpectBadValue(ExecArgs(kReshapeS, {kX, {"s", DType::kFloat32, {2}, {3, 2}}}, "y"),
                 {"p.yaml", "reshape", "input Shape (var 's')", "int32 or int64", "float32[2]"});
}

TEST_F(TensorAttrCliTest, ReshapeRejectsAShapeOfRank2) {
  ExpectBadValue(ExecArgs(kReshapeS, {kX, {"s", DType::kInt64, {1, 2}, {3, 2}}}, "y"),
                 {"reshape", "input Shape", "rank 1", "int64[1, 2]"});
}

TEST_F(TensorAttrCliTest, ReshapeRejectsANegativeDim) {
  ExpectBadValue(ExecArgs(kReshapeS, {kX, {"s", DType::kInt64, {2}, {2, -3}}}, "y"),
                 {"reshape", "input Shape", ">= -1", "[2, -3]"});
}

TEST_F(TensorAttrCliTest, ReshapeRejectsAShapeTensorOfTwoElements) {
  ExpectBadValue(ExecArgs("      - {type: reshape, inputs: {X: [x], ShapeTensor: [a, b]}, outputs: {Out: [y]}}\n",
                          {kX, {"a", DType::kInt32, {1}, {3}}, {"b", DType::kInt64, {2}, {2, 1}}}, "y"),
                 {"reshape", "input ShapeTensor[1] (var 'b')", "one element", "int64[2]"});
}

TEST_F(TensorAttrCliTest, OneHotRejectsADepthOfZero) {
  ExpectBadValue(
      ExecArgs(
          "      - {type: one_hot, inputs: {X: [ids], depth_tensor: [d]}, outputs: {Out: [y]}, attrs: {depth: 3}}\n",
          {{"ids", DType::kInt64, {2, 1}, {0, 1}}, {"d", DType::kInt32, {1}, {0}}}, "y"),
      {"one_hot", "input depth_tensor", ">= 1", "received 0"});
}

TEST_F(TensorAttrCliTest, SplitRejectsSectionsThatDoNotSumToTheAxis) {
  ExpectBadValue(ExecArgs("      - {type: split, inputs: {X: [x], SectionsTensorList: [p, q]}, outputs: {Out: [o1, "
                          "o2]}, attrs: {axis: 1}}\n",
                          {kX, {"p", DType::kInt64, {1}, {1}}, {"q", DType::kInt32, {1}, {1}}}, "o1"),
                 {"split", "input SectionsTensorList", "[1, 1]", "sum"});
}

TEST_F(TensorAttrCliTest, SplitRejectsAnAxisOutOfRange) {
  ExpectBadValue(ExecArgs("      - {type: split, inputs: {X: [x], AxisTensor: [ax]}, outputs: {Out: [o1, o2]}, "
                          "attrs: {num: 2}}\n",
                          {kX, {"ax", DType::kInt64, {1}, {5}}}, "o1"),
                 {"split", "input AxisTensor", "[-2, 2)", "received 5"});
}

TEST_F(TensorAttrCliTest, ScaleRejectsAnIntegerScaleTensor) {
  ExpectBadValue(ExecArgs("      - {type: scale, inputs: {X: [x], ScaleTensor: [st]}, outputs: {Out: [y]}}\n",
                          {kX, {"st", DType::kInt64, {1}, {2}}}, "y"),
                 {"scale", "input ScaleTensor (var 'st')", "float32 or float64", "int64[1]"});
}

TEST_F(TensorAttrCliTest, FillConstantRejectsANegativeDim) {
  ExpectBadValue(ExecArgs("      - {type: fill_constant, inputs: {ShapeTensor: [s]}, outputs: {Out: [y]}}\n",
                          {{"s", DType::kInt32, {2}, {2, -1}}}, "y"),
                 {"fill_constant", "input ShapeTensor", "[2, -1]", ">= 0"});
}

// The kernel's message names its op; the executor puts the op's position
// in front of that name.
TEST_F(TensorAttrCliTest, FillConstantRejectsAValueTensorOfTwoElementsAtItsPosition) {
  ExpectBadValue(ExecArgs("      - {type: fill_constant, inputs: {ValueTensor: [v]}, outputs: {Out: [y]}, attrs: "
                          "{shape: [2]}}\n",
                          {{"v", DType::kFloat32, {2}, {1, 2}}}, "y"),
                 {"p.yaml:8:9: op 'fill_constant': input ValueTensor (var 'v')", "one element", "float32[2]"});
}

// An integer ValueTensor is read exactly (Paddle reads it in Out's dtype),
// before str_value and value.
TEST_F(TensorAttrCliTest, FillConstantTakesAnInt64ValueTensorExactly) {
  Result r = Nabla(ExecArgs("      - {type: fill_constant, inputs: {ValueTensor: [v]}, outputs: {Out: [y]}, attrs: "
                            "{shape: [3], dtype: int64, value: 7.0, str_value: \"5\"}}\n",
                            {{"v", DType::kInt64, {1}, {123456789012.0}}}, "y") +
                   " --out " + Quote(Path("out")));
  ASSERT_EQ(r.code, 0) << r.err;
  Tensor y = ReadNpy(Path("out/y.npy"), HostDevice());
  EXPECT_EQ(std::vector<int64_t>(y.Data<int64_t>(), y.Data<int64_t>() + 3),
            (std::vector<int64_t>{123456789012, 123456789012, 123456789012}));
}

TEST_F(TensorAttrCliTest, SliceClampsBoundsFromTensorsAsPaddleDoes) {
  Result r = Nabla(ExecArgs("      - {type: slice, inputs: {Input: [x], StartsTensor: [b], EndsTensor: [e]}, "
                            "outputs: {Out: [y]}, attrs: {axes: [1]}}\n",
                            {kX, {"b", DType::kInt64, {1}, {-100}}, {"e", DType::kInt32, {1}, {2}}}, "y") +
                   " --out " + Quote(Path("out")));
  ASSERT_EQ(r.code, 0) << r.err;
  Tensor y = ReadNpy(Path("out/y.npy"), HostDevice());
  EXPECT_EQ(y.GetShape(), (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(y.Data<float>(), y.Data<float>() + 4), (std::vector<float>{1, 2, 4, 5}));
}

}  // namespace
}  // namespace nabla
