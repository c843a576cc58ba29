// The `nabla` binary as users meet it: exec of small programs checked
// against values computed here, `nabla ops`, and every bad-input path, which
// must exit 2 with exactly one stderr line naming the culprit.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
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

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string WriteText(const std::string& name, const std::string& text) const {
    std::ofstream(Path(name), std::ios::binary) << text;
    return Path(name);
  }
  std::string WriteFloats(const std::string& name, const Shape& shape, const std::vector<float>& values) const {
    Tensor t;
    float* p = t.Allocate<float>(HostDevice(), shape);
    std::copy(values.begin(), values.end(), p);
    WriteNpy(Path(name), t);
    return Path(name);
  }
  std::vector<float> ReadFloats(const std::string& path, Shape* shape = nullptr) const {
    Tensor t = ReadNpy(path, HostDevice());
    if (shape) *shape = t.GetShape();
    return std::vector<float>(t.Data<float>(), t.Data<float>() + t.Numel());
  }

  // Runs `nabla ARGS` (ARGS already quoted) with `env` prepended.
  Result Nabla(const std::string& args, const std::string& env = "") const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, env, Path("captured"));
  }

  // A bad input: exit 2, one stderr line `nabla: error: ...` containing every fragment.
  void ExpectBadInput(const std::string& args, const std::vector<std::string>& fragments) const {
    testing_cli::ExpectOneLineError(Nabla(args), args, fragments);
  }

  // x is 2x3: rows (1, 2, 3) and (4, 5, 6).
  std::string LinearArgs() {
    const std::string program = WriteText("linear.yaml", kLinear);
    const std::string x = WriteFloats("x.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
    return "exec " + Quote(program) + " --feed " + Quote("x=" + x);
  }

  test_util::TempDir dir_{"nabla_cli_test"};
};

