// nabla/train.h through its public API: the ops and vars each optimizer,
// clipping, regularization and the metric add to a tiny linear model, and
// what one step does to the parameters, checked against the update rules
// computed here from the model's own gradient formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/nabla.h"
#include "nabla/train.h"
#include "nabla/train/pipeline.h"
#include "test_util.h"

namespace nabla::train {
namespace {

// loss = mean((x·w + b - y)^2), x [4, 2], w [2, 1], b [1].
constexpr const char* kLinear = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 2], dtype: float32, stop_gradient: true}
      y: {shape: [-1, 1], dtype: float32, stop_gradient: true}
      w: {shape: [2, 1], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
      b: {shape: [1], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.25}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [pred]}}
      - {type: elementwise_sub, inputs: {X: [pred], Y: [y]}, outputs: {Out: [err]}}
      - {type: square, inputs: {X: [err]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)";

const float kX[4][2] = {{1.0f, 2.0f}, {-1.0f, 0.5f}, {3.0f, -2.0f}, {0.0f, 1.0f}};
const float kY[4] = {1.0f, -2.0f, 0.5f, 3.0f};
constexpr float kW0 = 0.5f, kB0 = 0.25f;

// d loss / d (w0, w1, b) at w = (kW0, kW0), b = kB0, by the chain rule.
std::vector<double> ExpectedGrads() {
  std::vector<double> g(3, 0.0);
  for (int i = 0; i < 4; ++i) {
    const double err = kX[i][0] * kW0 + kX[i][1] * kW0 + kB0 - kY[i];
    g[0] += 2.0 / 4 * err * kX[i][0];
    g[1] += 2.0 / 4 * err * kX[i][1];
    g[2] += 2.0 / 4 * err;
  }
  return g;
}

class TrainLibTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    cpu::InitCpuBackend();
    PluginManager::Instance().LoadDefaults();
  }

  // The linear model with its backward part; `pg` gets (w, w@GRAD), (b, b@GRAD).
  static ProgramDesc Linear(ParamGrads& pg) {
    ProgramDesc p = ParseProgram(kLinear, "linear.yaml");
    pg = AppendBackward(p, "loss");
    return p;
  }

  // Runs the startup program, then `steps` steps on the fixed batch.
  void Run(const ProgramDesc& p, int steps) {
    executor_ = CreateExecutor("sequential", HostDevice(), ExecutorOptions{});
    executor_->Run(BuildStartupProgram(p, {"x", "y"}), 0, scope_);
    float* x = scope_.Var("x")->GetTensor().Allocate<float>(HostDevice(), {4, 2});
    float* y = scope_.Var("y")->GetTensor().Allocate<float>(HostDevice(), {4, 1});
    std::copy(&kX[0][0], &kX[0][0] + 8, x);
    std::copy(kY, kY + 4, y);
    for (int i = 0; i < steps; ++i) executor_->Run(p, 0, scope_);
  }

  // w0, w1, b after the steps run.
  std::vector<double> Params() { return {Value("w", 0), Value("w", 1), Value("b", 0)}; }
  double Value(const std::string& name, int64_t i) {
    const Variable* v = scope_.FindVar(name);
    EXPECT_TRUE(v != nullptr && v->GetTensor().IsInitialized()) << name;
    return v->GetTensor().Data<float>()[i];
  }

  static std::vector<std::string> OpTypesFrom(const ProgramDesc& p, size_t first) {
    std::vector<std::string> types;
    for (size_t i = first; i < p.Root()->OpSize(); ++i) types.push_back(p.Root()->Op(i)->Type());
    return types;
  }

  static void ExpectFilledVar(const ProgramDesc& p, const std::string& name, const Shape& shape, float value) {
    const VarDesc* v = p.Root()->FindVar(name);
    ASSERT_NE(v, nullptr) << name;
    EXPECT_TRUE(v->Persistable()) << name;
    EXPECT_TRUE(v->StopGradient()) << name;
    EXPECT_EQ(v->GetShape(), shape) << name;
    EXPECT_EQ(v->GetDType(), DType::kFloat32) << name;
    ASSERT_TRUE(v->Init().has_value()) << name;
    EXPECT_EQ(v->Init()->type, "fill_constant") << name;
    EXPECT_EQ(std::get<float>(v->Init()->attrs.at("value")), value) << name;
  }

  Scope scope_;
  std::unique_ptr<Executor> executor_;
};

