// The backward builder's exact output on the seed documents' scenarios: op
// types and order, slot arguments, @RENAME@ / sum / fill_zeros_like
// placement, gradient var dtypes and shapes, and a program the verifier
// accepts.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/toy_ops.h"
#include "nabla/backward.h"
#include "nabla/op_registry.h"

namespace nabla {
namespace {

using Strings = std::vector<std::string>;

// Builds forward programs the way the loader does: declared vars, schema
// defaults filled, outputs created by inference.
class Net {
 public:
  Net() { toys::RegisterToyOps(); }

  VarDesc* Var(const std::string& name, Shape shape, DType dtype = DType::kFloat32, BlockDesc* block = nullptr) {
    VarDesc* v = (block ? block : prog.Root())->Var(name);
    v->SetShape(std::move(shape));
    v->SetDType(dtype);
    v->MarkDTypeKnown();
    v->SetDeclared(true);
    return v;
  }
  VarDesc* Param(const std::string& name, Shape shape) {
    VarDesc* v = Var(name, std::move(shape));
    v->SetPersistable(true);
    return v;
  }
  VarDesc* Feed(const std::string& name, Shape shape, DType dtype = DType::kFloat32) {
    VarDesc* v = Var(name, std::move(shape), dtype);
    v->SetStopGradient(true);
    return v;
  }
  OpDesc* Op(const std::string& type, VarNameMap in, VarNameMap out, AttributeMap attrs = {},
             BlockDesc* block = nullptr) {
    BlockDesc* b = block ? block : prog.Root();
    OpDesc op(type, std::move(in), std::move(out), std::move(attrs));
    auto reg = CurrentRegistry();
    FillDefaultAttrs(op, *reg, &prog);
    OpDesc* added = b->AppendOp(std::move(op));
    InferOpAtBuildTime(*added, *b, *reg);
    return added;
  }