TEST_F(CliTest, ExecWritesFetchesComputedFromInitializersAndFeeds) {
  Result r = Nabla(LinearArgs() + " --fetch y,loss,w --out " + Quote(Path("out/sub")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  Shape shape;
  // y[i][j] = 0.25 * sum(x[i]) + 0.5
  EXPECT_EQ(ReadFloats(Path("out/sub/y.npy"), &shape), (std::vector<float>{2.0f, 2.0f, 4.25f, 4.25f}));
  EXPECT_EQ(shape, (Shape{2, 2}));
  std::vector<float> loss = ReadFloats(Path("out/sub/loss.npy"), &shape);
  ASSERT_EQ(loss.size(), 1u);
  EXPECT_FLOAT_EQ(loss[0], 3.125f);
  EXPECT_EQ(ReadFloats(Path("out/sub/w.npy")), std::vector<float>(6, 0.25f));
}

TEST_F(CliTest, AFeedMaySetAParameter) {
  const std::string w = WriteFloats("w.npy", {3, 2}, {1, 0, 0, 1, 1, 1});
  Result r = Nabla(LinearArgs() + " --feed " + Quote("w=" + w) + " --fetch y --out " + Quote(Path("out")));
  ASSERT_EQ(r.code, 0) << r.err;
  // x·w = (1+3, 2+3) and (4+6, 5+6); b = 0.5
  EXPECT_EQ(ReadFloats(Path("out/y.npy")), (std::vector<float>{4.5f, 5.5f, 10.5f, 11.5f}));
}

TEST_F(CliTest, ExecPrintsFetchesWithoutOut) {
  Result r = Nabla(LinearArgs() + " --fetch loss,y");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, "loss: float32[1]\n[3.125]\ny: float32[2, 2]\n[[   2    2]\n [4.25 4.25]]\n");
}

TEST_F(CliTest, BackwardGradientsAreWrittenUnderTheirVerbatimNames) {
  Result r = Nabla(LinearArgs() + " --backward loss --fetch w@GRAD,b@GRAD --out " + Quote(Path("g")));
  ASSERT_EQ(r.code, 0) << r.err;
  // d mean(y) / dy = 1/4; dw[k][j] = sum_i x[i][k] / 4; db[j] = 2/4.
  EXPECT_EQ(ReadFloats(Path("g/w@GRAD.npy")), (std::vector<float>{1.25f, 1.25f, 1.75f, 1.75f, 2.25f, 2.25f}));
  EXPECT_EQ(ReadFloats(Path("g/b@GRAD.npy")), (std::vector<float>{0.5f, 0.5f}));
}

TEST_F(CliTest, BothExecutorsAgree) {
  for (const char* executor : {"sequential", "taskgraph"}) {
    Result r =
        Nabla(LinearArgs() + " --executor " + executor + " --threads 2 --fetch y --out " + Quote(Path(executor)));
    ASSERT_EQ(r.code, 0) << executor << ": " << r.err;
    EXPECT_EQ(ReadFloats(Path(std::string(executor) + "/y.npy")), (std::vector<float>{2.0f, 2.0f, 4.25f, 4.25f}));
  }
}

// matmul of X[1000]^T and Y[1, 1000] is their outer product, [1000, 1000]:
// its shape inference once gave [1000] and the GEMM wrote a million floats
// into it. In checked mode such a write ends the run with one line naming
// matmul's Out; the right shape runs the same checked or not.
TEST_F(CliTest, TransposedVectorMatmulRunsCheckedAndUnchecked) {
  const std::string program = WriteText("outer.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars: {x: {shape: [1000], dtype: float32}, y: {shape: [1, 1000], dtype: float32}}
    ops:
      - {type: matmul, inputs: {X: [x], Y: [y]}, outputs: {Out: [out]}, attrs: {transpose_X: true}}
)");
  std::vector<float> x(1000), y(1000);
  for (int i = 0; i < 1000; ++i) {
    x[i] = static_cast<float>(i % 7) - 3.0f;
    y[i] = static_cast<float>(i % 5) * 0.5f;
  }
  const std::string args = "exec " + Quote(program) + " --feed " + Quote("x=" + WriteFloats("x.npy", {1000}, x)) +
                           " --feed " + Quote("y=" + WriteFloats("y.npy", {1, 1000}, y)) + " --fetch out --out ";
  for (const char* checked : {"", " --checked"}) {
    const std::string out = Path(std::string("out") + (*checked ? "_checked" : ""));
    Result r = Nabla(args + Quote(out) + checked);
    ASSERT_EQ(r.code, 0) << checked << ": " << r.err;
    Shape shape;
    const std::vector<float> got = ReadFloats(out + "/out.npy", &shape);
    ASSERT_EQ(shape, (Shape{1000, 1000})) << checked;
    for (int i = 0; i < 1000; ++i)
      for (int j = 0; j < 1000; ++j)
        ASSERT_EQ(got[i * 1000 + j], x[i] * y[j]) << checked << " [" << i << ", " << j << "]";
  }
}

TEST_F(CliTest, RepeatPrintsTimingsAndKeepsResults) {
  Result r = Nabla(LinearArgs() + " --repeat 5 --warmup 2 --fetch loss --out " + Quote(Path("out")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("5 runs after 2 warm-up: median ", 0), 0u) << r.out;
  // "median 12.345 us, min 11.000 us, max 20.100 us per run" (or ms)
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(median [0-9.]+ (us|ms), min [0-9.]+ \1, max [0-9.]+ \1 per run)")))
      << r.out;
  EXPECT_FLOAT_EQ(ReadFloats(Path("out/loss.npy"))[0], 3.125f);
}

TEST_F(CliTest, OutIsNotWrittenWhenTheRunFails) {
  // Y's trailing dim (4) cannot broadcast against X's (3): a run-time failure
  // after every input check passed.
  const std::string program = WriteText("bad_add.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      a: {shape: [-1, -1], dtype: float32}
      c: {shape: [-1, -1], dtype: float32}
    ops:
      - {type: scale, inputs: {X: [a]}, outputs: {Out: [a2]}, attrs: {scale: 2.0}}
      - {type: elementwise_add, inputs: {X: [a2], Y: [c]}, outputs: {Out: [s]}}
)");
  const std::string a = WriteFloats("a.npy", {2, 3}, {1, 2, 3, 4, 5, 6});
  const std::string c = WriteFloats("c.npy", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  Result r = Nabla("exec " + Quote(program) + " --feed " + Quote("a=" + a) + " --feed " + Quote("c=" + c) +
                   " --fetch a2,s --out " + Quote(Path("out")));
  EXPECT_NE(r.code, 0);
  EXPECT_EQ(r.ErrLines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find("elementwise_add"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(Path("out")));
}

TEST_F(CliTest, AnUnwritableOutFolderIsARuntimeFailure) {
  WriteText("file", "a regular file");
  Result r = Nabla(LinearArgs() + " --fetch y --out " + Quote(Path("file/sub")));
  EXPECT_EQ(r.code, 1) << r.err;
  ASSERT_EQ(r.ErrLines().size(), 1u) << r.err;
  EXPECT_NE(r.err.find(Path("file/sub")), std::string::npos) << r.err;
}

TEST_F(CliTest, OpsListsEveryStandardOpAsJson) {
  Result r = Nabla("ops --json");
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json doc = nlohmann::json::parse(r.out);
  bool found = false;
  for (const auto& op : doc["ops"]) {
    if (op["type"] != "mul") continue;
    found = true;
    EXPECT_EQ(op["plugin"], "math_ops");
    EXPECT_EQ(op["has_gradient"], true);
    EXPECT_GT(op["origin"]["line"].get<int>(), 0);
    EXPECT_EQ(op["inputs"][0]["name"], "X");
    bool has_attr = false;
    for (const auto& a : op["attrs"]) {
      if (a["name"] == "x_num_col_dims") {
        has_attr = true;
        EXPECT_EQ(a["type"], "int");
        EXPECT_EQ(a["default"], 1);
      }
    }
    EXPECT_TRUE(has_attr);
    const auto& cpu = op["kernels"]["cpu"];
    EXPECT_NE(std::find(cpu.begin(), cpu.end(), "float32"), cpu.end()) << op["kernels"];
  }
  EXPECT_TRUE(found) << "mul is not listed";
  bool math_plugin = false;
  for (const auto& p : doc["plugins"]) math_plugin |= p["name"] == "math_ops";
  EXPECT_TRUE(math_plugin);
}

TEST_F(CliTest, OpsPrintsATable) {
  Result r = Nabla("ops");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("OP ", 0), 0u) << r.out.substr(0, 200);
  std::istringstream in(r.out);
  bool mul_row = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("mul ", 0) == 0) {
      mul_row = true;
      EXPECT_NE(line.find("math_ops"), std::string::npos) << line;
      EXPECT_NE(line.find("yes"), std::string::npos) << line;
      EXPECT_NE(line.find("cpu: float32"), std::string::npos) << line;
    }
  }
  EXPECT_TRUE(mul_row) << r.out.substr(0, 500);
  EXPECT_NE(r.out.find("    attr  x_num_col_dims: int = 1"), std::string::npos);
}

TEST_F(CliTest, HelpAndVersionExitZero) {
  Result help = Nabla("--help");
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("exec"), std::string::npos);
  EXPECT_NE(help.out.find("ops"), std::string::npos);
  Result exec_help = Nabla("exec --help");
  EXPECT_EQ(exec_help.code, 0);
  EXPECT_NE(exec_help.out.find("--feed"), std::string::npos);
  Result version = Nabla("--version");
  EXPECT_EQ(version.code, 0);
  EXPECT_EQ(version.out.rfind("nabla ", 0), 0u) << version.out;
}

