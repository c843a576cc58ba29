#include <gtest/gtest.h>

#include "common/toy_ops.h"
#include "io_test_util.h"
#include "nabla/op_registry.h"

namespace nabla::io_test {
namespace {

class Inference : public ::testing::Test {
 protected:
  void SetUp() override { toys::RegisterToyOps(); }

  VarDesc* Declare(BlockDesc* b, const std::string& name, Shape shape, std::optional<DType> dtype) {
    VarDesc* v = b->Var(name);
    v->SetShape(std::move(shape));
    v->SetDeclared(true);
    if (dtype) {
      v->SetDType(*dtype);
      v->MarkDTypeKnown();
    }
    return v;
  }

  OpDesc Op(const std::string& type, VarNameMap in, VarNameMap out) {
    OpDesc op(type, std::move(in), std::move(out), {});
    FillDefaultAttrs(op, *CurrentRegistry());
    return op;
  }

  ProgramDesc p_;
};

TEST_F(Inference, CreatesOutputsWithUnknownDims) {
  Declare(p_.Root(), "x", {-1, 784}, DType::kFloat64);
  Declare(p_.Root(), "w", {784, 10}, DType::kFloat64);
  OpDesc mul = Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"y"}}});
  InferOpAtBuildTime(mul, *p_.Root(), *CurrentRegistry());
  const VarDesc* y = p_.Root()->FindVar("y");
  ASSERT_NE(y, nullptr);
  EXPECT_FALSE(y->Declared());
  EXPECT_EQ(y->GetShape(), (Shape{-1, 10}));
  EXPECT_TRUE(y->HasDType());
  EXPECT_EQ(y->GetDType(), DType::kFloat64);
  EXPECT_EQ(y->Type(), VarType::kDense);
}

// Inference never guesses a dtype: an input without one leaves the outputs
// without one (the shape the function set before asking is kept).
TEST_F(Inference, UnknownInputDTypeStaysUnknown) {
  Declare(p_.Root(), "x", {-1, 4}, std::nullopt);
  Declare(p_.Root(), "w", {4, 2}, DType::kFloat32);
  OpDesc mul = Op("mul", {{"X", {"x"}}, {"Y", {"w"}}}, {{"Out", {"y"}}});
  InferOpAtBuildTime(mul, *p_.Root(), *CurrentRegistry());
  const VarDesc* y = p_.Root()->FindVar("y");
  ASSERT_NE(y, nullptr);
  EXPECT_FALSE(y->HasDType());
  EXPECT_EQ(y->GetShape(), (Shape{-1, 2}));
}

TEST_F(Inference, OutputsInParentBlocksAreUpdatedNotShadowed) {
  Declare(p_.Root(), "a", {3}, DType::kFloat32);
  VarDesc* h = Declare(p_.Root(), "h", {}, std::nullopt);
  BlockDesc* body = p_.AppendBlock(0);
  OpDesc sum = Op("toy_sum", {{"X", {"a"}}}, {{"Out", {"h"}}});
  InferOpAtBuildTime(sum, *body, *CurrentRegistry());
  EXPECT_FALSE(body->HasVar("h"));
  EXPECT_EQ(h->GetShape(), (Shape{3}));
  EXPECT_EQ(h->GetDType(), DType::kFloat32);
}

TEST_F(Inference, EmptyOutputsMakeNoVar) {
  Declare(p_.Root(), "a", {3}, DType::kFloat32);
  OpDesc g = Op("toy_grad_ish", {{"X", {"a"}}}, {{"X@GRAD", {kEmptyVarName}}});
  InferOpAtBuildTime(g, *p_.Root(), *CurrentRegistry());
  EXPECT_FALSE(p_.Root()->HasVar(kEmptyVarName));
  EXPECT_EQ(p_.Root()->AllVars().size(), 1u);
}

TEST_F(Inference, VarTypeInferenceRunsAndDefaultLeavesTheTypeAlone) {
  Declare(p_.Root(), "a", {3}, DType::kFloat32);
  VarDesc* steps = Declare(p_.Root(), "steps", {}, std::nullopt);
  steps->SetType(VarType::kStepScopes);
  InferOpAtBuildTime(Op("toy_make_array", {{"X", {"a"}}}, {{"Out", {"arr"}}}), *p_.Root(), *CurrentRegistry());
  EXPECT_EQ(p_.Root()->FindVar("arr")->Type(), VarType::kTensorArray);
  InferOpAtBuildTime(Op("toy_opaque", {{"X", {"a"}}}, {{"Out", {"steps"}}}), *p_.Root(), *CurrentRegistry());
  EXPECT_EQ(steps->Type(), VarType::kStepScopes);
}

