#include <gtest/gtest.h>

#include "common/toy_ops.h"
#include "io_test_util.h"
#include "nabla/op_registry.h"

namespace nabla::io_test {
namespace {

// Programs built in memory, the way passes build them: vars made with Var()
// (not declared), ops appended without positions.
class Verifier : public ::testing::Test {
 protected:
  void SetUp() override {
    toys::RegisterToyOps();
    for (const char* name : {"a", "b"}) {
      VarDesc* v = p_.Root()->Var(name);
      v->SetShape({2, 2});
      v->SetDType(DType::kFloat32);
      v->MarkDTypeKnown();
    }
  }

  OpDesc* Add(BlockDesc* block, const std::string& type, VarNameMap in, VarNameMap out, AttributeMap attrs = {}) {
    OpDesc* op = block->AppendOp(OpDesc(type, std::move(in), std::move(out), std::move(attrs)));
    if (const OpInfo* info = CurrentRegistry()->Find(type)) {
      for (const AttrDef& d : info->schema.attrs)
        if (!op->HasAttr(d.name) && d.default_value) op->SetAttr(d.name, *d.default_value);
    }
    return op;
  }

  // The verifier's message; fails the test when it accepts the program.
  std::string Reject(ErrorKind kind) {
    try {
      VerifyProgram(p_, *CurrentRegistry());
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "the verifier accepted the program";
    return "";
  }

  void Accept() { EXPECT_NO_THROW(VerifyProgram(p_, *CurrentRegistry())); }

  ProgramDesc p_;
};

TEST_F(Verifier, AcceptsAWellFormedProgram) {
  Add(p_.Root(), "mul", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}});
  Add(p_.Root(), "toy_sum", {{"X", {"a", "c"}}}, {{"Out", {"d"}}});  // duplicable, Bias dispensable
  Add(p_.Root(), "toy_grad_ish", {{"X", {kEmptyVarName}}}, {{"X@GRAD", {kEmptyVarName}}});
  Accept();
  InferProgram(p_);  // created vars change nothing
  Accept();
}

TEST_F(Verifier, UnknownOpType) {
  Add(p_.Root(), "mean", {{"X", {"a"}}}, {{"Out", {"m"}}});
  Add(p_.Root(), "no_such_op", {{"X", {"a"}}}, {{"Out", {"c"}}});
  std::string msg = Reject(ErrorKind::kNotFound);
  EXPECT_TRUE(StartsWith(msg, "op 'no_such_op' (#1 in block 0): unknown op type")) << msg;
}

TEST_F(Verifier, UnknownSlot) {
  Add(p_.Root(), "mean", {{"X", {"a"}}, {"Z", {"b"}}}, {{"Out", {"c"}}});
  std::string msg = Reject(ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("unknown input slot: expected one of X but received 'Z'"), std::string::npos) << msg;
}

TEST_F(Verifier, RequiredSlotMissingOrEmpty) {
  Add(p_.Root(), "mul", {{"X", {"a"}}}, {{"Out", {"c"}}});
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument).find("input slot 'Y' is required"), std::string::npos);
  p_.Root()->Op(0)->SetInput("Y", {});
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument).find("input slot 'Y' is required"), std::string::npos);
  p_.Root()->Op(0)->SetInput("Y", {"b"});
  p_.Root()->Op(0)->MutableOutputs().clear();
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument).find("output slot 'Out' is required"), std::string::npos);
}

TEST_F(Verifier, NonDuplicableSlotTakesOneVar) {
  Add(p_.Root(), "mean", {{"X", {"a", "b"}}}, {{"Out", {"c"}}});
  std::string msg = Reject(ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("input slot 'X' is not duplicable: expected at most 1 var but received 2 [a, b]"),
            std::string::npos)
      << msg;
}

TEST_F(Verifier, AttributesKnownTypedAndChecked) {
  OpDesc* op = Add(p_.Root(), "mul", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}});
  op->SetAttr("x_num_col_dims", 1.0f);
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument).find("attribute 'x_num_col_dims' has the wrong type: expected int"),
            std::string::npos);
  op->SetAttr("x_num_col_dims", 1);
  op->SetAttr("transpose", true);
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument)
                .find("unknown attribute: expected one of x_num_col_dims, "
                      "y_num_col_dims but received 'transpose'"),
            std::string::npos);
  op->MutableAttrs().erase("transpose");
  Accept();

  Add(p_.Root(), "toy_attrs", {{"X", {"a"}}}, {{"Out", {"t"}}}, {{"positive", -4}});
  std::string msg = Reject(ErrorKind::kOutOfRange);
  EXPECT_NE(msg.find("op 'toy_attrs' (#1 in block 0): attribute 'positive' = -4 is rejected by the op's checker: "
                     "expected > 0 but received -4"),
            std::string::npos)
      << msg;
}

