// Control flow end to end: programs with while and conditional_block go
// through the backward builder and both executors; gradients are pinned on
// hand-derived values and checked against float64 central differences of the
// whole program run forward with perturbed feeds.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

struct Feed {
  std::string name;
  Shape shape;
  std::vector<double> values;
  DType dtype = DType::kFloat64;
};

Tensor MakeTensor(const Feed& f) {
  Tensor t;
  int64_t n = NumElements(f.shape);
  EXPECT_EQ(n, static_cast<int64_t>(f.values.size())) << f.name;
  switch (f.dtype) {
    case DType::kFloat64: {
      double* d = t.Allocate<double>(HostDevice(), f.shape);
      for (int64_t i = 0; i < n; ++i) d[i] = f.values[i];
      break;
    }
    case DType::kFloat32: {
      float* d = t.Allocate<float>(HostDevice(), f.shape);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(f.values[i]);
      break;
    }
    case DType::kInt64: {
      int64_t* d = t.Allocate<int64_t>(HostDevice(), f.shape);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int64_t>(f.values[i]);
      break;
    }
    case DType::kBool: {
      bool* d = t.Allocate<bool>(HostDevice(), f.shape);
      for (int64_t i = 0; i < n; ++i) d[i] = f.values[i] != 0;
      break;
    }
    default:
      ADD_FAILURE() << "unsupported feed dtype";
  }
  return t;
}

std::vector<double> Values(const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.Numel()));
  for (int64_t i = 0; i < t.Numel(); ++i)
    v[i] = t.GetDType() == DType::kFloat64 ? t.Data<double>()[i] : t.Data<float>()[i];
  return v;
}

class ControlFlowTest : public ::testing::TestWithParam<std::string> {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }

  // Runs block 0 once and returns the fetched tensors.
  std::map<std::string, Tensor> Run(const ProgramDesc& program, const std::vector<Feed>& feeds,
                                    const std::vector<std::string>& fetches, ExecutorOptions options = {}) {
    auto executor = CreateExecutor(GetParam(), HostDevice(), options);
    Scope scope;
    for (const auto& f : feeds) scope.Var(f.name)->GetTensor() = MakeTensor(f);
    executor->Run(program, 0, scope);
    std::map<std::string, Tensor> out;
    for (const auto& name : fetches) {
      const Variable* v = scope.FindVar(name);
      EXPECT_TRUE(v != nullptr && v->GetTensor().IsInitialized()) << "no value for " << name;
      if (v != nullptr) {
        Tensor copy;
        if (v->GetTensor().IsInitialized()) copy.CopyFrom(v->GetTensor(), HostDevice());
        out.emplace(name, copy);
      }
    }
    return out;
  }

  double Loss(const ProgramDesc& program, const std::vector<Feed>& feeds, const std::string& loss) {
    return Values(Run(program, feeds, {loss}).at(loss)).at(0);
  }

  // Gradients from AppendBackward against float64 central differences of
  // the forward program, for every element of every feed in `wrt`.
  void CheckGradients(const std::string& yaml, const std::vector<Feed>& feeds, const std::string& loss,
                      const std::vector<std::string>& wrt, double delta = 1e-6) {
    ProgramDesc forward = ParseProgram(yaml, "check.yaml");
    ProgramDesc program = forward;
    AppendBackward(program, loss, {}, {});
    std::vector<std::string> grads;
    for (const auto& w : wrt) grads.push_back(GradVarName(w));
    auto got = Run(program, feeds, grads);
    for (const auto& w : wrt) {
      size_t fi = 0;
      while (feeds[fi].name != w) ++fi;
      std::vector<double> analytic = Values(got.at(GradVarName(w)));
      ASSERT_EQ(analytic.size(), feeds[fi].values.size()) << w;
      for (size_t k = 0; k < analytic.size(); ++k) {
        std::vector<Feed> plus = feeds, minus = feeds;
        plus[fi].values[k] += delta;
        minus[fi].values[k] -= delta;
        double numeric = (Loss(forward, plus, loss) - Loss(forward, minus, loss)) / (2 * delta);
        double scale = std::max(1.0, std::abs(numeric));
        EXPECT_NEAR(analytic[k], numeric, 1e-5 * scale) << w << "[" << k << "] on " << GetParam();
      }
    }
  }
};

