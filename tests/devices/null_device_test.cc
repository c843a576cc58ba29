// The null device: shapes and dtypes only. `nabla exec --device null` runs
// shape inference through every op (startup, forward, backward) and prints
// each fetch's dtype and shape, or the first shape error in one line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/npy.h"
#include "nabla/plugin.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;
using testing_cli::Result;

const std::string kLinear = std::string(NABLA_SOURCE_DIR) + "/examples/linear.yaml";

// linear.yaml with x's columns left open, so only the run can see that a fed
// x of 5 columns does not meet w's 4 rows.
const char* kOpenColumns = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, -1], dtype: float32, stop_gradient: true}
      w: {shape: [4, 3], dtype: float32, persistable: true,
          init: {type: uniform_random, min: -0.5, max: 0.5, seed: 1}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: mean, inputs: {X: [xw]}, outputs: {Out: [loss]}}
)";

class DeviceNullCli : public ::testing::Test {
 protected:
  void SetUp() override { cpu::InitCpuBackend(); }

  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string WriteZeros(const std::string& name, const Shape& shape) const {
    Tensor t;
    float* p = t.Allocate<float>(HostDevice(), shape);
    std::fill(p, p + t.Numel(), 0.0f);
    WriteNpy(Path(name), t);
    return Path(name);
  }
  Result Nabla(const std::string& args) const {
    return testing_cli::RunBinary(NABLA_BIN_PATH, args, "", Path("captured"));
  }

  test_util::TempDir dir_{"nabla_devices_test"};
};

TEST_F(DeviceNullCli, DryRunOfLinearPrintsShapesAndDTypes) {
  const std::string x = WriteZeros("x.npy", {2, 4});
  Result r = Nabla("exec " + testing_cli::Quote(kLinear) + " --device null --feed x=" + testing_cli::Quote(x) +
                   " --fetch xw,y,loss,w");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.OutLines(),
            (std::vector<std::string>{"xw: float32[2, 3]", "y: float32[2, 3]", "loss: float32[1]", "w: float32[4, 3]"}))
      << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(DeviceNullCli, DryRunFollowsTheBackwardPart) {
  const std::string x = WriteZeros("x.npy", {7, 4});
  Result r = Nabla("exec " + testing_cli::Quote(kLinear) + " --device null --backward loss --sgd 0.1 --feed x=" +
                   testing_cli::Quote(x) + " --fetch y,w@GRAD,b@GRAD");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.OutLines(), (std::vector<std::string>{"y: float32[7, 3]", "w@GRAD: float32[4, 3]", "b@GRAD: float32[3]"}))
      << r.out;
}

TEST_F(DeviceNullCli, ShapeErrorIsOneLineNamingTheOp) {
  std::ofstream(Path("open.yaml")) << kOpenColumns;
  const std::string x = WriteZeros("x.npy", {2, 5});
  Result r = Nabla("exec " + testing_cli::Quote(Path("open.yaml")) +
                   " --device null --feed x=" + testing_cli::Quote(x) + " --fetch loss");
  testing_cli::ExpectOneLineError(r, "mul of [2, 5] by [4, 3]", {"op 'mul' (", "open.yaml:10:9)", "[2, 5]", "[4, 3]"});
  EXPECT_EQ(r.out, "");
  // The same program and feed fail the same way on the CPU: the dry run
  // reports what a real run would.
  Result cpu = Nabla("exec " + testing_cli::Quote(Path("open.yaml")) +
                     " --device cpu --feed x=" + testing_cli::Quote(x) + " --fetch loss");
  EXPECT_EQ(cpu.code, 2);
  EXPECT_EQ(cpu.err, r.err);
}

// A while loop's trip count is data: the dry run says so instead of
// guessing one.
TEST_F(DeviceNullCli, ControlFlowIsRefusedInOneLine) {
  const std::string dir = std::string(NABLA_SOURCE_DIR) + "/tests/reference/rnn_while/";
  std::string args = "exec " + testing_cli::Quote(dir + "program.yaml") + " --device null --fetch loss";
  for (const char* n : {"x0", "x1", "x2", "x3", "x4", "x5", "h0", "label", "w", "b", "v", "c"})
    args += std::string(" --feed ") + n + "=" + testing_cli::Quote(dir + "inputs/" + n + ".npy");
  testing_cli::ExpectOneLineError(Nabla(args), "while", {"op 'while'", "dry run", "control flow"});
}

TEST_F(DeviceNullCli, UnknownDeviceListsTheRegisteredNames) {
  const std::string x = WriteZeros("x.npy", {2, 4});
  testing_cli::ExpectOneLineError(
      Nabla("exec " + testing_cli::Quote(kLinear) + " --device tpu:1 --feed x=" + testing_cli::Quote(x)),
      "--device tpu:1", {"unknown device 'tpu:1'", "cpu", "null"});
}

TEST_F(DeviceNullCli, DryRunHasNothingToWriteOrTime) {
  const std::string x = WriteZeros("x.npy", {2, 4});
  const std::string base = "exec " + testing_cli::Quote(kLinear) + " --device null --feed x=" + testing_cli::Quote(x);
  testing_cli::ExpectOneLineError(Nabla(base + " --fetch y --out " + testing_cli::Quote(Path("out"))), "--out",
                                  {"dry run", "--out"});
  EXPECT_FALSE(fs::exists(Path("out")));
  testing_cli::ExpectOneLineError(Nabla(base + " --repeat 3"), "--repeat", {"dry run", "--repeat"});
}

TEST_F(DeviceNullCli, DevicesListsEveryBackend) {
  Result r = Nabla("devices");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("cpu "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("null "), std::string::npos) << r.out;
}

// In process: what the dry run leaves in the scope has shape and dtype but
// no data, and asking for the data is an error, never zeros.
TEST(DeviceNull, TensorsCarryShapesButNoData) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  ProgramDesc program = ParseProgram(kOpenColumns, "open.yaml");
  Scope scope;
  Tensor x;
  x.Allocate<float>(HostDevice(), {3, 4});
  scope.Var("x")->GetTensor().CopyFrom(x, NullDevice());
  auto exec = CreateExecutor("sequential", NullDevice());
  exec->Run(BuildStartupProgram(program, {"x"}), 0, scope);
  exec->Run(program, 0, scope);
  const Tensor& xw = scope.FindVar("xw")->GetTensor();
  EXPECT_EQ(xw.DebugString(), "float32[3, 3]");
  EXPECT_TRUE(IsDryRun(*xw.GetDevice()));
  Tensor host;
  try {
    host.CopyFrom(xw, HostDevice());
    FAIL() << "copied data off the null device";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kPreconditionNotMet);
    EXPECT_NE(std::string(e.what()).find("null device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nabla
