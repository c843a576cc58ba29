// Build-time shape inference (dims of -1), the errors bad shapes give, and
// the exact ops the grad makers emit.
#include "nabla/backward.h"
#include "op_test_util.h"

namespace nabla::op_test {
namespace {

// Declares vars, runs build-time inference of one op, returns Out's shape.
Shape InferOut(const std::string& type, const std::vector<std::tuple<std::string, std::string, Shape>>& inputs,
               AttributeMap attrs = {}) {
  ProgramDesc program;
  BlockDesc* block = program.Root();
  VarNameMap in;
  for (const auto& [slot, name, shape] : inputs) {
    VarDesc* v = block->Var(name);
    v->SetShape(shape);
    v->SetDType(DType::kFloat32);
    v->MarkDTypeKnown();
    in[slot].push_back(name);
  }
  OpDesc op(type, in, {{"Out", {"out"}}}, std::move(attrs));
  FillDefaultAttrs(op, *CurrentRegistry());
  InferOpAtBuildTime(op, *block, *CurrentRegistry());
  return block->FindVar("out")->GetShape();
}

TEST(BuildTimeShapes, UnknownBatchDimsFlowThrough) {
  EXPECT_EQ(InferOut("mul", {{"X", "x", {-1, 784}}, {"Y", "w", {784, 10}}}), (Shape{-1, 10}));
  EXPECT_EQ(InferOut("elementwise_add", {{"X", "x", {-1, 10}}, {"Y", "b", {10}}}), (Shape{-1, 10}));
  EXPECT_EQ(InferOut("matmul", {{"X", "x", {-1, 3, 4}}, {"Y", "y", {4, 5}}}), (Shape{-1, 3, 5}));
  EXPECT_EQ(InferOut("reshape", {{"X", "x", {-1, 3, 4}}}, {{"shape", std::vector<int>{0, -1}}}), (Shape{-1, 12}));
  EXPECT_EQ(InferOut("reshape", {{"X", "x", {2, 3, 4}}}, {{"shape", std::vector<int>{-1, 4}}}), (Shape{6, 4}));
  EXPECT_EQ(InferOut("reshape", {{"X", "x", {-1, 3, 4}}}, {{"shape", std::vector<int>{-1, 12}}}), (Shape{-1, 12}));
  EXPECT_EQ(InferOut("reduce_sum", {{"X", "x", {-1, 3, 4}}}, {{"dim", std::vector<int>{-1}}}), (Shape{-1, 3}));
  EXPECT_EQ(InferOut("reduce_mean", {{"X", "x", {-1, 3}}}, {{"reduce_all", true}}), (Shape{1}));
  EXPECT_EQ(InferOut("mean", {{"X", "x", {-1, 3}}}), (Shape{1}));
  EXPECT_EQ(InferOut("transpose", {{"X", "x", {-1, 3, 4}}}, {{"axis", std::vector<int>{2, 0, 1}}}),
            (Shape{4, -1, 3}));
  EXPECT_EQ(InferOut("fill_constant", {}, {{"shape", std::vector<int>{2, 5}}}), (Shape{2, 5}));
}

// Runs `type` on float32 zeros of the given shapes and returns the error.
std::string RunError(const std::string& type, const std::vector<std::pair<std::string, Shape>>& inputs,
                     AttributeMap attrs = {}) {
  OpRun run;
  run.type = type;
  run.attrs = std::move(attrs);
  for (const auto& [slot, shape] : inputs) {
    run.inputs.push_back({slot, {HostTensor{shape, std::vector<double>(NumElements(shape), 0.0)}}});
    run.input_dtypes.push_back(DType::kFloat32);
  }
  try {
    run.Run();
  } catch (const Error& e) {
    EXPECT_TRUE(e.IsBadInput()) << ErrorKindName(e.kind()) << ": " << e.what();
    return e.what();
  }
  ADD_FAILURE() << type << " accepted bad shapes";
  return "";
}

void ExpectMentions(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' missing from: " << msg;
}

TEST(ShapeErrors, SayExpectedAndReceived) {
  ExpectMentions(RunError("elementwise_add", {{"X", {2, 3}}, {"Y", {4}}}),
                 {"elementwise_add", "[2, 3]", "[4]", "but received"});
  ExpectMentions(RunError("elementwise_mul", {{"X", {2, 3, 4}}, {"Y", {3}}}, {{"axis", 2}}),
                 {"elementwise_mul", "axis", "but received"});
  ExpectMentions(RunError("mul", {{"X", {2, 3}}, {"Y", {4, 5}}}), {"'mul'", "[2, 3]", "[4, 5]", "but received"});
  ExpectMentions(RunError("matmul", {{"X", {2, 3}}, {"Y", {2, 3}}}), {"'matmul'", "[2, 3]", "but received"});
  ExpectMentions(RunError("reshape", {{"X", {2, 3}}}, {{"shape", std::vector<int>{4}}}),
                 {"'reshape'", "[2, 3]", "[4]"});
  ExpectMentions(RunError("transpose", {{"X", {2, 3}}}, {{"axis", std::vector<int>{0, 0}}}),
                 {"'transpose'", "permutation", "but received"});
  ExpectMentions(RunError("minus", {{"X", {2, 3}}, {"Y", {3, 2}}}), {"'minus'", "[2, 3]", "[3, 2]"});
  ExpectMentions(RunError("reduce_sum", {{"X", {2, 3}}}, {{"dim", std::vector<int>{2}}}),
                 {"'reduce_sum'", "dim", "but received 2"});
}

// ---------------------------------------------------------------- grad makers

OpDesc Forward(const std::string& type, VarNameMap inputs, AttributeMap attrs = {}) {
  OpDesc op(type, std::move(inputs), {{"Out", {"out"}}}, std::move(attrs));
  FillDefaultAttrs(op, *CurrentRegistry());
  return op;
}

TEST(GradMakers, MinusEmitsScaleOpsAndSkipsNoGradSides) {
  OpDesc fwd = Forward("minus", {{"X", {"a"}}, {"Y", {"b"}}});
  auto both = MakeGradOps(fwd, {});
  ASSERT_EQ(both.size(), 2u);
  EXPECT_EQ(both[0]->Type(), "scale");
  EXPECT_EQ(both[0]->Input("X"), std::vector<std::string>{"out@GRAD"});
  EXPECT_EQ(both[0]->Output("Out"), std::vector<std::string>{"a@GRAD"});
  EXPECT_EQ(both[0]->Attr<float>("scale"), 1.0f);
  EXPECT_EQ(both[1]->Output("Out"), std::vector<std::string>{"b@GRAD"});
  EXPECT_EQ(both[1]->Attr<float>("scale"), -1.0f);
  EXPECT_EQ(both[1]->Attr<float>("bias"), 0.0f);
  auto only_b = MakeGradOps(fwd, {"a"});
  ASSERT_EQ(only_b.size(), 1u);
  EXPECT_EQ(only_b[0]->Output("Out"), std::vector<std::string>{"b@GRAD"});
  EXPECT_EQ(only_b[0]->Attr<float>("scale"), -1.0f);
}

TEST(GradMakers, SumEmitsOneScalePerInputNeedingAGradient) {
  OpDesc fwd = Forward("sum", {{"X", {"a", "b", "c"}}});
  auto ops = MakeGradOps(fwd, {"b"});
  ASSERT_EQ(ops.size(), 2u);
  for (const auto& op : ops) {
    EXPECT_EQ(op->Type(), "scale");
    EXPECT_EQ(op->Attr<float>("scale"), 1.0f);
    EXPECT_EQ(op->Input("X"), std::vector<std::string>{"out@GRAD"});
  }
  EXPECT_EQ(ops[0]->Output("Out"), std::vector<std::string>{"a@GRAD"});
  EXPECT_EQ(ops[1]->Output("Out"), std::vector<std::string>{"c@GRAD"});
}

TEST(GradMakers, ScaleGradIsAScaleWithoutBias) {
  auto ops = MakeGradOps(Forward("scale", {{"X", {"a"}}}, {{"scale", 3.0f}, {"bias", 2.0f}}), {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "scale");
  EXPECT_EQ(ops[0]->Attr<float>("scale"), 3.0f);
  EXPECT_EQ(ops[0]->Attr<float>("bias"), 0.0f);
}

TEST(GradMakers, TransposeGradUsesTheInversePermutation) {
  auto ops = MakeGradOps(Forward("transpose", {{"X", {"a"}}}, {{"axis", std::vector<int>{1, 2, 0}}}), {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "transpose");
  EXPECT_EQ(ops[0]->Attr<std::vector<int>>("axis"), (std::vector<int>{2, 0, 1}));
}

TEST(GradMakers, CastGradCastsBack) {
  auto ops = MakeGradOps(Forward("cast", {{"X", {"a"}}},
                                 {{"in_dtype", std::string("float64")}, {"out_dtype", std::string("float32")}}),
                         {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "cast");
  EXPECT_EQ(ops[0]->Attr<std::string>("in_dtype"), "float32");
  EXPECT_EQ(ops[0]->Attr<std::string>("out_dtype"), "float64");
}

TEST(GradMakers, ElementwiseUsesPaddlesGradOpSlots) {
  auto ops = MakeGradOps(Forward("elementwise_add", {{"X", {"a"}}, {"Y", {"b"}}}), {"b"});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "elementwise_add_grad");
  EXPECT_EQ(ops[0]->Input("Out@GRAD"), std::vector<std::string>{"out@GRAD"});
  EXPECT_EQ(ops[0]->Output("X@GRAD"), std::vector<std::string>{"a@GRAD"});
  EXPECT_EQ(ops[0]->Output("Y@GRAD"), std::vector<std::string>{kEmptyVarName});
}

// A grad kernel given @EMPTY@ for one gradient computes only the other.
TEST(GradKernels, SkipEmptyOutputs) {
  Scope scope;
  auto set = [&](const std::string& name, Shape shape, double v) {
    ToTensor(HostTensor{shape, std::vector<double>(NumElements(shape), v)}, DType::kFloat64,
             scope.Var(name)->GetTensor());
  };
  set("a", {2, 3}, 1.0);
  set("b", {3}, 2.0);
  set("out", {2, 3}, 3.0);
  set("out@GRAD", {2, 3}, 0.5);
  OpDesc grad("elementwise_mul_grad", {{"X", {"a"}}, {"Y", {"b"}}, {"Out", {"out"}}, {"Out@GRAD", {"out@GRAD"}}},
              {{"X@GRAD", {kEmptyVarName}}, {"Y@GRAD", {"b@GRAD"}}}, {});
  FillDefaultAttrs(grad, *CurrentRegistry());
  ExecutorOptions options;
  RunContext run;
  run.options = &options;
  RunOp(grad, scope, HostDevice(), run);
  EXPECT_EQ(scope.FindVar("a@GRAD"), nullptr);
  HostTensor db = FromTensor(scope.FindVar("b@GRAD")->GetTensor());
  EXPECT_EQ(db.shape, (Shape{3}));
  // Y broadcast over 2 rows: dY = sum over rows of dOut * X = 2 * 0.5 * 1.
  for (double v : db.v) EXPECT_DOUBLE_EQ(v, 1.0);
}

}  // namespace
}  // namespace nabla::op_test
