// Large kernels split their work with tbb::parallel_for (cpu::ParallelFor):
// elementwise ops, reductions, softmax, softmax_with_cross_entropy,
// layer_norm, conv2d (float32 on oneDNN too) and the optimizers must give the same bits with one thread as with two, on
// every executor, because each output element is computed (and each sum added up) in one fixed order whatever the
// split. Sizes are well above the parallel threshold; no timing here (speed lives in bench/).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "nabla/backward.h"
#include "nabla/cpu/simd.h"
#include "nabla/program_io.h"
#include "op_test_util.h"

namespace nabla::op_test {
namespace {

// 512 x 300 = 153 600 elements: several chunks for every kernel, and more
// than two blocks of the total reductions' fixed-block sums.
constexpr const char* kProgram = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [512, 300], dtype: float32, persistable: true}
      b: {shape: [300], dtype: float32, persistable: true}
      label: {shape: [512, 1], dtype: int64}
      lr: {shape: [1], dtype: float32, persistable: true}
      x_new: {shape: [512, 300], dtype: float32}
      img: {shape: [16, 8, 12, 12], dtype: float32, persistable: true}
      filt: {shape: [16, 8, 3, 3], dtype: float32, persistable: true}
      dfilt: {shape: [8, 1, 3, 3], dtype: float32, persistable: true}
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [b]}, outputs: {Out: [s]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [s]}, outputs: {Out: [h]}}
      - {type: fused_elemwise_activation, inputs: {X: [x], Y: [b]}, outputs: {Out: [f]},
         attrs: {axis: 1, functor_list: [sigmoid, elementwise_add]}}
      - {type: elementwise_mul, inputs: {X: [h], Y: [f]}, outputs: {Out: [hf]}}
      - {type: softmax, inputs: {X: [hf]}, outputs: {Out: [p_rows]}}
      - {type: softmax, inputs: {X: [h]}, outputs: {Out: [p_cols]}, attrs: {axis: 0}}
      - {type: reduce_sum, inputs: {X: [p_rows]}, outputs: {Out: [col_sums]}, attrs: {dim: [0]}}
      - {type: reduce_mean, inputs: {X: [p_cols]}, outputs: {Out: [row_means]}, attrs: {dim: [1]}}
      - {type: reduce_sum, inputs: {X: [hf]}, outputs: {Out: [total]}, attrs: {reduce_all: true}}
      - {type: scale, inputs: {X: [hf]}, outputs: {Out: [hs]}, attrs: {scale: 0.5, bias: 0.25}}
      - {type: sum, inputs: {X: [h, f, hs]}, outputs: {Out: [sum3]}}
      - {type: softmax_with_cross_entropy, inputs: {Logits: [hs], Label: [label]}, outputs: {Softmax: [sm], Loss: [ce]}}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [ce_mean]}}
      - {type: mean, inputs: {X: [hf]}, outputs: {Out: [hf_mean]}}
      - {type: layer_norm, inputs: {X: [hs], Scale: [b], Bias: [b]}, outputs: {Y: [ln], Mean: [ln_m], Variance: [ln_v]}}
      - {type: elementwise_mul, inputs: {X: [ln], Y: [h]}, outputs: {Out: [lnh]}}
      - {type: mean, inputs: {X: [lnh]}, outputs: {Out: [ln_mean]}}
      - {type: elementwise_add, inputs: {X: [ce_mean], Y: [hf_mean]}, outputs: {Out: [loss0]}}
      - {type: conv2d, inputs: {Input: [img], Filter: [filt]}, outputs: {Output: [conv]}, attrs: {paddings: [1, 1]}}
      - {type: conv2d, inputs: {Input: [img], Filter: [dfilt]}, outputs: {Output: [dconv]},
         attrs: {strides: [2, 2], paddings: [1, 1], groups: 8}}
      - {type: elementwise_mul, inputs: {X: [conv], Y: [conv]}, outputs: {Out: [conv_sq]}}
      - {type: mean, inputs: {X: [conv_sq]}, outputs: {Out: [conv_mean]}}
      - {type: elementwise_mul, inputs: {X: [dconv], Y: [dconv]}, outputs: {Out: [dconv_sq]}}
      - {type: mean, inputs: {X: [dconv_sq]}, outputs: {Out: [dconv_mean]}}
      - {type: elementwise_add, inputs: {X: [loss0], Y: [ln_mean]}, outputs: {Out: [loss1]}}
      - {type: elementwise_add, inputs: {X: [conv_mean], Y: [dconv_mean]}, outputs: {Out: [loss2]}}
      - {type: gelu, inputs: {X: [hs]}, outputs: {Out: [ge]}}
      - {type: gelu, inputs: {X: [hs]}, outputs: {Out: [gt]}, attrs: {approximate: true}}
      - {type: relu, inputs: {X: [ge]}, outputs: {Out: [gr]}}
      - {type: elementwise_sub, inputs: {X: [gr], Y: [gt]}, outputs: {Out: [gd]}}
      - {type: cast, inputs: {X: [gd]}, outputs: {Out: [gb]}, attrs: {in_dtype: float32, out_dtype: bfloat16}}
      - {type: cast, inputs: {X: [gb]}, outputs: {Out: [gf]}, attrs: {in_dtype: bfloat16, out_dtype: float32}}
      - {type: mean, inputs: {X: [gf]}, outputs: {Out: [g_mean]}}
      - {type: elementwise_add, inputs: {X: [loss2], Y: [g_mean]}, outputs: {Out: [loss3]}}
      - {type: elementwise_add, inputs: {X: [loss1], Y: [loss3]}, outputs: {Out: [loss]}}
)";