  ProgramDesc prog;
};

Strings Types(const BlockDesc& b, size_t from = 0) {
  Strings t;
  for (size_t i = from; i < b.OpSize(); ++i) t.push_back(b.Op(i)->Type());
  return t;
}

std::string Args(const VarNameMap& m) {
  std::string s;
  for (const auto& [slot, args] : m) {
    if (!s.empty()) s += " ";
    s += slot + "=[";
    for (size_t i = 0; i < args.size(); ++i) s += (i ? "," : "") + args[i];
    s += "]";
  }
  return s;
}

// "mul_grad(Out=[h] Out@GRAD=[h@GRAD] X=[x] Y=[w]) -> (X@GRAD=[@EMPTY@] Y@GRAD=[w@GRAD])"
std::string Sig(const OpDesc& op) { return op.Type() + "(" + Args(op.Inputs()) + ") -> (" + Args(op.Outputs()) + ")"; }

void ExpectVerified(const ProgramDesc& p) {
  EXPECT_NO_THROW(VerifyProgram(p, *CurrentRegistry())) << "the verifier rejects the program";
}

void ExpectGradVar(const BlockDesc& b, const std::string& name, const Shape& shape, DType dtype = DType::kFloat32) {
  const VarDesc* v = b.FindVar(name);
  ASSERT_NE(v, nullptr) << name << " was not created in block " << b.Idx();
  EXPECT_EQ(v->GetShape(), shape) << name;
  EXPECT_EQ(v->GetDType(), dtype) << name;
  EXPECT_FALSE(v->Persistable()) << name;
}

// x (param) -> mean -> loss.
TEST(AppendBackward, SingleOp) {
  Net n;
  n.Param("x", {2, 3});
  n.Op("mean", {{"X", {"x"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b), (Strings{"mean", "fill_constant", "mean_grad"}));
  EXPECT_EQ(Sig(*b.Op(1)), "fill_constant() -> (Out=[loss@GRAD])");
  EXPECT_EQ(b.Op(1)->Attr<std::vector<int>>("shape"), (std::vector<int>{1}));
  EXPECT_EQ(b.Op(1)->Attr<float>("value"), 1.0f);
  EXPECT_EQ(b.Op(1)->Attr<std::string>("dtype"), "float32");
  EXPECT_EQ(Sig(*b.Op(2)), "mean_grad(Out=[loss] Out@GRAD=[loss@GRAD] X=[x]) -> (X@GRAD=[x@GRAD])");
  EXPECT_EQ(pg, (ParamGrads{{"x", "x@GRAD"}}));
  ASSERT_TRUE(n.prog.Backward().has_value());
  EXPECT_EQ(n.prog.Backward()->loss, "loss");
  EXPECT_EQ(n.prog.Backward()->param_grads, pg);
  ExpectGradVar(b, "loss@GRAD", {1});
  ExpectGradVar(b, "x@GRAD", {2, 3});
  ExpectVerified(n.prog);
}

// The seed takes the loss's dtype and exact shape (a scalar stays a scalar).
TEST(AppendBackward, SeedFollowsLossDTypeAndShape) {
  Net n;
  n.Param("x", {});
  n.prog.Root()->FindVar("x")->SetDType(DType::kFloat64);
  n.Op("scale", {{"X", {"x"}}}, {{"Out", {"loss"}}}, {{"scale", 3.0f}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b), (Strings{"scale", "fill_constant", "scale"}));
  EXPECT_EQ(b.Op(1)->Attr<std::vector<int>>("shape"), std::vector<int>{});
  EXPECT_EQ(b.Op(1)->Attr<std::string>("dtype"), "float64");
  EXPECT_EQ(Sig(*b.Op(2)), "scale(X=[loss@GRAD]) -> (Out=[x@GRAD])");
  EXPECT_EQ(b.Op(2)->Attr<float>("scale"), 3.0f);
  // Schema defaults are filled in on grad ops.
  EXPECT_EQ(b.Op(2)->Attr<bool>("bias_after_scale"), true);
  ExpectGradVar(b, "x@GRAD", {}, DType::kFloat64);
  ExpectVerified(n.prog);
}

// x -> relu -> scale -> mean: grad ops in reverse forward order.
TEST(AppendBackward, Chain) {
  Net n;
  n.Param("x", {3});
  n.Op("relu", {{"X", {"x"}}}, {{"Out", {"a"}}});
  n.Op("scale", {{"X", {"a"}}}, {{"Out", {"b"}}}, {{"scale", 2.0f}});
  n.Op("mean", {{"X", {"b"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 3), (Strings{"fill_constant", "mean_grad", "scale", "relu_grad"}));
  EXPECT_EQ(Sig(*b.Op(5)), "scale(X=[b@GRAD]) -> (Out=[a@GRAD])");
  EXPECT_EQ(Sig(*b.Op(6)), "relu_grad(Out=[a] Out@GRAD=[a@GRAD] X=[x]) -> (X@GRAD=[x@GRAD])");
  for (const char* g : {"b@GRAD", "a@GRAD", "x@GRAD"}) ExpectGradVar(b, g, {3});
  ExpectVerified(n.prog);
}

// Seed 002's fit-a-line: mul -> elementwise_add -> mean.
TEST(AppendBackward, MulAddMean) {
  Net n;
  n.Feed("x", {4, 3});
  n.Param("w", {3, 5});
  n.Param("b", {5});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"h"}}});
  n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b), (Strings{"mul", "elementwise_add", "mean", "fill_constant", "mean_grad", "elementwise_add_grad",
                               "mul_grad"}));
  EXPECT_EQ(Sig(*b.Op(4)), "mean_grad(Out=[loss] Out@GRAD=[loss@GRAD] X=[z]) -> (X@GRAD=[z@GRAD])");
  EXPECT_EQ(Sig(*b.Op(5)),
            "elementwise_add_grad(Out=[z] Out@GRAD=[z@GRAD] X=[h] Y=[b]) -> (X@GRAD=[h@GRAD] Y@GRAD=[b@GRAD])");
  EXPECT_EQ(Sig(*b.Op(6)), "mul_grad(Out=[h] Out@GRAD=[h@GRAD] X=[x] Y=[w]) -> (X@GRAD=[@EMPTY@] Y@GRAD=[w@GRAD])");
  // Forward attributes travel to the default grad op.
  EXPECT_EQ(b.Op(6)->Attr<int>("x_num_col_dims"), 1);
  EXPECT_EQ(b.Op(5)->Attr<int>("axis"), -1);
  EXPECT_EQ(pg, (ParamGrads{{"w", "w@GRAD"}, {"b", "b@GRAD"}}));
  ExpectGradVar(b, "w@GRAD", {3, 5});
  ExpectGradVar(b, "b@GRAD", {5});
  ExpectGradVar(b, "h@GRAD", {4, 5});
  ExpectGradVar(b, "z@GRAD", {4, 5});
  EXPECT_EQ(b.FindVar("x@GRAD"), nullptr);
  EXPECT_EQ(b.FindVar(kEmptyVarName), nullptr);
  ExpectVerified(n.prog);
}