// The ranges a run config's optimizer keys are held to, for programs built
// through the library (Python's append_optimizer): a negative adamw decay
// once trained with no decay, and wrote an op its own checker refuses.
TEST_F(TrainLibTest, OptimizerValuesOutsideTheirRangesAreErrors) {
  struct Case {
    void (*set)(OptimizerOptions&);
    std::string message;
  };
  const Case cases[] = {
      {[](OptimizerOptions& o) { o.lr = -0.05; }, "optimizer's lr must be positive, but received -0.05"},
      {[](OptimizerOptions& o) { o.weight_decay = -0.1; }, "weight_decay must be >= 0, but received -0.1"},
      {[](OptimizerOptions& o) { o.beta2 = 1.0; }, "beta2 must be in [0, 1)"},
      {[](OptimizerOptions& o) { o.epsilon = 0; }, "epsilon must be positive"},
      {[](OptimizerOptions& o) { o.clip_global_norm = -1; }, "clip_global_norm must be >= 0"},
      {[](OptimizerOptions& o) { o.lr = std::numeric_limits<double>::quiet_NaN(); }, "lr must be positive"},
      {[](OptimizerOptions& o) { o.nesterov = true; }, "nesterov applies to the momentum optimizer"},
  };
  for (const Case& c : cases) {
    ParamGrads pg;
    ProgramDesc p = Linear(pg);
    const size_t before = p.Root()->OpSize();
    OptimizerOptions o;
    o.type = "adamw";
    c.set(o);
    const std::string msg = testing::ErrorOf([&] { AppendOptimizer(p, pg, o); });
    EXPECT_NE(msg.find(c.message), std::string::npos) << msg;
    EXPECT_EQ(p.Root()->OpSize(), before);  // nothing appended
  }
}

TEST_F(TrainLibTest, SgdAddsOneUpdatePerParameterAndTheLearningRateVar) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  const size_t before = p.Root()->OpSize();
  OptimizerOptions o;
  o.lr = 0.1;
  AppendOptimizer(p, pg, o);
  EXPECT_EQ(OpTypesFrom(p, before), (std::vector<std::string>{"sgd", "sgd"}));
  const OpDesc& w_update = *p.Root()->Op(before);
  EXPECT_EQ(w_update.Input("Param"), std::vector<std::string>{"w"});
  EXPECT_EQ(w_update.Input("Grad"), std::vector<std::string>{"w@GRAD"});
  EXPECT_EQ(w_update.Input("LearningRate"), std::vector<std::string>{kLearningRateVar});
  EXPECT_EQ(w_update.Output("ParamOut"), std::vector<std::string>{"w"});
  ExpectFilledVar(p, kLearningRateVar, {1}, 0.1f);

  Run(p, 1);
  const std::vector<double> g = ExpectedGrads(), after = Params();
  const double before_step[3] = {kW0, kW0, kB0};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(after[i], before_step[i] - 0.1 * g[i], 1e-5) << i;
}

TEST_F(TrainLibTest, MomentumKeepsAVelocityPerParameter) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  const size_t before = p.Root()->OpSize();
  OptimizerOptions o;
  o.type = "momentum";
  o.lr = 0.05;
  o.momentum = 0.8;
  AppendOptimizer(p, pg, o);
  EXPECT_EQ(OpTypesFrom(p, before), (std::vector<std::string>{"momentum", "momentum"}));
  EXPECT_EQ(p.Root()->Op(before)->Attr<float>("mu"), 0.8f);
  ExpectFilledVar(p, "w@velocity", {2, 1}, 0.0f);
  ExpectFilledVar(p, "b@velocity", {1}, 0.0f);

  // From zero velocity, one step: v = g, p -= lr * v.
  Run(p, 1);
  const std::vector<double> g = ExpectedGrads(), after = Params();
  const double before_step[3] = {kW0, kW0, kB0};
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(after[i], before_step[i] - 0.05 * g[i], 1e-5) << i;
  EXPECT_NEAR(Value("w@velocity", 1), g[1], 1e-5);
  EXPECT_NEAR(Value("b@velocity", 0), g[2], 1e-5);
}

