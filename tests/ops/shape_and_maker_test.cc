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
  EXPECT_EQ(InferOut("transpose", {{"X", "x", {-1, 3, 4}}}, {{"axis", std::vector<int>{2, 0, 1}}}), (Shape{4, -1, 3}));
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

// ---------------------------------------------------------------- shape ops

struct VarSpec {
  std::string slot, name;
  Shape shape;
  DType dtype = DType::kFloat32;
};

// Build-time inference of one op over declared vars; returns the shape and
// dtype of output `out_slot`.
std::pair<Shape, DType> InferAtBuildTime(const std::string& type, const std::vector<VarSpec>& inputs,
                                         AttributeMap attrs = {}, const std::string& out_slot = "Out") {
  ProgramDesc program;
  BlockDesc* block = program.Root();
  VarNameMap in;
  for (const VarSpec& s : inputs) {
    VarDesc* v = block->Var(s.name);
    v->SetShape(s.shape);
    v->SetDType(s.dtype);
    v->MarkDTypeKnown();
    in[s.slot].push_back(s.name);
  }
  OpDesc op(type, in, {{out_slot, {"out"}}}, std::move(attrs));
  FillDefaultAttrs(op, *CurrentRegistry());
  InferOpAtBuildTime(op, *block, *CurrentRegistry());
  const VarDesc* out = block->FindVar("out");
  return {out->GetShape(), out->GetDType()};
}

TEST(BuildTimeShapes, ShapeOpsKeepUnknownDims) {
  using V = std::vector<int>;
  auto shape = [](auto r) { return r.first; };
  EXPECT_EQ(shape(InferAtBuildTime("slice", {{"Input", "x", {-1, 4, 5}}},
                                   {{"axes", V{1, 2}}, {"starts", V{1, -3}}, {"ends", V{100, -1}}})),
            (Shape{-1, 3, 2}));
  EXPECT_EQ(shape(InferAtBuildTime("slice", {{"Input", "x", {-1, 4}}},
                                   {{"axes", V{0}}, {"starts", V{0}}, {"ends", V{1}}, {"decrease_axis", V{0}}})),
            (Shape{4}));
  EXPECT_EQ(shape(InferAtBuildTime("gather", {{"X", "x", {10, -1}}, {"Index", "i", {-1}, DType::kInt64}})),
            (Shape{-1, -1}));
  EXPECT_EQ(
      shape(InferAtBuildTime("gather", {{"X", "x", {-1, 3}}, {"Index", "i", {2, 1}, DType::kInt32}}, {{"axis", -1}})),
      (Shape{-1, 2}));
  EXPECT_EQ(shape(InferAtBuildTime("stack", {{"X", "a", {-1, 3}}, {"X", "b", {2, -1}}}, {{"axis", -1}}, "Y")),
            (Shape{2, 3, 2}));
  EXPECT_EQ(shape(InferAtBuildTime("unsqueeze", {{"X", "x", {-1, 3}}}, {{"axes", V{0, -1}}})), (Shape{1, -1, 3, 1}));
  EXPECT_EQ(shape(InferAtBuildTime("squeeze", {{"X", "x", {-1, 1, 3}}})), (Shape{-1, 3}));
  EXPECT_EQ(shape(InferAtBuildTime("squeeze", {{"X", "x", {-1, 3}}}, {{"axes", V{-2}}})), (Shape{3}));
  EXPECT_EQ(shape(InferAtBuildTime("flatten", {{"X", "x", {-1, 3, 4}}}, {{"axis", 2}})), (Shape{-1, 4}));
  EXPECT_EQ(shape(InferAtBuildTime("flatten", {{"X", "x", {-1, 3, 4}}})), (Shape{-1, 12}));
  EXPECT_EQ(shape(InferAtBuildTime("expand", {{"X", "x", {-1, 2}}}, {{"expand_times", V{2, 3}}})), (Shape{-1, 6}));
  EXPECT_EQ(InferAtBuildTime("arg_max", {{"X", "x", {-1, 5}}}, {{"axis", -1}}),
            (std::pair<Shape, DType>{{-1}, DType::kInt64}));
  EXPECT_EQ(InferAtBuildTime("one_hot", {{"X", "x", {-1, 1}, DType::kInt64}}, {{"depth", 7}}),
            (std::pair<Shape, DType>{{-1, 7}, DType::kFloat32}));
  EXPECT_EQ(shape(InferAtBuildTime("elementwise_pow", {{"X", "x", {-1, 3, 4}}, {"Y", "y", {3}}}, {{"axis", 1}})),
            (Shape{-1, 3, 4}));
  for (const char* act : {"gelu", "leaky_relu", "log_softmax"})
    EXPECT_EQ(shape(InferAtBuildTime(act, {{"X", "x", {-1, 5}}})), (Shape{-1, 5})) << act;
}