// A weight read by two ops: each write becomes a @RENAME@ contribution and
// one sum adds them (at the end: nothing reads w@GRAD).
TEST(AppendBackward, SharedWeightIsRenamedAndSummed) {
  Net n;
  n.Feed("x1", {2, 3});
  n.Feed("x2", {2, 3});
  n.Param("w", {3, 4});
  n.Op("mul", {{"X", {"x1"}}, {"Y", {"w"}}}, {{"Out", {"h1"}}});
  n.Op("mul", {{"X", {"x2"}}, {"Y", {"w"}}}, {{"Out", {"h2"}}});
  n.Op("elementwise_add", {{"X", {"h1"}}, {"Y", {"h2"}}}, {{"Out", {"s"}}});
  n.Op("mean", {{"X", {"s"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 4),
            (Strings{"fill_constant", "mean_grad", "elementwise_add_grad", "mul_grad", "mul_grad", "sum"}));
  EXPECT_EQ(Sig(*b.Op(7)),
            "mul_grad(Out=[h2] Out@GRAD=[h2@GRAD] X=[x2] Y=[w]) -> (X@GRAD=[@EMPTY@] Y@GRAD=[w@GRAD@RENAME@0])");
  EXPECT_EQ(Sig(*b.Op(8)),
            "mul_grad(Out=[h1] Out@GRAD=[h1@GRAD] X=[x1] Y=[w]) -> (X@GRAD=[@EMPTY@] Y@GRAD=[w@GRAD@RENAME@1])");
  EXPECT_EQ(Sig(*b.Op(9)), "sum(X=[w@GRAD@RENAME@0,w@GRAD@RENAME@1]) -> (Out=[w@GRAD])");
  EXPECT_EQ(pg, (ParamGrads{{"w", "w@GRAD"}}));
  ExpectGradVar(b, "w@GRAD@RENAME@0", {3, 4});
  ExpectGradVar(b, "w@GRAD@RENAME@1", {3, 4});
  ExpectGradVar(b, "w@GRAD", {3, 4});
  ExpectVerified(n.prog);
}

// An activation read by two ops: its contributions are summed right before
// the first op that reads a@GRAD, not at the end.
TEST(AppendBackward, ActivationReadTwiceIsSummedBeforeItsReader) {
  Net n;
  n.Param("x", {5});
  n.Op("relu", {{"X", {"x"}}}, {{"Out", {"a"}}});
  n.Op("scale", {{"X", {"a"}}}, {{"Out", {"b1"}}}, {{"scale", 2.0f}});
  n.Op("scale", {{"X", {"a"}}}, {{"Out", {"b2"}}}, {{"scale", 3.0f}});
  n.Op("elementwise_add", {{"X", {"b1"}}, {"Y", {"b2"}}}, {{"Out", {"s"}}});
  n.Op("mean", {{"X", {"s"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 5),
            (Strings{"fill_constant", "mean_grad", "elementwise_add_grad", "scale", "scale", "sum", "relu_grad"}));
  EXPECT_EQ(Sig(*b.Op(8)), "scale(X=[b2@GRAD]) -> (Out=[a@GRAD@RENAME@0])");
  EXPECT_EQ(b.Op(8)->Attr<float>("scale"), 3.0f);
  EXPECT_EQ(Sig(*b.Op(9)), "scale(X=[b1@GRAD]) -> (Out=[a@GRAD@RENAME@1])");
  EXPECT_EQ(Sig(*b.Op(10)), "sum(X=[a@GRAD@RENAME@0,a@GRAD@RENAME@1]) -> (Out=[a@GRAD])");
  EXPECT_EQ(Sig(*b.Op(11)), "relu_grad(Out=[a] Out@GRAD=[a@GRAD] X=[x]) -> (X@GRAD=[x@GRAD])");
  ExpectVerified(n.prog);
}

// mul(x, w) with w in the no-grad set: its gradient output is @EMPTY@, and w
// gets no pair and no var.
TEST(AppendBackward, PartOfInputsNoGrad) {
  Net n;
  n.Param("x", {2, 3});
  n.Param("w", {3, 1});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"h"}}});
  n.Op("mean", {{"X", {"h"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss", {}, {"w"});
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "mul_grad"}));
  EXPECT_EQ(Sig(*b.Op(4)), "mul_grad(Out=[h] Out@GRAD=[h@GRAD] X=[x] Y=[w]) -> (X@GRAD=[x@GRAD] Y@GRAD=[@EMPTY@])");
  EXPECT_EQ(pg, (ParamGrads{{"x", "x@GRAD"}}));
  EXPECT_EQ(b.FindVar("w@GRAD"), nullptr);
  ExpectVerified(n.prog);
}

// An op whose inputs are all no-grad (stop_gradient feeds) gets no grad op;
// the op reading its output still does.
TEST(AppendBackward, AllInputsNoGrad) {
  Net n;
  n.Feed("x", {2, 3});
  n.Feed("y", {2, 3});
  n.Param("w", {3, 2});
  n.Op("elementwise_add", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"h"}}});
  n.Op("mul", {{"X", {"h"}}, {"Y", {"w"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 3), (Strings{"fill_constant", "mean_grad", "mul_grad"}));
  EXPECT_EQ(pg, (ParamGrads{{"w", "w@GRAD"}}));
  EXPECT_EQ(b.FindVar("x@GRAD"), nullptr);
  EXPECT_EQ(b.FindVar("y@GRAD"), nullptr);
  ExpectVerified(n.prog);
}

// Paddle's _find_no_grad_vars: h is computed from no-grad vars only (the
// user's no-grad w0 and a feed), so no gradient of it can reach anything,
// and mul's maker emits @EMPTY@ for it instead of a GEMM nobody reads. The
// bf16 pass depends on it: its casts of a no-grad var are such ops.
TEST(AppendBackward, NoGradFlowsForwardThroughOpsWithoutGradientInputs) {
  Net n;
  n.Feed("x", {2, 3});
  n.Param("w0", {3, 3});
  n.Param("w1", {3, 2});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w0"}}}, {{"Out", {"h0"}}});
  n.Op("relu", {{"X", {"h0"}}}, {{"Out", {"h"}}});
  n.Op("mul", {{"X", {"h"}}, {"Y", {"w1"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss", {}, {"w0"});
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 4), (Strings{"fill_constant", "mean_grad", "mul_grad"}));
  EXPECT_EQ(b.Op(6)->Output("X@GRAD"), (Strings{kEmptyVarName}));
  EXPECT_EQ(b.Op(6)->Output("Y@GRAD"), (Strings{"w1@GRAD"}));
  EXPECT_EQ(pg, (ParamGrads{{"w1", "w1@GRAD"}}));
  EXPECT_EQ(b.FindVar("h@GRAD"), nullptr);
  ExpectVerified(n.prog);
}

TEST(AppendBackward, UnknownNoGradNameIsAnError) {
  Net n;
  n.Feed("x", {2, 3});
  n.Param("w", {3, 2});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  EXPECT_THROW(
      {
        try {
          AppendBackward(n.prog, "loss", {}, {"ww"});
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("no-grad var 'ww' is not a variable of the program"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// Nothing upstream of the loss wants a gradient: z, written only by an op
// without a gradient-carrying input, joins the no-grad set, so only the seed
// remains and no parameter gets a pair.
TEST(AppendBackward, WholeNetNoGrad) {
  Net n;
  n.Feed("x", {2, 3});
  n.Param("w", {3, 2})->SetStopGradient(true);
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  EXPECT_EQ(Types(*n.prog.Root(), 2), (Strings{"fill_constant"}));
  EXPECT_TRUE(pg.empty());
  ExpectVerified(n.prog);
}

// An intermediate var in the no-grad set cuts its branch: nothing upstream of
// it gets a grad op, even though x is a trainable parameter.
TEST(AppendBackward, IntermediateNoGradCutsBranch) {
  Net n;
  n.Param("x", {4});
  n.Param("b", {4});
  n.Op("scale", {{"X", {"x"}}}, {{"Out", {"h"}}}, {{"scale", 2.0f}});
  n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss", {}, {"h"});
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 3), (Strings{"fill_constant", "mean_grad", "elementwise_add_grad"}));
  EXPECT_EQ(Sig(*b.Op(5)),
            "elementwise_add_grad(Out=[z] Out@GRAD=[z@GRAD] X=[h] Y=[b]) -> (X@GRAD=[@EMPTY@] Y@GRAD=[b@GRAD])");
  EXPECT_EQ(pg, (ParamGrads{{"b", "b@GRAD"}}));
  ExpectVerified(n.prog);
}

// The same cut by stop_gradient on the var itself.
TEST(AppendBackward, StopGradientVarCutsBranch) {
  Net n;
  n.Param("x", {4});
  n.Param("b", {4});
  n.Op("scale", {{"X", {"x"}}}, {{"Out", {"h"}}});
  n.prog.Root()->FindVar("h")->SetStopGradient(true);
  n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  EXPECT_EQ(Types(*n.prog.Root(), 3), (Strings{"fill_constant", "mean_grad", "elementwise_add_grad"}));
  EXPECT_EQ(pg, (ParamGrads{{"b", "b@GRAD"}}));
}

// split with two of three outputs unused: their gradients are zero-filled
// right before the concat that reads them.
TEST(AppendBackward, SplitWithUnusedOutputsIsZeroFilled) {
  Net n;
  n.Param("x", {6, 4});
  n.Op("split", {{"X", {"x"}}}, {{"Out", {"a", "b", "c"}}}, {{"num", 3}});
  n.Op("mean", {{"X", {"a"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "fill_zeros_like", "fill_zeros_like", "concat"}));
  EXPECT_EQ(Sig(*b.Op(4)), "fill_zeros_like(X=[b]) -> (Out=[b@GRAD])");
  EXPECT_EQ(Sig(*b.Op(5)), "fill_zeros_like(X=[c]) -> (Out=[c@GRAD])");
  EXPECT_EQ(Sig(*b.Op(6)), "concat(X=[a@GRAD,b@GRAD,c@GRAD]) -> (Out=[x@GRAD])");
  ExpectGradVar(b, "b@GRAD", {2, 4});
  ExpectGradVar(b, "x@GRAD", {6, 4});
  ExpectVerified(n.prog);
}

// Seed 003's minus: a maker emitting existing ops. With Y no-grad the scale
// writing @EMPTY@ is dropped.
TEST(AppendBackward, MinusWithOneInputNoGrad) {
  Net n;
  n.Param("a", {3});
  n.Param("b", {3});
  n.Op("minus", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"d"}}});
  n.Op("mean", {{"X", {"d"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss", {}, {"b"});
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b), (Strings{"minus", "mean", "fill_constant", "mean_grad", "scale"}));
  EXPECT_EQ(Sig(*b.Op(4)), "scale(X=[d@GRAD]) -> (Out=[a@GRAD])");
  EXPECT_EQ(b.Op(4)->Attr<float>("scale"), 1.0f);
  EXPECT_EQ(pg, (ParamGrads{{"a", "a@GRAD"}}));
  ExpectVerified(n.prog);
}

TEST(AppendBackward, MinusBothInputs) {
  Net n;
  n.Param("a", {3});
  n.Param("b", {3});
  n.Op("minus", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"d"}}});
  n.Op("mean", {{"X", {"d"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "scale", "scale"}));
  EXPECT_EQ(Sig(*b.Op(5)), "scale(X=[d@GRAD]) -> (Out=[b@GRAD])");
  EXPECT_EQ(b.Op(5)->Attr<float>("scale"), -1.0f);
  EXPECT_EQ(pg, (ParamGrads{{"a", "a@GRAD"}, {"b", "b@GRAD"}}));
}

// A grad op whose gradient inputs are all zero (here: the gradient of an
// unused or stop_gradient output) is dropped, and writes nothing: the other
// writer of x@GRAD is not renamed and no sum appears.
TEST(AppendBackward, GradOpWithOnlyZeroGradInputsIsDropped) {
  for (bool stop_a : {false, true}) {
    Net n;
    n.Param("x", {2});
    n.Op("twin", {{"X", {"x"}}}, {{"A", {"a"}}, {"B", {"bb"}}});
    if (stop_a) n.prog.Root()->FindVar("a")->SetStopGradient(true);
    n.Op("mean", {{"X", {"bb"}}}, {{"Out", {"loss"}}});
    AppendBackward(n.prog, "loss");
    const BlockDesc& b = *n.prog.Root();
    EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "scale"})) << "stop_a=" << stop_a;
    EXPECT_EQ(Sig(*b.Op(4)), "scale(X=[bb@GRAD]) -> (Out=[x@GRAD])");
    EXPECT_EQ(b.FindVar("x@GRAD@RENAME@0"), nullptr);
    ExpectVerified(n.prog);
  }
}

// When both outputs feed the loss, both grad ops stay and their writes to
// x@GRAD are summed.
TEST(AppendBackward, TwoGradOpsOfOneForwardOpAreSummed) {
  Net n;
  n.Param("x", {2});
  n.Op("twin", {{"X", {"x"}}}, {{"A", {"a"}}, {"B", {"bb"}}});
  n.Op("elementwise_add", {{"X", {"a"}}, {"Y", {"bb"}}}, {{"Out", {"s"}}});
  n.Op("mean", {{"X", {"s"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 3), (Strings{"fill_constant", "mean_grad", "elementwise_add_grad", "scale", "scale", "sum"}));
  EXPECT_EQ(Sig(*b.Op(6)), "scale(X=[a@GRAD]) -> (Out=[x@GRAD@RENAME@0])");
  EXPECT_EQ(Sig(*b.Op(7)), "scale(X=[bb@GRAD]) -> (Out=[x@GRAD@RENAME@1])");
  EXPECT_EQ(Sig(*b.Op(8)), "sum(X=[x@GRAD@RENAME@0,x@GRAD@RENAME@1]) -> (Out=[x@GRAD])");
}

// A grad op updating a gradient in place is not a second contribution: no
// rename, no sum.
TEST(AppendBackward, InPlaceGradOpIsNotRenamed) {
  Net n;
  n.Param("x", {3});
  n.Op("inplace_twice", {{"X", {"x"}}}, {{"Out", {"y"}}});
  n.Op("mean", {{"X", {"y"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "scale", "scale"}));
  EXPECT_EQ(Sig(*b.Op(4)), "scale(X=[y@GRAD]) -> (Out=[x@GRAD])");
  EXPECT_EQ(Sig(*b.Op(5)), "scale(X=[x@GRAD]) -> (Out=[x@GRAD])");
  EXPECT_EQ(b.FindVar("x@GRAD@RENAME@0"), nullptr);
  ExpectVerified(n.prog);
}

// A contribution read before the next one is written: the first write and
// that read are renamed together, and the sum comes after the last write.
TEST(AppendBackward, ReadBetweenTwoWritesKeepsTheFirstContribution) {
  Net n;
  n.Param("x", {3});
  n.Param("y", {3});
  n.Op("read_between", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"o"}}});
  n.Op("mean", {{"X", {"o"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 2), (Strings{"fill_constant", "mean_grad", "scale", "scale", "scale", "sum"}));
  EXPECT_EQ(Sig(*b.Op(4)), "scale(X=[o@GRAD]) -> (Out=[x@GRAD@RENAME@0])");
  EXPECT_EQ(Sig(*b.Op(5)), "scale(X=[x@GRAD@RENAME@0]) -> (Out=[y@GRAD])");
  EXPECT_EQ(Sig(*b.Op(6)), "scale(X=[o@GRAD]) -> (Out=[x@GRAD@RENAME@1])");
  EXPECT_EQ(Sig(*b.Op(7)), "sum(X=[x@GRAD@RENAME@0,x@GRAD@RENAME@1]) -> (Out=[x@GRAD])");
  ExpectVerified(n.prog);
}

TEST(AppendBackward, LossMustHoldOneElement) {
  for (const Shape& shape : {Shape{2, 3}, Shape{-1, 1}, Shape{0}}) {
    Net n;
    n.Param("x", shape);
    n.Op("relu", {{"X", {"x"}}}, {{"Out", {"big_loss"}}});
    size_t ops_before = n.prog.Root()->OpSize();
    try {
      AppendBackward(n.prog, "big_loss");
      ADD_FAILURE() << "accepted a loss of shape " << ShapeToString(shape);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
      std::string msg = e.what();
      EXPECT_NE(msg.find("'big_loss'"), std::string::npos) << msg;
      EXPECT_NE(msg.find(ShapeToString(shape)), std::string::npos) << msg;
      EXPECT_NE(msg.find("one element"), std::string::npos) << msg;
    }
    EXPECT_EQ(n.prog.Root()->OpSize(), ops_before);
    EXPECT_FALSE(n.prog.Backward().has_value());
  }
}

TEST(AppendBackward, SecondCallIsRejected) {
  Net n;
  n.Param("x", {2});
  n.Op("mean", {{"X", {"x"}}}, {{"Out", {"loss"}}});
  AppendBackward(n.prog, "loss");
  size_t ops = n.prog.Root()->OpSize();
  try {
    AppendBackward(n.prog, "loss");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPreconditionNotMet);
    EXPECT_NE(std::string(e.what()).find("already has a backward part"), std::string::npos) << e.what();
  }
  EXPECT_EQ(n.prog.Root()->OpSize(), ops);
}

TEST(AppendBackward, UnknownLossIsNotFound) {
  Net n;
  n.Param("x", {1});
  try {
    AppendBackward(n.prog, "nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("'nope'"), std::string::npos) << e.what();
  }
}

// parameter_list filters and orders the pairs; no_grad_set removes a
// parameter; a parameter nobody uses has no gradient and is left out.
TEST(AppendBackward, ParameterListAndNoGradSetFilter) {
  auto build = [](Net& n) {
    n.Feed("x", {2, 3});
    n.Param("w", {3, 3});
    n.Param("b", {3});
    n.Param("unused", {7});
    n.Param("frozen", {3})->SetStopGradient(true);
    n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"h"}}});
    n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
    n.Op("elementwise_add", {{"X", {"z"}}, {"Y", {"frozen"}}}, {{"Out", {"z2"}}});
    n.Op("mean", {{"X", {"z2"}}}, {{"Out", {"loss"}}});
  };
  {
    Net n;
    build(n);
    EXPECT_EQ(AppendBackward(n.prog, "loss"), (ParamGrads{{"w", "w@GRAD"}, {"b", "b@GRAD"}}));
    EXPECT_EQ(n.prog.Root()->FindVar("frozen@GRAD"), nullptr);
    EXPECT_EQ(n.prog.Root()->FindVar("unused@GRAD"), nullptr);
  }
  {
    Net n;
    build(n);
    EXPECT_EQ(AppendBackward(n.prog, "loss", {"b", "unused", "w"}), (ParamGrads{{"b", "b@GRAD"}, {"w", "w@GRAD"}}));
  }
  {
    Net n;
    build(n);
    EXPECT_EQ(AppendBackward(n.prog, "loss", {"w"}), (ParamGrads{{"w", "w@GRAD"}}));
    EXPECT_EQ(n.prog.Backward()->param_grads, (ParamGrads{{"w", "w@GRAD"}}));
  }
  {
    Net n;
    build(n);
    EXPECT_EQ(AppendBackward(n.prog, "loss", {}, {"w"}), (ParamGrads{{"b", "b@GRAD"}}));
    EXPECT_EQ(n.prog.Root()->FindVar("w@GRAD"), nullptr);
    ExpectVerified(n.prog);
  }
  {
    Net n;
    build(n);
    try {
      AppendBackward(n.prog, "loss", {"w", "ghost"});
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
      EXPECT_NE(std::string(e.what()).find("'ghost'"), std::string::npos) << e.what();
    }
  }
}