TEST_F(Inference, InferProgramRunsBlocksInOrder) {
  Declare(p_.Root(), "a", {5}, DType::kInt32);
  BlockDesc* body = p_.AppendBlock(0);
  p_.Root()->AppendOp(Op("toy_sum", {{"X", {"a"}}}, {{"Out", {"b"}}}));
  body->AppendOp(Op("toy_sum", {{"X", {"b"}}}, {{"Out", {"c"}}}));
  body->AppendOp(Op("mean", {{"X", {"c"}}}, {{"Out", {"d"}}}));
  InferProgram(p_);
  EXPECT_EQ(body->FindVar("c")->GetShape(), (Shape{5}));
  EXPECT_EQ(body->FindVar("c")->GetDType(), DType::kInt32);
  EXPECT_EQ(body->FindVar("d")->GetShape(), (Shape{1}));
  EXPECT_FALSE(p_.Root()->HasVar("c"));
}

TEST_F(Inference, FillDefaultAttrs) {
  OpDesc op("toy_attrs", {{"X", {"a"}}}, {{"Out", {"b"}}}, {{"i", 7}});
  FillDefaultAttrs(op, *CurrentRegistry());
  EXPECT_EQ(op.Attr<int>("i"), 7);
  EXPECT_EQ(op.Attr<float>("f"), 0.0f);
  EXPECT_EQ(op.Attr<int>("positive"), 1);
  EXPECT_EQ(op.Attrs().size(), 9u);

  p_.SetSourceFile("d.yaml");
  OpDesc bad("toy_attrs", {}, {}, {{"i", 1.5f}});
  bad.SetPos({2, 3});
  try {
    FillDefaultAttrs(bad, *CurrentRegistry(), &p_);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_TRUE(StartsWith(e.what(), "d.yaml:2:3: op 'toy_attrs': attribute 'i' has the wrong type: expected int"))
        << e.what();
  }
  OpDesc unknown("toy_attrs", {}, {}, {{"j", 1}});
  EXPECT_THROW(FillDefaultAttrs(unknown, *CurrentRegistry()), Error);
  OpDesc loop("toy_loop", {}, {}, {});
  try {
    FillDefaultAttrs(loop, *CurrentRegistry());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("required attribute 'sub_block' is missing"), std::string::npos);
  }
  OpDesc none("no_such_op", {}, {}, {});
  try {
    FillDefaultAttrs(none, *CurrentRegistry());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
  }
}

// A context over fixed values, to check the non-virtual helpers.
class FakeContext : public InferShapeContext {
 public:
  FakeContext(const OpDesc& op, const ProgramDesc* program) : op_(op), program_(program) {}
  const OpDesc& Op() const override { return op_; }
  bool IsRuntime() const override { return false; }
  bool HasInput(const std::string&) const override { return true; }
  bool HasOutput(const std::string&) const override { return true; }
  size_t InputSize(const std::string&) const override { return 2; }
  size_t OutputSize(const std::string&) const override { return 2; }
  Shape InputShape(const std::string& slot, size_t i) const override { return {static_cast<int64_t>(i) + 2, 7}; }
  DType InputDType(const std::string&, size_t i) const override { return i ? DType::kInt64 : DType::kFloat32; }
  VarType InputVarType(const std::string&, size_t) const override { return VarType::kDense; }
  void SetOutputShape(const std::string& slot, const Shape& shape, size_t i) override {
    set_shape = slot + "[" + std::to_string(i) + "]=" + ShapeToString(shape);
  }
  void SetOutputDType(const std::string& slot, DType dtype, size_t i) override {
    set_dtype = slot + "[" + std::to_string(i) + "]=" + DTypeName(dtype);
  }
  const ProgramDesc* Program() const override { return program_; }

  std::string set_shape, set_dtype;

 private:
  const OpDesc& op_;
  const ProgramDesc* program_;
};

TEST_F(Inference, ShareShapeAndDTypeAndWhere) {
  OpDesc op("mul", {}, {}, {});
  FakeContext ctx(op, nullptr);
  ctx.ShareShapeAndDType("X", "Out", 1, 1);
  EXPECT_EQ(ctx.set_shape, "Out[1]=[3, 7]");
  EXPECT_EQ(ctx.set_dtype, "Out[1]=int64");
  EXPECT_EQ(ctx.Where(), "op 'mul'");
  op.SetPos({3, 7});
  EXPECT_EQ(ctx.Where(), "op 'mul' (3:7)");
  p_.SetSourceFile("prog.yaml");
  FakeContext located(op, &p_);
  EXPECT_EQ(located.Where(), "op 'mul' (prog.yaml:3:7)");
}

}  // namespace
}  // namespace nabla::io_test
