#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "../common/temp_dir.h"
#include "common/toy_ops.h"
#include "io_test_util.h"
#include "nabla/op_registry.h"
#include "nabla/program_io.h"

namespace nabla::io_test {
namespace {

namespace fs = std::filesystem;

// The example of docs/program-format.md, verbatim.
const char* const kSpecExample = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x:     {shape: [-1, 784], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      w:     {shape: [784, 10], dtype: float32, persistable: true,
              init: {type: uniform_random, min: -0.05, max: 0.05, seed: 1}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [logits]},
         attrs: {x_num_col_dims: 1}}
      - type: softmax_with_cross_entropy
        inputs: {Logits: [logits], Label: [label]}
        outputs: {Softmax: [prob], Loss: [ce]}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

class ProgramIo : public ::testing::Test {
 protected:
  void SetUp() override { toys::RegisterToyOps(); }

  std::string WriteText(const std::string& name, const std::string& text) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << text;
    return path;
  }

  test_util::TempDir dir_{"nabla_io_test"};
};

TEST_F(ProgramIo, LoadsTheSpecExample) {
  std::string path = WriteText("spec.yaml", kSpecExample);
  ProgramDesc p = LoadProgram(path);
  EXPECT_EQ(p.SourceFile(), path);
  ASSERT_EQ(p.Size(), 1u);
  const BlockDesc& b = *p.Root();
  EXPECT_EQ(b.ParentIdx(), -1);

  const VarDesc* x = b.FindVar("x");
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(x->Declared());
  EXPECT_EQ(x->GetShape(), (Shape{-1, 784}));
  EXPECT_TRUE(x->HasDType());
  EXPECT_EQ(x->GetDType(), DType::kFloat32);
  EXPECT_TRUE(x->StopGradient());
  EXPECT_FALSE(x->Persistable());
  EXPECT_EQ(x->Pos().line, 6);
  EXPECT_EQ(x->Pos().col, 7);
  EXPECT_EQ(b.FindVar("label")->GetDType(), DType::kInt64);

  const VarDesc* w = b.FindVar("w");
  ASSERT_TRUE(w->Persistable());
  ASSERT_TRUE(w->Init().has_value());
  EXPECT_EQ(w->Init()->type, "uniform_random");
  // Typed by uniform_random's schema: min/max are floats, seed an int.
  EXPECT_EQ(std::get<float>(w->Init()->attrs.at("min")), -0.05f);
  EXPECT_EQ(std::get<float>(w->Init()->attrs.at("max")), 0.05f);
  EXPECT_EQ(std::get<int>(w->Init()->attrs.at("seed")), 1);
  EXPECT_EQ(w->Init()->pos.line, 9);
  EXPECT_EQ(w->Init()->pos.col, 21);

  ASSERT_EQ(b.OpSize(), 3u);
  const OpDesc& mul = *b.Op(0);
  EXPECT_EQ(mul.Type(), "mul");
  EXPECT_EQ(mul.Input("X"), std::vector<std::string>{"x"});
  EXPECT_EQ(mul.Attr<int>("x_num_col_dims"), 1);
  EXPECT_EQ(mul.Attr<int>("y_num_col_dims"), 1);  // schema default filled in
  EXPECT_EQ(mul.Pos().line, 11);
  EXPECT_EQ(mul.Pos().col, 9);
  EXPECT_EQ(b.Op(1)->Attr<bool>("soft_label"), false);
  EXPECT_EQ(b.Op(1)->Pos().line, 13);
  EXPECT_EQ(b.Op(1)->Pos().col, 9);

  // Vars only ops produce are created, undeclared, with inferred info.
  const VarDesc* logits = b.FindVar("logits");
  ASSERT_NE(logits, nullptr);
  EXPECT_FALSE(logits->Declared());
  EXPECT_EQ(logits->GetShape(), (Shape{-1, 10}));
  EXPECT_TRUE(logits->HasDType());
  EXPECT_EQ(b.FindVar("prob")->GetShape(), (Shape{-1, 10}));
  EXPECT_EQ(b.FindVar("ce")->GetShape(), (Shape{-1, 1}));
  EXPECT_EQ(b.FindVar("loss")->GetShape(), (Shape{1}));
  EXPECT_EQ(b.FindVar("loss")->GetDType(), DType::kFloat32);
  EXPECT_FALSE(p.Backward().has_value());
}

TEST_F(ProgramIo, AttributesAreTypedBySchema) {
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars: {a: {shape: [2, 3], dtype: float64}}
    ops:
      - type: toy_attrs
        inputs: {X: [a]}
        outputs: {Out: [b]}
        attrs: {i: 3, f: 2, s: 12, b: yes, is: [1, -2], fs: [1, 2.5, -1e-3], ss: [u, "v w"], bs: [true, false]}
)",
                               "t.yaml");
  const OpDesc& op = *p.Root()->Op(0);
  EXPECT_EQ(op.Attr<int>("i"), 3);
  EXPECT_EQ(op.Attr<float>("f"), 2.0f);  // a YAML int for a float attribute
  EXPECT_EQ(op.Attr<std::string>("s"), "12");
  EXPECT_EQ(op.Attr<bool>("b"), true);
  EXPECT_EQ(op.Attr<std::vector<int>>("is"), (std::vector<int>{1, -2}));
  EXPECT_EQ(op.Attr<std::vector<float>>("fs"), (std::vector<float>{1.0f, 2.5f, -1e-3f}));
  EXPECT_EQ(op.Attr<std::vector<std::string>>("ss"), (std::vector<std::string>{"u", "v w"}));
  EXPECT_EQ(op.Attr<std::vector<bool>>("bs"), (std::vector<bool>{true, false}));
  EXPECT_EQ(op.Attr<int>("positive"), 1);
  EXPECT_EQ(p.Root()->FindVar("b")->GetDType(), DType::kFloat64);
  EXPECT_EQ(p.Root()->FindVar("b")->GetShape(), (Shape{2, 3}));
}

