// `nabla backward`, `nabla graph` and `nabla gradcheck` as users meet them:
// the exact op list and `backward:` key of the seed scenario, a backward
// program that runs through `nabla exec`, DOT that tells gradient edges
// apart, Graphviz output, gradient checks of the standard plugins and of a
// third-party plugin, and every bad-input path (exit 2, one stderr line).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/cli_runner.h"
#include "common/linear_program.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

using testing_cli::Quote;
using testing_cli::Result;
using testing_cli::Slurp;

const char* const kLinear = testing_cli::kLinearProgram;

const std::vector<std::string> kSeedOps = {"mul",       "elementwise_add",      "mean",    "fill_constant",
                                           "mean_grad", "elementwise_add_grad", "mul_grad"};

class CliToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cpu::InitCpuBackend();
    program_ = WriteText("linear.yaml", kLinear);
  }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string WriteText(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }

  // Runs `nabla ARGS` (ARGS already quoted) with `env` prepended; its output
  // goes outside dir_ so tests can list dir_.
  Result Nabla(const std::string& args, const std::string& env = "") const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, env, dir_.Dir().string());
  }

  // A bad input: exit 2, one stderr line `nabla: error: ...` containing every fragment.
  void ExpectBadInput(const std::string& args, const std::vector<std::string>& fragments,
                      const std::string& env = "") const {
    testing_cli::ExpectOneLineError(Nabla(args, env), args, fragments);
  }

  std::vector<std::string> FilesInDir() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_.Dir())) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }

  static std::vector<std::string> OpTypes(const YAML::Node& program, int block = 0) {
    std::vector<std::string> types;
    for (const YAML::Node& op : program["blocks"][block]["ops"]) types.push_back(op["type"].as<std::string>());
    return types;
  }

  static std::vector<std::pair<std::string, std::string>> ParamGrads(const YAML::Node& program) {
    std::vector<std::pair<std::string, std::string>> pairs;
    for (const YAML::Node& p : program["backward"]["param_grads"])
      pairs.emplace_back(p[0].as<std::string>(), p[1].as<std::string>());
    return pairs;
  }

  test_util::TempDir dir_{"nabla_cli_tools_test"};
  std::string program_;
};

// ---------------------------------------------------------------- backward

TEST_F(CliToolsTest, BackwardWritesTheSeedOpListAndTheBackwardKey) {
  const std::string out = Path("with_backward.yaml");
  Result r = Nabla("backward " + Quote(program_) + " --loss loss -o " + Quote(out));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  const YAML::Node program = YAML::LoadFile(out);
  EXPECT_EQ(program["format"].as<std::string>(), "nabla-program/1");
  EXPECT_EQ(OpTypes(program), kSeedOps);
  EXPECT_EQ(program["backward"]["loss"].as<std::string>(), "loss");
  EXPECT_EQ(ParamGrads(program), (std::vector<std::pair<std::string, std::string>>{{"w", "w@GRAD"}, {"b", "b@GRAD"}}));
  // The seed writes loss@GRAD; mul_grad writes w's gradient and none for x (stop_gradient).
  const YAML::Node ops = program["blocks"][0]["ops"];
  EXPECT_EQ(ops[3]["outputs"]["Out"][0].as<std::string>(), "loss@GRAD");
  EXPECT_EQ(ops[6]["outputs"]["Y@GRAD"][0].as<std::string>(), "w@GRAD");
  EXPECT_FALSE(Slurp(out).find("x@GRAD") != std::string::npos) << Slurp(out);

  // Without -o the same program goes to stdout.
  Result printed = Nabla("backward " + Quote(program_) + " --loss loss");
  ASSERT_EQ(printed.code, 0) << printed.err;
  EXPECT_EQ(printed.out, Slurp(out));
}