TEST_F(TrainLibTest, AdamKeepsMomentsAndBetaPowers) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  const size_t before = p.Root()->OpSize();
  OptimizerOptions o;
  o.type = "adam";
  o.lr = 0.01;
  AppendOptimizer(p, pg, o);
  const std::vector<std::string> ops = OpTypesFrom(p, before);
  ASSERT_GE(ops.size(), 2u);
  EXPECT_EQ(std::count(ops.begin(), ops.end(), "adam"), 2);
  for (const char* param : {"w", "b"}) {
    const Shape shape = std::string(param) == "w" ? Shape{2, 1} : Shape{1};
    ExpectFilledVar(p, std::string(param) + "@moment1", shape, 0.0f);
    ExpectFilledVar(p, std::string(param) + "@moment2", shape, 0.0f);
    ExpectFilledVar(p, std::string(param) + "@beta1_pow", {1}, 0.9f);
    ExpectFilledVar(p, std::string(param) + "@beta2_pow", {1}, 0.999f);
  }

  // Paddle's adam, first step: m = (1-b1) g, v = (1-b2) g^2,
  // p -= lr sqrt(1-b2)/(1-b1) * m / (sqrt(v) + eps sqrt(1-b2)).
  Run(p, 1);
  const std::vector<double> g = ExpectedGrads(), after = Params();
  const double before_step[3] = {kW0, kW0, kB0};
  const double lr_t = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  for (int i = 0; i < 3; ++i) {
    const double m = 0.1 * g[i], v = 0.001 * g[i] * g[i];
    EXPECT_NEAR(after[i], before_step[i] - lr_t * m / (std::sqrt(v) + 1e-8 * std::sqrt(1 - 0.999)), 1e-5) << i;
  }
  EXPECT_NEAR(Value("b@moment1", 0), 0.1 * g[2], 1e-5);
  EXPECT_NEAR(Value("w@beta1_pow", 0), 0.9 * 0.9, 1e-6);  // advanced for the next step
}

// adamw's weight decay is the op's own (decoupled): no L2 term reaches the
// gradient, and the first step is adam's from Param * (1 - lr * decay).
TEST_F(TrainLibTest, AdamWDecaysTheParameterNotTheGradient) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  const size_t before = p.Root()->OpSize();
  OptimizerOptions o;
  o.type = "adamw";
  o.lr = 0.01;
  o.weight_decay = 0.5;
  AppendOptimizer(p, pg, o);
  const std::vector<std::string> ops = OpTypesFrom(p, before);
  EXPECT_EQ(ops, (std::vector<std::string>{"adamw", "adamw"}));
  const OpDesc* last = p.Root()->Op(p.Root()->OpSize() - 1);
  EXPECT_EQ(last->Input("Grad"), std::vector<std::string>{"b@GRAD"});
  EXPECT_EQ(last->Attr<float>("coeff"), 0.5f);
  EXPECT_TRUE(last->Attr<bool>("with_decay"));

  Run(p, 1);
  const std::vector<double> g = ExpectedGrads(), after = Params();
  const double before_step[3] = {kW0, kW0, kB0};
  const double lr_t = 0.01 * std::sqrt(1 - 0.999) / (1 - 0.9);
  for (int i = 0; i < 3; ++i) {
    const double m = 0.1 * g[i], v = 0.001 * g[i] * g[i];
    const double decayed = before_step[i] * (1 - 0.01 * 0.5);
    EXPECT_NEAR(after[i], decayed - lr_t * m / (std::sqrt(v) + 1e-8 * std::sqrt(1 - 0.999)), 1e-5) << i;
  }
}

TEST_F(TrainLibTest, ClippingAndWeightDecayComeBeforeTheUpdate) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  const size_t before = p.Root()->OpSize();
  OptimizerOptions o;
  o.lr = 0.1;
  o.clip_global_norm = 0.2;
  o.weight_decay = 0.3;
  AppendOptimizer(p, pg, o);
  const std::vector<std::string> ops = OpTypesFrom(p, before);
  EXPECT_EQ(ops.front(), "squared_l2_norm");
  EXPECT_EQ(ops.back(), "sgd");
  EXPECT_EQ(p.Root()->Op(p.Root()->OpSize() - 1)->Input("Grad"), std::vector<std::string>{"b@GRAD@regularized"});

  // g' = g * clip / max(|g|, clip) + decay * p.
  Run(p, 1);
  const std::vector<double> g = ExpectedGrads(), after = Params();
  const double norm = std::sqrt(g[0] * g[0] + g[1] * g[1] + g[2] * g[2]);
  ASSERT_GT(norm, 0.2);  // the batch is chosen so that clipping acts
  const double before_step[3] = {kW0, kW0, kB0};
  for (int i = 0; i < 3; ++i) {
    const double clipped = g[i] * 0.2 / norm + 0.3 * before_step[i];
    EXPECT_NEAR(after[i], before_step[i] - 0.1 * clipped, 1e-5) << i;
  }
}

TEST_F(TrainLibTest, SetLearningRateChangesTheNextStep) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  AppendOptimizer(p, pg, OptimizerOptions{});
  Run(p, 0);
  SetLearningRate(scope_, 0.5);
  executor_->Run(p, 0, scope_);
  EXPECT_NEAR(Value("b", 0), kB0 - 0.5 * ExpectedGrads()[2], 1e-5);
}