// Runs one op on zeros (or the given values) and returns its bad-input error.
std::string BadInputError(const std::string& type, const std::vector<std::tuple<std::string, Shape, DType>>& inputs,
                          AttributeMap attrs, std::vector<std::vector<double>> values = {},
                          const std::string& out_slot = "Out") {
  OpRun run;
  run.type = type;
  run.attrs = std::move(attrs);
  run.outputs = {{out_slot, 1}};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto& [slot, shape, dtype] = inputs[i];
    HostTensor h{shape, i < values.size() ? values[i] : std::vector<double>(NumElements(shape), 0.0)};
    if (!run.inputs.empty() && run.inputs.back().first == slot) {
      run.inputs.back().second.push_back(h);
      continue;
    }
    run.inputs.push_back({slot, {h}});
    run.input_dtypes.push_back(dtype);
  }
  try {
    run.Run();
  } catch (const Error& e) {
    EXPECT_TRUE(e.IsBadInput()) << ErrorKindName(e.kind()) << ": " << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << type << " accepted bad input";
  return "";
}

TEST(ShapeErrors, ShapeOpsNameTheOpAndBothSides) {
  using V = std::vector<int>;
  const DType f = DType::kFloat32, i64 = DType::kInt64;
  ExpectMentions(BadInputError("squeeze", {{"X", {2, 3}, f}}, {{"axes", V{1}}}),
                 {"'squeeze'", "[2, 3]", "must be 1", "but received 3"});
  ExpectMentions(BadInputError("squeeze", {{"X", {2, 1}, f}}, {{"axes", V{2}}}),
                 {"'squeeze'", "axes", "[-2, 2)", "but received 2"});
  ExpectMentions(BadInputError("gather", {{"X", {5, 3}, f}, {"Index", {3}, i64}}, {}, {{}, {1, 5, 0}}),
                 {"'gather'", "Index[1] = 5", "out of range [0, 5)", "axis 0", "[5, 3]"});
  ExpectMentions(BadInputError("gather", {{"X", {5, 3}, f}, {"Index", {2}, i64}}, {{"axis", 1}}, {{}, {-1, 0}}),
                 {"'gather'", "Index[0] = -1", "[0, 3)", "axis 1"});
  ExpectMentions(BadInputError("gather", {{"X", {5, 3}, f}, {"Index", {2, 2}, i64}}, {}),
                 {"'gather'", "[K] or [K, 1]", "[2, 2]"});
  ExpectMentions(BadInputError("slice", {{"Input", {3, 4}, f}},
                               {{"axes", V{1}}, {"starts", V{0}}, {"ends", V{2}}, {"decrease_axis", V{1}}}),
                 {"'slice'", "decrease_axis", "[3, 4]", "but received size 2"});
  ExpectMentions(BadInputError("slice", {{"Input", {3, 4}, f}}, {{"axes", V{0, 1}}, {"starts", V{0}}, {"ends", V{1}}}),
                 {"'slice'", "starts and ends", "[0]"});
  ExpectMentions(BadInputError("slice", {{"Input", {3, 4}, f}}, {{"axes", V{-3}}, {"starts", V{0}}, {"ends", V{1}}}),
                 {"'slice'", "axes", "[-2, 2)", "but received -3"});
  ExpectMentions(BadInputError("unsqueeze", {{"X", {2, 3}, f}}, {{"axes", V{4}}}),
                 {"'unsqueeze'", "[-3, 3)", "[2, 3]", "but received 4"});
  ExpectMentions(BadInputError("unsqueeze", {{"X", {2, 3}, f}}, {}), {"'unsqueeze'", "axes", "but received []"});
  ExpectMentions(BadInputError("stack", {{"X", {2, 3}, f}, {"X", {3, 2}, f}}, {}, {}, "Y"),
                 {"'stack'", "[2, 3]", "X[1] has shape [3, 2]"});
  ExpectMentions(BadInputError("stack", {{"X", {2, 3}, f}}, {{"axis", 3}}, {}, "Y"),
                 {"'stack'", "[-3, 3)", "but received 3"});
  ExpectMentions(BadInputError("expand", {{"X", {2, 3}, f}}, {{"expand_times", V{2}}}),
                 {"'expand'", "expand_times", "[2, 3]", "but received [2]"});
  ExpectMentions(BadInputError("flatten", {{"X", {2, 3, 4}, f}}, {{"axis", 4}}),
                 {"'flatten'", "[0, 3]", "[2, 3, 4]", "but received 4"});
  ExpectMentions(BadInputError("arg_max", {{"X", {2, 3}, f}}, {{"axis", 2}}),
                 {"'arg_max'", "[-2, 2)", "but received 2"});
  ExpectMentions(BadInputError("one_hot", {{"X", {3, 1}, i64}}, {{"depth", 4}}, {{0, 4, 1}}),
                 {"'one_hot'", "X[1] = 4", "[0, 4)"});
  ExpectMentions(BadInputError("one_hot", {{"X", {3, 2}, i64}}, {{"depth", 4}}),
                 {"'one_hot'", "[..., 1]", "but received shape [3, 2]"});
  ExpectMentions(BadInputError("one_hot", {{"X", {3, 1}, f}}, {{"depth", 4}}), {"'one_hot'", "int64", "float32"});
  ExpectMentions(BadInputError("elementwise_max", {{"X", {2, 3}, f}, {"Y", {4}, f}}, {}),
                 {"elementwise_max", "[2, 3]", "[4]", "but received"});
  ExpectMentions(BadInputError("elementwise_pow", {{"X", {2, 3, 4}, f}, {"Y", {3}, f}}, {{"axis", 2}}),
                 {"elementwise_pow", "axis 2", "[2, 3, 4]", "[3]"});
  ExpectMentions(BadInputError("log_softmax", {{"X", {2, 3}, f}}, {{"axis", 2}}),
                 {"log_softmax", "[-2, 2)", "but received 2"});
}