// An embedding table shared by three lookups, one of whose heads is unused:
// that lookup is pruned, the other two contributions are summed, and the
// int64 ids never get a gradient.
TEST(AppendBackward, SharedEmbeddingWithUnusedHead) {
  Net n;
  n.Param("emb", {10, 4});
  for (const char* ids : {"ids1", "ids2", "ids3"}) n.Var(ids, {3, 1}, DType::kInt64);
  n.Op("lookup_table", {{"W", {"emb"}}, {"Ids", {"ids1"}}}, {{"Out", {"e1"}}});
  n.Op("lookup_table", {{"W", {"emb"}}, {"Ids", {"ids2"}}}, {{"Out", {"e2"}}});
  n.Op("lookup_table", {{"W", {"emb"}}, {"Ids", {"ids3"}}}, {{"Out", {"e3"}}});
  n.Op("elementwise_add", {{"X", {"e1"}}, {"Y", {"e2"}}}, {{"Out", {"s"}}});
  n.Op("mean", {{"X", {"s"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");
  const BlockDesc& b = *n.prog.Root();
  EXPECT_EQ(Types(b, 5), (Strings{"fill_constant", "mean_grad", "elementwise_add_grad", "lookup_table_grad",
                                  "lookup_table_grad", "sum"}));
  EXPECT_EQ(Sig(*b.Op(8)), "lookup_table_grad(Ids=[ids2] Out@GRAD=[e2@GRAD] W=[emb]) -> (W@GRAD=[emb@GRAD@RENAME@0])");
  EXPECT_EQ(Sig(*b.Op(9)), "lookup_table_grad(Ids=[ids1] Out@GRAD=[e1@GRAD] W=[emb]) -> (W@GRAD=[emb@GRAD@RENAME@1])");
  EXPECT_EQ(Sig(*b.Op(10)), "sum(X=[emb@GRAD@RENAME@0,emb@GRAD@RENAME@1]) -> (Out=[emb@GRAD])");
  EXPECT_EQ(pg, (ParamGrads{{"emb", "emb@GRAD"}}));
  EXPECT_EQ(b.FindVar("e3@GRAD"), nullptr);
  EXPECT_EQ(b.FindVar("ids1@GRAD"), nullptr);
  ExpectGradVar(b, "emb@GRAD@RENAME@0", {10, 4});
  ExpectVerified(n.prog);
}

// An op owning a block: the block's backward is built first into a new
// block parented by the forward sub-block, and the grad op runs it.
TEST(AppendBackward, SubBlockIsBuiltFirstIntoANewBlock) {
  Net n;
  n.Param("x", {2});
  n.Param("w", {2});
  n.Var("y", {2});
  BlockDesc* body = n.prog.AppendBlock(0);
  n.Op("elementwise_add", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"t"}}}, {}, body);
  n.Op("scale", {{"X", {"t"}}}, {{"Out", {"y"}}}, {{"scale", 2.0f}}, body);
  n.Op("toy_loop", {{"X", {"x", "w"}}}, {{"Out", {"y"}}}, {{"sub_block", BlockRef{1}}});
  n.Op("mean", {{"X", {"y"}}}, {{"Out", {"loss"}}});
  ParamGrads pg = AppendBackward(n.prog, "loss");

  ASSERT_EQ(n.prog.Size(), 3u);
  const BlockDesc& root = *n.prog.Root();
  const BlockDesc& grad_body = *n.prog.Block(2);
  EXPECT_EQ(grad_body.ParentIdx(), 1);
  EXPECT_EQ(Types(root), (Strings{"toy_loop", "mean", "fill_constant", "mean_grad", "toy_loop_grad"}));
  EXPECT_EQ(Sig(*root.Op(4)), "toy_loop_grad(Out=[y] Out@GRAD=[y@GRAD] X=[x,w]) -> (X@GRAD=[x@GRAD,w@GRAD])");
  EXPECT_EQ(root.Op(4)->Attr<BlockRef>("sub_block").idx, 2);
  EXPECT_EQ(root.Op(0)->Attr<BlockRef>("sub_block").idx, 1);
  EXPECT_EQ(Types(grad_body), (Strings{"scale", "elementwise_add_grad"}));
  EXPECT_EQ(Sig(*grad_body.Op(0)), "scale(X=[y@GRAD]) -> (Out=[t@GRAD])");
  EXPECT_EQ(Sig(*grad_body.Op(1)),
            "elementwise_add_grad(Out=[t] Out@GRAD=[t@GRAD] X=[x] Y=[w]) -> (X@GRAD=[x@GRAD] Y@GRAD=[w@GRAD])");
  // The body's own gradient lives in the grad block; the loop's outer
  // gradients in the root, where the loop's grad op writes them.
  ExpectGradVar(grad_body, "t@GRAD", {2});
  ExpectGradVar(root, "x@GRAD", {2});
  EXPECT_EQ(n.prog.Block(1)->FindVar("t@GRAD"), nullptr);
  EXPECT_EQ(pg, (ParamGrads{{"x", "x@GRAD"}, {"w", "w@GRAD"}}));
  ExpectVerified(n.prog);
}

// A custom maker is handed the grad block and may name it itself.
TEST(AppendBackward, SubBlockGradBlockIsHandedToTheMaker) {
  Net n;
  n.Param("x", {2});
  n.Var("y", {2});
  BlockDesc* branch = n.prog.AppendBlock(0);
  n.Op("relu", {{"X", {"x"}}}, {{"Out", {"y"}}}, {}, branch);
  n.Op("toy_cond", {{"Input", {"x"}}}, {{"Out", {"y"}}}, {{"sub_block", BlockRef{1}}});
  n.Op("mean", {{"X", {"y"}}}, {{"Out", {"loss"}}});
  toys::LastCondGradBlock() = -1;
  AppendBackward(n.prog, "loss");
  ASSERT_EQ(n.prog.Size(), 3u);
  EXPECT_EQ(toys::LastCondGradBlock(), 2);
  EXPECT_EQ(Types(*n.prog.Root(), 2), (Strings{"fill_constant", "mean_grad", "toy_cond_grad"}));
  EXPECT_EQ(n.prog.Root()->Op(4)->Attr<BlockRef>("sub_block").idx, 2);
  EXPECT_EQ(Types(*n.prog.Block(2)), (Strings{"relu_grad"}));
  ExpectVerified(n.prog);
}

TEST(AppendBackward, OpWithoutGradMakerOnThePathIsNotFound) {
  Net n;
  n.prog.SetSourceFile("net.yaml");
  n.Param("x", {3});
  n.Op("no_grad_op", {{"X", {"x"}}}, {{"Out", {"h"}}})->SetPos({7, 5});
  n.Op("mean", {{"X", {"h"}}}, {{"Out", {"loss"}}});
  try {
    AppendBackward(n.prog, "loss");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    std::string msg = e.what();
    EXPECT_NE(msg.find("'no_grad_op'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("registered by toys at toy_ops.h"), std::string::npos) << msg;
    EXPECT_EQ(msg.rfind("net.yaml:7:5: ", 0), 0u) << msg;
  }
}

// The same op off the path (its input is a stop_gradient feed) is fine.
TEST(AppendBackward, OpWithoutGradMakerOffThePathIsFine) {
  Net n;
  n.Feed("x", {3});
  n.Param("b", {3});
  n.Op("no_grad_op", {{"X", {"x"}}}, {{"Out", {"h"}}});
  n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  EXPECT_EQ(AppendBackward(n.prog, "loss"), (ParamGrads{{"b", "b@GRAD"}}));
}

TEST(MakeGradOps, UsesTheRegisteredMakerAndFillsDefaults) {
  Net n;
  OpDesc op("scale", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"scale", 4.0f}});
  std::unordered_map<std::string, std::string> grad_to_var;
  auto ops = MakeGradOps(op, {}, &grad_to_var);
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(Sig(*ops[0]), "scale(X=[y@GRAD]) -> (Out=[x@GRAD])");
  EXPECT_EQ(ops[0]->Attr<float>("scale"), 4.0f);
  EXPECT_TRUE(ops[0]->Attr<bool>("bias_after_scale"));
  EXPECT_EQ(grad_to_var.at("x@GRAD"), "x");
  auto none = MakeGradOps(op, {"x"});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0]->Output("Out"), Strings{kEmptyVarName});
}