TEST_F(ProgramIo, SpecExampleRoundTrips) {
  ProgramDesc p = ParseProgram(kSpecExample, "spec.yaml");
  std::string text = ProgramToYaml(p);
  ProgramDesc q = ParseProgram(text, "written.yaml");
  ExpectSameProgram(p, q);
  EXPECT_EQ(ProgramToYaml(q), text);
  // Inferable vars stay out of the file; declared ones are written.
  EXPECT_EQ(text.find("logits:"), std::string::npos) << text;
  EXPECT_NE(text.find("x: {shape: [-1, 784], dtype: float32, stop_gradient: true}"), std::string::npos) << text;
  EXPECT_NE(text.find("init: {type: uniform_random, max: 0.05, min: -0.05, seed: 1}"), std::string::npos) << text;
  EXPECT_NE(text.find("attrs: {x_num_col_dims: 1, y_num_col_dims: 1}"), std::string::npos) << text;
  EXPECT_TRUE(StartsWith(text, "format: nabla-program/1\n")) << text;
}

// Sub-blocks, backward info, names and strings YAML would misread, and
// float values that need care are all preserved.
TEST_F(ProgramIo, RoundTripKeepsBlocksBackwardAndAwkwardValues) {
  const std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      "true": {shape: [3], dtype: float32}
      w: {shape: [3], dtype: float32, persistable: true, init: {type: uniform_random, min: 0.1, max: .inf}}
      arr: {type: tensor_array}
    ops:
      - {type: toy_loop, inputs: {X: ["true", w]}, outputs: {Out: [h]}, attrs: {sub_block: 1}}
      - type: toy_attrs
        inputs: {X: ["true"]}
        outputs: {Out: ["x@GRAD"]}
        attrs: {s: "1", ss: ["null", "", "a: b", "@EMPTY@"], fs: [1e-8, 3.4028235e38, -0.0], f: 0.1}
      - {type: toy_grad_ish, inputs: {X: ["true"]}, outputs: {X@GRAD: ["@EMPTY@"]}}
  - idx: 1
    parent: 0
    vars: {}
    ops:
      - {type: toy_sum, inputs: {X: ["true", w]}, outputs: {Out: [h]}}
  - idx: 2
    parent: 1
    ops: []
backward: {loss: "x@GRAD", param_grads: [[w, w@GRAD], ["true", "true@GRAD"]]}
)";
  ProgramDesc p = ParseProgram(text, "awkward.yaml");
  EXPECT_EQ(p.Root()->FindVar("arr")->Type(), VarType::kTensorArray);
  EXPECT_TRUE(std::isinf(std::get<float>(p.Root()->FindVar("w")->Init()->attrs.at("max"))));
  EXPECT_EQ(p.Block(2)->ParentIdx(), 1);
  std::string written = ProgramToYaml(p);
  ProgramDesc q = ParseProgram(written, "written.yaml");
  ExpectSameProgram(p, q);
  EXPECT_EQ(ProgramToYaml(q), written);
  EXPECT_EQ(q.Root()->Op(1)->Attr<std::string>("s"), "1");
  EXPECT_EQ(q.Root()->Op(1)->Attr<std::vector<std::string>>("ss"),
            (std::vector<std::string>{"null", "", "a: b", "@EMPTY@"}));
  EXPECT_EQ(q.Root()->Op(1)->Attr<float>("f"), 0.1f);
  EXPECT_NE(written.find("f: 0.1,"), std::string::npos) << written;  // shortest form, not 0.100000001
  EXPECT_EQ(q.Backward()->loss, "x@GRAD");
}