// x = 1, i = 1 (both trainable); while i < 3: x = x + i; i = i + 1;
// loss = mean(x). x_final = x + 2 i + 1, so x@GRAD = 1 and i@GRAD = 2.
const char* kLoopCarried = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [1], dtype: float64}
      i: {shape: [1], dtype: float64}
      limit: {shape: [1], dtype: float64, stop_gradient: true}
      scopes: {type: step_scopes}
    ops:
      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [cond]}}
      - type: while
        inputs: {X: [x, i, limit], Condition: [cond]}
        outputs: {Out: [x, i, cond], StepScopes: [scopes]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [x]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [i]}, outputs: {Out: [x_next]}}
      - {type: assign, inputs: {X: [x_next]}, outputs: {Out: [x]}}
      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i_next]}, attrs: {step: 1.0}}
      - {type: assign, inputs: {X: [i_next]}, outputs: {Out: [i]}}
      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [cond]}}
)";

std::vector<Feed> LoopFeeds() { return {{"x", {1}, {1.0}}, {"i", {1}, {1.0}}, {"limit", {1}, {3.0}}}; }
// Away from the integers, where a small change of i changes the number of
// iterations (the loss is piecewise smooth in i).
std::vector<Feed> NumericLoopFeeds() { return {{"x", {1}, {0.7}}, {"i", {1}, {1.25}}, {"limit", {1}, {3.0}}}; }

std::vector<std::string> OpTypes(const BlockDesc& block) {
  std::vector<std::string> t;
  for (const auto& op : block.AllOps()) t.push_back(op->Type());
  return t;
}

TEST_P(ControlFlowTest, LoopCarriedGradients) {
  ProgramDesc program = ParseProgram(kLoopCarried, "loop.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, LoopFeeds(), {"loss", "x@GRAD", "i@GRAD"});
  EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], 4.0);  // 1 + 1 + 2
  EXPECT_DOUBLE_EQ(Values(out.at("x@GRAD"))[0], 1.0);
  EXPECT_DOUBLE_EQ(Values(out.at("i@GRAD"))[0], 2.0);
}

TEST_P(ControlFlowTest, LoopCarriedNumeric) { CheckGradients(kLoopCarried, NumericLoopFeeds(), "loss", {"x", "i"}); }