TEST_F(TrainLibTest, BadRequestsAreErrors) {
  ParamGrads pg;
  ProgramDesc p = Linear(pg);
  OptimizerOptions o;
  o.type = "rmsprop";
  EXPECT_THROW(AppendOptimizer(p, pg, o), Error);
  EXPECT_THROW(AppendOptimizer(p, {}, OptimizerOptions{}), Error);
  AppendOptimizer(p, pg, OptimizerOptions{});
  try {
    AppendOptimizer(p, pg, OptimizerOptions{});  // a second learning-rate var
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kAlreadyExists);
    EXPECT_NE(std::string(e.what()).find(kLearningRateVar), std::string::npos) << e.what();
  }
  Scope empty;
  EXPECT_THROW(SetLearningRate(empty, 0.1), Error);
}

TEST(LrScheduleTest, FollowsTheScheduleAndTheWarmup) {
  LrScheduleOptions s;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 50, 3, 100), 0.1);
  s.type = "step";
  s.gamma = 0.5;
  s.every_epochs = 2;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 0, 3, 100), 0.05);  // epoch 3: one period done
  s.type = "exponential";
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 0, 3, 100), 0.1 * 0.125);
  s.type = "cosine";
  s.final_lr = 0.01;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 0, 0, 100), 0.1);
  EXPECT_NEAR(ScheduledLearningRate(0.1, s, 50, 0, 100), 0.055, 1e-12);
  EXPECT_NEAR(ScheduledLearningRate(0.1, s, 100, 0, 100), 0.01, 1e-12);
  s.type = "constant";
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 0, 0, 100), 0.025);
  EXPECT_DOUBLE_EQ(ScheduledLearningRate(0.1, s, 4, 0, 100), 0.1);
  s.type = "linear";
  EXPECT_THROW(ScheduledLearningRate(0.1, s, 0, 0, 100), Error);
}