// OpenBLAS reads OPENBLAS_CORETYPE before main runs, so nabla re-executes
// itself with it set; --version reports the kernels actually in use.
TEST_F(CliTest, PicksFastBlasKernelsWhenTheEnvironmentDoesNot) {
  __builtin_cpu_init();
  std::string expected;
  if (__builtin_cpu_supports("avx512f")) {
    expected = "SkylakeX";
  } else if (__builtin_cpu_supports("avx2")) {
    expected = "Haswell";
  } else {
    GTEST_SKIP() << "this CPU has neither AVX-512 nor AVX2; nabla leaves OpenBLAS's choice alone";
  }
  Result r = Nabla("--version", "env -u OPENBLAS_CORETYPE");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("OpenBLAS kernels: " + expected), std::string::npos) << r.out;
  // An explicit choice is respected.
  Result forced = Nabla("--version", "env OPENBLAS_CORETYPE=Haswell");
  EXPECT_NE(forced.out.find("OpenBLAS kernels: Haswell"), std::string::npos) << forced.out;
}

TEST_F(CliTest, BadYaml) {
  const std::string p = WriteText("bad.yaml", "format: nabla-program/1\nblocks: [ {idx: 0\n");
  ExpectBadInput("exec " + Quote(p), {p + ":"});
}