std::map<std::string, std::vector<char>> RunAndFetchBits(const std::string& executor, int threads) {
  ProgramDesc program = ParseProgram(kProgram, "parallel.yaml");
  AppendBackward(program, "loss");
  OpDesc sgd("sgd", {{"Param", {"x"}}, {"Grad", {GradVarName("x")}}, {"LearningRate", {"lr"}}},
             {{"ParamOut", {"x_new"}}}, {});
  FillDefaultAttrs(sgd, *CurrentRegistry());
  program.Root()->AppendOp(sgd);
  Scope scope;
  std::mt19937_64 rng(11);
  ToTensor(RandomTensor({512, 300}, DType::kFloat32, -3, 3, rng), DType::kFloat32, scope.Var("x")->GetTensor());
  ToTensor(RandomTensor({300}, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var("b")->GetTensor());
  ToTensor(HostTensor{{1}, {0.1}}, DType::kFloat32, scope.Var("lr")->GetTensor());
  // Batch 16: more than one block of the conv2d's fixed batch split.
  ToTensor(RandomTensor({16, 8, 12, 12}, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var("img")->GetTensor());
  ToTensor(RandomTensor({16, 8, 3, 3}, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var("filt")->GetTensor());
  ToTensor(RandomTensor({8, 1, 3, 3}, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var("dfilt")->GetTensor());
  HostTensor label{{512, 1}, {}};
  for (int i = 0; i < 512; ++i) label.v.push_back((i * 37) % 300);
  ToTensor(label, DType::kInt64, scope.Var("label")->GetTensor());
  ExecutorOptions options;
  options.threads = threads;
  auto exec = CreateExecutor(executor, HostDevice(), options);
  exec->Run(program, 0, scope);
  std::map<std::string, std::vector<char>> bits;
  for (const char* name : {"s",          "h",      "f",      "hf",    "p_rows", "p_cols", "col_sums", "row_means",
                           "total",      "hs",     "sum3",   "sm",    "ce",     "ln",     "ln_m",     "ln_v",
                           "loss",       "x@GRAD", "b@GRAD", "x_new", "conv",   "dconv",  "img@GRAD", "filt@GRAD",
                           "dfilt@GRAD", "ge",     "gt",     "gr",    "gd",     "gb",     "gf",       "hs@GRAD"}) {
    const Variable* var = scope.FindVar(name);
    EXPECT_NE(var, nullptr) << name;
    if (!var) continue;
    const Tensor& t = var->GetTensor();
    const char* p = static_cast<const char*>(t.RawData());
    bits[name].assign(p, p + t.Bytes());
  }
  return bits;
}

class ParallelKernels : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { LoadStandardPlugins(); }
};

TEST_P(ParallelKernels, OneAndTwoThreadsGiveTheSameBits) {
  const auto one = RunAndFetchBits(GetParam(), 1);
  const auto two = RunAndFetchBits(GetParam(), 2);
  ASSERT_EQ(one.size(), two.size());
  for (const auto& [name, bits] : one) {
    ASSERT_TRUE(two.count(name)) << name;
    EXPECT_FALSE(bits.empty()) << name;
    EXPECT_TRUE(bits == two.at(name)) << name << " differs between --threads 1 and 2";
  }
}

TEST(ParallelKernels, ExecutorsAgreeBitForBit) {
  LoadStandardPlugins();
  const auto seq = RunAndFetchBits("sequential", 2);
  const auto graph = RunAndFetchBits("taskgraph", 2);
  for (const auto& [name, bits] : seq) EXPECT_TRUE(bits == graph.at(name)) << name;
}

// The kernels' loops run compiled for the CPU's widest vectors
// (nabla/cpu/simd.h): every level this CPU has gives the baseline's bits
// (a CPU without AVX-512 checks the levels it has).
TEST(ParallelKernels, EverySimdLevelGivesTheBaselinesBits) {
  LoadStandardPlugins();
  const cpu::SimdLevel saved = cpu::ActiveSimdLevel();
  cpu::SetSimdLevel(cpu::SimdLevel::kBaseline);
  const auto baseline = RunAndFetchBits("sequential", 1);
  for (cpu::SimdLevel level : {cpu::SimdLevel::kAvx2, cpu::SimdLevel::kAvx512}) {
    if (static_cast<int>(level) > static_cast<int>(cpu::SupportedSimdLevel())) continue;
    ASSERT_EQ(cpu::SetSimdLevel(level), level);
    const auto wide = RunAndFetchBits("sequential", 1);
    for (const auto& [name, bits] : baseline)
      EXPECT_TRUE(bits == wide.at(name)) << name << " differs between " << cpu::SimdLevelName(level) << " and baseline";
  }
  cpu::SetSimdLevel(saved);
}

// A conv's bias: [C] broadcast onto [N, C, H, W] at axis 1, summed over
// two stretches of dims. Its gradient is the serial row-major sum of the
// output gradient, bit for bit, with one thread and with two.
TEST(ParallelKernels, ABiasAroundOneStretchSumsInTheSerialOrder) {
  LoadStandardPlugins();
  ProgramDesc program = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [16, 24, 20, 20], dtype: float32, persistable: true}
      b: {shape: [24], dtype: float32, persistable: true}
      g: {shape: [16, 24, 20, 20], dtype: float32, stop_gradient: true}
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [b]}, outputs: {Out: [s]}, attrs: {axis: 1}}
      - {type: elementwise_mul, inputs: {X: [s], Y: [g]}, outputs: {Out: [t]}}
      - {type: reduce_sum, inputs: {X: [t]}, outputs: {Out: [loss]}, attrs: {reduce_all: true}}
)",
                                     "bias.yaml");
  AppendBackward(program, "loss");
  std::mt19937_64 rng(5);
  const HostTensor x = RandomTensor({16, 24, 20, 20}, DType::kFloat32, -1, 1, rng);
  const HostTensor b = RandomTensor({24}, DType::kFloat32, -1, 1, rng);
  const HostTensor g = RandomTensor({16, 24, 20, 20}, DType::kFloat32, -1, 1, rng);
  // s@GRAD is g exactly (reduce_sum's ones times g): b@GRAD[c] adds g's
  // float32 values over n, then h and w, in that order.
  std::vector<float> want(24, 0.0f);
  for (int n = 0; n < 16; ++n)
    for (int c = 0; c < 24; ++c)
      for (int i = 0; i < 400; ++i) want[c] += static_cast<float>(g.v[(n * 24 + c) * 400 + i]);
  for (int threads : {1, 2}) {
    Scope scope;
    ToTensor(x, DType::kFloat32, scope.Var("x")->GetTensor());
    ToTensor(b, DType::kFloat32, scope.Var("b")->GetTensor());
    ToTensor(g, DType::kFloat32, scope.Var("g")->GetTensor());
    ExecutorOptions options;
    options.threads = threads;
    CreateExecutor("taskgraph", HostDevice(), options)->Run(program, 0, scope);
    const Tensor& db = scope.FindVar("b@GRAD")->GetTensor();
    ASSERT_EQ(std::memcmp(db.Data<float>(), want.data(), sizeof(float) * 24), 0) << threads << " threads";
    const Tensor& dx = scope.FindVar("x@GRAD")->GetTensor();
    for (int64_t i = 0; i < dx.Numel(); ++i)
      ASSERT_EQ(dx.Data<float>()[i], static_cast<float>(g.v[i])) << i << ", " << threads << " threads";
  }
}