TEST_F(Verifier, RequiredAttributeMissing) {
  BlockDesc* body = p_.AppendBlock(0);
  (void)body;
  Add(p_.Root(), "toy_loop", {{"X", {"a"}}}, {});
  EXPECT_NE(Reject(ErrorKind::kInvalidArgument).find("required attribute 'sub_block' is missing"), std::string::npos);
}

TEST_F(Verifier, UndefinedInput) {
  Add(p_.Root(), "mul", {{"X", {"a"}}, {"Y", {"bb"}}}, {{"Out", {"c"}}});
  std::string msg = Reject(ErrorKind::kNotFound);
  EXPECT_NE(msg.find("op 'mul' (#0 in block 0): input Y[0] 'bb' is not defined"), std::string::npos) << msg;
}

TEST_F(Verifier, ReadBeforeWrite) {
  Add(p_.Root(), "mean", {{"X", {"h"}}}, {{"Out", {"m"}}});
  Add(p_.Root(), "mean", {{"X", {"a"}}}, {{"Out", {"h"}}});
  EXPECT_NE(Reject(ErrorKind::kNotFound).find("'h' is not defined"), std::string::npos);
  // Once the var exists (inference of the later op created it), it is still
  // read before any op writes it.
  p_.Root()->Var("h");
  std::string msg = Reject(ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("op 'mean' (#0 in block 0): input X[0] 'h' is read before it is written"), std::string::npos)
      << msg;
  // A declared var may be fed, then overwritten later.
  p_.Root()->FindVar("h")->SetDeclared(true);
  Accept();
}

TEST_F(Verifier, SubBlocksSeeTheirParents) {
  BlockDesc* body = p_.AppendBlock(0);
  BlockDesc* grad_body = p_.AppendBlock(1);  // a grad block: its parent is the forward sub-block
  Add(p_.Root(), "mul", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}});
  Add(p_.Root(), "toy_loop", {{"X", {"c"}}}, {{"Out", {"h"}}}, {{"sub_block", BlockRef{1}}});
  Add(body, "toy_sum", {{"X", {"a", "c"}}}, {{"Out", {"h"}}});
  Add(grad_body, "toy_sum", {{"X", {"h", "late"}}}, {{"Out", {"g"}}});
  Add(p_.Root(), "mean", {{"X", {"h"}}}, {{"Out", {"late"}}});
  // The grad op sits in block 0 and names block 2, a grandchild.
  Add(p_.Root(), "toy_loop", {{"X", {"late"}}}, {}, {{"sub_block", BlockRef{2}}});
  Accept();
}

TEST_F(Verifier, BlockAttributeMustNameASubBlock) {
  p_.AppendBlock(0);
  OpDesc* op = Add(p_.Root(), "toy_loop", {{"X", {"a"}}}, {}, {{"sub_block", BlockRef{5}}});
  std::string msg = Reject(ErrorKind::kOutOfRange);
  EXPECT_NE(msg.find("attribute 'sub_block' names no block: expected a block index in [0, 2) but received 5"),
            std::string::npos)
      << msg;
  op->SetAttr("sub_block", BlockRef{0});
  msg = Reject(ErrorKind::kInvalidArgument);
  EXPECT_NE(msg.find("names block 0 whose parent is block -1: expected a sub-block of block 0"), std::string::npos)
      << msg;
  op->SetAttr("sub_block", BlockRef{1});
  Accept();
}

TEST_F(Verifier, MessagesStartWithTheOpsPosition) {
  p_.SetSourceFile("p.yaml");
  OpDesc* op = Add(p_.Root(), "mean", {{"X", {"zz"}}}, {{"Out", {"m"}}});
  op->SetPos({4, 9});
  std::string msg = Reject(ErrorKind::kNotFound);
  EXPECT_TRUE(StartsWith(msg, "p.yaml:4:9: op 'mean' (#0 in block 0): input X[0] 'zz'")) << msg;
}

}  // namespace
}  // namespace nabla::io_test