TEST_P(ControlFlowTest, WhileBackwardStructure) {
  ProgramDesc program = ParseProgram(kLoopCarried, "loop.yaml");
  AppendBackward(program, "loss", {}, {});
  ASSERT_EQ(program.Size(), 3u);
  EXPECT_EQ(OpTypes(*program.Root()), (std::vector<std::string>{"less_than", "while", "mean", "fill_constant",
                                                                "mean_grad", "fill_zeros_like", "while_grad"}));
  const OpDesc& zeros = *program.Root()->Op(5);
  EXPECT_EQ(zeros.Input("X"), std::vector<std::string>{"i"});
  EXPECT_EQ(zeros.Output("Out"), std::vector<std::string>{"i@GRAD"});
  const OpDesc& wg = *program.Root()->Op(6);
  EXPECT_EQ(wg.Input("X"), (std::vector<std::string>{"x", "i", "limit"}));
  EXPECT_EQ(wg.Input("Out"), (std::vector<std::string>{"x", "i", "cond"}));
  EXPECT_EQ(wg.Input("Out@GRAD"), (std::vector<std::string>{"x@GRAD", "i@GRAD", "@EMPTY@"}));
  EXPECT_EQ(wg.Input("StepScopes"), std::vector<std::string>{"scopes"});
  EXPECT_EQ(wg.Output("X@GRAD"), (std::vector<std::string>{"x@GRAD", "i@GRAD", "@EMPTY@"}));
  EXPECT_FALSE(wg.HasOutput("Out@GRAD"));
  EXPECT_EQ(wg.Attr<BlockRef>("sub_block").idx, 2);

  const BlockDesc& grad = *program.Block(2);
  EXPECT_EQ(grad.ParentIdx(), 1);
  EXPECT_EQ(OpTypes(grad),
            (std::vector<std::string>{"assign", "increment_grad", "assign", "elementwise_add_grad", "sum"}));
  EXPECT_EQ(grad.Op(0)->Input("X"), std::vector<std::string>{"i@GRAD"});
  EXPECT_EQ(grad.Op(0)->Output("Out"), std::vector<std::string>{"i_next@GRAD"});
  EXPECT_EQ(grad.Op(1)->Output("X@GRAD"), std::vector<std::string>{"i@GRAD@RENAME@0"});
  EXPECT_EQ(grad.Op(2)->Input("X"), std::vector<std::string>{"x@GRAD"});
  EXPECT_EQ(grad.Op(3)->Output("X@GRAD"), std::vector<std::string>{"x@GRAD"});
  EXPECT_EQ(grad.Op(3)->Output("Y@GRAD"), std::vector<std::string>{"i@GRAD@RENAME@1"});
  EXPECT_EQ(grad.Op(4)->Input("X"), (std::vector<std::string>{"i@GRAD@RENAME@0", "i@GRAD@RENAME@1"}));
  EXPECT_EQ(grad.Op(4)->Output("Out"), std::vector<std::string>{"i@GRAD"});
  // Inner-only gradients live in the grad block; outer ones in block 0.
  EXPECT_TRUE(grad.HasVar("x_next@GRAD"));
  EXPECT_FALSE(grad.HasVar("x@GRAD"));
  EXPECT_TRUE(program.Root()->HasVar("x@GRAD"));
  // The result round-trips through YAML and verifies.
  ProgramDesc again = ParseProgram(ProgramToYaml(program), "again.yaml");
  EXPECT_EQ(OpTypes(*again.Block(2)), OpTypes(grad));
}

TEST_P(ControlFlowTest, ZeroIterationsPassGradientsThrough) {
  ProgramDesc program = ParseProgram(kLoopCarried, "loop.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, {{"x", {1}, {5.0}}, {"i", {1}, {7.0}}, {"limit", {1}, {3.0}}}, {"loss", "x@GRAD", "i@GRAD"});
  EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], 5.0);
  EXPECT_DOUBLE_EQ(Values(out.at("x@GRAD"))[0], 1.0);
  EXPECT_DOUBLE_EQ(Values(out.at("i@GRAD"))[0], 0.0);
}