TEST_F(CliTest, UnknownOp) {
  const std::string p = WriteText("unknown.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float32}
    ops:
      - {type: no_such_op, inputs: {X: [x]}, outputs: {Out: [y]}}
)");
  ExpectBadInput("exec " + Quote(p), {p + ":8:", "no_such_op"});
}

TEST_F(CliTest, MissingProgramFile) { ExpectBadInput("exec " + Quote(Path("absent.yaml")), {Path("absent.yaml")}); }

TEST_F(CliTest, BadNpyFeed) {
  const std::string bad = WriteText("garbage.npy", "this is not numpy");
  ExpectBadInput(LinearArgs() + " --feed " + Quote("w=" + bad), {bad, "not a .npy file"});
}

TEST_F(CliTest, MissingFeedFile) {
  ExpectBadInput("exec " + Quote(WriteText("linear.yaml", kLinear)) + " --feed " + Quote("x=" + Path("nope.npy")),
                 {Path("nope.npy")});
}

TEST_F(CliTest, FeedShapeMismatch) {
  const std::string x = WriteFloats("x4.npy", {2, 4}, {1, 2, 3, 4, 5, 6, 7, 8});
  ExpectBadInput("exec " + Quote(WriteText("linear.yaml", kLinear)) + " --feed " + Quote("x=" + x),
                 {x, "feed 'x'", "[2, 4]", "[-1, 3]", "linear.yaml:6:"});
}

TEST_F(CliTest, FeedDTypeMismatch) {
  Tensor t;
  t.Allocate<double>(HostDevice(), {2, 3});
  for (int i = 0; i < 6; ++i) t.MutableData<double>()[i] = i;
  WriteNpy(Path("x64.npy"), t);
  ExpectBadInput("exec " + Quote(WriteText("linear.yaml", kLinear)) + " --feed " + Quote("x=" + Path("x64.npy")),
                 {Path("x64.npy"), "float64", "float32"});
}

TEST_F(CliTest, FeedOfAnUndeclaredVar) {
  ExpectBadInput(LinearArgs() + " --feed " + Quote("nothing=" + Path("x.npy")), {"--feed nothing", "'nothing'"});
}

TEST_F(CliTest, MalformedFeedOption) {
  ExpectBadInput(LinearArgs() + " --feed justaname", {"NAME=FILE.npy", "justaname"});
}

TEST_F(CliTest, MissingFeed) {
  ExpectBadInput("exec " + Quote(WriteText("linear.yaml", kLinear)) + " --fetch y",
                 {"linear.yaml:10:", "'x'", "--feed x="});
}

TEST_F(CliTest, UnknownFetch) { ExpectBadInput(LinearArgs() + " --fetch y,ghost", {"--fetch ghost"}); }

TEST_F(CliTest, UnknownExecutor) { ExpectBadInput(LinearArgs() + " --executor warp", {"warp", "sequential"}); }

TEST_F(CliTest, NotAPluginViaPluginOption) {
  const std::string fake = WriteText("libfake.so", "not an ELF file");
  ExpectBadInput("--plugin " + Quote(fake) + " ops", {fake});
  // Global options may also follow the command.
  ExpectBadInput("ops --plugin " + Quote(fake), {fake});
}

// ---------------------------------------------------------------- --sgd and --fuse

// examples/linear.yaml with its seeded initializers and a fixed 8x4 batch.
std::string ExampleLinear() { return std::string(NABLA_SOURCE_DIR) + "/examples/linear.yaml"; }