TEST(GradMakers, ShapeOpGradsReadInputsNotOutputs) {
  OpDesc fwd("gather", {{"X", {"a"}}, {"Index", {"i"}}}, {{"Out", {"out"}}}, {});
  FillDefaultAttrs(fwd, *CurrentRegistry());
  auto ops = MakeGradOps(fwd, {"i"});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "gather_grad");
  EXPECT_EQ(ops[0]->Input("X"), std::vector<std::string>{"a"});
  EXPECT_EQ(ops[0]->Input("Index"), std::vector<std::string>{"i"});
  EXPECT_EQ(ops[0]->Input("Out@GRAD"), std::vector<std::string>{"out@GRAD"});
  EXPECT_FALSE(ops[0]->HasInput("Out"));
  EXPECT_EQ(ops[0]->Output("X@GRAD"), std::vector<std::string>{"a@GRAD"});
  EXPECT_EQ(ops[0]->Output("Index@GRAD"), std::vector<std::string>{kEmptyVarName});
  for (const char* type : {"arg_max", "one_hot"}) {
    OpDesc op(type, {{"X", {"a"}}}, {{"Out", {"out"}}}, {{"depth", 3}});
    if (std::string(type) == "arg_max") op.MutableAttrs().erase("depth");
    FillDefaultAttrs(op, *CurrentRegistry());
    EXPECT_TRUE(MakeGradOps(op, {}).empty()) << type;
  }
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
  auto ops = MakeGradOps(
      Forward("cast", {{"X", {"a"}}}, {{"in_dtype", std::string("float64")}, {"out_dtype", std::string("float32")}}),
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

// Paddle's activation_op family: each grad op reads what Paddle's
// ActBwdOpFwdDeps says (X, Out, or only Out@GRAD for the zero gradients of
// ceil, floor and round) and carries the forward attributes.
TEST(GradMakers, ActivationGradsReadPaddlesSlots) {
  const std::vector<std::string> from_x = {
      "logsigmoid", "tanh_shrink", "hard_shrink", "softshrink",       "brelu", "hard_swish", "swish", "elu",
      "stanh",      "softplus",    "softsign",    "thresholded_relu", "sin",   "cos",        "atan",  "asin",
      "acos",       "log1p",       "pow"};
  const std::vector<std::string> from_out = {"relu6", "hard_sigmoid", "soft_relu", "rsqrt", "reciprocal"};
  const std::vector<std::string> from_dout = {"ceil", "floor", "round"};
  for (const auto* list : {&from_x, &from_out, &from_dout}) {
    for (const std::string& type : *list) {
      SCOPED_TRACE(type);
      auto ops = MakeGradOps(Forward(type, {{"X", {"a"}}}), {});
      ASSERT_EQ(ops.size(), 1u);
      EXPECT_EQ(ops[0]->Type(), type + "_grad");
      EXPECT_EQ(ops[0]->Input("Out@GRAD"), std::vector<std::string>{"out@GRAD"});
      EXPECT_EQ(ops[0]->Output("X@GRAD"), std::vector<std::string>{"a@GRAD"});
      EXPECT_EQ(ops[0]->HasInput("X"), list == &from_x);
      EXPECT_EQ(ops[0]->HasInput("Out"), list == &from_out);
    }
  }
  auto ops = MakeGradOps(Forward("hard_swish", {{"X", {"a"}}}, {{"offset", 2.0f}}), {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Attr<float>("offset"), 2.0f);
  EXPECT_EQ(ops[0]->Attr<float>("threshold"), 6.0f);
}

TEST(RunTimeErrors, IntegerPowNeedsANonNegativeFactor) {
  ExpectMentions(BadInputError("pow", {{"X", {2}, DType::kInt32}}, {{"factor", -1.0f}}),
                 {"'pow'", "int32", "factor", "but received factor -1"});
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

// ------------------------------------------------------- nn ops at build time

class NnBuild : public ::testing::Test {
 protected:
  VarDesc* Declare(const std::string& name, Shape shape, DType dtype = DType::kFloat32) {
    VarDesc* v = prog.Root()->Var(name);
    v->SetShape(std::move(shape));
    v->SetDType(dtype);
    v->MarkDTypeKnown();
    v->SetDeclared(true);
    return v;
  }
  void Infer(OpDesc op) {
    FillDefaultAttrs(op, *CurrentRegistry());
    InferOpAtBuildTime(op, *prog.Root(), *CurrentRegistry());
  }
  Shape ShapeOfVar(const std::string& name) { return prog.Root()->FindVar(name)->GetShape(); }
  DType DTypeOfVar(const std::string& name) { return prog.Root()->FindVar(name)->GetDType(); }
  ProgramDesc prog;
};

TEST_F(NnBuild, UnknownBatchDimsPropagate) {
  Declare("x", {-1, 10});
  Declare("label", {-1, 1}, DType::kInt64);
  Declare("w", {100, 8});
  Declare("ids", {-1, 5, 1}, DType::kInt64);
  Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"label"}}},
               {{"Softmax", {"sm"}}, {"Loss", {"loss"}}}, {}));
  EXPECT_EQ(ShapeOfVar("sm"), (Shape{-1, 10}));
  EXPECT_EQ(ShapeOfVar("loss"), (Shape{-1, 1}));
  Infer(OpDesc("lookup_table", {{"W", {"w"}}, {"Ids", {"ids"}}}, {{"Out", {"emb"}}}, {}));
  EXPECT_EQ(ShapeOfVar("emb"), (Shape{-1, 5, 8}));
  Infer(OpDesc("concat", {{"X", {"x", "x"}}}, {{"Out", {"cat"}}}, {{"axis", 0}}));
  EXPECT_EQ(ShapeOfVar("cat"), (Shape{-1, 10}));
  Infer(OpDesc("split", {{"X", {"x"}}}, {{"Out", {"a", "b"}}}, {{"sections", std::vector<int>{3, -1}}, {"axis", 1}}));
  EXPECT_EQ(ShapeOfVar("a"), (Shape{-1, 3}));
  EXPECT_EQ(ShapeOfVar("b"), (Shape{-1, 7}));
  Infer(OpDesc("top_k", {{"X", {"x"}}}, {{"Out", {"tv"}}, {"Indices", {"ti"}}}, {{"k", 3}}));
  EXPECT_EQ(ShapeOfVar("ti"), (Shape{-1, 3}));
  EXPECT_EQ(DTypeOfVar("ti"), DType::kInt64);
  Infer(OpDesc("accuracy", {{"Out", {"tv"}}, {"Indices", {"ti"}}, {"Label", {"label"}}},
               {{"Accuracy", {"acc"}}, {"Correct", {"cor"}}, {"Total", {"tot"}}}, {}));
  EXPECT_EQ(ShapeOfVar("acc"), (Shape{1}));
  EXPECT_EQ(DTypeOfVar("cor"), DType::kInt32);
  Infer(OpDesc("layer_norm", {{"X", {"emb"}}}, {{"Y", {"ln"}}, {"Mean", {"mu"}}, {"Variance", {"var"}}},
               {{"begin_norm_axis", 2}}));
  EXPECT_EQ(ShapeOfVar("ln"), (Shape{-1, 5, 8}));
  EXPECT_EQ(ShapeOfVar("mu"), (Shape{-1}));
}