TEST_F(CliToolsTest, BackwardParamsAndNoGradFilterThePairs) {
  Result r = Nabla("backward " + Quote(program_) + " --loss loss --params b");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ParamGrads(YAML::Load(r.out)), (std::vector<std::pair<std::string, std::string>>{{"b", "b@GRAD"}}));

  // w in the no-grad set: mul's only gradient is gone, so mul_grad is dropped.
  r = Nabla("backward " + Quote(program_) + " --loss loss --no-grad w");
  ASSERT_EQ(r.code, 0) << r.err;
  const YAML::Node program = YAML::Load(r.out);
  EXPECT_EQ(ParamGrads(program), (std::vector<std::pair<std::string, std::string>>{{"b", "b@GRAD"}}));
  const std::vector<std::string> types = OpTypes(program);
  EXPECT_EQ(std::count(types.begin(), types.end(), "mul_grad"), 0) << r.out;
}

TEST_F(CliToolsTest, BackwardOutputRunsThroughExec) {
  const std::string out = Path("with_backward.yaml");
  ASSERT_EQ(Nabla("backward " + Quote(program_) + " --loss loss -o " + Quote(out)).code, 0);
  Tensor x;
  float* p = x.Allocate<float>(HostDevice(), {2, 3});
  const float values[] = {1, 2, 3, 4, 5, 6};
  std::copy(values, values + 6, p);
  WriteNpy(Path("x.npy"), x);

  Result r = Nabla("exec " + Quote(out) + " --feed " + Quote("x=" + Path("x.npy")) +
                   " --fetch loss,w@GRAD,b@GRAD --out " + Quote(Path("fetched")));
  ASSERT_EQ(r.code, 0) << r.err;
  auto read = [&](const std::string& name) {
    Tensor t = ReadNpy(Path("fetched/" + name + ".npy"), HostDevice());
    return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel());
  };
  // y[i][j] = 0.25 * sum(x[i]) + 0.5 = 2 and 4.25; dloss/dy = 1/4 everywhere.
  EXPECT_FLOAT_EQ(read("loss")[0], (2.0f + 4.25f) / 2);
  EXPECT_EQ(read("b@GRAD"), (std::vector<float>{0.5f, 0.5f}));
  // w@GRAD[k][j] = 0.25 * (x[0][k] + x[1][k]).
  EXPECT_EQ(read("w@GRAD"), (std::vector<float>{1.25f, 1.25f, 1.75f, 1.75f, 2.25f, 2.25f}));
}

// --fuse shows the program `nabla run` trains: a weight shared by two
// steps is transposed once and its partial gradients chain through
// AccumulateY instead of a sum; saved, it runs to the same gradients.
TEST_F(CliToolsTest, BackwardFuseShowsTheGradRewritesAndTheResultRuns) {
  const std::string shared = WriteText("shared.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 3], dtype: float32}
      w: {shape: [3, 3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.25}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [h1]}}
      - {type: tanh, inputs: {X: [h1]}, outputs: {Out: [a1]}}
      - {type: mul, inputs: {X: [a1], Y: [w]}, outputs: {Out: [h2]}}
      - {type: mean, inputs: {X: [h2]}, outputs: {Out: [loss]}}
)");
  const std::string plain = Path("plain.yaml"), fused = Path("fused.yaml");
  ASSERT_EQ(Nabla("backward " + Quote(shared) + " --loss loss -o " + Quote(plain)).code, 0);
  Result r = Nabla("backward " + Quote(shared) + " --loss loss --fuse -o " + Quote(fused));
  ASSERT_EQ(r.code, 0) << r.err;
  const YAML::Node program = YAML::LoadFile(fused);
  const std::vector<std::string> types = OpTypes(program);
  EXPECT_EQ(std::count(types.begin(), types.end(), "transpose"), 1);
  EXPECT_EQ(std::count(types.begin(), types.end(), "sum"), 0);
  int accumulating = 0;
  for (const YAML::Node& op : program["blocks"][0]["ops"])
    if (op["inputs"]["AccumulateY"]) ++accumulating;
  EXPECT_EQ(accumulating, 1);
  const std::vector<std::string> plain_types = OpTypes(YAML::LoadFile(plain));
  EXPECT_EQ(std::count(plain_types.begin(), plain_types.end(), "sum"), 1);

  Tensor x;
  float* p = x.Allocate<float>(HostDevice(), {2, 3});
  const float values[] = {0.5f, -1, 2, 1.5f, 0.25f, -0.75f};
  std::copy(values, values + 6, p);
  WriteNpy(Path("x.npy"), x);
  auto grads = [&](const std::string& prog, const std::string& dir) {
    Result run = Nabla("exec " + Quote(prog) + " --feed " + Quote("x=" + Path("x.npy")) +
                       " --fetch loss,w@GRAD --out " + Quote(Path(dir)));
    EXPECT_EQ(run.code, 0) << run.err;
    Tensor t = ReadNpy(Path(dir + "/w@GRAD.npy"), HostDevice());
    return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel());
  };
  const std::vector<float> want = grads(plain, "plain_out"), got = grads(fused, "fused_out");
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6f) << i;
}