// A carried var also used before the loop: its gradient sums the loop's
// (renamed apart from the gradient of the final value) and the other use.
TEST_P(ControlFlowTest, CarriedVarAlsoUsedOutsideTheLoop) {
  std::string yaml = kLoopCarried;
  yaml.replace(yaml.find("      - {type: mean, inputs: {X: [x]}, outputs: {Out: [loss]}}"),
               std::strlen("      - {type: mean, inputs: {X: [x]}, outputs: {Out: [loss]}}"),
               "      - {type: elementwise_mul, inputs: {X: [x], Y: [x0]}, outputs: {Out: [xx]}}\n"
               "      - {type: mean, inputs: {X: [xx]}, outputs: {Out: [loss]}}");
  yaml.replace(
      yaml.find("      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [cond]}}\n      - type: while"),
      std::strlen("      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [cond]}}"),
      "      - {type: scale, inputs: {X: [x]}, outputs: {Out: [x0]}, attrs: {scale: 3.0}}\n"
      "      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [cond]}}");
  // loss = (x + 2i + 1) * 3x: d/dx = 3x + 3(x + 2i + 1) = 3 + 12 = 15 at x = i = 1.
  ProgramDesc program = ParseProgram(yaml, "outside.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, LoopFeeds(), {"x@GRAD", "i@GRAD"});
  EXPECT_DOUBLE_EQ(Values(out.at("x@GRAD"))[0], 15.0);
  EXPECT_DOUBLE_EQ(Values(out.at("i@GRAD"))[0], 6.0);
  CheckGradients(yaml, NumericLoopFeeds(), "loss", {"x", "i"});
}

// A matrix recurrence with a parameter read every step, a tensor array
// written every step and read after the loop, and an int counter.
const char* kMatrixLoop = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      h: {shape: [2, 3], dtype: float64}
      w: {shape: [3, 3], dtype: float64}
      b: {shape: [3], dtype: float64}
      i: {shape: [1], dtype: int64}
      n: {shape: [1], dtype: int64}
      hs: {shape: [2, 3], dtype: float64, type: tensor_array}
      scopes: {type: step_scopes}
    ops:
      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [cond]}}
      - type: while
        inputs: {X: [h, w, b, i, n], Condition: [cond]}
        outputs: {Out: [h, i, cond, hs], StepScopes: [scopes]}
        attrs: {sub_block: 1}
      - {type: fill_constant, outputs: {Out: [one]}, attrs: {shape: [1], dtype: int64, value: 1.0}}
      - {type: read_from_array, inputs: {X: [hs], I: [one]}, outputs: {Out: [h1]}}
      - {type: elementwise_mul, inputs: {X: [h], Y: [h1]}, outputs: {Out: [prod]}}
      - {type: reduce_sum, inputs: {X: [prod]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
  - idx: 1
    parent: 0
    ops:
      - {type: mul, inputs: {X: [h], Y: [w]}, outputs: {Out: [hw]}}
      - {type: elementwise_add, inputs: {X: [hw], Y: [b]}, outputs: {Out: [pre]}}
      - {type: square, inputs: {X: [pre]}, outputs: {Out: [sq]}}
      - {type: scale, inputs: {X: [sq]}, outputs: {Out: [h_next]}, attrs: {scale: 0.5, bias: 0.1}}
      - {type: write_to_array, inputs: {X: [h_next], I: [i]}, outputs: {Out: [hs]}}
      - {type: assign, inputs: {X: [h_next]}, outputs: {Out: [h]}}
      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i]}}
      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [cond]}}
)";

std::vector<Feed> MatrixFeeds() {
  return {{"h", {2, 3}, {0.1, -0.2, 0.3, 0.4, 0.05, -0.3}},
          {"w", {3, 3}, {0.5, -0.1, 0.2, 0.3, 0.6, -0.4, -0.2, 0.1, 0.7}},
          {"b", {3}, {0.05, -0.1, 0.2}},
          {"i", {1}, {0.0}, DType::kInt64},
          {"n", {1}, {3.0}, DType::kInt64}};
}

TEST_P(ControlFlowTest, MatrixLoopWithTensorArrayNumeric) {
  CheckGradients(kMatrixLoop, MatrixFeeds(), "loss", {"h", "w", "b"});
}

// Nested loops: for j < 2: for k < 3: x = x * a, so x_final = x a^6.
const char* kNested = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64}
      a: {shape: [2], dtype: float64}
      j: {shape: [1], dtype: int64}
      jn: {shape: [1], dtype: int64}
      kn: {shape: [1], dtype: int64}
      outer_scopes: {type: step_scopes}
    ops:
      - {type: less_than, inputs: {X: [j], Y: [jn]}, outputs: {Out: [jc]}}
      - type: while
        inputs: {X: [x, a, j, jn, kn], Condition: [jc]}
        outputs: {Out: [x, j, jc], StepScopes: [outer_scopes]}
        attrs: {sub_block: 1}
      - {type: reduce_sum, inputs: {X: [x]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
  - idx: 1
    parent: 0
    vars:
      k: {shape: [1], dtype: int64}
      inner_scopes: {type: step_scopes}
    ops:
      - {type: fill_constant, outputs: {Out: [k]}, attrs: {shape: [1], dtype: int64, value: 0.0}}
      - {type: less_than, inputs: {X: [k], Y: [kn]}, outputs: {Out: [kc]}}
      - type: while
        inputs: {X: [x, a, k, kn], Condition: [kc]}
        outputs: {Out: [x, k, kc], StepScopes: [inner_scopes]}
        attrs: {sub_block: 2}
      - {type: increment, inputs: {X: [j]}, outputs: {Out: [j]}}
      - {type: less_than, inputs: {X: [j], Y: [jn]}, outputs: {Out: [jc]}}
  - idx: 2
    parent: 1
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [a]}, outputs: {Out: [xa]}}
      - {type: assign, inputs: {X: [xa]}, outputs: {Out: [x]}}
      - {type: increment, inputs: {X: [k]}, outputs: {Out: [k]}}
      - {type: less_than, inputs: {X: [k], Y: [kn]}, outputs: {Out: [kc]}}
)";

