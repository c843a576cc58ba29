// conv2d, pool2d and batch_norm against PyTorch: every folder under
// tests/reference/vision_ops/ (written by scripts/vision_op_reference.py) is
// one configuration, run through `nabla exec` on float32 and float64 vars
// and compared with PyTorch's float64 result. Gradients are checked by the
// float64 GradCheck cases (ops_test) and, for the whole CNN, by parity_test.
// Bad attributes end in one error line and exit code 2.
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "common/cli_runner.h"
#include "nabla/cpu/cpu.h"
#include "nabla/npy.h"

namespace fs = std::filesystem;

namespace nabla {
namespace {

using testing_cli::Quote;

fs::path CasesDir() { return fs::path(NABLA_REFERENCE_DIR) / "vision_ops"; }

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(CasesDir()))
    if (fs::exists(e.path() / "case.yaml")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<double> AsDoubles(const Tensor& t) {
  if (t.GetDType() == DType::kFloat32) return std::vector<double>(t.Data<float>(), t.Data<float>() + t.Numel());
  return std::vector<double>(t.Data<double>(), t.Data<double>() + t.Numel());
}

class VisionOps : public ::testing::TestWithParam<std::string> {};

TEST_P(VisionOps, ForwardMatchesPyTorch) {
  cpu::InitCpuBackend();
  const fs::path dir = CasesDir() / GetParam();
  YAML::Node spec = YAML::LoadFile((dir / "case.yaml").string());
  const test_util::TempDir scratch{"vision_ops"};
  const fs::path& out = scratch.Dir();
  std::string args = "exec " + Quote((dir / "program.yaml").string());
  for (const auto& f : spec["feeds"])
    args += " --feed " + Quote(f.first.as<std::string>() + "=" + (dir / f.second.as<std::string>()).string());
  std::string fetch;
  for (const auto& e : spec["expected"]) fetch += (fetch.empty() ? "" : ",") + e.first.as<std::string>();
  args += " --fetch " + Quote(fetch) + " --out " + Quote(out.string());
  testing_cli::Result r = testing_cli::RunBinary(NABLA_BIN_PATH, args, "", (out / "run").string());
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
  for (const auto& e : spec["expected"]) {
    const std::string var = e.first.as<std::string>();
    Tensor want = ReadNpy((dir / e.second.as<std::string>()).string(), HostDevice());
    Tensor got = ReadNpy((out / (var + ".npy")).string(), HostDevice());
    ASSERT_EQ(got.GetShape(), want.GetShape()) << var << " of " << GetParam();
    const bool f32 = got.GetDType() == DType::kFloat32;
    // float32 sums of up to ~150 unit-sized products (or an average).
    const double atol = f32 ? 2e-5 : 1e-11, rtol = f32 ? 2e-5 : 1e-10;
    const std::vector<double> g = AsDoubles(got), w = AsDoubles(want);
    for (size_t i = 0; i < w.size(); ++i)
      ASSERT_NEAR(g[i], w[i], atol + rtol * std::abs(w[i])) << var << " of " << GetParam() << " at element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(PyTorch, VisionOps, ::testing::ValuesIn(CaseNames()),
                         [](const auto& info) { return info.param; });

// The reference set covers each op's features; losing a folder fails here.
TEST(VisionOpsCoverage, EveryFeatureHasACase) {
  const std::vector<std::string> names = CaseNames();
  const std::set<std::string> have(names.begin(), names.end());
  for (const char* n : {"conv_stride2_asym_pad",
                        "conv_dilation2",
                        "conv_groups2",
                        "conv_depthwise_mult2",
                        "conv_same_stride2",
                        "conv_same_dilation2",
                        "conv_valid",
                        "pool_max_pad_ceil",
                        "pool_max_ceil_drops_pad_window",
                        "pool_avg_exclusive_pad",
                        "pool_avg_inclusive_pad",
                        "pool_avg_inclusive_ceil",
                        "pool_avg_adaptive",
                        "pool_max_adaptive",
                        "pool_avg_global",
                        "pool_max_global",
                        "bn_train_nchw",
                        "bn_train_2d_momentum",
                        "bn_is_test",
                        "bn_use_global_stats",
                        "conv_nhwc_stride2_groups2",
                        "pool_max_nhwc_pad_ceil",
                        "pool_avg_nhwc",
                        "bn_train_nhwc"})
    EXPECT_TRUE(have.count(n)) << n;
}

// ---------------------------------------------------------------- the CNN example

// examples/fashion_mnist_cnn.yaml itself for 30 steps (on both executors):
// it trains, and its evaluation, which runs batch_norm with is_test on the
// running statistics the training steps moved in place, is far above chance.
TEST(CnnExample, TrainsAndEvaluates) {
  if (!fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  const test_util::TempDir scratch{"vision_cnn"};
  const fs::path& dir = scratch.Dir();
  const std::string config = std::string(NABLA_SOURCE_DIR) + "/examples/fashion_mnist_cnn.yaml";
  // The example writes runs/... under the working directory.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir);
  testing_cli::Result r = testing_cli::RunBinary(NABLA_BIN_PATH, "run " + Quote(config) + " --steps 30 --progress none",
                                                 "", (dir / "run").string());
  fs::current_path(cwd);
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t at = r.out.find("final eval accuracy: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double accuracy = std::stod(r.out.substr(at + 21));
  EXPECT_GT(accuracy, 50.0) << r.out;
  EXPECT_TRUE(fs::exists(dir / "runs/fashion_mnist_cnn/checkpoints")) << r.out;
}

// ---------------------------------------------------------------- bad input

struct BadCase {
  std::string name;
  std::string op;  // one YAML op line on vars x [2, 3, 6, 6] and w [4, 3, 3, 3]
  std::vector<std::string> fragments;
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

// oneDNN's conv backward is planned for the team it is promised; a smaller
// one (OMP_THREAD_LIMIT=1, or OMP_DYNAMIC shrinking it on a busy machine)
// never passed its barriers and spun forever. The user's OpenMP settings may
// cap nabla's threads, never hang it.
TEST(VisionThreads, ConvBackwardFinishesUnderTheUsersOpenMpLimits) {
  const test_util::TempDir scratch{"vision_omp"};
  const fs::path& dir = scratch.Dir();
  const fs::path prog = dir / "prog.yaml";
  std::ofstream(prog) << "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"
                      << "      x: {shape: [2, 3, 8, 8], dtype: float32, persistable: true, stop_gradient: true,"
                      << " init: {type: uniform_random, min: -1.0, max: 1.0, seed: 2}}\n"
                      << "      f: {shape: [4, 3, 3, 3], dtype: float32, persistable: true,"
                      << " init: {type: uniform_random, min: -0.1, max: 0.1, seed: 1}}\n"
                      << "    ops:\n"
                      << "      - {type: conv2d, inputs: {Input: [x], Filter: [f]}, outputs: {Output: [c]},"
                      << " attrs: {paddings: [1, 1]}}\n"
                      << "      - {type: mean, inputs: {X: [c]}, outputs: {Out: [loss]}}\n";
  for (const char* env : {"OMP_THREAD_LIMIT=1", "OMP_DYNAMIC=true"}) {
    testing_cli::Result r = testing_cli::RunBinary(
        NABLA_BIN_PATH, "exec " + Quote(prog.string()) + " --backward loss --fetch f@GRAD --threads 2",
        std::string("env ") + env + " timeout 60", (dir / "run").string());
    EXPECT_EQ(r.code, 0) << env << " (124: hung)\n" << r.err;
    EXPECT_NE(r.out.find("f@GRAD: float32[4, 3, 3, 3]"), std::string::npos) << env << "\n" << r.out;
  }
}

class VisionBadInput : public ::testing::TestWithParam<BadCase> {};

TEST_P(VisionBadInput, OneLineErrorExit2) {
  const test_util::TempDir scratch{"vision_bad"};
  const fs::path& dir = scratch.Dir();
  const fs::path prog = dir / "prog.yaml";
  std::ofstream(prog) << "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"
                      << "      x: {shape: [2, 3, 6, 6], dtype: float32}\n"
                      << "      w: {shape: [4, 3, 3, 3], dtype: float32, persistable: true,"
                      << " init: {type: fill_constant, value: 1.0}}\n"
                      << "      s: {shape: [3], dtype: float32, persistable: true,"
                      << " init: {type: fill_constant, value: 1.0}}\n"
                      << "    ops:\n      - " << GetParam().op << "\n";
  testing_cli::Result r =
      testing_cli::RunBinary(NABLA_BIN_PATH, "exec " + Quote(prog.string()), "", (dir / "run").string());
  testing_cli::ExpectOneLineError(r, GetParam().name, GetParam().fragments);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, VisionBadInput,
    ::testing::Values(
        BadCase{"conv_three_paddings",
                "{type: conv2d, inputs: {Input: [x], Filter: [w]}, outputs: {Output: [y]}, attrs: {paddings: [1, 1, "
                "1]}}",
                {"prog.yaml:", "conv2d", "paddings must hold 2 values", "but received 3"}},
        BadCase{"conv_groups_mismatch",
                "{type: conv2d, inputs: {Input: [x], Filter: [w]}, outputs: {Output: [y]}, attrs: {groups: 3}}",
                {"conv2d", "Input's channels (3)", "groups (3)"}},
        BadCase{"conv_bad_algorithm",
                "{type: conv2d, inputs: {Input: [x], Filter: [w]}, outputs: {Output: [y]}, attrs: "
                "{padding_algorithm: FULL}}",
                {"padding_algorithm", "FULL"}},
        BadCase{"conv_zero_stride",
                "{type: conv2d, inputs: {Input: [x], Filter: [w]}, outputs: {Output: [y]}, attrs: {strides: [0, "
                "1]}}",
                {"conv2d", "strides", "but received 0"}},
        BadCase{"conv_filter_too_big",
                "{type: conv2d, inputs: {Input: [w], Filter: [x]}, outputs: {Output: [y]}, attrs: {groups: 1}}",
                {"conv2d", "height window (kernel 6", "larger than the padded input (3"}},
        BadCase{"pool_no_ksize",
                "{type: pool2d, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {pooling_type: max}}",
                {"pool2d", "ksize must hold 2 values", "but received 0"}},
        BadCase{"pool_bad_type",
                "{type: pool2d, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {pooling_type: sum, ksize: [2, 2]}}",
                {"pooling_type", "sum"}},
        BadCase{"pool_window_too_big",
                "{type: pool2d, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {pooling_type: max, ksize: [7, 2]}}",
                {"pool2d", "height window", "larger than the padded input"}},
        BadCase{"bn_scale_shape",
                "{type: batch_norm, inputs: {X: [x], Scale: [w], Bias: [s], Mean: [s], Variance: [s]}, outputs: {Y: "
                "[y], MeanOut: [s], VarianceOut: [s], SavedMean: [m], SavedVariance: [v]}}",
                {"batch_norm", "Scale must have shape [3]", "[4, 3, 3, 3]"}}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace nabla