// A hand-written AccumulateY of the wrong shape is refused when the program
// loads, on one line naming the op's position.
TEST_F(CliToolsTest, AccumulateYOfAnotherShapeIsOneLineExitTwo) {
  const std::string bad = WriteText("bad_acc.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 2], dtype: float32}
      y: {shape: [2, 4], dtype: float32}
      g: {shape: [3, 4], dtype: float32}
      acc: {shape: [4, 2], dtype: float32}
    ops:
      - {type: mul_grad, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateY: [acc]}, outputs: {Y@GRAD: [dy]}}
)");
  ExpectBadInput("exec " + Quote(bad) + " --fetch dy", {"bad_acc.yaml:11:9", "mul_grad", "AccumulateY", "[4, 2]"});
}

TEST_F(CliToolsTest, AnSgdStepInAGradOpNeedsAParameterAndOneLearningRate) {
  const std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 2], dtype: float32}
      y: {shape: [2, 4], dtype: float32}
      g: {shape: [3, 4], dtype: float32}
      lr: {shape: [LR], dtype: float32}
    ops:
      - {type: mul_grad, inputs: {X: [x], Y: [y], Out@GRAD: [g], ACC LearningRate: [lr]}, outputs: {Y@GRAD: [y]}}
)";
  auto variant = [&](const std::string& name, const std::string& lr_shape, const std::string& acc) {
    std::string t = text;
    t.replace(t.find("LR"), 2, lr_shape);
    t.replace(t.find("ACC "), 4, acc);
    return WriteText(name, t);
  };
  ExpectBadInput("exec " + Quote(variant("no_acc.yaml", "1", "")) + " --fetch y",
                 {"no_acc.yaml:11:9", "mul_grad", "LearningRate needs AccumulateY"});
  ExpectBadInput("exec " + Quote(variant("two_lr.yaml", "2", "AccumulateY: [y], ")) + " --fetch y",
                 {"two_lr.yaml:11:9", "mul_grad", "LearningRate must have one element", "[2]"});
}

TEST_F(CliToolsTest, BackwardFailureLeavesTheOutputUntouched) {
  const std::string out = WriteText("out.yaml", "previous contents\n");
  ExpectBadInput("backward " + Quote(program_) + " --loss ghost -o " + Quote(out), {"ghost"});
  EXPECT_EQ(Slurp(out), "previous contents\n");
  // No temporary file is left beside it.
  EXPECT_EQ(FilesInDir(), (std::vector<std::string>{"linear.yaml", "out.yaml"}));
}

TEST_F(CliToolsTest, BackwardBadInput) {
  ExpectBadInput("backward " + Quote(program_), {"--loss"});
  ExpectBadInput("backward " + Quote(Path("absent.yaml")) + " --loss loss", {"absent.yaml"});
  // The loss must hold one element (y is [-1, 2]).
  ExpectBadInput("backward " + Quote(program_) + " --loss y", {"'y'"});
  ExpectBadInput("backward " + Quote(program_) + " --loss loss -o " + Quote(Path("no/such/dir/out.yaml")),
                 {"no/such/dir", "does not exist"});
  EXPECT_FALSE(fs::exists(Path("no")));
}

// ---------------------------------------------------------------- graph