std::vector<Feed> NestedFeeds() {
  return {{"x", {2}, {0.7, -1.2}},
          {"a", {2}, {1.1, 0.9}},
          {"j", {1}, {0.0}, DType::kInt64},
          {"jn", {1}, {2.0}, DType::kInt64},
          {"kn", {1}, {3.0}, DType::kInt64}};
}

TEST_P(ControlFlowTest, NestedWhile) {
  ProgramDesc program = ParseProgram(kNested, "nested.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, NestedFeeds(), {"loss", "x@GRAD", "a@GRAD"});
  std::vector<double> x = {0.7, -1.2}, a = {1.1, 0.9};
  for (int k = 0; k < 2; ++k) {
    EXPECT_NEAR(Values(out.at("x@GRAD"))[k], std::pow(a[k], 6), 1e-12);
    EXPECT_NEAR(Values(out.at("a@GRAD"))[k], 6 * x[k] * std::pow(a[k], 5), 1e-12);
  }
  CheckGradients(kNested, NestedFeeds(), "loss", {"x", "a"});
}

// y = x; if flag: y = x * w.  loss = sum(y).
const char* kConditional = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64}
      w: {shape: [2], dtype: float64}
      flag: {shape: [1], dtype: bool}
      branch: {type: step_scopes}
    ops:
      - {type: assign, inputs: {X: [x]}, outputs: {Out: [y]}}
      - type: conditional_block
        inputs: {Cond: [flag], Input: [x, w]}
        outputs: {Out: [y], Scope: [branch]}
        attrs: {sub_block: 1, is_scalar_condition: true}
      - {type: reduce_sum, inputs: {X: [y]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [t]}}
      - {type: assign, inputs: {X: [t]}, outputs: {Out: [y]}}
)";

std::vector<Feed> CondFeeds(bool flag) {
  return {{"x", {2}, {0.5, -2.0}}, {"w", {2}, {3.0, 0.25}}, {"flag", {1}, {flag ? 1.0 : 0.0}, DType::kBool}};
}

TEST_P(ControlFlowTest, ConditionalTaken) {
  ProgramDesc program = ParseProgram(kConditional, "cond.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, CondFeeds(true), {"loss", "x@GRAD", "w@GRAD"});
  EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], 0.5 * 3.0 - 2.0 * 0.25);
  EXPECT_EQ(Values(out.at("x@GRAD")), (std::vector<double>{3.0, 0.25}));
  EXPECT_EQ(Values(out.at("w@GRAD")), (std::vector<double>{0.5, -2.0}));
  CheckGradients(kConditional, CondFeeds(true), "loss", {"x", "w"});
}

TEST_P(ControlFlowTest, ConditionalNotTakenGivesZeroGradients) {
  ProgramDesc program = ParseProgram(kConditional, "cond.yaml");
  AppendBackward(program, "loss", {}, {});
  auto out = Run(program, CondFeeds(false), {"loss", "x@GRAD", "w@GRAD"});
  EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], -1.5);
  EXPECT_EQ(Values(out.at("x@GRAD")), (std::vector<double>{1.0, 1.0}));
  EXPECT_EQ(Values(out.at("w@GRAD")), (std::vector<double>{0.0, 0.0}));
  CheckGradients(kConditional, CondFeeds(false), "loss", {"x", "w"});
}