template <typename F>
void ExpectError(F&& f, ErrorKind kind, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(NnBuild, BadInputsAreReportedWithBothSides) {
  Declare("x", {-1, 10});
  Declare("label3", {-1, 1, 1}, DType::kInt64);
  Declare("flabel", {-1, 1});
  Declare("odd", {4, 7});
  ExpectError(
      [&] {
        Infer(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"label3"}}}, {{"Y", {"y"}}}, {}));
      },
      ErrorKind::kInvalidArgument,
      "a hard Label must have the rank of X (2) or one less, but received Label [-1, 1, 1]");
  ExpectError(
      [&] {
        Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"flabel"}}},
                     {{"Softmax", {"s"}}, {"Loss", {"l"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "input Label must be int64 (or int32), but received float32");
  ExpectError(
      [&] {
        Infer(OpDesc("split", {{"X", {"odd"}}}, {{"Out", {"a", "b"}}}, {{"num", 2}, {"axis", 1}}));
      },
      ErrorKind::kInvalidArgument, "the split axis (size 7) must divide evenly into num = 2 parts");
  ExpectError(
      [&] {
        Infer(OpDesc("softmax", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"axis", 2}}));
      },
      ErrorKind::kOutOfRange, "attribute axis must be in [-2, 2) for an input of rank 2, but received 2");
  ExpectError(
      [&] {
        Infer(OpDesc("concat", {{"X", {"x", "odd"}}}, {{"Out", {"c"}}}, {{"axis", 0}}));
      },
      ErrorKind::kInvalidArgument, "X must agree on every dim but axis 0");
  ExpectError(
      [&] {
        Infer(OpDesc("top_k", {{"X", {"odd"}}}, {{"Out", {"v"}}, {"Indices", {"i"}}}, {{"k", 8}}));
      },
      ErrorKind::kOutOfRange, "k = 8 must not exceed the last dim of X");
  // Attribute checkers run in the verifier, which every loaded program passes.
  prog.Root()->AppendOp(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"dropout_prob", 1.5f}}));
  ExpectError([&] { VerifyProgram(prog, *CurrentRegistry()); }, ErrorKind::kInvalidArgument,
              "attribute dropout_prob must be in [0, 1], but received 1.5");
  prog.Root()->RemoveOps(prog.Root()->OpSize() - 1, prog.Root()->OpSize());
  Declare("s", {10});
  prog.Root()->AppendOp(OpDesc(
      "fused_batch_norm_act", {{"X", {"x"}}, {"Scale", {"s"}}, {"Bias", {"s"}}, {"Mean", {"s"}}, {"Variance", {"s"}}},
      {{"Y", {"y"}}, {"MeanOut", {"s"}}, {"VarianceOut", {"s"}}, {"SavedMean", {"m"}}, {"SavedVariance", {"v"}}},
      {{"act_type", std::string("sigmoid")}}));
  ExpectError([&] { VerifyProgram(prog, *CurrentRegistry()); }, ErrorKind::kInvalidArgument,
              "attribute act_type must be relu, but received 'sigmoid'");
}