TEST(MakeGradOps, NoMakerIsNotFoundNamingOpAndPlugin) {
  Net n;
  OpDesc op("no_grad_op", {{"X", {"x"}}}, {{"Out", {"y"}}}, {});
  try {
    MakeGradOps(op, {});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    std::string msg = e.what();
    EXPECT_NE(msg.find("'no_grad_op'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("registered by toys at toy_ops.h"), std::string::npos) << msg;
  }
}

// Gradient of an intermediate var only: ops upstream of it are left alone.
TEST(CalcGradient, IntermediateInput) {
  Net n;
  n.Feed("x", {4, 3});
  n.Param("w", {3, 5});
  n.Param("b", {5});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"h"}}});
  n.Op("elementwise_add", {{"X", {"h"}}, {"Y", {"b"}}}, {{"Out", {"z"}}});
  n.Op("mean", {{"X", {"z"}}}, {{"Out", {"loss"}}});
  Strings grads = CalcGradient(n.prog, {"loss"}, {"h"});
  const BlockDesc& blk = *n.prog.Root();
  EXPECT_EQ(grads, Strings{"h@GRAD"});
  EXPECT_EQ(Types(blk, 3), (Strings{"fill_constant", "mean_grad", "elementwise_add_grad"}));
  // b is not asked for, so its gradient is not computed.
  EXPECT_EQ(Sig(*blk.Op(5)),
            "elementwise_add_grad(Out=[z] Out@GRAD=[z@GRAD] X=[h] Y=[b]) -> (X@GRAD=[h@GRAD] Y@GRAD=[@EMPTY@])");
  EXPECT_FALSE(n.prog.Backward().has_value());
  ExpectGradVar(blk, "h@GRAD", {4, 5});
  ExpectVerified(n.prog);
}