// Without is_scalar_condition the branch runs when every Cond tensor holds
// an element (Paddle's rule), whatever their dtypes and values.
TEST_P(ControlFlowTest, ConditionalOnNonEmptyConds) {
  std::string yaml = kConditional;
  const std::string scalar = "inputs: {Cond: [flag], Input: [x, w]}";
  yaml.replace(yaml.find(scalar), scalar.size(), "inputs: {Cond: [c1, c2], Input: [x, w]}");
  const std::string attr = "is_scalar_condition: true";
  yaml.replace(yaml.find(attr), attr.size(), "is_scalar_condition: false");
  const std::string flag = "flag: {shape: [1], dtype: bool}";
  yaml.replace(yaml.find(flag), flag.size(), "c1: {shape: [3], dtype: float64}\n      c2: {shape: [-1], dtype: int64}");
  for (const bool empty : {false, true}) {
    std::vector<Feed> feeds = CondFeeds(true);
    feeds.pop_back();
    feeds.push_back({"c1", {3}, {0.0, 0.0, 0.0}});  // zeros: only the count matters
    feeds.push_back(empty ? Feed{"c2", {0}, {}, DType::kInt64} : Feed{"c2", {2}, {1.0, 1.0}, DType::kInt64});
    ProgramDesc program = ParseProgram(yaml, "cond.yaml");
    AppendBackward(program, "loss", {}, {});
    auto out = Run(program, feeds, {"loss", "x@GRAD", "w@GRAD"});
    if (empty) {
      EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], -1.5);
      EXPECT_EQ(Values(out.at("w@GRAD")), (std::vector<double>{0.0, 0.0}));
    } else {
      EXPECT_DOUBLE_EQ(Values(out.at("loss"))[0], 0.5 * 3.0 - 2.0 * 0.25);
      EXPECT_EQ(Values(out.at("w@GRAD")), (std::vector<double>{0.5, -2.0}));
    }
    CheckGradients(yaml, feeds, "loss", {"x", "w"});
  }
}

TEST_P(ControlFlowTest, ConditionalBackwardStructure) {
  ProgramDesc program = ParseProgram(kConditional, "cond.yaml");
  AppendBackward(program, "loss", {}, {});
  ASSERT_EQ(program.Size(), 3u);
  EXPECT_EQ(OpTypes(*program.Root()),
            (std::vector<std::string>{"assign", "conditional_block", "reduce_sum", "fill_constant", "reduce_sum_grad",
                                      "conditional_block_grad", "assign", "sum"}));
  const OpDesc& cg = *program.Root()->Op(5);
  EXPECT_EQ(cg.Input("Input"), (std::vector<std::string>{"x", "w"}));
  EXPECT_EQ(cg.Input("Out@GRAD"), std::vector<std::string>{"y@GRAD"});
  // y is overwritten, not read: its old value's gradient is cut in place.
  EXPECT_EQ(cg.Output("Out@GRAD"), std::vector<std::string>{"y@GRAD"});
  EXPECT_EQ(cg.Output("Input@GRAD"), (std::vector<std::string>{"x@GRAD@RENAME@0", "w@GRAD"}));
  EXPECT_EQ(cg.Input("Scope"), std::vector<std::string>{"branch"});
  EXPECT_EQ(program.Root()->Op(6)->Output("Out"), std::vector<std::string>{"x@GRAD@RENAME@1"});
  EXPECT_EQ(program.Root()->Op(7)->Input("X"), (std::vector<std::string>{"x@GRAD@RENAME@0", "x@GRAD@RENAME@1"}));
  const BlockDesc& grad = *program.Block(2);
  EXPECT_EQ(grad.ParentIdx(), 1);
  EXPECT_EQ(OpTypes(grad), (std::vector<std::string>{"assign", "elementwise_mul_grad"}));
  EXPECT_EQ(grad.Op(0)->Input("X"), std::vector<std::string>{"y@GRAD"});
  EXPECT_EQ(grad.Op(0)->Output("Out"), std::vector<std::string>{"t@GRAD"});
}

