// Tensor-valued attribute inputs (reshape's Shape, scale's ScaleTensor, ...):
// build-time inference leaves the dims they decide at -1, run-time
// inference and kernels use the values fed (a new value in the next run
// too), and the backward pass gives them no gradient.
#include <map>

#include "nabla/backward.h"
#include "nabla/executor.h"
#include "nabla/program_io.h"
#include "op_test_util.h"

namespace nabla::op_test {
namespace {

const char* const kShapes = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3, 4], dtype: float32}
      s: {shape: [2], dtype: int64}
      d0: {shape: [1], dtype: int32}
      d1: {shape: [1], dtype: int64}
      t: {shape: [2], dtype: int64}
      b: {shape: [1], dtype: int64}
      ax: {shape: [1], dtype: int32}
      n: {shape: [1], dtype: int64}
    ops:
      - {type: reshape, inputs: {X: [x], Shape: [s]}, outputs: {Out: [r]}, attrs: {shape: [24]}}
      - {type: concat, inputs: {X: [x, x], AxisTensor: [ax]}, outputs: {Out: [cc]}}
      - {type: reshape, inputs: {X: [x], ShapeTensor: [d0, d1]}, outputs: {Out: [rl]}}
      - {type: expand, inputs: {X: [r], ExpandTimes: [t]}, outputs: {Out: [e]}}
      - {type: slice, inputs: {Input: [x], StartsTensor: [b]}, outputs: {Out: [sl]}, attrs: {axes: [2], ends: [100]}}
      - {type: fill_constant, inputs: {ShapeTensor: [t]}, outputs: {Out: [f]}, attrs: {value: 2.0}}
      - {type: uniform_random, inputs: {ShapeTensorList: [n, n]}, outputs: {Out: [u]}, attrs: {shape: [1]}}
)";

Shape VarShape(const ProgramDesc& p, const std::string& name) { return p.Block(0)->FindVar(name)->GetShape(); }

TEST(TensorAttrs, BuildTimeDimsAreUnknownAndRunTimeUsesEachRunsValue) {
  LoadStandardPlugins();
  ProgramDesc p = ParseProgram(kShapes, "shapes.yaml");
  EXPECT_EQ(VarShape(p, "r"), (Shape{-1, -1}));
  EXPECT_EQ(VarShape(p, "rl"), (Shape{-1, -1}));
  EXPECT_EQ(VarShape(p, "e"), (Shape{-1, -1}));
  EXPECT_EQ(VarShape(p, "sl"), (Shape{2, 3, -1}));
  EXPECT_EQ(VarShape(p, "f"), (Shape{-1, -1}));
  EXPECT_EQ(VarShape(p, "cc"), (Shape{-1, -1, -1}));
  EXPECT_EQ(VarShape(p, "u"), (Shape{-1, -1}));

  Scope scope;
  HostTensor x{{2, 3, 4}, {}};
  for (int i = 0; i < 24; ++i) x.v.push_back(i);
  ToTensor(x, DType::kFloat32, scope.Var("x")->GetTensor());
  auto exec = CreateExecutor("sequential", HostDevice());
  // The second run feeds other values: a prepared op must infer again
  // (concat's kernel writes the shape inference gave Out).
  const std::vector<std::vector<double>> shapes = {{4, -1}, {3, 8}};
  const std::vector<Shape> want_r = {{4, 6}, {3, 8}};
  for (size_t run = 0; run < 2; ++run) {
    SCOPED_TRACE(run);
    ToTensor(HostTensor{{2}, shapes[run]}, DType::kInt64, scope.Var("s")->GetTensor());
    ToTensor(HostTensor{{1}, {run == 0 ? 6.0 : 0.0}}, DType::kInt32, scope.Var("d0")->GetTensor());
    ToTensor(HostTensor{{1}, {-1}}, DType::kInt64, scope.Var("d1")->GetTensor());
    ToTensor(HostTensor{{2}, {1, run + 1.0}}, DType::kInt64, scope.Var("t")->GetTensor());
    ToTensor(HostTensor{{1}, {run == 0 ? 1.0 : -1.0}}, DType::kInt64, scope.Var("b")->GetTensor());
    ToTensor(HostTensor{{1}, {run == 0 ? 0.0 : 2.0}}, DType::kInt32, scope.Var("ax")->GetTensor());
    ToTensor(HostTensor{{1}, {run + 2.0}}, DType::kInt64, scope.Var("n")->GetTensor());
    exec->Run(p, 0, scope);
    HostTensor r = FromTensor(scope.FindVar("r")->GetTensor());
    EXPECT_EQ(r.shape, want_r[run]);
    EXPECT_EQ(r.v, x.v);
    EXPECT_EQ(FromTensor(scope.FindVar("rl")->GetTensor()).shape, run == 0 ? (Shape{6, 4}) : (Shape{2, 12}));
    EXPECT_EQ(FromTensor(scope.FindVar("e")->GetTensor()).shape, run == 0 ? (Shape{4, 6}) : (Shape{3, 16}));
    HostTensor sl = FromTensor(scope.FindVar("sl")->GetTensor());
    EXPECT_EQ(sl.shape, run == 0 ? (Shape{2, 3, 3}) : (Shape{2, 3, 1}));
    EXPECT_EQ(sl.v[0], run == 0 ? 1.0 : 3.0);
    HostTensor f = FromTensor(scope.FindVar("f")->GetTensor());
    EXPECT_EQ(f.shape, run == 0 ? (Shape{1, 1}) : (Shape{1, 2}));
    EXPECT_EQ(f.v[0], 2.0);
    HostTensor u = FromTensor(scope.FindVar("u")->GetTensor());
    EXPECT_EQ(u.shape, run == 0 ? (Shape{2, 2}) : (Shape{3, 3}));
    for (double v : u.v) EXPECT_TRUE(v >= -1.0 && v < 1.0) << v;
    HostTensor cc = FromTensor(scope.FindVar("cc")->GetTensor());
    EXPECT_EQ(cc.shape, run == 0 ? (Shape{4, 3, 4}) : (Shape{2, 3, 8}));
    EXPECT_EQ(cc.v[4], run == 0 ? 4.0 : 0.0);
  }
}