TEST_F(CliTest, SgdStepIsParamMinusLearningRateTimesGradExactly) {
  std::vector<float> xs;
  for (int i = 0; i < 32; ++i) xs.push_back(0.125f * static_cast<float>((i * 7) % 13) - 0.75f);
  const std::string feed = " --feed " + Quote("x=" + WriteFloats("x.npy", {8, 4}, xs));
  const std::string program = Quote(ExampleLinear());
  // Without --sgd: the initial parameters and their gradients.
  Result before =
      Nabla("exec " + program + feed + " --backward loss --fetch w,b,w@GRAD,b@GRAD --out " + Quote(Path("before")));
  ASSERT_EQ(before.code, 0) << before.err;
  // One training step: the same forward and backward, then the update.
  Result step = Nabla("exec " + program + feed + " --backward loss --sgd 0.1 --fetch w,b,w@GRAD,b@GRAD --out " +
                      Quote(Path("step")));
  ASSERT_EQ(step.code, 0) << step.err;
  const float lr = 0.1f;
  for (const char* p : {"w", "b"}) {
    const std::vector<float> param = ReadFloats(Path("before/" + std::string(p) + ".npy"));
    const std::vector<float> grad = ReadFloats(Path("before/" + std::string(p) + "@GRAD.npy"));
    EXPECT_EQ(ReadFloats(Path("step/" + std::string(p) + "@GRAD.npy")), grad) << p;
    const std::vector<float> updated = ReadFloats(Path("step/" + std::string(p) + ".npy"));
    ASSERT_EQ(updated.size(), param.size()) << p;
    for (size_t i = 0; i < param.size(); ++i) {
      EXPECT_EQ(updated[i], param[i] - lr * grad[i]) << p << "[" << i << "]";
      EXPECT_NE(grad[i], 0.0f) << p << "[" << i << "]: a zero gradient would not test the update";
    }
  }
}

