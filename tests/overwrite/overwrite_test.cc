// Overwritten vars get right gradients or a build-time error, never a wrong
// number: every case under cases/ (PyTorch's values, float64) runs through
// the binary on both executors; the error paths and the renamed program are
// checked through the binary too.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "nabla/cpu/cpu.h"
#include "nabla/npy.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;
using testing_cli::Quote;
using testing_cli::Result;

struct Case {
  std::string name;
  std::string executor;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name << "/" << c.executor; }

std::vector<Case> AllCases() {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(NABLA_OVERWRITE_CASES))
    if (fs::exists(entry.path() / "case.yaml")) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  std::vector<Case> cases;
  for (const auto& n : names)
    for (const char* e : {"sequential", "taskgraph"}) cases.push_back(Case{n, e});
  return cases;
}

class Overwrite : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }
  Result Nabla(const std::string& args) const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, "", (dir_ / "captured").string());
  }
  test_util::TempDir dir_{"nabla_overwrite_test"};
};

// float64 throughout: the only differences left are rounding.
TEST_P(Overwrite, GradientsMatchPyTorch) {
  const fs::path dir = fs::path(NABLA_OVERWRITE_CASES) / GetParam().name;
  YAML::Node spec = YAML::LoadFile((dir / "case.yaml").string());
  std::string args = "exec " + Quote((dir / "program.yaml").string()) + " --backward " +
                     spec["loss"].as<std::string>() + " --executor " + GetParam().executor;
  for (const auto& f : spec["feeds"])
    args += " --feed " + Quote(f.first.as<std::string>() + "=" + (dir / f.second.as<std::string>()).string());
  std::string fetch;
  for (const auto& e : spec["expected"]) fetch += (fetch.empty() ? "" : ",") + e.first.as<std::string>();
  args += " --fetch " + Quote(fetch) + " --out " + Quote((dir_ / "out").string());
  Result r = Nabla(args);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
  for (const auto& e : spec["expected"]) {
    const std::string var = e.first.as<std::string>();
    Tensor want = ReadNpy((dir / e.second.as<std::string>()).string(), HostDevice());
    Tensor got = ReadNpy((dir_ / "out" / (var + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetShape(), want.GetShape()) << var;
    ASSERT_EQ(got.GetDType(), DType::kFloat64) << var;
    const double* g = got.Data<double>();
    const double* w = want.Data<double>();
    for (int64_t i = 0; i < want.Numel(); ++i)
      EXPECT_NEAR(g[i], w[i], 1e-9 * std::max(1.0, std::abs(w[i]))) << var << "[" << i << "] of " << GetParam().name;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, Overwrite, ::testing::ValuesIn(AllCases()),
                         [](const auto& info) { return info.param.name + "_" + info.param.executor; });

class OverwriteCli : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }
  std::string Write(const std::string& name, const std::string& text) const { return dir_.Write(name, text); }
  Result Nabla(const std::string& args) const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, "", (dir_ / "captured").string());
  }
  test_util::TempDir dir_{"nabla_overwrite_cli"};
};

// A fed loss that an op reads before the loss is written: the seed
// loss@GRAD would be the gradient of both values, so no right answer exists.
TEST_F(OverwriteCli, OverwritingATargetAfterItWasReadIsABuildError) {
  const std::string program = Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64}
      loss: {shape: [1], dtype: float64}
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [loss]}, outputs: {Out: [z]}}
      - {type: mean, inputs: {X: [z]}, outputs: {Out: [loss]}}
)");
  Result r = Nabla("backward " + Quote(program) + " --loss loss");
  testing_cli::ExpectOneLineError(
      r, "backward", {"target 'loss'", "'elementwise_mul' (op #0 at ", "p.yaml:9:", "'mean' (op #1 at ", "p.yaml:10:"});
}