// A program a pass built in memory: vars the pass created are written only
// when reading the file back could not recreate them.
TEST_F(ProgramIo, WritesUndeclaredVarsOnlyWhenInferenceCannotRecreateThem) {
  ProgramDesc p;
  BlockDesc* b = p.Root();
  VarDesc* a = b->Var("a");
  a->SetShape({4});
  a->SetDType(DType::kFloat32);
  a->MarkDTypeKnown();
  OpDesc sum("toy_sum", {{"X", {"a"}}}, {{"Out", {"s"}}}, {});
  OpDesc opaque("toy_opaque", {{"X", {"s"}}}, {{"Out", {"o"}}}, {});
  b->AppendOp(sum);
  b->AppendOp(opaque);
  InferProgram(p);
  b->FindVar("o")->SetShape({4});  // known to the pass, not to any shape function
  std::string text = ProgramToYaml(p);
  EXPECT_NE(text.find("a: {shape: [4], dtype: float32}"), std::string::npos) << text;  // read by nobody's output
  EXPECT_EQ(text.find(" s: "), std::string::npos) << text;
  EXPECT_NE(text.find("o: {shape: [4]}"), std::string::npos) << text;
  ProgramDesc q = ParseProgram(text, "mem.yaml");
  ExpectSameProgram(p, q);
}

TEST_F(ProgramIo, SaveIsAtomicAndLoadsBack) {
  ProgramDesc p = ParseProgram(kSpecExample, "spec.yaml");
  std::string path = (dir_ / "out.yaml").string();
  SaveProgram(p, path);
  ExpectSameProgram(p, LoadProgram(path));
  SaveProgram(p, path);  // replacing an existing file
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_.Dir())) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1u) << "a temporary file was left behind";

  std::string bad = (dir_ / "missing_dir" / "out.yaml").string();
  try {
    SaveProgram(p, bad);
    FAIL() << "saving into a missing folder succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kExternal);
    EXPECT_NE(std::string(e.what()).find(bad), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(bad));
}

TEST_F(ProgramIo, WriteFileAtomicallyReplacesContent) {
  std::string path = (dir_ / "data.txt").string();
  WriteFileAtomically(path, "first");
  WriteFileAtomically(path, "second");
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  EXPECT_EQ(s.str(), "second");
}