// A given target gradient seeds instead of fill_constant, so targets need
// not hold one element; a stop_gradient feed asked for explicitly gets a
// gradient, an integer input never does.
TEST(CalcGradient, TargetGradsSeedAndExplicitInputs) {
  Net n;
  n.Feed("x", {4, 3});
  n.Param("w", {3, 5});
  n.Var("ids", {4}, DType::kInt64);
  n.Var("dz", {4, 5});
  n.Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"z"}}});
  Strings grads = CalcGradient(n.prog, {"z"}, {"x", "ids"}, {"dz"});
  const BlockDesc& blk = *n.prog.Root();
  EXPECT_EQ(grads, (Strings{"x@GRAD", ""}));
  EXPECT_EQ(Types(blk, 1), Strings{"mul_grad"});
  EXPECT_EQ(Sig(*blk.Op(1)), "mul_grad(Out=[z] Out@GRAD=[dz] X=[x] Y=[w]) -> (X@GRAD=[x@GRAD] Y@GRAD=[@EMPTY@])");
  ExpectGradVar(blk, "x@GRAD", {4, 3});
  ExpectVerified(n.prog);
}

TEST(CalcGradient, NonScalarTargetIsSeededWithOnesOfItsShape) {
  Net n;
  n.Param("x", {2, 3});
  n.Op("relu", {{"X", {"x"}}}, {{"Out", {"y"}}});
  EXPECT_EQ(CalcGradient(n.prog, {"y"}, {"x"}), Strings{"x@GRAD"});
  const BlockDesc& blk = *n.prog.Root();
  EXPECT_EQ(Types(blk, 1), (Strings{"fill_constant", "relu_grad"}));
  EXPECT_EQ(blk.Op(1)->Attr<std::vector<int>>("shape"), (std::vector<int>{2, 3}));
}

TEST(CalcGradient, BadArgumentsAreReported) {
  Net n;
  n.Param("x", {-1, 3});
  n.Var("g", {2});
  n.Op("relu", {{"X", {"x"}}}, {{"Out", {"y"}}});
  ProgramDesc copy = n.prog;
  EXPECT_THROW(CalcGradient(copy, {"y"}, {"x"}), Error);              // unknown dims, no seed
  EXPECT_THROW(CalcGradient(copy, {"y"}, {"x"}, {"g"}), Error);       // seed shape differs
  EXPECT_THROW(CalcGradient(copy, {"y"}, {"x"}, {"g", "g"}), Error);  // one seed per target
  EXPECT_THROW(CalcGradient(copy, {"y"}, {"nope"}), Error);
  EXPECT_EQ(copy.Root()->OpSize(), 1u);
}

}  // namespace
}  // namespace nabla