// w stop_gradient, overwritten after elementwise_mul read it: its fed value
// is copied aside for elementwise_mul_grad, which reads it, so x@GRAD is the
// fed w / 2, not tanh(x*w) / 2.
TEST_F(OverwriteCli, AnOverwrittenFeedWithoutGradientIsCopiedAside) {
  const std::string program = Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64}
      w: {shape: [2], dtype: float64, stop_gradient: true}
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [z]}}
      - {type: tanh, inputs: {X: [z]}, outputs: {Out: [w]}}
      - {type: mean, inputs: {X: [z]}, outputs: {Out: [loss]}}
)");
  Tensor x, w;
  double* px = x.Allocate<double>(HostDevice(), {2});
  double* pw = w.Allocate<double>(HostDevice(), {2});
  px[0] = 0.5, px[1] = -1.0, pw[0] = 2.0, pw[1] = 0.75;
  WriteNpy((dir_ / "x.npy").string(), x);
  WriteNpy((dir_ / "w.npy").string(), w);
  Result r = Nabla("exec " + Quote(program) + " --backward loss --feed " + Quote("x=" + (dir_ / "x.npy").string()) +
                   " --feed " + Quote("w=" + (dir_ / "w.npy").string()) + " --fetch 'x@GRAD,w' --out " +
                   Quote((dir_ / "out").string()));
  ASSERT_EQ(r.code, 0) << r.err;
  Tensor gx = ReadNpy((dir_ / "out" / "x@GRAD.npy").string(), HostDevice());
  Tensor last_w = ReadNpy((dir_ / "out" / "w.npy").string(), HostDevice());
  for (int i = 0; i < 2; ++i) {
    EXPECT_NEAR(gx.Data<double>()[i], 0.5 * pw[i], 1e-12) << i;
    EXPECT_NEAR(last_w.Data<double>()[i], std::tanh(px[i] * pw[i]), 1e-12)
        << i;  // fetches see the last value under the user's name
  }
}

// An op that writes the var it reads, in a forward-only run (no backward,
// so no renaming): mul(X=h, Y=w) -> h reads h whole before h changes, and
// tanh(h) -> h and a second
// mul on the new h follow. It once gave zeros with exit 0.
TEST_F(OverwriteCli, AnOpWritingItsOwnInputReadsItIntact) {
  const std::string program = Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      h: {shape: [2, 2], dtype: float64}
      w: {shape: [2, 2], dtype: float64}
      u: {shape: [2, 2], dtype: float64}
    ops:
      - {type: mul, inputs: {X: [h], Y: [w]}, outputs: {Out: [h]}}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [h]}}
      - {type: mul, inputs: {X: [h], Y: [u]}, outputs: {Out: [h]}}
)");
  Tensor h, w, u;
  double* ph = h.Allocate<double>(HostDevice(), {2, 2});
  double* pw = w.Allocate<double>(HostDevice(), {2, 2});
  double* pu = u.Allocate<double>(HostDevice(), {2, 2});
  for (int i = 0; i < 4; ++i) ph[i] = 0.25 * (i + 1) - 0.6;
  for (int i = 0; i < 4; ++i) pw[i] = 0.3 * i - 0.7;
  for (int i = 0; i < 4; ++i) pu[i] = 0.1 * i - 0.35;
  WriteNpy((dir_ / "h.npy").string(), h);
  WriteNpy((dir_ / "w.npy").string(), w);
  WriteNpy((dir_ / "u.npy").string(), u);
  double t[4], want[4];
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      double acc = 0;
      for (int k = 0; k < 2; ++k) acc += ph[r * 2 + k] * pw[k * 2 + c];
      t[r * 2 + c] = std::tanh(acc);
    }
  for (int r = 0; r < 2; ++r)
    for (int c = 0; c < 2; ++c) {
      double acc = 0;
      for (int k = 0; k < 2; ++k) acc += t[r * 2 + k] * pu[k * 2 + c];
      want[r * 2 + c] = acc;
    }
  for (const char* executor : {"sequential", "taskgraph"}) {
    Result r = Nabla("exec " + Quote(program) + " --executor " + executor + " --feed " +
                     Quote("h=" + (dir_ / "h.npy").string()) + " --feed " + Quote("w=" + (dir_ / "w.npy").string()) +
                     " --feed " + Quote("u=" + (dir_ / "u.npy").string()) + " --fetch h --out " +
                     Quote((dir_ / executor).string()));
    ASSERT_EQ(r.code, 0) << r.err;
    Tensor got = ReadNpy((dir_ / executor / "h.npy").string(), HostDevice());
    ASSERT_EQ(got.GetShape(), (Shape{2, 2})) << executor;
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(got.Data<double>()[i], want[i], 1e-12) << executor << " " << i;
  }
}