// scores [3, 3] against labels [3, 1]: rows 0 and 2 rank their label first.
constexpr const char* kScores = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      scores: {shape: [-1, 3], dtype: float32, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
    ops:
      - {type: softmax_with_cross_entropy, inputs: {Logits: [scores], Label: [label]},
         outputs: {Softmax: [prob], Loss: [ce]}}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

TEST_F(TrainLibTest, AccuracyCountsTheRowsWhoseLabelRanksFirst) {
  ProgramDesc p = ParseProgram(kScores, "scores.yaml");
  EXPECT_EQ(FindScoresFor(*p.Root(), "label"), "scores");
  EXPECT_EQ(FindScoresFor(*p.Root(), "scores"), "");
  const size_t before = p.Root()->OpSize();
  const AccuracyVars acc = AppendAccuracy(p, "scores", "label");
  EXPECT_EQ(OpTypesFrom(p, before), (std::vector<std::string>{"top_k", "accuracy"}));

  auto executor = CreateExecutor("sequential", HostDevice(), ExecutorOptions{});
  Scope scope;
  const float scores[9] = {0.9f, 0.05f, 0.05f, 0.2f, 0.7f, 0.1f, 0.1f, 0.1f, 0.8f};
  const int64_t labels[3] = {0, 2, 2};
  std::copy(scores, scores + 9, scope.Var("scores")->GetTensor().Allocate<float>(HostDevice(), {3, 3}));
  std::copy(labels, labels + 3, scope.Var("label")->GetTensor().Allocate<int64_t>(HostDevice(), {3, 1}));
  executor->Run(p, 0, scope);
  const Tensor& correct = scope.FindVar(acc.correct)->GetTensor();
  ASSERT_EQ(correct.GetDType(), DType::kInt32);
  EXPECT_EQ(correct.Data<int32_t>()[0], 2);
  EXPECT_NEAR(scope.FindVar(acc.accuracy)->GetTensor().Data<float>()[0], 2.0 / 3, 1e-6);
}

TEST_F(TrainLibTest, TheEvalProgramIsTheForwardPartInTestMode) {
  // The linear model with a dropout beside the loss: the op that has is_test.
  ProgramDesc p = ParseProgram(
      std::string(kLinear) + "      - {type: dropout, inputs: {X: [pred]}, outputs: {Out: [dropped], Mask: [mask]}}\n",
      "linear.yaml");
  const size_t forward = p.Root()->OpSize();
  const ParamGrads pg = AppendBackward(p, "loss");
  AppendOptimizer(p, pg, OptimizerOptions{});
  ASSERT_GT(p.Root()->OpSize(), forward);
  const ProgramDesc eval = MakeEvalProgram(p, forward);
  ASSERT_EQ(eval.Root()->OpSize(), forward);
  EXPECT_FALSE(eval.Backward().has_value());
  EXPECT_TRUE(eval.Root()->Op(forward - 1)->Attr<bool>("is_test"));
  EXPECT_FALSE(p.Root()->Op(forward - 1)->Attr<bool>("is_test"));  // the training program keeps its mode
  EXPECT_THROW(MakeEvalProgram(p, p.Root()->OpSize() + 1), Error);
  // A count that stops short of the loss's seed would cut forward ops off.
  EXPECT_THROW(MakeEvalProgram(p, forward - 1), Error);
}

// The pass pipeline in one call (nabla run, exec, embedders) and in two
// (Python's append_backward, then append_optimizer) gives the same program,
// with the fusion passes on either side of the backward part and the
// optimizer, and the hooks seeing the program between the stages.
TEST_F(TrainLibTest, ThePipelineInOneCallOrTwoGivesTheSameProgram) {
  // relu after the add: a chain (mul, add, relu) FuseOps turns into fc.
  std::string text = kLinear;
  const std::string add_out = "outputs: {Out: [pred]}}";
  text.replace(text.find(add_out), add_out.size(),
               "outputs: {Out: [pre]}}\n      - {type: relu, inputs: {X: [pre]}, outputs: {Out: [pred]}}");
  PassPipelineOptions o;
  o.fuse = true;
  o.loss = "loss";
  o.optimizer = OptimizerOptions{};
  size_t forward_ops = 0;
  ParamGrads seen;
  o.before_backward = [&](ProgramDesc& p) { forward_ops = p.Root()->OpSize(); };
  o.after_backward = [&](const ParamGrads& pg) { seen = pg; };
  ProgramDesc one = ParseProgram(text, "linear.yaml");
  const size_t unfused_ops = one.Root()->OpSize();
  const PassPipelineResult r = ApplyPassPipeline(one, o);
  EXPECT_FALSE(r.bf16);
  EXPECT_EQ(r.param_grads, seen);
  EXPECT_EQ(forward_ops, unfused_ops - 2);  // mul + add + relu fused before the backward part
  bool fused = false;
  for (size_t i = 0; i < forward_ops; ++i) fused |= one.Root()->Op(i)->Type() == "fc";
  EXPECT_TRUE(fused);

  ProgramDesc two = ParseProgram(text, "linear.yaml");
  PassPipelineOptions first = o;
  first.stages = PassPipelineOptions::Stages::kUntilOptimizer;
  const ParamGrads pg = ApplyPassPipeline(two, first).param_grads;
  EXPECT_EQ(pg, r.param_grads);
  PassPipelineOptions second = o;
  second.stages = PassPipelineOptions::Stages::kFromOptimizer;
  second.param_grads = pg;
  ApplyPassPipeline(two, second);
  EXPECT_EQ(ProgramToYaml(two), ProgramToYaml(one));

  // Without a loss only the forward passes run.
  ProgramDesc fwd = ParseProgram(text, "linear.yaml");
  PassPipelineOptions forward_only;
  forward_only.fuse = true;
  forward_only.keep = {"loss"};
  EXPECT_TRUE(ApplyPassPipeline(fwd, forward_only).param_grads.empty());
  EXPECT_FALSE(fwd.Backward().has_value());
  EXPECT_EQ(fwd.Root()->OpSize(), unfused_ops - 2);
  // A no_grad var stays a var, where the gradient stops: fusing it into fc
  // would let the gradient flow on into the weights.
  ProgramDesc stop = ParseProgram(text, "linear.yaml");
  PassPipelineOptions stopped = o;
  stopped.no_grad = {"pre"};
  stopped.optimizer.reset();
  EXPECT_TRUE(ApplyPassPipeline(stop, stopped).param_grads.empty());
  EXPECT_NE(stop.Root()->FindVar("pre"), nullptr);
  bool relu_reads_pre = false;  // mul + add may become fc, writing pre
  for (size_t i = 0; i < stop.Root()->OpSize(); ++i)
    relu_reads_pre |=
        stop.Root()->Op(i)->Type() == "relu" && stop.Root()->Op(i)->Input("X") == std::vector<std::string>{"pre"};
  EXPECT_TRUE(relu_reads_pre);
  // An unknown precision names where it came from.
  PassPipelineOptions bad = o;
  bad.precision = "fp16";
  bad.precision_where = "here";
  ProgramDesc b = ParseProgram(text, "linear.yaml");
  try {
    ApplyPassPipeline(b, bad);
    ADD_FAILURE() << "fp16 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("here: precision must be one of fp32, bf16, but received 'fp16'"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace nabla::train