// The DOT statement (one line) that contains every fragment.
std::string LineWith(const std::string& dot, const std::vector<std::string>& fragments) {
  std::istringstream in(dot);
  for (std::string line; std::getline(in, line);) {
    bool all = true;
    for (const std::string& f : fragments) all = all && line.find(f) != std::string::npos;
    if (all) return line;
  }
  return "";
}

// The DOT id of the op box labelled `type`.
std::string OpNode(const std::string& dot, const std::string& type) {
  std::smatch m;
  const std::regex re("(op_\\d+_\\d+) \\[shape=box, label=\"" + type + "\"");
  return std::regex_search(dot, m, re) ? m[1].str() : "";
}

void ExpectGradientsToldApart(const std::string& dot) {
  ASSERT_EQ(dot.rfind("digraph", 0), 0u) << dot;
  for (const std::string& type : kSeedOps) EXPECT_NE(OpNode(dot, type), "") << type << " missing in:\n" << dot;
  // Forward ops and edges are solid; gradient ops and their edges red and dashed.
  const std::string mul = OpNode(dot, "mul"), mul_grad = OpNode(dot, "mul_grad");
  EXPECT_EQ(LineWith(dot, {mul + " [shape=box"}).find("dashed"), std::string::npos);
  EXPECT_NE(LineWith(dot, {mul_grad + " [shape=box"}).find("dashed"), std::string::npos);
  const std::string x_to_mul = LineWith(dot, {"\"var_0_x\" -> " + mul + " "});
  ASSERT_NE(x_to_mul, "") << dot;
  EXPECT_EQ(x_to_mul.find("dashed"), std::string::npos) << x_to_mul;
  EXPECT_EQ(x_to_mul.find("red"), std::string::npos) << x_to_mul;
  const std::string to_w_grad = LineWith(dot, {mul_grad + " -> \"var_0_w@GRAD\""});
  ASSERT_NE(to_w_grad, "") << dot;
  EXPECT_NE(to_w_grad.find("style=dashed"), std::string::npos) << to_w_grad;
  EXPECT_NE(to_w_grad.find("color=red"), std::string::npos) << to_w_grad;
  // Parameters stand out from other vars; gradient vars from both.
  const std::string w = LineWith(dot, {"\"var_0_w\" [shape=ellipse"});
  const std::string x = LineWith(dot, {"\"var_0_x\" [shape=ellipse"});
  const std::string w_grad = LineWith(dot, {"\"var_0_w@GRAD\" [shape=ellipse"});
  EXPECT_NE(w.find("bold"), std::string::npos) << w;
  EXPECT_EQ(x.find("bold"), std::string::npos) << x;
  EXPECT_NE(w_grad.find("dashed"), std::string::npos) << w_grad;
}

TEST_F(CliToolsTest, GraphDrawsForwardAndGradientEdgesApart) {
  Result r = Nabla("graph " + Quote(program_) + " --backward loss");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  ExpectGradientsToldApart(r.out);
  // The vars' shapes and dtypes are in their labels.
  EXPECT_NE(LineWith(r.out, {"\"var_0_w\" [shape=ellipse, label=\"w\\n[3, 2] float32\""}), "") << r.out;
}

TEST_F(CliToolsTest, GraphOfASavedBackwardProgramFindsItsGradientOps) {
  const std::string saved = Path("with_backward.yaml");
  ASSERT_EQ(Nabla("backward " + Quote(program_) + " --loss loss -o " + Quote(saved)).code, 0);
  Result r = Nabla("graph " + Quote(saved));
  ASSERT_EQ(r.code, 0) << r.err;
  ExpectGradientsToldApart(r.out);
}

TEST_F(CliToolsTest, GraphOfAForwardProgramHasNoGradientStyling) {
  Result r = Nabla("graph " + Quote(program_));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(OpNode(r.out, "mul"), "");
  EXPECT_EQ(OpNode(r.out, "mul_grad"), "");
  EXPECT_EQ(r.out.find("dashed"), std::string::npos) << r.out;
}