TEST_P(ControlFlowTest, IterationCapIsAnError) {
  ProgramDesc program = ParseProgram(kLoopCarried, "loop.yaml");
  ExecutorOptions options;
  options.max_loop_iterations = 5;
  try {
    Run(program, {{"x", {1}, {0.0}}, {"i", {1}, {0.0}}, {"limit", {1}, {100.0}}}, {"x"}, options);
    FAIL() << "expected the iteration cap to stop the loop";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("op 'while'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("max_loop_iterations = 5"), std::string::npos) << e.what();
  }
  // Under the cap the same loop finishes.
  auto out = Run(program, {{"x", {1}, {0.0}}, {"i", {1}, {0.0}}, {"limit", {1}, {5.0}}}, {"x"}, options);
  EXPECT_DOUBLE_EQ(Values(out.at("x"))[0], 10.0);
}

TEST_P(ControlFlowTest, NonBoolConditionIsAnError) {
  std::string yaml = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [1], dtype: float64}
      c: {shape: [1], dtype: float64}
      scopes: {type: step_scopes}
    ops:
      - type: while
        inputs: {X: [x], Condition: [c]}
        outputs: {Out: [x], StepScopes: [scopes]}
        attrs: {sub_block: 1}
  - idx: 1
    parent: 0
    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [x]}}
)";
  try {
    ParseProgram(yaml, "bad.yaml");
    FAIL() << "expected a float condition to be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Condition must be a bool tensor with exactly one element"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
}

TEST_P(ControlFlowTest, NonScalarConditionIsAnErrorAtRunTime) {
  ProgramDesc program = ParseProgram(kConditional, "cond.yaml");
  try {
    Run(program, {{"x", {2}, {1, 2}}, {"w", {2}, {1, 2}}, {"flag", {2}, {1, 0}, DType::kBool}}, {"y"});
    FAIL() << "expected a two-element condition to be rejected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("Cond 'flag' must be a bool tensor with exactly one element, but received "
                                         "bool[2]"),
              std::string::npos)
        << e.what();
  }
}

TEST_P(ControlFlowTest, ArrayReadOutOfRangeIsAnError) {
  std::string yaml = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64}
      i: {shape: [1], dtype: int64}
      j: {shape: [1], dtype: int64}
    ops:
      - {type: write_to_array, inputs: {X: [x], I: [i]}, outputs: {Out: [arr]}}
      - {type: array_length, inputs: {X: [arr]}, outputs: {Out: [len]}}
      - {type: read_from_array, inputs: {X: [arr], I: [j]}, outputs: {Out: [y]}}
)";
  ProgramDesc program = ParseProgram(yaml, "array.yaml");
  EXPECT_EQ(program.Root()->FindVar("arr")->Type(), VarType::kTensorArray);
  auto ok =
      Run(program, {{"x", {2}, {1, 2}}, {"i", {1}, {2}, DType::kInt64}, {"j", {1}, {2}, DType::kInt64}}, {"y", "len"});
  EXPECT_EQ(Values(ok.at("y")), (std::vector<double>{1, 2}));
  EXPECT_EQ(ok.at("len").Data<int64_t>()[0], 3);
  try {
    Run(program, {{"x", {2}, {1, 2}}, {"i", {1}, {0}, DType::kInt64}, {"j", {1}, {4}, DType::kInt64}}, {"y"});
    FAIL() << "expected an out-of-range read to be rejected";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("index I = 4 is out of range for array 'arr'"), std::string::npos) << e.what();
  }
}

TEST_P(ControlFlowTest, MissingLoopInputIsAnError) {
  std::string yaml = kLoopCarried;
  yaml.replace(yaml.find("X: [x, i, limit]"), std::strlen("X: [x, i, limit]"), "X: [i, limit]");
  try {
    ParseProgram(yaml, "missing.yaml");
    FAIL() << "expected the missing X entry to be reported";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("these are missing: x"), std::string::npos) << e.what();
  }
}