// Paddle's cross_entropy takes a hard Label of rank X - 1, and Y then has
// Label's shape; softmax_with_cross_entropy takes it too (class axis last),
// so the fusion of softmax + cross_entropy keeps Y's shape.
TEST_F(NnBuild, HardLabelOfRankOneLessGivesLabelsShape) {
  Declare("x", {-1, 3, 10});
  Declare("short", {-1, 3}, DType::kInt64);
  Infer(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"short"}}}, {{"Y", {"y"}}}, {}));
  EXPECT_EQ(ShapeOfVar("y"), (Shape{-1, 3}));
  Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"short"}}},
               {{"Softmax", {"s"}}, {"Loss", {"l"}}}, {}));
  EXPECT_EQ(ShapeOfVar("l"), (Shape{-1, 3}));
  // Not on another class axis, and not for soft labels.
  ExpectError(
      [&] {
        Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"short"}}},
                     {{"Softmax", {"s"}}, {"Loss", {"l"}}}, {{"axis", 1}}));
      },
      ErrorKind::kInvalidArgument, "Label must have the rank of Logits (3");
  Declare("fshort", {-1, 3});
  ExpectError(
      [&] {
        Infer(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"fshort"}}}, {{"Y", {"y"}}}, {{"soft_label", true}}));
      },
      ErrorKind::kInvalidArgument, "with soft_label the Label must have the rank of X (3), but received Label [-1, 3]");
}

// cross_entropy over an empty class axis: each row still gets its loss
// (soft: 0; hard: an out-of-range label), never an unwritten output (Y had
// [rows, 1] elements but rows were counted as Numel / d = 0).
TEST(RunTimeErrors, CrossEntropyOverNoClasses) {
  OpRun run;
  run.type = "cross_entropy";
  run.inputs = {{"X", {HostTensor{{2, 0}, {}}}}, {"Label", {HostTensor{{2, 0}, {}}}}};
  run.input_dtypes = {DType::kFloat64, DType::kFloat64};
  run.attrs = {{"soft_label", true}, {"ignore_index", -100}};
  run.outputs = {{"Y", 1}};
  const std::vector<HostTensor> y = run.Run();
  EXPECT_EQ(y.at(0).shape, (Shape{2, 1}));
  EXPECT_EQ(y.at(0).v, (std::vector<double>{0.0, 0.0}));
  run.inputs[1] = {"Label", {HostTensor{{2, 1}, {0, 0}}}};
  run.input_dtypes[1] = DType::kInt64;
  run.attrs["soft_label"] = false;
  try {
    run.Run();
    FAIL() << "a label into no classes was accepted";
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("Label[0] must be in [0, 0)"), std::string::npos) << err.what();
  }
}

// Integer division is Paddle's (C++'s truncating `/`); a zero divisor is an
// error, not a SIGFPE, and the lowest int32 divided by -1 wraps instead of
// trapping.
TEST(RunTimeErrors, IntegerDivision) {
  OpRun run;
  run.type = "elementwise_div";
  run.inputs = {{"X", {HostTensor{{3}, {-7, -2147483648.0, 9}}}}, {"Y", {HostTensor{{3}, {2, -1, 4}}}}};
  run.input_dtypes = {DType::kInt32, DType::kInt32};
  EXPECT_EQ(run.Run().at(0).v, (std::vector<double>{-3, -2147483648.0, 2}));
  run.inputs[1].second[0].v = {2, 0, 4};
  try {
    run.Run();
    FAIL() << "an integer division by zero was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(
        std::string(err.what()).find("integer division by zero: Y must have no zero element, but received Y[1] = 0"),
        std::string::npos)
        << err.what();
  }
}