// The RNN of tests/reference: a while op whose sub-block (block 1) gets a
// grad block (block 2, parent 1) from backward.
TEST_F(CliToolsTest, GraphDrawsSubBlocksAsNestedClusters) {
  const std::string rnn = std::string(NABLA_SOURCE_DIR) + "/tests/reference/rnn_while/program.yaml";
  Result r = Nabla("graph " + Quote(rnn) + " --backward loss");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string& dot = r.out;
  const size_t block1 = dot.find("subgraph cluster_1 {"), block2 = dot.find("subgraph cluster_2 {");
  ASSERT_NE(block1, std::string::npos) << dot;
  ASSERT_NE(block2, std::string::npos) << dot;
  // Block 2 is drawn inside block 1: more indented, after it opened.
  EXPECT_LT(block1, block2);
  EXPECT_EQ(dot.substr(block2 - 5, 5), "\n    ") << dot;
  EXPECT_NE(LineWith(dot, {"label=\"block 2\""}), "") << dot;
  // The while op and its grad op point into the clusters of their blocks.
  const std::string loop = OpNode(dot, "while"), loop_grad = OpNode(dot, "while_grad");
  ASSERT_NE(loop, "");
  ASSERT_NE(loop_grad, "");
  EXPECT_NE(LineWith(dot, {loop + " -> op_1_0 [lhead=cluster_1"}), "") << dot;
  EXPECT_NE(LineWith(dot, {loop_grad + " -> op_2_0 [lhead=cluster_2", "color=red"}), "") << dot;
  // Ops of the grad block are gradient ops; the forward sub-block's are not.
  EXPECT_NE(LineWith(dot, {"op_2_0 [shape=box", "dashed"}), "") << dot;
  EXPECT_EQ(LineWith(dot, {"op_1_0 [shape=box", "dashed"}), "") << dot;
  // Graphviz accepts it.
  r = Nabla("graph " + Quote(rnn) + " --backward loss -o " + Quote(Path("rnn.svg")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(Slurp(Path("rnn.svg")).find("<svg"), std::string::npos);
}

TEST_F(CliToolsTest, GraphWritesDotSvgAndPng) {
  Result r = Nabla("graph " + Quote(program_) + " --backward loss -o " + Quote(Path("g.dot")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(Slurp(Path("g.dot")), Nabla("graph " + Quote(program_) + " --backward loss").out);

  r = Nabla("graph " + Quote(program_) + " --backward loss -o " + Quote(Path("g.svg")));
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string svg = Slurp(Path("g.svg"));
  EXPECT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(svg.find("mul_grad"), std::string::npos);

  r = Nabla("graph " + Quote(program_) + " -o " + Quote(Path("g.png")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(Slurp(Path("g.png")).substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  // Only the outputs: dot's temporary files are gone.
  EXPECT_EQ(FilesInDir(), (std::vector<std::string>{"g.dot", "g.png", "g.svg", "linear.yaml"}));
}

TEST_F(CliToolsTest, GraphBadInput) {
  ExpectBadInput("graph " + Quote(program_) + " -o " + Quote(Path("g.pdf")), {"g.pdf", "'.pdf'", ".svg"});
  ExpectBadInput("graph " + Quote(program_) + " -o " + Quote(Path("graph")), {"no extension"});
  EXPECT_EQ(FilesInDir(), (std::vector<std::string>{"linear.yaml"}));
  ExpectBadInput("graph " + Quote(program_) + " --backward ghost", {"ghost"});
  ExpectBadInput("graph " + Quote(program_) + " --params w", {"--backward"});
  ExpectBadInput("graph " + Quote(program_) + " -o " + Quote(Path("no/such/g.svg")), {"no/such"});
  // Without Graphviz, .svg names what to install; DOT still works.
  fs::create_directories(Path("empty_bin"));
  const std::string no_dot = "PATH=" + Quote(Path("empty_bin"));
  ExpectBadInput("graph " + Quote(program_) + " -o " + Quote(Path("g.svg")), {"'dot'", "graphviz"}, no_dot);
  EXPECT_FALSE(fs::exists(Path("g.svg")));
  EXPECT_EQ(Nabla("graph " + Quote(program_), no_dot).code, 0);
}

// ---------------------------------------------------------------- gradcheck

TEST_F(CliToolsTest, GradcheckOfOneOpPasses) {
  Result r = Nabla("gradcheck --op mul");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  const std::vector<std::string> lines = r.OutLines();
  ASSERT_GE(lines.size(), 2u) << r.out;
  // One line per device the op has float64 kernels for, the CPU first.
  EXPECT_TRUE(std::regex_search(lines[0], std::regex("^PASS +mul +cpu +max error [0-9.e+-]+ over [0-9]+ case")))
      << lines[0];
  for (const std::string& line : lines)
    if (line.find("mul") != std::string::npos) {
      EXPECT_EQ(line.rfind("PASS", 0), 0u) << line;
    }
  EXPECT_NE(r.out.find(" passed, 0 failed"), std::string::npos) << r.out;
}

TEST_F(CliToolsTest, GradcheckAllPassesForTheStandardPlugins) {
  Result r = Nabla("gradcheck --all --device cpu");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(r.out.find("FAIL"), std::string::npos) << r.out;
  for (const char* op : {"mul", "elementwise_add", "mean", "softmax_with_cross_entropy", "relu", "concat"})
    EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)PASS +" + std::string(op) + " +cpu +max error")))
        << op << "\n"
        << r.out;
  // Grad ops are checked through their forward ops, not listed on their own.
  EXPECT_EQ(r.out.find("mul_grad"), std::string::npos) << r.out;
  // Ops without a gradient are named in one note; ops whose gradients only
  // programs can check (sub-blocks, tensor arrays) are skipped, not failed.
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\nnot checked, no gradient: .*fill_constant.*sgd"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)SKIP +while "))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)SKIP +read_from_array "))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\n[0-9]+ checks: [0-9]+ passed, 0 failed, [0-9]+ skipped\n")))
      << r.out;
}