TEST_F(ProgramIo, MissingFileIsNotFoundNamingIt) {
  std::string path = (dir_ / "nope.yaml").string();
  try {
    LoadProgram(path);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
  try {
    LoadProgram(dir_.Dir().string());
    FAIL() << "a folder was read as a program";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("received a folder"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------ bad input

std::string Program(const std::string& vars, const std::string& ops) {
  return "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + vars + "    ops:\n" + ops;
}

const char* const kVarX = "      x: {shape: [2, 3], dtype: float32}\n";

void ExpectError(const std::string& text, ErrorKind kind, const std::string& pos, const std::string& what) {
  Error e = ParseError(text);
  std::string msg = e.what();
  EXPECT_EQ(e.kind(), kind) << msg;
  EXPECT_TRUE(StartsWith(msg, "f.yaml:" + pos + ": ")) << "expected f.yaml:" << pos << " in: " << msg;
  EXPECT_NE(msg.find(what), std::string::npos) << msg;
}

TEST_F(ProgramIo, UnknownOpType) {
  std::string t = Program(kVarX, "      - {type: mull, inputs: {X: [x]}, outputs: {Out: [y]}}\n");
  ExpectError(t, ErrorKind::kNotFound, At(t, "mull"), "unknown op type");
}

TEST_F(ProgramIo, UnknownAttribute) {
  std::string t = Program(kVarX, "      - {type: toy_attrs, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {ii: 1}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "ii"), "received 'ii'");
}

TEST_F(ProgramIo, IllTypedAttributes) {
  const char* cases[][2] = {{"i: 1.5", "1.5"},    {"i: abc", "abc"}, {"f: yes", "yes"},
                            {"b: 2", "2}}"},      {"is: 3", "3}}"},  {"is: [1, x]", "x]}}"},
                            {"fs: {a: 1}", "{a"}, {"i: [1]", "[1]"}, {"f: 1e99", "1e99"}};
  for (const auto& c : cases) {
    std::string t =
        Program(kVarX, std::string("      - {type: toy_attrs, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {") + c[0] +
                           "}}\n");
    Error e = ParseError(t);
    std::string msg = e.what();
    EXPECT_TRUE(e.kind() == ErrorKind::kInvalidArgument || e.kind() == ErrorKind::kOutOfRange) << msg;
    EXPECT_TRUE(StartsWith(msg, "f.yaml:" + At(t, c[1]) + ": ")) << c[0] << " -> " << msg;
  }
}

TEST_F(ProgramIo, BlockAttributeMustBeAnIndex) {
  std::string t = Program(kVarX, "      - {type: toy_loop, inputs: {X: [x]}, outputs: {}, attrs: {sub_block: one}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "one"), "block index");
}

TEST_F(ProgramIo, InitAttributesAreTypedByTheInitOp) {
  std::string t =
      Program("      w: {shape: [2], persistable: true, init: {type: uniform_random, seed: 0.5}}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "0.5"), "seed");
  t = Program("      w: {shape: [2], persistable: true, init: {type: no_such_init}}\n", "      []\n");
  ExpectError(t, ErrorKind::kNotFound, At(t, "no_such_init"), "unknown op type");
  t = Program("      w: {shape: [2], persistable: true, init: {min: 1}}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{min"), "missing 'type'");
  t = Program("      w: {shape: [2], init: {type: uniform_random}}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "init"), "persistable");
}

TEST_F(ProgramIo, UnknownVarField) {
  std::string t = Program("      x: {shape: [2], dtyp: float32}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "dtyp"), "received 'dtyp'");
}

TEST_F(ProgramIo, BadDTypeAndVarType) {
  std::string t = Program("      x: {shape: [2], dtype: float16}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "float16"), "received 'float16'");
  t = Program("      x: {type: sparse}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "sparse"), "received 'sparse'");
  t = Program("      x: {shape: [2, -3]}\n", "      []\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "-3"), "-1 (unknown)");
}

TEST_F(ProgramIo, DuplicateVar) {
  std::string t = Program("      x: {shape: [2]}\n      y: {}\n      x: {shape: [3]}\n", "      []\n");
  ExpectError(t, ErrorKind::kAlreadyExists, At(t, "x: {shape: [3]}"), "duplicate var 'x'");
}

TEST_F(ProgramIo, DuplicateKeyInAnOp) {
  std::string t = Program(kVarX, "      - {type: mean, inputs: {X: [x]}, outputs: {Out: [y]}, type: mean}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "type", 2), "duplicate key");
}

TEST_F(ProgramIo, BadBlockIdxAndParent) {
  std::string head = "format: nabla-program/1\nblocks:\n  - {idx: 0, parent: -1}\n";
  std::string t = head + "  - {idx: 2, parent: 0}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "2,"), "expected idx 1");
  t = head + "  - {idx: 1, parent: 1}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "1}", 1), "bad block parent");
  t = head + "  - {idx: 1}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{idx: 1}"), "missing 'parent'");
  t = "format: nabla-program/1\nblocks:\n  - {idx: 0, parent: 0}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "0}"), "block 0 is the root");
  t = "format: nabla-program/1\nblocks: []\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "[]"), "non-empty list");
}

TEST_F(ProgramIo, MissingOrWrongFormat) {
  std::string t = "blocks:\n  - {idx: 0, parent: -1}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, "1:1", "missing 'format'");
  t = "format: nabla-program/2\nblocks:\n  - {idx: 0, parent: -1}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "nabla-program/2"), "unsupported format version");
  t = "format: something-else\nblocks:\n  - {idx: 0, parent: -1}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "something-else"), "not a program file");
  t = "format: nabla-program/1\nblocks:\n  - {idx: 0, parent: -1}\nextra: 1\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "extra"), "received 'extra'");
}

TEST_F(ProgramIo, MissingOpTypeReportsTheOp) {
  std::string t = Program(kVarX, "      - {inputs: {X: [x]}, outputs: {Out: [y]}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{inputs"), "missing 'type'");
}

TEST_F(ProgramIo, YamlSyntaxError) {
  std::string t = Program(kVarX, "      - {type: mean, inputs: {X: [x}, outputs: {Out: [y]}}\n");
  Error e = ParseError(t);
  std::string msg = e.what();
  EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
  EXPECT_TRUE(StartsWith(msg, "f.yaml:" + At(t, "}, outputs") + ": invalid YAML: ")) << msg;
  EXPECT_NE(msg.find("flow"), std::string::npos) << msg;  // yaml-cpp's own reason follows
}

TEST_F(ProgramIo, BadBackward) {
  std::string base = Program(kVarX, "      []\n");
  std::string t = base + "backward: {param_grads: []}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{param_grads"), "missing 'loss'");
  t = base + "backward: {loss: x, param_grads: [[w]]}\n";
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "[w]"), "[param, grad]");
}

// Schema problems found after parsing still point at the op.
TEST_F(ProgramIo, VerifierErrorsCarryThePosition) {
  std::string t = Program(kVarX,
                          "      - {type: mean, inputs: {X: [x]}, outputs: {Out: [y]}}\n"
                          "      - {type: mul, inputs: {X: [y], Y: [z]}, outputs: {Out: [o]}}\n");
  ExpectError(t, ErrorKind::kNotFound, At(t, "{type: mul"), "op 'mul' (#1 in block 0): input Y[0] 'z' is not defined");
  t = Program(kVarX, "      - {type: toy_attrs, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {positive: 0}}\n");
  ExpectError(t, ErrorKind::kOutOfRange, At(t, "{type"), "attribute 'positive' = 0 is rejected");
  t = Program(kVarX, "      - {type: toy_loop, inputs: {X: [x]}, outputs: {}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "required attribute 'sub_block'");
}

TEST_F(ProgramIo, ShapeInferenceErrorsStartWithThePosition) {
  std::string t = Program("      a: {shape: [2, 3], dtype: float32}\n      b: {shape: [4, 5], dtype: float32}\n",
                          "      - {type: mul, inputs: {X: [a], Y: [b]}, outputs: {Out: [c]}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "op 'mul': X's width must equal Y's height");
  // An attribute the inference indexes by is checked before use (found by fuzz_program).
  t = Program("      a: {shape: [2, 3], dtype: float32}\n      b: {shape: [3], dtype: float32}\n",
              "      - {type: mul, inputs: {X: [a], Y: [b]}, outputs: {Out: [c]}, attrs: {y_num_col_dims: 3}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"),
              "op 'mul': attribute y_num_col_dims must be in [1, 1] for Y of shape [3], but received 3");
  t = Program("      a: {shape: [2, 3], dtype: float32}\n      b: {shape: [3], dtype: float32}\n",
              "      - {type: mul, inputs: {X: [a], Y: [b]}, outputs: {Out: [c]}, attrs: {x_num_col_dims: -1}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "attribute x_num_col_dims must be in [1, 2]");
  t = Program(kVarX, "      - {type: split, inputs: {X: [x]}, outputs: {Out: [p, q]}, attrs: {axis: 2}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "attribute axis must be in [0, 1] for X of shape [2, 3]");
  t = Program(kVarX + std::string("      v: {shape: [3], dtype: float32}\n"),
              "      - {type: concat, inputs: {X: [x, v]}, outputs: {Out: [y]}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "X[1] has shape [3], but X[0] has rank 2");
  t = Program(kVarX + std::string("      ids: {shape: [2, 1], dtype: int64}\n      w: {shape: [5], dtype: float32}\n"),
              "      - {type: lookup_table, inputs: {W: [w], Ids: [ids]}, outputs: {Out: [y]}}\n");
  ExpectError(t, ErrorKind::kInvalidArgument, At(t, "{type"), "W must have rank >= 2, but received shape [5]");
}

}  // namespace
}  // namespace nabla::io_test