// `nabla backward` writes the versions it made: the value mul read is y@VER@1,
// the last one keeps the name y.
TEST_F(OverwriteCli, BackwardShowsTheRenamedProgram) {
  const fs::path dir = fs::path(NABLA_OVERWRITE_CASES) / "block0_overwrite";
  Result r = Nabla("backward " + Quote((dir / "program.yaml").string()) + " --loss loss -o " +
                   Quote((dir_ / "b.yaml").string()));
  ASSERT_EQ(r.code, 0) << r.err;
  YAML::Node prog = YAML::LoadFile((dir_ / "b.yaml").string());
  YAML::Node ops = prog["blocks"][0]["ops"];
  EXPECT_EQ(ops[0]["outputs"]["Out"][0].as<std::string>(), "y@VER@1");
  EXPECT_EQ(ops[1]["inputs"]["X"][0].as<std::string>(), "y@VER@1");
  EXPECT_EQ(ops[2]["outputs"]["Out"][0].as<std::string>(), "y");
  EXPECT_EQ(ops[3]["inputs"]["X"][0].as<std::string>(), "y");
}

// Optimizer ops update their parameter in place on purpose (UpdatesInPlace):
// no error, sgd keeps writing w itself and w@GRAD is still the gradient of w,
// but elementwise_mul_grad, which runs after sgd, reads a copy of the w that
// elementwise_mul read.
TEST_F(OverwriteCli, OptimizerUpdatesInPlaceAreNotOverwrites) {
  const std::string program = Write("p.yaml", R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float64, stop_gradient: true}
      w: {shape: [2], dtype: float64, persistable: true, init: {type: fill_constant, value: 0.5, shape: [2], dtype: float64}}
      g: {shape: [2], dtype: float64, stop_gradient: true}
      lr: {shape: [1], dtype: float64, stop_gradient: true}
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [z]}}
      - {type: mean, inputs: {X: [z]}, outputs: {Out: [loss]}}
      - {type: sgd, inputs: {Param: [w], Grad: [g], LearningRate: [lr]}, outputs: {ParamOut: [w]}}
)");
  Result r = Nabla("backward " + Quote(program) + " --loss loss");
  ASSERT_EQ(r.code, 0) << r.err;
  YAML::Node prog = YAML::Load(r.out);
  EXPECT_EQ(prog["backward"]["param_grads"][0][0].as<std::string>(), "w");
  EXPECT_EQ(prog["backward"]["param_grads"][0][1].as<std::string>(), "w@GRAD");
  YAML::Node ops = prog["blocks"][0]["ops"];
  EXPECT_EQ(ops[0]["type"].as<std::string>(), "assign");
  EXPECT_EQ(ops[0]["inputs"]["X"][0].as<std::string>(), "w");
  const std::string copy = ops[0]["outputs"]["Out"][0].as<std::string>();
  EXPECT_EQ(ops[1]["inputs"]["Y"][0].as<std::string>(), copy);
  EXPECT_EQ(ops[3]["type"].as<std::string>(), "sgd");
  EXPECT_EQ(ops[3]["inputs"]["Param"][0].as<std::string>(), "w");
  EXPECT_EQ(ops[3]["outputs"]["ParamOut"][0].as<std::string>(), "w");
}

}  // namespace
}  // namespace nabla