TEST_F(CliTest, SgdStepsAccumulateOverRepeats) {
  // --repeat 3 runs three steps on the same scope: b moves by 3 * lr * 0.5
  // (d mean(y) / db = 2/4 every step, whatever w is).
  Result r = Nabla(LinearArgs() + " --backward loss --sgd 0.25 --repeat 3 --fetch b --out " + Quote(Path("out")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(ReadFloats(Path("out/b.npy")), (std::vector<float>{0.125f, 0.125f}));
}

// Two tanh layers and softmax + cross_entropy: every chain --fuse fuses.
const char* kFusable = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 3], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      w0: {shape: [3, 5], dtype: float32, persistable: true, init: {type: uniform_random, min: -1, max: 1, seed: 3}}
      b0: {shape: [5], dtype: float32, persistable: true, init: {type: uniform_random, min: -1, max: 1, seed: 4}}
      w1: {shape: [5, 4], dtype: float32, persistable: true, init: {type: uniform_random, min: -1, max: 1, seed: 5}}
      b1: {shape: [4], dtype: float32, persistable: true, init: {type: uniform_random, min: -1, max: 1, seed: 6}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w0]}, outputs: {Out: [xw0]}}
      - {type: elementwise_add, inputs: {X: [xw0], Y: [b0]}, outputs: {Out: [pre0]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [pre0]}, outputs: {Out: [h0]}}
      - {type: mul, inputs: {X: [h0], Y: [w1]}, outputs: {Out: [xw1]}}
      - {type: elementwise_add, inputs: {X: [xw1], Y: [b1]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
      - {type: softmax, inputs: {X: [logits]}, outputs: {Out: [prob]}}
      - {type: cross_entropy, inputs: {X: [prob], Label: [label]}, outputs: {Y: [ce]}}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

TEST_F(CliTest, FuseGivesTheSameFetchesAsWithout) {
  const std::string program = WriteText("fusable.yaml", kFusable);
  const std::string x = WriteFloats("x.npy", {4, 3}, {0.5f, -1, 2, 1.5f, 0.25f, -0.5f, -2, 1, 0, 0.75f, -0.25f, 1});
  Tensor label;
  int64_t* l = label.Allocate<int64_t>(HostDevice(), {4, 1});
  l[0] = 0, l[1] = 3, l[2] = 1, l[3] = 2;
  WriteNpy(Path("label.npy"), label);
  const std::string base = "exec " + Quote(program) + " --feed " + Quote("x=" + x) + " --feed " +
                           Quote("label=" + Path("label.npy")) + " --backward loss";
  const std::vector<std::string> fetched = {"loss", "h0", "w0@GRAD", "b0@GRAD", "w1@GRAD", "b1@GRAD"};
  std::string list;
  for (const auto& f : fetched) list += (list.empty() ? "" : ",") + f;
  for (const char* step : {"", " --sgd 0.5"}) {
    Result plain = Nabla(base + step + " --fetch " + list + " --out " + Quote(Path("plain")));
    ASSERT_EQ(plain.code, 0) << plain.err;
    Result fused = Nabla(base + step + " --fuse --fetch " + list + " --out " + Quote(Path("fused")));
    ASSERT_EQ(fused.code, 0) << fused.err;
    for (const auto& f : fetched) {
      const std::vector<float> a = ReadFloats(Path("plain/" + f + ".npy"));
      const std::vector<float> b = ReadFloats(Path("fused/" + f + ".npy"));
      ASSERT_EQ(a.size(), b.size()) << f;
      // Bias + tanh fuses bit for bit; softmax + cross entropy goes through
      // log-sum-exp, equal within float rounding.
      for (size_t i = 0; i < a.size(); ++i)
        EXPECT_NEAR(a[i], b[i], 1e-6 + 1e-5 * std::fabs(a[i])) << f << "[" << i << "]" << step;
    }
  }
  // Without the gradients fetched, each weight's sgd step moves into the
  // GEMM of its gradient: the weights after the step stay the same.
  const std::string weights = " --sgd 0.5 --fetch w0,b0,w1,b1 --out ";
  Result plain = Nabla(base + weights + Quote(Path("plain_step")));
  ASSERT_EQ(plain.code, 0) << plain.err;
  Result fused = Nabla(base + " --fuse" + weights + Quote(Path("fused_step")));
  ASSERT_EQ(fused.code, 0) << fused.err;
  for (const char* w : {"w0", "b0", "w1", "b1"}) {
    const std::vector<float> a = ReadFloats(Path(std::string("plain_step/") + w + ".npy"));
    const std::vector<float> b = ReadFloats(Path(std::string("fused_step/") + w + ".npy"));
    ASSERT_EQ(a.size(), b.size()) << w;
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_NEAR(a[i], b[i], 1e-6 + 1e-5 * std::fabs(a[i])) << w << "[" << i << "]";
  }
}

TEST_F(CliTest, BadSgdIsABadInput) {
  ExpectBadInput(LinearArgs() + " --sgd 0.1", {"--sgd", "--backward"});
  ExpectBadInput(LinearArgs() + " --backward loss --sgd=-0.1", {"--sgd", "positive", "-0.1"});
  ExpectBadInput(LinearArgs() + " --backward loss --sgd 0", {"--sgd", "positive", "'0'"});
  ExpectBadInput(LinearArgs() + " --backward loss --sgd fast", {"--sgd", "fast"});
}

TEST_F(CliTest, UsageErrors) {
  ExpectBadInput("", {"nabla --help"});
  ExpectBadInput("frobnicate", {"frobnicate"});
  ExpectBadInput("exec", {"PROGRAM"});
  ExpectBadInput("ops --bogus", {"--bogus"});
  ExpectBadInput(LinearArgs() + " --device tpu", {"tpu"});
  ExpectBadInput(LinearArgs() + " --threads many", {"many"});
  ExpectBadInput(LinearArgs() + " --params w", {"--backward"});
  // An int64 option past the 64-bit integers is refused, not clamped to
  // 9223372036854775807 (strtoll's overflow).
  ExpectBadInput(LinearArgs() + " --seed 99999999999999999999", {"--seed", "99999999999999999999", "64-bit"});
  ExpectBadInput(LinearArgs() + " --seed 18446744073709551615", {"--seed", "64-bit"});
}

}  // namespace
}  // namespace nabla