TEST_P(ControlFlowTest, IsTestKeepsNoStepScopes) {
  std::string yaml = kLoopCarried;
  yaml.replace(yaml.find("attrs: {sub_block: 1}"), std::strlen("attrs: {sub_block: 1}"),
               "attrs: {sub_block: 1, is_test: true}");
  ProgramDesc program = ParseProgram(yaml, "test.yaml");
  auto executor = CreateExecutor(GetParam(), HostDevice());
  Scope scope;
  for (const auto& f : LoopFeeds()) scope.Var(f.name)->GetTensor() = MakeTensor(f);
  executor->Run(program, 0, scope);
  EXPECT_DOUBLE_EQ(Values(scope.FindVar("x")->GetTensor())[0], 4.0);
  EXPECT_TRUE(scope.FindVar("scopes")->GetStepScopes().empty());
}

// Two independent loops, so on 2 threads the task graph runs their `while`
// nodes at once, on different workers, and each run in a fresh scope, which
// often takes the freed one's address. Prepared blocks used to match a scope
// by its address and hand out the freed scope's vars (here: "out of memory"
// from a garbage shape; in the RNN example, heap corruption at --threads 2).
TEST(ControlFlowTaskGraph, FreshScopeEachRunWithConcurrentLoops) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  ProgramDesc program = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4], dtype: float64}
      i: {shape: [1], dtype: float64}
      y: {shape: [4], dtype: float64}
      j: {shape: [1], dtype: float64}
      limit: {shape: [1], dtype: float64, stop_gradient: true}
      s1: {type: step_scopes}
      s2: {type: step_scopes}
    ops:
      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [c1]}}
      - type: while
        inputs: {X: [x, i, limit], Condition: [c1]}
        outputs: {Out: [x, i, c1], StepScopes: [s1]}
        attrs: {sub_block: 1, is_test: true}
      - {type: less_than, inputs: {X: [j], Y: [limit]}, outputs: {Out: [c2]}}
      - type: while
        inputs: {X: [y, j, limit], Condition: [c2]}
        outputs: {Out: [y, j, c2], StepScopes: [s2]}
        attrs: {sub_block: 2, is_test: true}
      - {type: mean, inputs: {X: [x]}, outputs: {Out: [mx]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [my]}}
      - {type: elementwise_add, inputs: {X: [mx], Y: [my]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [i]}, outputs: {Out: [x_next]}}
      - {type: assign, inputs: {X: [x_next]}, outputs: {Out: [x]}}
      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i_next]}, attrs: {step: 1.0}}
      - {type: assign, inputs: {X: [i_next]}, outputs: {Out: [i]}}
      - {type: less_than, inputs: {X: [i], Y: [limit]}, outputs: {Out: [c1]}}
  - idx: 2
    parent: 0
    ops:
      - {type: elementwise_mul, inputs: {X: [y], Y: [j]}, outputs: {Out: [y_next]}}
      - {type: assign, inputs: {X: [y_next]}, outputs: {Out: [y]}}
      - {type: increment, inputs: {X: [j]}, outputs: {Out: [j_next]}, attrs: {step: 1.0}}
      - {type: assign, inputs: {X: [j_next]}, outputs: {Out: [j]}}
      - {type: less_than, inputs: {X: [j], Y: [limit]}, outputs: {Out: [c2]}}
)",
                                     "two_loops.yaml");
  ExecutorOptions options;
  options.threads = 2;
  auto executor = CreateExecutor("taskgraph", HostDevice(), options);
  for (int run = 0; run < 300; ++run) {
    Scope scope;
    for (const Feed& f : std::vector<Feed>{{"x", {4}, {1, 2, 3, 4}},
                                           {"i", {1}, {1}},
                                           {"y", {4}, {1, 1, 1, 1}},
                                           {"j", {1}, {1}},
                                           {"limit", {1}, {40}}})
      scope.Var(f.name)->GetTensor() = MakeTensor(f);
    executor->Run(program, 0, scope);
    // x gains 1 + 2 + ... + 39 = 780 per element; y becomes 39! (about 2.04e46).
    const double want = 2.5 + 780 + std::tgamma(40.0);
    ASSERT_NEAR(Values(scope.FindVar("loss")->GetTensor())[0], want, want * 1e-12) << "run " << run;
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, ControlFlowTest, ::testing::Values("sequential", "taskgraph"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nabla