// The ops a GPT needs: flash_attn, lookup_table_v2, tril_triu.
TEST_F(NnBuild, AttentionOpsShapesAndErrors) {
  Declare("q", {-1, 5, 2, 4});
  Declare("k", {-1, 7, 2, 4});
  Declare("v", {-1, 7, 2, 3});
  Declare("mask", {1, 5, 7});
  Declare("bad_mask", {3, 5, 7});
  Declare("k3", {-1, 7, 3, 4});
  Infer(OpDesc("flash_attn", {{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}, {"attn_mask", {"mask"}}},
               {{"out", {"o"}}, {"softmax_lse", {"lse"}}}, {{"causal", true}}));
  EXPECT_EQ(ShapeOfVar("o"), (Shape{-1, 5, 2, 3}));
  EXPECT_EQ(ShapeOfVar("lse"), (Shape{-1, 2, 5}));
  ExpectError(
      [&] {
        Infer(OpDesc("flash_attn", {{"q", {"q"}}, {"k", {"k3"}}, {"v", {"v"}}},
                     {{"out", {"o2"}}, {"softmax_lse", {"l2"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "but received k [-1, 7, 3, 4] and v [-1, 7, 2, 3]");
  ExpectError(
      [&] {
        Infer(OpDesc("flash_attn", {{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}, {"attn_mask", {"bad_mask"}}},
                     {{"out", {"o2"}}, {"softmax_lse", {"l2"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "attn_mask of shape [3, 5, 7] does not broadcast to [batch, heads, seq_q, seq_k]");
  // Dropout's seed and offset: int64 [2].
  Declare("seed32", {2}, DType::kInt32);
  Infer(OpDesc("flash_attn", {{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}},
               {{"out", {"o3"}}, {"softmax_lse", {"l3"}}, {"seed_offset", {"so3"}}}, {{"dropout", 0.1f}}));
  EXPECT_EQ(ShapeOfVar("so3"), (Shape{2}));
  ExpectError(
      [&] {
        Infer(OpDesc("flash_attn", {{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}, {"fixed_seed_offset", {"seed32"}}},
                     {{"out", {"o2"}}, {"softmax_lse", {"l2"}}}, {{"dropout", 0.1f}}));
      },
      ErrorKind::kInvalidArgument, "fixed_seed_offset must be int64 [2] (seed, offset), but received int32 [2]");

  Declare("w", {100, 8});
  Declare("ids", {-1, 5}, DType::kInt64);
  Infer(OpDesc("lookup_table_v2", {{"W", {"w"}}, {"Ids", {"ids"}}}, {{"Out", {"emb"}}}, {}));
  EXPECT_EQ(ShapeOfVar("emb"), (Shape{-1, 5, 8}));
  Declare("row", {5});
  ExpectError(
      [&] {
        Infer(OpDesc("tril_triu", {{"X", {"row"}}}, {{"Out", {"t"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "X must have rank >= 2");
}

// Ids are data, so their range is checked when the kernel runs.
TEST(RunTimeErrors, LookupTableIdOutOfRange) {
  OpRun run;
  run.type = "lookup_table";
  run.inputs = {{"W", {HostTensor{{5, 3}, std::vector<double>(15, 1.0)}}}, {"Ids", {HostTensor{{2, 1}, {1, 5}}}}};
  run.input_dtypes = {DType::kFloat32, DType::kInt64};
  try {
    run.Run();
    FAIL() << "an out-of-range id was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(err.what()).find("Ids[1] must be a row of W, in [0, 5), but received 5"), std::string::npos)
        << err.what();
  }
}

// split's gradient is a concat; the builder zero-fills the gradient of the
// part nobody used, so X@GRAD is dOut on the used part and 0 elsewhere.
TEST(GradMakers, SplitGradientZeroFillsUnusedParts) {
  ProgramDesc prog;
  BlockDesc* b = prog.Root();
  VarDesc* x = b->Var("x");
  x->SetShape({2, 3});
  x->SetDType(DType::kFloat64);
  x->MarkDTypeKnown();
  x->SetDeclared(true);
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::make_unique<OpDesc>("split", VarNameMap{{"X", {"x"}}}, VarNameMap{{"Out", {"a", "b"}}},
                                         AttributeMap{{"sections", std::vector<int>{1, 2}}, {"axis", 1}}));
  ops.push_back(std::make_unique<OpDesc>("squared_l2_norm", VarNameMap{{"X", {"b"}}}, VarNameMap{{"Out", {"loss"}}},
                                         AttributeMap{}));
  for (auto& op : ops) {
    FillDefaultAttrs(*op, *CurrentRegistry());
    InferOpAtBuildTime(*op, *b, *CurrentRegistry());
    b->AppendOp(std::move(op));
  }
  AppendBackward(prog, "loss", {}, {});
  bool has_concat = false;
  for (const auto& op : b->AllOps()) has_concat = has_concat || op->Type() == "concat";
  EXPECT_TRUE(has_concat);
  Scope scope;
  ToTensor(HostTensor{{2, 3}, {1, 2, 3, 4, 5, 6}}, DType::kFloat64, scope.Var("x")->GetTensor());
  auto exec = CreateExecutor("sequential", HostDevice());
  exec->Run(prog, 0, scope);
  EXPECT_EQ(FromTensor(scope.FindVar("loss")->GetTensor()).v, (std::vector<double>{4 + 9 + 25 + 36}));
  EXPECT_EQ(FromTensor(scope.FindVar("x@GRAD")->GetTensor()).v, (std::vector<double>{0, 4, 6, 0, 10, 12}));
}

// flash_attn's dropout mask is drawn again in backward from the seed the
// forward used: a training program must carry it (seed_offset, or a fed
// fixed_seed_offset), else the gradient could not see the same mask.
TEST(GradMakers, FlashAttnDropoutNeedsItsSeedForTheGradient) {
  for (const bool with_seed : {false, true}) {
    SCOPED_TRACE(with_seed ? "seed_offset written" : "no seed_offset");
    ProgramDesc prog;
    BlockDesc* b = prog.Root();
    for (const char* n : {"q", "k", "v"}) {
      VarDesc* x = b->Var(n);
      x->SetShape({1, 4, 2, 3});
      x->SetDType(DType::kFloat64);
      x->MarkDTypeKnown();
      x->SetPersistable(true);
      x->SetDeclared(true);
    }
    VarNameMap outs{{"out", {"o"}}, {"softmax_lse", {"lse"}}};
    if (with_seed) outs["seed_offset"] = {"so"};
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("flash_attn", VarNameMap{{"q", {"q"}}, {"k", {"k"}}, {"v", {"v"}}}, outs,
                                           AttributeMap{{"dropout", 0.1f}}));
    ops.push_back(
        std::make_unique<OpDesc>("mean", VarNameMap{{"X", {"o"}}}, VarNameMap{{"Out", {"loss"}}}, AttributeMap{}));
    for (auto& op : ops) {
      FillDefaultAttrs(*op, *CurrentRegistry());
      InferOpAtBuildTime(*op, *b, *CurrentRegistry());
      b->AppendOp(std::move(op));
    }
    if (with_seed) {
      AppendBackward(prog, "loss", {}, {});
      const OpDesc* grad = nullptr;
      for (const auto& op : b->AllOps())
        if (op->Type() == "flash_attn_grad") grad = op.get();
      ASSERT_NE(grad, nullptr);
      EXPECT_EQ(grad->Input("seed_offset"), std::vector<std::string>{"so"});
    } else {
      ExpectError([&] { AppendBackward(prog, "loss", {}, {}); }, ErrorKind::kInvalidArgument,
                  "dropout 0.1 in training needs the output seed_offset (or the input fixed_seed_offset)");
    }
  }
}

// top_k ranks NaN above every number (torch.topk, arg_max), NaNs tying by
// index; the comparator was no strict weak order once a row held NaN, and
// std::partial_sort dropped the row's largest number ([1, nan, 3], k = 2
// gave [1, nan]). top_k_grad scatters Out@GRAD to exactly those indices.
TEST(TopK, NaNRanksLargestAndTheGradientFollowsItsIndices) {
  const double nan = std::nan("");
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    OpRun fwd;
    fwd.type = "top_k";
    fwd.inputs = {{"X", {HostTensor{{2, 3}, {1, nan, 3, 2, 7, nan}}}}};
    fwd.input_dtypes = {dtype};
    fwd.attrs = {{"k", 2}};
    fwd.outputs = {{"Out", 1}, {"Indices", 1}};
    const std::vector<HostTensor> r = fwd.Run();  // by slot name: Indices, Out
    ASSERT_EQ(r.size(), 2u);
    const HostTensor &indices = r[0], &out = r[1];
    EXPECT_EQ(indices.v, (std::vector<double>{1, 2, 2, 1}));
    ASSERT_EQ(out.v.size(), 4u);
    EXPECT_TRUE(std::isnan(out.v[0]));
    EXPECT_EQ(out.v[1], 3.0);
    EXPECT_TRUE(std::isnan(out.v[2]));
    EXPECT_EQ(out.v[3], 7.0);
    OpRun grad;
    grad.type = "top_k_grad";
    grad.inputs = {{"X", {HostTensor{{2, 3}, {1, nan, 3, 2, 7, nan}}}},
                   {"Indices", {indices}},
                   {"Out@GRAD", {HostTensor{{2, 2}, {10, 20, 30, 40}}}}};
    grad.input_dtypes = {dtype, DType::kInt64, dtype};
    grad.attrs = {{"k", 2}};
    grad.outputs = {{"X@GRAD", 1}};
    EXPECT_EQ(grad.Run()[0].v, (std::vector<double>{0, 10, 20, 0, 40, 30}));
  }
}

// Integer and bool tensors through concat and split get no gradient: their
// grad makers emit nothing for them, and a program that concats integer ids
// into a float loss gets its backward part.
TEST(GradMakers, ConcatAndSplitOfIntegersEmitNoGradOps) {
  OpDesc concat("concat", {{"X", {"a", "b"}}}, {{"Out", {"c"}}}, {{"axis", 0}});
  FillDefaultAttrs(concat, *CurrentRegistry());
  EXPECT_TRUE(MakeGradOps(concat, {"a", "b"}).empty());
  EXPECT_EQ(MakeGradOps(concat, {"a"}).size(), 1u);  // a float X still gets its part
  OpDesc split("split", {{"X", {"c"}}}, {{"Out", {"a", "b"}}}, {{"num", 2}});
  FillDefaultAttrs(split, *CurrentRegistry());
  EXPECT_TRUE(MakeGradOps(split, {"c"}).empty());

  ProgramDesc prog;
  BlockDesc* b = prog.Root();
  for (const char* n : {"ids0", "ids1"}) {
    VarDesc* v = b->Var(n);
    v->SetShape({2, 3});
    v->SetDType(DType::kInt64);
    v->MarkDTypeKnown();
    v->SetDeclared(true);
  }
  VarDesc* w = b->Var("w");
  w->SetShape({3, 3});
  w->SetDType(DType::kFloat64);
  w->MarkDTypeKnown();
  w->SetPersistable(true);
  w->SetDeclared(true);
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::make_unique<OpDesc>("concat", VarNameMap{{"X", {"ids0", "ids1"}}}, VarNameMap{{"Out", {"ids"}}},
                                         AttributeMap{}));
  ops.push_back(std::make_unique<OpDesc>("split", VarNameMap{{"X", {"ids"}}}, VarNameMap{{"Out", {"top", "bottom"}}},
                                         AttributeMap{{"sections", std::vector<int>{3, 1}}}));
  ops.push_back(std::make_unique<OpDesc>(
      "cast", VarNameMap{{"X", {"top"}}}, VarNameMap{{"Out", {"f"}}},
      AttributeMap{{"in_dtype", std::string("int64")}, {"out_dtype", std::string("float64")}}));
  ops.push_back(std::make_unique<OpDesc>("elementwise_mul", VarNameMap{{"X", {"f"}}, {"Y", {"w"}}},
                                         VarNameMap{{"Out", {"p"}}}, AttributeMap{}));
  ops.push_back(
      std::make_unique<OpDesc>("mean", VarNameMap{{"X", {"p"}}}, VarNameMap{{"Out", {"loss"}}}, AttributeMap{}));
  for (auto& op : ops) {
    FillDefaultAttrs(*op, *CurrentRegistry());
    InferOpAtBuildTime(*op, *b, *CurrentRegistry());
    b->AppendOp(std::move(op));
  }
  AppendBackward(prog, "loss", {}, {});
  for (const auto& op : b->AllOps()) EXPECT_NE(op->Type(), "concat_grad");
  Scope scope;
  ToTensor(HostTensor{{2, 3}, {1, 2, 3, 4, 5, 6}}, DType::kInt64, scope.Var("ids0")->GetTensor());
  ToTensor(HostTensor{{2, 3}, {7, 8, 9, 10, 11, 12}}, DType::kInt64, scope.Var("ids1")->GetTensor());
  ToTensor(HostTensor{{3, 3}, std::vector<double>(9, 1.0)}, DType::kFloat64, scope.Var("w")->GetTensor());
  CreateExecutor("sequential", HostDevice())->Run(prog, 0, scope);
  EXPECT_EQ(FromTensor(scope.FindVar("top")->GetTensor()).v, (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  const HostTensor dw = FromTensor(scope.FindVar("w@GRAD")->GetTensor());
  ASSERT_EQ(dw.v.size(), 9u);
  for (size_t i = 0; i < 9; ++i) EXPECT_NEAR(dw.v[i], (i + 1) / 9.0, 1e-15) << i;
}

// The mean of no elements is NaN (Paddle's mean_all and reduce_mean kernels,
// NumPy, PyTorch), not 0; its gradient is the empty X@GRAD, no division by 0.
TEST(GradKernels, MeanOfNothingIsNaNWithAnEmptyGradient) {
  for (const char* type : {"mean", "reduce_mean"}) {
    SCOPED_TRACE(type);
    OpRun fwd;
    fwd.type = type;
    fwd.inputs = {{"X", {HostTensor{{0, 4}, {}}}}};
    fwd.input_dtypes = {DType::kFloat64};
    if (std::string(type) == "reduce_mean") fwd.attrs = {{"reduce_all", true}};
    const HostTensor out = fwd.Run()[0];
    ASSERT_EQ(out.v.size(), 1u);
    EXPECT_TRUE(std::isnan(out.v[0])) << out.v[0];
    OpRun grad;
    grad.type = std::string(type) + "_grad";
    grad.inputs = {{"X", {HostTensor{{0, 4}, {}}}}, {"Out", {out}}, {"Out@GRAD", {HostTensor{{1}, {1.0}}}}};
    grad.input_dtypes = {DType::kFloat64, DType::kFloat64, DType::kFloat64};
    grad.attrs = fwd.attrs;
    grad.outputs = {{"X@GRAD", 1}};
    const HostTensor dx = grad.Run()[0];
    EXPECT_EQ(dx.shape, (Shape{0, 4}));
  }
}

// An integer X scales by scale and bias truncated to its dtype (Paddle's
// scale.to<T>()); one the dtype cannot hold is an error, not an undefined
// conversion.
TEST(RunTimeErrors, IntegerScaleOutsideTheDType) {
  ExpectMentions(BadInputError("scale", {{"X", {2}, DType::kInt32}}, {{"scale", 3e9f}}),
                 {"'scale'", "scale", "int32", "but received 3"});
  ExpectMentions(BadInputError("scale", {{"X", {2}, DType::kInt64}}, {{"bias", std::nanf("")}}),
                 {"'scale'", "bias", "int64", "but received nan"});
}

}  // namespace
}  // namespace nabla::op_test