// The float32 row kernels of softmax, softmax_with_cross_entropy and
// layer_norm (cpu::RowMax, ExpShiftedSum, LayerNormRow, ... in 16 float
// lanes) against the float64 kernels (plain double loops) on the same
// values, forward and every gradient: rows of 300 (not a multiple of the
// lanes), a layer_norm row with a large mean, and enough rows for the
// layer_norm gradient's several blocks of partial sums.
TEST(ParallelKernels, Float32RowKernelsMatchFloat64) {
  LoadStandardPlugins();
  const std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [64, 300], dtype: DT, persistable: true}
      g: {shape: [300], dtype: DT, persistable: true}
      b: {shape: [300], dtype: DT, persistable: true}
      w: {shape: [64, 300], dtype: DT, stop_gradient: true}
      label: {shape: [64, 1], dtype: int64}
    ops:
      - {type: layer_norm, inputs: {X: [x], Scale: [g], Bias: [b]}, outputs: {Y: [y], Mean: [m], Variance: [v]}}
      - {type: softmax, inputs: {X: [y]}, outputs: {Out: [p]}}
      - {type: elementwise_mul, inputs: {X: [p], Y: [w]}, outputs: {Out: [pw]}}
      - {type: softmax_with_cross_entropy, inputs: {Logits: [y], Label: [label]}, outputs: {Softmax: [sm], Loss: [ce]}}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [ce_mean]}}
      - {type: reduce_sum, inputs: {X: [pw]}, outputs: {Out: [pw_sum]}, attrs: {reduce_all: true}}
      - {type: elementwise_add, inputs: {X: [ce_mean], Y: [pw_sum]}, outputs: {Out: [loss]}}
)";
  std::mt19937_64 rng(3);
  HostTensor x = RandomTensor({64, 300}, DType::kFloat64, -2, 2, rng);
  for (int64_t i = 0; i < 300; ++i) x.v[i] = static_cast<float>(x.v[i] + 1000.0);  // a row far from zero
  for (double& e : x.v) e = static_cast<float>(e);
  const HostTensor g = RandomTensor({300}, DType::kFloat32, 0.5, 1.5, rng);
  const HostTensor b = RandomTensor({300}, DType::kFloat32, -1, 1, rng);
  const HostTensor w = RandomTensor({64, 300}, DType::kFloat32, -30, 30, rng);
  HostTensor label{{64, 1}, {}};
  for (int i = 0; i < 64; ++i) label.v.push_back((i * 37) % 300);
  std::map<std::string, std::vector<double>> got[2];
  for (int f64 = 0; f64 < 2; ++f64) {
    const DType dt = f64 ? DType::kFloat64 : DType::kFloat32;
    std::string t = text;
    for (size_t at; (at = t.find("DT")) != std::string::npos;) t.replace(at, 2, f64 ? "float64" : "float32");
    ProgramDesc program = ParseProgram(t, "rows.yaml");
    AppendBackward(program, "loss");
    Scope scope;
    ToTensor(x, dt, scope.Var("x")->GetTensor());
    ToTensor(g, dt, scope.Var("g")->GetTensor());
    ToTensor(b, dt, scope.Var("b")->GetTensor());
    ToTensor(w, dt, scope.Var("w")->GetTensor());
    ToTensor(label, DType::kInt64, scope.Var("label")->GetTensor());
    ExecutorOptions options;
    options.threads = 2;
    CreateExecutor("taskgraph", HostDevice(), options)->Run(program, 0, scope);
    for (const char* name : {"y", "m", "v", "p", "sm", "ce", "x@GRAD", "g@GRAD", "b@GRAD"})
      got[f64][name] = FromTensor(scope.FindVar(name)->GetTensor()).v;
  }
  for (const auto& [name, want] : got[1]) {
    const std::vector<double>& f32 = got[0].at(name);
    ASSERT_EQ(f32.size(), want.size()) << name;
    double scale = 0.0;
    for (double e : want) scale = std::max(scale, std::abs(e));
    // Mean's values are ~1000 in one row: relative to each value there.
    for (size_t i = 0; i < want.size(); ++i) {
      const double ref = std::string(name) == "m" ? std::max(1.0, std::abs(want[i])) : scale;
      EXPECT_NEAR(f32[i], want[i], 2e-5 * ref) << name << "[" << i << "]";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Executors, ParallelKernels, ::testing::Values("sequential", "taskgraph"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace nabla::op_test