const char* const kGrads = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float64}
      st: {shape: [1], dtype: float64}
      lo: {shape: [1], dtype: float64}
      hi: {shape: [1], dtype: float64}
      s: {shape: [2], dtype: int64}
      t: {shape: [2], dtype: int64}
      b: {shape: [1], dtype: int64}
    ops:
      - {type: scale, inputs: {X: [x], ScaleTensor: [st]}, outputs: {Out: [a]}, attrs: {scale: 5.0}}
      - {type: clip, inputs: {X: [a], Min: [lo], Max: [hi]}, outputs: {Out: [c]}, attrs: {min: -100.0, max: 100.0}}
      - {type: reshape, inputs: {X: [c], Shape: [s]}, outputs: {Out: [r]}}
      - {type: expand, inputs: {X: [r], ExpandTimes: [t]}, outputs: {Out: [e]}}
      - {type: slice, inputs: {Input: [e], StartsTensor: [b]}, outputs: {Out: [sl]}, attrs: {axes: [0], ends: [6]}}
      - {type: reduce_sum, inputs: {X: [sl]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
)";

TEST(TensorAttrs, GetNoGradientAndGradOpsReadThem) {
  LoadStandardPlugins();
  ProgramDesc p = ParseProgram(kGrads, "grads.yaml");
  AppendBackward(p, "loss", {}, {});
  const BlockDesc& block = *p.Block(0);
  for (const char* v : {"st", "lo", "hi", "s", "t", "b"}) EXPECT_EQ(block.FindVar(GradVarName(v)), nullptr) << v;
  std::map<std::string, std::vector<std::string>> read;
  for (const auto& op : block.AllOps()) {
    for (const auto& [slot, args] : op->Outputs()) {
      for (const char* tensor_attr : {"ScaleTensor", "Min", "Max", "Shape", "ExpandTimes", "StartsTensor"})
        EXPECT_NE(slot, GradVarName(tensor_attr)) << op->Type();
      for (const auto& a : args)
        for (const char* v : {"st", "lo", "hi", "s", "t", "b"}) EXPECT_NE(a, GradVarName(v)) << op->Type();
    }
    // Skip the forward scale: scale_grad is a scale op too.
    if (op->Type() == "scale" && op->Input("X")[0] == "x") continue;
    for (const auto& [slot, args] : op->Inputs()) read[op->Type() + "." + slot] = args;
  }
  // The grad ops that need the value read the same tensor.
  EXPECT_EQ(read["scale.ScaleTensor"], std::vector<std::string>{"st"});
  EXPECT_EQ(read["clip_grad.Min"], std::vector<std::string>{"lo"});
  EXPECT_EQ(read["clip_grad.Max"], std::vector<std::string>{"hi"});
  EXPECT_EQ(read["expand_grad.ExpandTimes"], std::vector<std::string>{"t"});
  EXPECT_EQ(read["slice_grad.StartsTensor"], std::vector<std::string>{"b"});

  Scope scope;
  ToTensor(HostTensor{{2, 3}, {0.1, -0.2, 0.3, 0.4, -0.5, 0.6}}, DType::kFloat64, scope.Var("x")->GetTensor());
  ToTensor(HostTensor{{1}, {2.0}}, DType::kFloat64, scope.Var("st")->GetTensor());
  ToTensor(HostTensor{{1}, {-0.5}}, DType::kFloat64, scope.Var("lo")->GetTensor());
  ToTensor(HostTensor{{1}, {0.7}}, DType::kFloat64, scope.Var("hi")->GetTensor());
  ToTensor(HostTensor{{2}, {3, 2}}, DType::kInt64, scope.Var("s")->GetTensor());
  ToTensor(HostTensor{{2}, {2, 1}}, DType::kInt64, scope.Var("t")->GetTensor());
  ToTensor(HostTensor{{1}, {-2}}, DType::kInt64, scope.Var("b")->GetTensor());
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  // a = 2x = (0.2, -0.4, 0.6, 0.8, -1, 1.2); c = a clipped to [-0.5, 0.7],
  // whose gradient passes where -0.5 < a < 0.7 (the first three). r = c as
  // rows (c0 c1) (c2 c3) (c4 c5); e tiles them twice along dim 0; sl = e[4:6]
  // = rows 1 and 2 of r. loss = c2 + c3 + c4 + c5 = 0.6 + 0.7 - 0.5 + 0.7.
  EXPECT_NEAR(FromTensor(scope.FindVar("loss")->GetTensor()).v.at(0), 1.5, 1e-12);
  HostTensor g = FromTensor(scope.FindVar("x@GRAD")->GetTensor());
  EXPECT_EQ(g.shape, (Shape{2, 3}));
  EXPECT_EQ(g.v, (std::vector<double>{0, 0, 2, 0, 0, 0}));
}

// dropout's Seed input fixes the mask (Paddle: before fix_seed and seed):
// two dropouts given the same Seed value drop the same elements, where
// without it each op derives its own seed.
TEST(TensorAttrs, DropoutSeedFixesTheMask) {
  LoadStandardPlugins();
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [64], dtype: float32}
      sd: {shape: [1], dtype: int32}
    ops:
      - {type: dropout, inputs: {X: [x], Seed: [sd]}, outputs: {Out: [a], Mask: [ma]}}
      - {type: dropout, inputs: {X: [x], Seed: [sd]}, outputs: {Out: [b], Mask: [mb]}}
      - {type: dropout, inputs: {X: [x]}, outputs: {Out: [c], Mask: [mc]}}
)",
                               "dropout.yaml");
  Scope scope;
  ToTensor(HostTensor{{64}, std::vector<double>(64, 1.0)}, DType::kFloat32, scope.Var("x")->GetTensor());
  ToTensor(HostTensor{{1}, {1234}}, DType::kInt32, scope.Var("sd")->GetTensor());
  CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
  const HostTensor ma = FromTensor(scope.FindVar("ma")->GetTensor());
  EXPECT_EQ(ma.v, FromTensor(scope.FindVar("mb")->GetTensor()).v);
  EXPECT_NE(ma.v, FromTensor(scope.FindVar("mc")->GetTensor()).v);
  // The same Seed value always gives the same mask: another run, another
  // scope.
  Scope again;
  ToTensor(HostTensor{{64}, std::vector<double>(64, 1.0)}, DType::kFloat32, again.Var("x")->GetTensor());
  ToTensor(HostTensor{{1}, {1234}}, DType::kInt32, again.Var("sd")->GetTensor());
  ExecutorOptions options;
  options.seed = 99;
  CreateExecutor("sequential", HostDevice(), options)->Run(p, 0, again);
  EXPECT_EQ(ma.v, FromTensor(again.FindVar("ma")->GetTensor()).v);
}

}  // namespace
}  // namespace nabla::op_test