TEST_F(CliToolsTest, GradcheckSkipsOpsWithoutGradOpsWithANote) {
  Result r = Nabla("gradcheck --op fill_constant");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^SKIP +fill_constant +- +its GradOpDescMaker emits no grad ops\n")))
      << r.out;
  EXPECT_NE(r.out.find("1 check: 0 passed, 0 failed, 1 skipped"), std::string::npos) << r.out;
  r = Nabla("gradcheck --op while");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("runs a sub-block"), std::string::npos) << r.out;
}

TEST_F(CliToolsTest, GradcheckOfAThirdPartyPlugin) {
  const std::string plugin = "--plugin " + Quote(ACME_PLUGIN_PATH);
  Result r = Nabla(plugin + " gradcheck --op acme_cube");
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^PASS +acme_cube +cpu .*\\(acme_grad\\)"))) << r.out;

  // --only-plugin keeps --all to the plugin's ops; the wrong gradient fails.
  r = Nabla("gradcheck " + plugin + " --all --only-plugin");
  EXPECT_EQ(r.code, 1) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)PASS +acme_cube +cpu "))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("(^|\n)FAIL +acme_bad_cube +cpu "))) << r.out;
  EXPECT_NE(r.out.find("case 'vector': X (x0, shape [5]): max error"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("mul"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2 checks: 1 passed, 1 failed, 0 skipped"), std::string::npos) << r.out;
  const std::vector<std::string> err = r.ErrLines();
  ASSERT_EQ(err.size(), 1u) << r.err;
  EXPECT_NE(err[0].find("nabla: error: gradient check failed for 1 op: acme_bad_cube on cpu"), std::string::npos)
      << err[0];
}

TEST_F(CliToolsTest, GradcheckBadInput) {
  ExpectBadInput("gradcheck --op no_such_op", {"no_such_op"});
  ExpectBadInput("gradcheck", {"--op", "--all"});
  ExpectBadInput("gradcheck --op mul --all", {"both"});
  ExpectBadInput("gradcheck --all --only-plugin", {"--only-plugin", "--plugin FILE"});
  ExpectBadInput("gradcheck --op mul --only-plugin", {"--only-plugin", "--all"});
  ExpectBadInput("gradcheck --op mul --device tpu", {"tpu"});
}

}  // namespace
}  // namespace nabla
