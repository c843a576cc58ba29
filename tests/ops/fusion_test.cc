// The fusion pass (nabla/fusion.h) with the standard plugins: which chains
// it fuses and which it must leave alone, and that a fused program computes
// the same loss and gradients as the unfused one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "nabla/backward.h"
#include "nabla/fusion.h"
#include "nabla/mixed_precision.h"
#include "nabla/program_io.h"
#include "nabla/train.h"
#include "op_test_util.h"

namespace nabla::op_test {
namespace {

// x -> fc(tanh) -> fc(relu) -> fc(sigmoid) -> fc -> softmax -> cross_entropy -> mean.
constexpr const char* kNet = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 6], dtype: float64, stop_gradient: true}
      label: {shape: [-1, 1], dtype: int64}
      w0: {shape: [6, 5], dtype: float64, persistable: true}
      b0: {shape: [5], dtype: float64, persistable: true}
      w1: {shape: [5, 5], dtype: float64, persistable: true}
      b1: {shape: [5], dtype: float64, persistable: true}
      w2: {shape: [5, 4], dtype: float64, persistable: true}
      b2: {shape: [4], dtype: float64, persistable: true}
      w3: {shape: [4, 3], dtype: float64, persistable: true}
      b3: {shape: [3], dtype: float64, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w0]}, outputs: {Out: [xw0]}}
      - {type: elementwise_add, inputs: {X: [xw0], Y: [b0]}, outputs: {Out: [pre0]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [pre0]}, outputs: {Out: [h0]}}
      - {type: mul, inputs: {X: [h0], Y: [w1]}, outputs: {Out: [xw1]}}
      - {type: elementwise_add, inputs: {X: [xw1], Y: [b1]}, outputs: {Out: [pre1]}, attrs: {axis: 1}}
      - {type: relu, inputs: {X: [pre1]}, outputs: {Out: [h1]}}
      - {type: mul, inputs: {X: [h1], Y: [w2]}, outputs: {Out: [xw2]}}
      - {type: elementwise_add, inputs: {X: [xw2], Y: [b2]}, outputs: {Out: [pre2]}, attrs: {axis: 1}}
      - {type: sigmoid, inputs: {X: [pre2]}, outputs: {Out: [h2]}}
      - {type: mul, inputs: {X: [h2], Y: [w3]}, outputs: {Out: [xw3]}}
      - {type: elementwise_add, inputs: {X: [xw3], Y: [b3]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
      - {type: softmax, inputs: {X: [logits]}, outputs: {Out: [prob]}}
      - {type: cross_entropy, inputs: {X: [prob], Label: [label]}, outputs: {Y: [ce]}}
      - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
)";

std::vector<std::string> OpTypes(const ProgramDesc& p) {
  std::vector<std::string> types;
  for (const auto& op : p.Root()->AllOps()) types.push_back(op->Type());
  return types;
}

size_t CountTypes(const ProgramDesc& p, const std::string& type) {
  const auto types = OpTypes(p);
  return static_cast<size_t>(std::count(types.begin(), types.end(), type));
}

// Runs forward + backward on fixed random inputs (the same for every call)
// and returns the loss and every parameter gradient.
std::map<std::string, HostTensor> LossAndGrads(ProgramDesc program, DType dtype, Shape label_shape = {8, 1}) {
  const ParamGrads pg = AppendBackward(program, "loss");
  Scope scope;
  std::mt19937_64 rng(7);
  auto set = [&](const std::string& name, Shape shape, double lo, double hi) {
    ToTensor(RandomTensor(std::move(shape), dtype, lo, hi, rng), dtype, scope.Var(name)->GetTensor());
  };
  set("x", {8, 6}, -1, 1);
  const Shape shapes[] = {{6, 5}, {5}, {5, 5}, {5}, {5, 4}, {4}, {4, 3}, {3}};
  for (int i = 0; i < 4; ++i) {
    set("w" + std::to_string(i), shapes[2 * i], -1, 1);
    set("b" + std::to_string(i), shapes[2 * i + 1], -0.5, 0.5);
  }
  HostTensor label{label_shape, {0, 1, 2, 1, 0, 2, 2, 1}};
  ToTensor(label, DType::kInt64, scope.Var("label")->GetTensor());
  auto exec = CreateExecutor("sequential", HostDevice());
  exec->Run(program, 0, scope);
  std::map<std::string, HostTensor> out;
  out["loss"] = FromTensor(scope.FindVar("loss")->GetTensor());
  for (const auto& [p, g] : pg) out[g] = FromTensor(scope.FindVar(g)->GetTensor());
  return out;
}

ProgramDesc Net(DType dtype) {
  std::string text = kNet;
  if (dtype == DType::kFloat32)
    for (size_t at; (at = text.find("float64")) != std::string::npos;) text.replace(at, 7, "float32");
  return ParseProgram(text, "net.yaml");
}

TEST(Fusion, FusesBiasActivationAndSoftmaxCrossEntropy) {
  ProgramDesc p = Net(DType::kFloat64);
  // Each layer's mul, bias add and activation become one fc.
  EXPECT_EQ(FuseOps(p, {"loss"}), 5u);
  EXPECT_EQ(OpTypes(p), (std::vector<std::string>{"fc", "fc", "fc", "fc", "softmax_with_cross_entropy", "mean"}));
  const OpDesc& relu = *p.Root()->Op(1);
  EXPECT_EQ(relu.Attr<std::string>("activation_type"), "relu");
  EXPECT_EQ(relu.Input("Input"), std::vector<std::string>{"h0"});
  EXPECT_EQ(relu.Input("W"), std::vector<std::string>{"w1"});
  EXPECT_EQ(relu.Input("Bias"), std::vector<std::string>{"b1"});
  EXPECT_EQ(relu.Output("Out"), std::vector<std::string>{"h1"});
  EXPECT_EQ(p.Root()->Op(3)->Attr<std::string>("activation_type"), "");
  EXPECT_FALSE(p.Root()->HasVar("pre1"));
  EXPECT_FALSE(p.Root()->HasVar("xw1"));
  VerifyProgram(p, *CurrentRegistry());
  EXPECT_EQ(FuseOps(p, {"loss"}), 0u);  // nothing left to fuse
}

TEST(Fusion, LeavesKeptAndSharedIntermediatesAlone) {
  ProgramDesc p = Net(DType::kFloat64);
  // pre0 is fetched; pre1 gets a second reader; prob is kept.
  p.Root()->AppendOp(OpDesc("scale", {{"X", {"pre1"}}}, {{"Out", {"pre1_copy"}}}, {}));
  FillDefaultAttrs(*p.Root()->Op(p.Root()->OpSize() - 1), *CurrentRegistry());
  // Every mul + bias add becomes an fc; only the sigmoid layer's takes its
  // activation along. tanh and relu stay.
  EXPECT_EQ(FuseOps(p, {"loss", "pre0", "prob"}), 4u);
  EXPECT_EQ(OpTypes(p), (std::vector<std::string>{"fc", "tanh", "fc", "relu", "fc", "fc", "softmax", "cross_entropy",
                                                  "mean", "scale"}));
  EXPECT_EQ(p.Root()->Op(0)->Output("Out"), std::vector<std::string>{"pre0"});
  EXPECT_EQ(p.Root()->Op(4)->Attr<std::string>("activation_type"), "sigmoid");
}

TEST(Fusion, DoesNotFuseAfterBackwardWasAppended) {
  ProgramDesc p = Net(DType::kFloat64);
  AppendBackward(p, "loss");  // the grad ops read the activations' outputs and inputs
  EXPECT_EQ(FuseOps(p, {"loss"}), 0u);
}

void ExpectSameLossAndGrads(DType dtype, double rtol, double atol) {
  ProgramDesc unfused = Net(dtype);
  ProgramDesc fused = Net(dtype);
  ASSERT_EQ(FuseOps(fused, {"loss"}), 5u);
  auto want = LossAndGrads(unfused, dtype);
  auto got = LossAndGrads(fused, dtype);
  ASSERT_EQ(want.size(), 9u);
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    ExpectNear(got[name], w, rtol, atol, name);
  }
}

// Paddle's cross_entropy takes a hard Label of rank X - 1 ([N] here), and Y
// is then [N]: the fused op must take it too and keep that shape.
TEST(Fusion, SoftmaxCrossEntropyKeepsALabelOfRankOneLess) {
  auto net = [] {
    std::string text = kNet;
    const std::string from = "label: {shape: [-1, 1]";
    text.replace(text.find(from), from.size(), "label: {shape: [-1]");
    return ParseProgram(text, "net.yaml");
  };
  ProgramDesc unfused = net(), fused = net();
  ASSERT_EQ(FuseOps(fused, {"loss"}), 5u);
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(fused.Root()->FindVar("ce")->GetShape(), (Shape{-1}));
  auto want = LossAndGrads(unfused, DType::kFloat64, {8});
  auto got = LossAndGrads(fused, DType::kFloat64, {8});
  ASSERT_EQ(want.size(), 9u);
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    ExpectNear(got[name], w, 1e-12, 1e-14, name);
  }
}

TEST(Fusion, SameLossAndGradientsFloat64) { ExpectSameLossAndGrads(DType::kFloat64, 1e-12, 1e-14); }
TEST(Fusion, SameLossAndGradientsFloat32) { ExpectSameLossAndGrads(DType::kFloat32, 1e-5, 1e-6); }

// Without the softmax pair, the fc fusion is exact: the fused kernels
// evaluate the unfused formulas in the same order, on the same GEMMs
// (OpenBLAS: what float32 runs on here).
TEST(Fusion, BiasActivationGradientsAreBitIdentical) {
  auto strip = [](DType dtype) {
    ProgramDesc p = Net(dtype);
    BlockDesc& b = *p.Root();
    // softmax, cross_entropy -> softmax_with_cross_entropy in both programs.
    b.RemoveOps(11, 13);
    b.InsertOp(11, std::make_unique<OpDesc>("softmax_with_cross_entropy",
                                            VarNameMap{{"Logits", {"logits"}}, {"Label", {"label"}}},
                                            VarNameMap{{"Softmax", {"prob"}}, {"Loss", {"ce"}}}, AttributeMap{}));
    FillDefaultAttrs(*b.Op(11), *CurrentRegistry());
    return p;
  };
  ProgramDesc unfused = strip(DType::kFloat32);
  ProgramDesc fused = strip(DType::kFloat32);
  ASSERT_EQ(FuseOps(fused, {"loss"}), 4u);
  ASSERT_EQ(CountTypes(fused, "fc"), 4u);
  auto want = LossAndGrads(unfused, DType::kFloat32);
  auto got = LossAndGrads(fused, DType::kFloat32);
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    EXPECT_EQ(got[name].v, w.v);
  }
}

// Net with its first layer's tanh replaced by `act` (a flow-mapping op
// tail, say "gelu, inputs: {X: [pre0]}, outputs: {Out: [h0]}, attrs: ...")
// and softmax + cross_entropy by softmax_with_cross_entropy, so the only
// fusions left are the bias-add + activation ones.
ProgramDesc NetWithFirstActivation(DType dtype, const std::string& act) {
  std::string text = kNet;
  if (dtype == DType::kFloat32)
    for (size_t at; (at = text.find("float64")) != std::string::npos;) text.replace(at, 7, "float32");
  const std::string tanh = "tanh, inputs: {X: [pre0]}, outputs: {Out: [h0]}";
  text.replace(text.find(tanh), tanh.size(), act);
  ProgramDesc p = ParseProgram(text, "net.yaml");
  BlockDesc& b = *p.Root();
  b.RemoveOps(11, 13);
  b.InsertOp(11, std::make_unique<OpDesc>("softmax_with_cross_entropy",
                                          VarNameMap{{"Logits", {"logits"}}, {"Label", {"label"}}},
                                          VarNameMap{{"Softmax", {"prob"}}, {"Loss", {"ce"}}}, AttributeMap{}));
  FillDefaultAttrs(*b.Op(11), *CurrentRegistry());
  return p;
}

// Bias + gelu (erf form) fuses as bias + tanh does, and the fused kernels
// compute what gelu and gelu_grad compute on the sum: float32 bit for bit
// (the same vector code), float64 too (the same scalar formulas).
TEST(Fusion, BiasGeluIsFusedAndBitIdentical) {
  const std::string gelu = "gelu, inputs: {X: [pre0]}, outputs: {Out: [h0]}";
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    ProgramDesc unfused = NetWithFirstActivation(dtype, gelu);
    ProgramDesc fused = NetWithFirstActivation(dtype, gelu);
    ASSERT_EQ(FuseOps(fused, {"loss"}), 4u);  // and the other three layers' fc
    EXPECT_EQ(fused.Root()->Op(0)->Type(), "mul");
    const OpDesc& op = *fused.Root()->Op(1);
    ASSERT_EQ(op.Type(), "fused_elemwise_activation");
    EXPECT_EQ(op.Attr<std::vector<std::string>>("functor_list"), (std::vector<std::string>{"gelu", "elementwise_add"}));
    VerifyProgram(fused, *CurrentRegistry());
    auto want = LossAndGrads(unfused, dtype);
    auto got = LossAndGrads(fused, dtype);
    ASSERT_EQ(want.size(), 9u);
    for (const auto& [name, w] : want) {
      SCOPED_TRACE(name);
      EXPECT_EQ(got[name].v, w.v);
    }
  }
}

// fused_elemwise_activation has no tanh-form gelu: such a gelu stays.
TEST(Fusion, LeavesTheTanhFormOfGeluAlone) {
  ProgramDesc p = NetWithFirstActivation(DType::kFloat32,
                                         "gelu, inputs: {X: [pre0]}, outputs: {Out: [h0]}, attrs: {approximate: true}");
  EXPECT_EQ(FuseOps(p, {"loss"}), 4u);
  EXPECT_EQ(OpTypes(p)[0], "fc");  // bias only
  EXPECT_EQ(p.Root()->Op(0)->Attr<std::string>("activation_type"), "");
  EXPECT_EQ(OpTypes(p)[1], "gelu");
}

// ----------------------------------------------------------- mul + bias + activation -> fc

// A layer of `rows` x `in` -> `out` in float32: mul (x_num_col_dims `xn`
// over x of shape `xs`), a bias add and `act` ("" for none), then a loss
// that reads every output element.
std::string FcLayerText(const std::string& xs, int xn, int in, int out, const std::string& act,
                        const std::string& dtype = "float32") {
  std::string text =
      "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n      x: {shape: " + xs +
      ", dtype: " + dtype + "}\n      w: {shape: [" + std::to_string(in) + ", " + std::to_string(out) +
      "], dtype: " + dtype + ", persistable: true}\n      b: {shape: [" + std::to_string(out) + "], dtype: " + dtype +
      ", persistable: true}\n    ops:\n      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: "
      "[xw]}, attrs: {x_num_col_dims: " +
      std::to_string(xn) + "}}\n      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [" +
      (act.empty() ? "h" : "pre") + "]}}\n";
  if (!act.empty()) text += "      - {type: " + act + ", inputs: {X: [pre]}, outputs: {Out: [h]}}\n";
  text += "      - {type: elementwise_mul, inputs: {X: [h], Y: [h]}, outputs: {Out: [h2]}}\n";
  text += "      - {type: mean, inputs: {X: [h2]}, outputs: {Out: [loss]}}\n";
  return text;
}

ProgramDesc FcLayer(const std::string& xs, int xn, int in, int out, const std::string& act,
                    const std::string& dtype = "float32") {
  return ParseProgram(FcLayerText(xs, xn, in, out, act, dtype), "fc_layer.yaml");
}

// h, the loss and the gradients of x, w and b, on fixed inputs, run with
// `threads` threads.
std::map<std::string, HostTensor> FcLayerRun(ProgramDesc program, const Shape& xs, int in, int out, int threads,
                                             DType dtype = DType::kFloat32, bool nan_first = false) {
  program.Root()->FindVar("x")->SetStopGradient(false);
  AppendBackward(program, "loss");
  VerifyProgram(program, *CurrentRegistry());
  Scope scope;
  std::mt19937_64 rng(3);
  HostTensor x = RandomTensor(xs, dtype, -1, 1, rng);
  if (nan_first) x.v[0] = std::numeric_limits<double>::quiet_NaN();
  ToTensor(x, dtype, scope.Var("x")->GetTensor());
  ToTensor(RandomTensor({in, out}, dtype, -0.3, 0.3, rng), dtype, scope.Var("w")->GetTensor());
  ToTensor(RandomTensor({out}, dtype, -0.5, 0.5, rng), dtype, scope.Var("b")->GetTensor());
  ExecutorOptions options;
  options.threads = threads;
  CreateExecutor("sequential", HostDevice(), options)->Run(program, 0, scope);
  std::map<std::string, HostTensor> r;
  for (const char* name : {"h", "loss", "x@GRAD", "w@GRAD", "b@GRAD"})
    r[name] = FromTensor(scope.FindVar(name)->GetTensor());
  return r;
}

// Every activation fc takes, float32 and float64, rank 2 and rank 3 with
// in_num_col_dims 2, and a product large enough to split across two
// threads (300 x 700 x 64): the fused program's output and gradients are
// the unfused one's bit for bit.
TEST(FcFusion, OutputAndGradientsAreBitIdentical) {
  struct Layer {
    std::string xs;
    Shape shape;
    int xn, in, out;
  };
  const Layer layers[] = {
      {"[6, 5]", {6, 5}, 1, 5, 4}, {"[2, 3, 5]", {2, 3, 5}, 2, 5, 4}, {"[300, 64]", {300, 64}, 1, 64, 700}};
  for (const std::string act : {"", "relu", "tanh", "sigmoid"})
    for (const Layer& l : layers)
      for (DType dtype : {DType::kFloat32, DType::kFloat64})
        for (int threads : {1, 2}) {
          SCOPED_TRACE("act '" + act + "' x " + l.xs + " " + DTypeName(dtype) + " threads " + std::to_string(threads));
          const std::string dt = DTypeName(dtype);
          ProgramDesc fused = FcLayer(l.xs, l.xn, l.in, l.out, act, dt);
          ASSERT_EQ(FuseOps(fused, {"loss", "h"}), 1u);
          ASSERT_EQ(OpTypes(fused), (std::vector<std::string>{"fc", "elementwise_mul", "mean"}));
          const OpDesc& fc = *fused.Root()->Op(0);
          EXPECT_EQ(fc.Attr<int>("in_num_col_dims"), l.xn);
          EXPECT_EQ(fc.Attr<std::string>("activation_type"), act);
          const auto want = FcLayerRun(FcLayer(l.xs, l.xn, l.in, l.out, act, dt), l.shape, l.in, l.out, threads, dtype);
          const auto got = FcLayerRun(fused, l.shape, l.in, l.out, threads, dtype);
          for (const auto& [name, w] : want) {
            SCOPED_TRACE(name);
            ASSERT_EQ(got.at(name).shape, w.shape);
            EXPECT_TRUE(got.at(name).v == w.v);
          }
        }
}

// A NaN in x reaches h as NaN through every activation, fused or not: on
// the small layer (OpenBLAS and the epilogue) and the large one (oneDNN,
// whose eltwise_relu post-op made it 0 while relu keeps NaN).
TEST(FcFusion, NanReachesTheOutputAsUnfused) {
  for (const std::string act : {"", "relu", "tanh", "sigmoid"})
    for (const auto& [xs, shape, in, out] :
         {std::tuple<std::string, Shape, int, int>{"[6, 5]", {6, 5}, 5, 4}, {"[300, 64]", {300, 64}, 64, 700}}) {
      SCOPED_TRACE("act '" + act + "' x " + xs);
      ProgramDesc fused = FcLayer(xs, 1, in, out, act);
      ASSERT_EQ(FuseOps(fused, {"loss", "h"}), 1u);
      const auto want = FcLayerRun(FcLayer(xs, 1, in, out, act), shape, in, out, 1, DType::kFloat32, true);
      const auto got = FcLayerRun(fused, shape, in, out, 1, DType::kFloat32, true);
      const HostTensor& w = want.at("h");
      const HostTensor& g = got.at("h");
      ASSERT_EQ(g.shape, w.shape);
      int64_t nans = 0;
      for (int64_t i = 0; i < w.Numel(); ++i) {
        ASSERT_EQ(std::isnan(g.v[i]), std::isnan(w.v[i])) << "element " << i;
        if (std::isnan(w.v[i])) {
          ++nans;
        } else {
          ASSERT_EQ(g.v[i], w.v[i]) << "element " << i;
        }
      }
      EXPECT_EQ(nans, out) << "the first row, all of it";
    }
}

// Bias + gelu on a layer large enough for the fused kernels' blocking (300
// x 700: the forward's few-row blocks; the gradient's one pass at 1 thread,
// two passes split across 2): output and gradients are gelu's and
// elementwise_add's bit for bit, float32 and float64.
TEST(Fusion, LargeBiasGeluLayerIsBitIdenticalAtAnyThreads) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (int threads : {1, 2}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " threads " + std::to_string(threads));
      const std::string dt = DTypeName(dtype);
      ProgramDesc fused = FcLayer("[300, 64]", 1, 64, 700, "gelu", dt);
      ASSERT_EQ(FuseOps(fused, {"loss", "h"}), 1u);
      ASSERT_EQ(OpTypes(fused),
                (std::vector<std::string>{"mul", "fused_elemwise_activation", "elementwise_mul", "mean"}));
      const auto want = FcLayerRun(FcLayer("[300, 64]", 1, 64, 700, "gelu", dt), {300, 64}, 64, 700, threads, dtype);
      const auto got = FcLayerRun(fused, {300, 64}, 64, 700, threads, dtype);
      for (const auto& [name, w] : want) {
        SCOPED_TRACE(name);
        ASSERT_EQ(got.at(name).shape, w.shape);
        EXPECT_TRUE(got.at(name).v == w.v);
      }
    }
}

// The backward part of an fc is the unfused program's grad ops: the bias
// and activation's, then mul_grad (which FuseGradOps' rewrites know); the
// product is never stored.
TEST(FcFusion, GradientIsTheUnfusedGradOps) {
  for (const std::string act : {"", "tanh"}) {
    ProgramDesc p = FcLayer("[6, 5]", 1, 5, 4, act);
    ASSERT_EQ(FuseOps(p, {"loss"}), 1u);
    AppendBackward(p, "loss");
    const auto types = OpTypes(p);
    EXPECT_EQ(CountTypes(p, act.empty() ? "elementwise_add_grad" : "fused_elemwise_activation_grad"), 1u);
    EXPECT_EQ(CountTypes(p, "mul_grad"), 1u);
    EXPECT_EQ(CountTypes(p, "fc_grad"), 0u);
    EXPECT_FALSE(p.Root()->HasVar("xw"));
  }
  // Bias not trained, w trained: the bias grad op still gives mul_grad its
  // input; x, w and b all frozen: no grad op at all.
  ProgramDesc frozen_b = FcLayer("[6, 5]", 1, 5, 4, "relu");
  frozen_b.Root()->FindVar("b")->SetStopGradient(true);
  ASSERT_EQ(FuseOps(frozen_b, {"loss"}), 1u);
  AppendBackward(frozen_b, "loss");
  EXPECT_EQ(CountTypes(frozen_b, "mul_grad"), 1u);
  EXPECT_EQ(CountTypes(frozen_b, "fused_elemwise_activation_grad"), 1u);
}

// mul followed by a fused_elemwise_activation already in the program (a
// Paddle program, or FuseOps run twice) becomes fc too; gelu stays.
TEST(FcFusion, MulAndFusedBiasActivationBecomeFc) {
  ProgramDesc p = FcLayer("[6, 5]", 1, 5, 4, "tanh");
  BlockDesc& b = *p.Root();
  b.RemoveOps(1, 3);
  b.InsertOp(1, std::make_unique<OpDesc>(
                    "fused_elemwise_activation", VarNameMap{{"X", {"xw"}}, {"Y", {"b"}}}, VarNameMap{{"Out", {"h"}}},
                    AttributeMap{{"functor_list", std::vector<std::string>{"tanh", "elementwise_add"}}}));
  FillDefaultAttrs(*b.Op(1), *CurrentRegistry());
  ProgramDesc gelu = p;
  gelu.Root()->Op(1)->SetAttr("functor_list", std::vector<std::string>{"gelu", "elementwise_add"});
  EXPECT_EQ(FuseOps(p, {"loss"}), 1u);
  EXPECT_EQ(OpTypes(p), (std::vector<std::string>{"fc", "elementwise_mul", "mean"}));
  EXPECT_EQ(p.Root()->Op(0)->Attr<std::string>("activation_type"), "tanh");
  EXPECT_EQ(FuseOps(gelu, {"loss"}), 0u);
}

// A program the bfloat16 pass runs on next keeps its mul for it (fc has no
// bfloat16 kernel, mul does): only the bias add and activation fuse.
TEST(FcFusion, LeavesMulToTheBf16Pass) {
  ProgramDesc p = FcLayer("[6, 5]", 1, 5, 4, "tanh");
  EXPECT_EQ(FuseOps(p, {"loss"}, /*bf16_next=*/true), 1u);
  EXPECT_EQ(OpTypes(p), (std::vector<std::string>{"mul", "fused_elemwise_activation", "elementwise_mul", "mean"}));
}

// Only where fc computes what the chain computes: W 2-D and not flattened,
// the bias a row [N] over the product's last dim and the add's Y, one
// float dtype.
TEST(FcFusion, OnlyWhereExact) {
  auto fuses = [](const std::string& from, const std::string& to) {
    std::string text = FcLayerText("[6, 5]", 1, 5, 4, "tanh");
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    ProgramDesc p = ParseProgram(text, "edited.yaml");
    FuseOps(p, {"loss"});
    return CountTypes(p, "fc") == 1;
  };
  EXPECT_TRUE(fuses("b: {shape: [4]", "b: {shape: [1, 4]"));
  EXPECT_FALSE(fuses("b: {shape: [4]", "b: {shape: [6, 4]"));  // a bias per element
  EXPECT_FALSE(fuses("b: {shape: [4]", "b: {shape: [1]"));     // broadcast from one element
  EXPECT_FALSE(fuses("inputs: {X: [xw], Y: [b]}", "inputs: {X: [b], Y: [xw]}"));
  EXPECT_FALSE(fuses("dtype: float32, persistable: true}", "dtype: float64, persistable: true}"));
}

// ----------------------------------------------------------- attention -> flash_attn

// One attention layer written with the ops a user has: projections, heads
// split by reshape + transpose, scores by matmul with transpose_Y and alpha
// 1/sqrt(4), an additive causal mask, softmax, matmul with v, heads merged.
constexpr const char* kAttention = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 5, 12], dtype: float64, stop_gradient: true}
      mask: {shape: [5, 5], dtype: float64, stop_gradient: true}
      wq: {shape: [12, 12], dtype: float64, persistable: true}
      wk: {shape: [12, 12], dtype: float64, persistable: true}
      wv: {shape: [12, 12], dtype: float64, persistable: true}
      wo: {shape: [12, 12], dtype: float64, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [wq]}, outputs: {Out: [q]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [q]}, outputs: {Out: [q4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [q4]}, outputs: {Out: [qt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: mul, inputs: {X: [x], Y: [wk]}, outputs: {Out: [k]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [k]}, outputs: {Out: [k4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [k4]}, outputs: {Out: [kt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: mul, inputs: {X: [x], Y: [wv]}, outputs: {Out: [v]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [v]}, outputs: {Out: [v4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [v4]}, outputs: {Out: [vt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: matmul, inputs: {X: [qt], Y: [kt]}, outputs: {Out: [s]}, attrs: {transpose_Y: true, alpha: 0.5}}
      - {type: elementwise_add, inputs: {X: [s], Y: [mask]}, outputs: {Out: [sm]}}
      - {type: softmax, inputs: {X: [sm]}, outputs: {Out: [p]}, attrs: {axis: -1}}
      - {type: matmul, inputs: {X: [p], Y: [vt]}, outputs: {Out: [o]}}
      - {type: transpose, inputs: {X: [o]}, outputs: {Out: [ot]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: reshape, inputs: {X: [ot]}, outputs: {Out: [a]}, attrs: {shape: [0, 0, 12]}}
      - {type: mul, inputs: {X: [a], Y: [wo]}, outputs: {Out: [y]}, attrs: {x_num_col_dims: 2}}
      - {type: elementwise_mul, inputs: {X: [y], Y: [y]}, outputs: {Out: [y2]}}
      - {type: mean, inputs: {X: [y2]}, outputs: {Out: [loss]}}
)";

// `edit` rewrites the program text (a mask-less variant, another alpha).
ProgramDesc Attention(DType dtype, const std::vector<std::pair<std::string, std::string>>& edits = {}) {
  std::string text = kAttention;
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  if (dtype == DType::kFloat32)
    for (size_t at; (at = text.find("float64")) != std::string::npos;) text.replace(at, 7, "float32");
  return ParseProgram(text, "attention.yaml");
}

const std::pair<std::string, std::string> kNoMask{
    "      - {type: elementwise_add, inputs: {X: [s], Y: [mask]}, outputs: {Out: [sm]}}\n", ""};
const std::pair<std::string, std::string> kSoftmaxOfScores{"inputs: {X: [sm]}", "inputs: {X: [s]}"};

// The loss, every weight's gradient and the vars in `fetch`, on fixed inputs.
std::map<std::string, HostTensor> AttentionRun(ProgramDesc program, DType dtype,
                                               const std::vector<std::string>& fetch = {}) {
  const ParamGrads pg = AppendBackward(program, "loss");
  InferProgram(program);
  VerifyProgram(program, *CurrentRegistry());
  Scope scope;
  std::mt19937_64 rng(5);
  ToTensor(RandomTensor({2, 5, 12}, dtype, -1, 1, rng), dtype, scope.Var("x")->GetTensor());
  for (const char* w : {"wq", "wk", "wv", "wo"})
    ToTensor(RandomTensor({12, 12}, dtype, -0.6, 0.6, rng), dtype, scope.Var(w)->GetTensor());
  HostTensor mask{{5, 5}, std::vector<double>(25, 0.0)};
  for (int i = 0; i < 5; ++i)
    for (int j = i + 1; j < 5; ++j) mask.v[i * 5 + j] = -1e9;
  ToTensor(mask, dtype, scope.Var("mask")->GetTensor());
  CreateExecutor("sequential", HostDevice())->Run(program, 0, scope);
  std::map<std::string, HostTensor> out;
  out["loss"] = FromTensor(scope.FindVar("loss")->GetTensor());
  for (const auto& [p, g] : pg) out[g] = FromTensor(scope.FindVar(g)->GetTensor());
  for (const auto& n : fetch) out[n] = FromTensor(scope.FindVar(n)->GetTensor());
  return out;
}

void ExpectSameResults(const ProgramDesc& unfused, const ProgramDesc& fused, DType dtype,
                       const std::vector<std::string>& fetch = {}) {
  const double tol = dtype == DType::kFloat64 ? 1e-11 : 2e-5;
  auto want = AttentionRun(unfused, dtype, fetch);
  auto got = AttentionRun(fused, dtype, fetch);
  ASSERT_EQ(want.size(), 5u + fetch.size());
  for (const auto& [name, w] : want) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(got.count(name));
    ExpectNear(got[name], w, tol, tol, name);
  }
}

TEST(Fusion, AttentionWithMatmulAndSoftmaxBecomesFlashAttn) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (bool masked : {true, false}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + (masked ? " masked" : " unmasked"));
      std::vector<std::pair<std::string, std::string>> edits;
      if (!masked) edits = {kNoMask, kSoftmaxOfScores};
      ProgramDesc fused = Attention(dtype, edits);
      ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
      // Every transpose, both matmuls, the mask add and the softmax are gone.
      EXPECT_EQ(OpTypes(fused), (std::vector<std::string>{"mul", "reshape", "mul", "reshape", "mul", "reshape",
                                                          "flash_attn", "reshape", "mul", "elementwise_mul", "mean"}));
      const OpDesc& fa = *fused.Root()->Op(6);
      EXPECT_EQ(fa.Input("q"), std::vector<std::string>{"q4"});
      EXPECT_EQ(fa.Input("v"), std::vector<std::string>{"v4"});
      EXPECT_EQ(fa.Output("out"), std::vector<std::string>{"ot"});
      EXPECT_EQ(fa.Input("attn_mask"), masked ? std::vector<std::string>{"mask"} : std::vector<std::string>{});
      EXPECT_FALSE(fused.Root()->HasVar("p"));
      ExpectSameResults(Attention(dtype, edits), fused, dtype);
    }
  }
}

// The scale as a scale op after the product (paddle.scale), alone or with
// part of it in matmul's alpha: the same rewrite, the scale op gone too.
TEST(Fusion, AttentionScaledByAScaleOpBecomesFlashAttn) {
  const std::string product =
      "      - {type: matmul, inputs: {X: [qt], Y: [kt]}, outputs: {Out: [s]}, attrs: "
      "{transpose_Y: true, alpha: 0.5}}";
  auto scaled = [&](const char* alpha, const char* scale) {
    return std::pair<std::string, std::string>{
        product,
        "      - {type: matmul, inputs: {X: [qt], Y: [kt]}, outputs: {Out: [raw]}, attrs: {transpose_Y: "
        "true, alpha: " +
            std::string(alpha) + "}}\n      - {type: scale, inputs: {X: [raw]}, outputs: {Out: [s]}, " +
            "attrs: {scale: " + scale + "}}"};
  };
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (const auto& edit : {scaled("1.0", "0.5"), scaled("2.0", "0.25")}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + edit.second);
      ProgramDesc fused = Attention(dtype, {edit});
      ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
      EXPECT_EQ(CountTypes(fused, "flash_attn"), 1u);
      EXPECT_EQ(CountTypes(fused, "scale"), 0u);
      EXPECT_FALSE(fused.Root()->HasVar("raw"));
      ExpectSameResults(Attention(dtype, {edit}), fused, dtype);
    }
  }
  // Not 1/sqrt(head_dim) in all, a bias, or the product or the scaled
  // scores read elsewhere: left alone.
  const std::pair<std::string, std::string> biased{
      product,
      "      - {type: matmul, inputs: {X: [qt], Y: [kt]}, outputs: {Out: [raw]}, attrs: {transpose_Y: "
      "true}}\n      - {type: scale, inputs: {X: [raw]}, outputs: {Out: [s]}, attrs: {scale: 0.5, bias: "
      "1.0}}"};
  for (const auto& [edit, keep] :
       std::vector<std::pair<std::pair<std::string, std::string>, std::string>>{{scaled("1.0", "0.25"), "loss"},
                                                                                {biased, "loss"},
                                                                                {scaled("1.0", "0.5"), "raw"},
                                                                                {scaled("1.0", "0.5"), "s"}}) {
    SCOPED_TRACE(edit.second + " keep " + keep);
    ProgramDesc p = Attention(DType::kFloat64, {edit});
    FuseOps(p, {"loss", keep});
    EXPECT_EQ(CountTypes(p, "flash_attn"), 0u);
    EXPECT_EQ(CountTypes(p, "softmax"), 1u);
  }
}

// o is fetched: flash_attn writes a var of its own, transposed into o.
TEST(Fusion, AttentionOutputReadAsItIsGetsATransposeBack) {
  ProgramDesc fused = Attention(DType::kFloat64);
  ASSERT_EQ(FuseOps(fused, {"loss", "o"}), 1u);
  EXPECT_EQ(CountTypes(fused, "flash_attn"), 1u);
  EXPECT_EQ(CountTypes(fused, "transpose"), 2u);  // into o, and o into ot
  EXPECT_EQ(CountTypes(fused, "softmax"), 0u);
  ExpectSameResults(Attention(DType::kFloat64), fused, DType::kFloat64, {"o"});
}

// The mask made in the program from constants: fill_constant -1e9, its
// upper triangle above the diagonal (tril_triu). The exact causal pattern
// becomes causal: true and its ops go; any other stays a mask.
const std::pair<std::string, std::string> kMaskFromTrilTriu(std::string value, int diagonal) {
  return {
      "      - {type: elementwise_add, inputs: {X: [s], Y: [mask]}",
      "      - {type: fill_constant, outputs: {Out: [big]}, attrs: {shape: [5, 5], dtype: float64, value: " + value +
          "}}\n      - {type: tril_triu, inputs: {X: [big]}, outputs: {Out: [mask]}, attrs: {lower: false, "
          "diagonal: " +
          std::to_string(diagonal) + "}}\n      - {type: elementwise_add, inputs: {X: [s], Y: [mask]}"};
}

TEST(Fusion, ConstantCausalMaskBecomesCausalFlashAttn) {
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    for (const char* value : {"-1e9", "-3e38"}) {
      SCOPED_TRACE(std::string(DTypeName(dtype)) + " " + value);
      if (dtype == DType::kFloat64 && std::string(value) == "-3e38") continue;
      const std::vector<std::pair<std::string, std::string>> edits = {kMaskFromTrilTriu(value, 1)};
      ProgramDesc fused = Attention(dtype, edits);
      ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
      EXPECT_EQ(OpTypes(fused), (std::vector<std::string>{"mul", "reshape", "mul", "reshape", "mul", "reshape",
                                                          "flash_attn", "reshape", "mul", "elementwise_mul", "mean"}));
      const OpDesc& fa = *fused.Root()->Op(6);
      EXPECT_TRUE(fa.Attr<bool>("causal"));
      EXPECT_FALSE(fa.HasInput("attn_mask"));
      ExpectSameResults(Attention(dtype, edits), fused, dtype);
    }
  }
  // The mask read elsewhere too: causal all the same, its ops stay.
  ProgramDesc kept = Attention(DType::kFloat64, {kMaskFromTrilTriu("-1e9", 1)});
  ASSERT_EQ(FuseOps(kept, {"loss", "mask"}), 1u);
  EXPECT_EQ(CountTypes(kept, "tril_triu"), 1u);
  EXPECT_EQ(CountTypes(kept, "flash_attn"), 1u);
  for (const auto& op : kept.Root()->AllOps()) {
    if (op->Type() == "flash_attn") {
      EXPECT_TRUE(op->Attr<bool>("causal"));
    }
  }
}

TEST(Fusion, ConstantMaskThatIsNotCausalStaysAMask) {
  // Showing the next key too, and a hidden value too small to vanish in exp.
  for (const auto& [value, diagonal] : std::vector<std::pair<std::string, int>>{{"-1e9", 2}, {"-30", 1}}) {
    SCOPED_TRACE(value + " diagonal " + std::to_string(diagonal));
    const std::vector<std::pair<std::string, std::string>> edits = {kMaskFromTrilTriu(value, diagonal)};
    ProgramDesc fused = Attention(DType::kFloat64, edits);
    ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
    EXPECT_EQ(CountTypes(fused, "tril_triu"), 1u);
    for (const auto& op : fused.Root()->AllOps()) {
      if (op->Type() != "flash_attn") continue;
      EXPECT_FALSE(op->Attr<bool>("causal"));
      EXPECT_EQ(op->Input("attn_mask"), std::vector<std::string>{"mask"});
    }
    ExpectSameResults(Attention(DType::kFloat64, edits), fused, DType::kFloat64);
  }
}

TEST(Fusion, AttentionIsLeftAloneWhereTheRewriteWouldNotBeExact) {
  struct Case {
    std::string name;
    std::vector<std::pair<std::string, std::string>> edits;
    std::unordered_set<std::string> keep;
  };
  const std::vector<Case> cases = {
      {"probabilities fetched", {}, {"loss", "p"}},
      {"scores fetched", {}, {"loss", "s"}},
      {"alpha is not 1/sqrt(head_dim)", {{"alpha: 0.5", "alpha: 0.25"}}, {"loss"}},
      {"softmax over the queries",
       {{"axis: -1}}\n      - {type: matmul", "axis: 2}}\n      - {type: matmul"}},
       {"loss"}},
      {"k not straight from a transpose",
       {{"      - {type: matmul, inputs: {X: [qt], Y: [kt]}",
         "      - {type: scale, inputs: {X: [kt]}, outputs: {Out: [kts]}}\n"
         "      - {type: matmul, inputs: {X: [qt], Y: [kts]}"}},
       {"loss"}},
      {"a trainable mask",
       {{"mask: {shape: [5, 5], dtype: float64, stop_gradient: true}",
         "mask: {shape: [5, 5], dtype: float64, persistable: true}"}},
       {"loss"}},
      // A fed var that does not stop gradients gets one: mask@GRAD.
      {"a fed mask without stop_gradient",
       {{"mask: {shape: [5, 5], dtype: float64, stop_gradient: true}", "mask: {shape: [5, 5], dtype: float64}"}},
       {"loss"}},
      // flash_attn would read the mask where the second matmul was.
      {"the mask rewritten after the add",
       {{"outputs: {Out: [sm]}}\n",
         "outputs: {Out: [sm]}}\n"
         "      - {type: scale, inputs: {X: [mask]}, outputs: {Out: [mask]}, attrs: {scale: 0.0}}\n"}},
       {"loss"}},
      // matmul broadcasts k and v over q's heads (multi-query attention) or
      // batch; flash_attn does not.
      {"k and v of one head",
       {{"wk: {shape: [12, 12]", "wk: {shape: [12, 4]"},
        {"wv: {shape: [12, 12]", "wv: {shape: [12, 4]"},
        {"outputs: {Out: [k4]}, attrs: {shape: [0, 0, 3, 4]}", "outputs: {Out: [k4]}, attrs: {shape: [0, 0, 1, 4]}"},
        {"outputs: {Out: [v4]}, attrs: {shape: [0, 0, 3, 4]}", "outputs: {Out: [v4]}, attrs: {shape: [0, 0, 1, 4]}"}},
       {"loss"}},
      {"k and v of batch 1",
       {{"      mask: {shape",
         "      xkv: {shape: [1, 5, 12], dtype: float64, stop_gradient: true}\n      mask: {shape"},
        {"{type: mul, inputs: {X: [x], Y: [wk]}", "{type: mul, inputs: {X: [xkv], Y: [wk]}"},
        {"{type: mul, inputs: {X: [x], Y: [wv]}", "{type: mul, inputs: {X: [xkv], Y: [wv]}"}},
       {"loss"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ProgramDesc p = Attention(DType::kFloat64, c.edits);
    FuseOps(p, c.keep);
    EXPECT_EQ(CountTypes(p, "flash_attn"), 0u);
    EXPECT_EQ(CountTypes(p, "softmax"), 1u);
  }
  // The probabilities read twice.
  ProgramDesc p = Attention(DType::kFloat64);
  p.Root()->AppendOp(OpDesc("scale", {{"X", {"p"}}}, {{"Out", {"p_copy"}}}, {}));
  FillDefaultAttrs(*p.Root()->Op(p.Root()->OpSize() - 1), *CurrentRegistry());
  FuseOps(p, {"loss"});
  EXPECT_EQ(CountTypes(p, "flash_attn"), 0u);
}

// ----------------------------------------------------------- after the backward part (FuseGradOps)

// Three unrolled steps of h = tanh(x * wx + h * wh): wh's gradient ops
// share it, wx's have no X@GRAD to compute (the xs stop gradients).
constexpr const char* kUnrolled = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x0: {shape: [-1, 4], dtype: float32, stop_gradient: true}
      x1: {shape: [-1, 4], dtype: float32, stop_gradient: true}
      x2: {shape: [-1, 4], dtype: float32, stop_gradient: true}
      wx: {shape: [4, 5], dtype: float32, persistable: true}
      wh: {shape: [5, 5], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x0], Y: [wx]}, outputs: {Out: [a0]}}
      - {type: tanh, inputs: {X: [a0]}, outputs: {Out: [h0]}}
      - {type: mul, inputs: {X: [x1], Y: [wx]}, outputs: {Out: [a1]}}
      - {type: mul, inputs: {X: [h0], Y: [wh]}, outputs: {Out: [c1]}}
      - {type: elementwise_add, inputs: {X: [a1], Y: [c1]}, outputs: {Out: [s1]}}
      - {type: tanh, inputs: {X: [s1]}, outputs: {Out: [h1]}}
      - {type: mul, inputs: {X: [x2], Y: [wx]}, outputs: {Out: [a2]}}
      - {type: mul, inputs: {X: [h1], Y: [wh]}, outputs: {Out: [c2]}}
      - {type: elementwise_add, inputs: {X: [a2], Y: [c2]}, outputs: {Out: [s2]}}
      - {type: tanh, inputs: {X: [s2]}, outputs: {Out: [h2]}}
      - {type: mean, inputs: {X: [h2]}, outputs: {Out: [loss]}}
)";

// `product`: mul or matmul (2-D, plain), which take the same rewrites.
ProgramDesc Unrolled(DType dtype, const std::string& product = "mul") {
  std::string text = kUnrolled;
  if (dtype == DType::kFloat64)
    for (size_t at; (at = text.find("float32")) != std::string::npos;) text.replace(at, 7, "float64");
  for (size_t at = 0; (at = text.find("type: mul,", at)) != std::string::npos; at += 6 + product.size())
    text.replace(at, 9, "type: " + product);
  return ParseProgram(text, "unrolled.yaml");
}

using Feeds = std::vector<std::pair<std::string, Shape>>;

// Runs `program` (its backward part already appended) with random float32
// values for `feeds`, the same for every call with one seed, sequentially
// or on `taskgraph_threads` threads, and returns the vars named (and in
// `fed`, where given, the values fed).
std::map<std::string, HostTensor> RunWith(const ProgramDesc& program, const Feeds& feeds, uint64_t seed,
                                          const std::vector<std::string>& names, int taskgraph_threads = 0,
                                          std::map<std::string, HostTensor>* fed = nullptr) {
  Scope scope;
  std::mt19937_64 rng(seed);
  for (const auto& [name, shape] : feeds) {
    HostTensor value = RandomTensor(shape, DType::kFloat32, -1, 1, rng);
    ToTensor(value, DType::kFloat32, scope.Var(name)->GetTensor());
    if (fed) (*fed)[name] = std::move(value);
  }
  ExecutorOptions options;
  options.threads = taskgraph_threads;
  CreateExecutor(taskgraph_threads ? "taskgraph" : "sequential", HostDevice(), options)->Run(program, 0, scope);
  std::map<std::string, HostTensor> out;
  for (const auto& n : names) {
    const Variable* v = scope.FindVar(n);
    EXPECT_NE(v, nullptr) << n;
    if (v) out[n] = FromTensor(v->GetTensor());
  }
  return out;
}

// The float32 unrolled program's inputs.
std::map<std::string, HostTensor> RunUnrolled(const ProgramDesc& program, const std::vector<std::string>& names,
                                              int taskgraph_threads = 0) {
  const Feeds feeds = {{"x0", {3, 4}}, {"x1", {3, 4}}, {"x2", {3, 4}}, {"wx", {4, 5}}, {"wh", {5, 5}}};
  return RunWith(program, feeds, 11, names, taskgraph_threads);
}

size_t CountOps(const ProgramDesc& p, const std::string& type) {
  const auto types = OpTypes(p);
  return static_cast<size_t>(std::count(types.begin(), types.end(), type));
}

TEST(FuseGradOps, SharedWeightIsTransposedOnceForItsInputGradients) {
  ProgramDesc plain = Unrolled(DType::kFloat32);
  AppendBackward(plain, "loss");
  ProgramDesc fused = plain;
  // wh transposed once (wx's mul_grads compute no X@GRAD), and wh's and
  // wx's partial gradients chained instead of summed.
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 3u);
  VerifyProgram(fused, *CurrentRegistry());
  ASSERT_EQ(CountOps(fused, "transpose"), 1u);
  EXPECT_EQ(CountOps(fused, "mul_grad"), CountOps(plain, "mul_grad"));  // each keeps its Y@GRAD
  EXPECT_EQ(CountOps(fused, "mul"), CountOps(plain, "mul") + 2);        // h0@GRAD and h1@GRAD
  const BlockDesc& b = *fused.Root();
  size_t transpose_at = 0;
  for (size_t i = 0; i < b.OpSize(); ++i) {
    const OpDesc& op = *b.Op(i);
    if (op.Type() == "transpose") {
      transpose_at = i;
      EXPECT_EQ(op.Input("X"), std::vector<std::string>{"wh"});
      EXPECT_EQ(op.Output("Out"), std::vector<std::string>{"wh@TRANSPOSE"});
    }
    if (op.Type() == "mul_grad" && op.Input("Y")[0] == "wh") {
      EXPECT_FALSE(op.HasOutput("X@GRAD")) << "mul_grad at " << i;
      EXPECT_GT(i, transpose_at);
    }
    if (op.Type() == "mul" && op.Input("Y")[0] == "wh@TRANSPOSE") {
      EXPECT_GT(i, transpose_at);
    }
  }
  EXPECT_EQ(b.FindVar("wh@TRANSPOSE")->GetShape(), (Shape{5, 5}));

  const std::vector<std::string> names = {"loss", "wx@GRAD", "wh@GRAD", "h0@GRAD", "h1@GRAD"};
  auto want = RunUnrolled(plain, names);
  auto got = RunUnrolled(fused, names);
  for (const auto& n : names) ExpectNear(got[n], want[n], 1e-6, 1e-7, n);
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 0u);  // wh's mul_grads have no X@GRAD left
}

TEST(FuseGradOps, SharedWeightGradientsAccumulateInPlaceWithoutASum) {
  ProgramDesc plain = Unrolled(DType::kFloat32);
  AppendBackward(plain, "loss");
  ASSERT_EQ(CountOps(plain, "sum"), 2u);  // wx@GRAD from 3 parts, wh@GRAD from 2
  ProgramDesc fused = plain;
  FuseGradOps(fused, {"loss"});
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "sum"), 0u);
  for (const std::string w : {"wx", "wh"}) {
    std::vector<const OpDesc*> chain;
    for (const auto& op : fused.Root()->AllOps())
      if (op->Type() == "mul_grad" && op->Input("Y")[0] == w) chain.push_back(op.get());
    ASSERT_EQ(chain.size(), w == "wx" ? 3u : 2u) << w;
    for (size_t i = 0; i < chain.size(); ++i) {
      EXPECT_EQ(chain[i]->Output("Y@GRAD"), std::vector<std::string>{w + "@GRAD"}) << w << " " << i;
      EXPECT_EQ(chain[i]->HasInput("AccumulateY"), i > 0) << w << " " << i;
      if (i > 0) {
        EXPECT_EQ(chain[i]->Input("AccumulateY"), std::vector<std::string>{w + "@GRAD"});
      }
    }
    EXPECT_FALSE(fused.Root()->HasVar(w + "@GRAD@RENAME@0")) << w;
  }
  const std::vector<std::string> names = {"loss", "wx@GRAD", "wh@GRAD"};
  auto want = RunUnrolled(plain, names);
  auto got = RunUnrolled(fused, names);
  for (const auto& n : names) ExpectNear(got[n], want[n], 1e-6, 1e-7, n);
  // The task graph orders the chain through the one var it reads and writes.
  for (int run = 0; run < 20; ++run) {
    auto parallel = RunUnrolled(fused, names, 2);
    for (const auto& n : names) ExpectNear(parallel[n], want[n], 1e-6, 1e-7, n);
  }
}

TEST(FuseGradOps, LeavesKeptOrSharedPartialGradientsSummed) {
  ProgramDesc p = Unrolled(DType::kFloat32);
  AppendBackward(p, "loss");
  std::string part;  // one of wh@GRAD's parts
  for (const auto& op : p.Root()->AllOps())
    if (op->Type() == "sum" && op->Output("Out")[0] == "wh@GRAD") part = op->Input("X")[0];
  ASSERT_FALSE(part.empty());
  ProgramDesc kept = p;
  FuseGradOps(kept, {"loss", part});     // fetched: it must keep its value
  EXPECT_EQ(CountOps(kept, "sum"), 1u);  // wx@GRAD's only
  p.Root()->AppendOp(OpDesc("scale", {{"X", {part}}}, {{"Out", {"part_copy"}}}, {}));
  FillDefaultAttrs(*p.Root()->Op(p.Root()->OpSize() - 1), *CurrentRegistry());
  FuseGradOps(p, {"loss"});  // a second reader
  EXPECT_EQ(CountOps(p, "sum"), 1u);
}

TEST(FuseGradOps, MatmulProductsTakeTheSameRewrites) {
  ProgramDesc plain = Unrolled(DType::kFloat32, "matmul");
  AppendBackward(plain, "loss");
  ASSERT_EQ(CountOps(plain, "matmul_grad"), 5u);
  ProgramDesc fused = plain;
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 3u);
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "transpose"), 1u);
  EXPECT_EQ(CountOps(fused, "sum"), 0u);
  const std::vector<std::string> names = {"loss", "wx@GRAD", "wh@GRAD", "h0@GRAD", "h1@GRAD"};
  auto want = RunUnrolled(plain, names);
  auto got = RunUnrolled(fused, names);
  for (const auto& n : names) ExpectNear(got[n], want[n], 1e-6, 1e-7, n);
  // A transposed or scaled product is not the plain one the rewrites assume.
  ProgramDesc scaled = Unrolled(DType::kFloat32, "matmul");
  for (const auto& op : scaled.Root()->AllOps())
    if (op->Type() == "matmul") op->SetAttr("alpha", 0.5f);
  AppendBackward(scaled, "loss");
  EXPECT_EQ(FuseGradOps(scaled, {"loss"}), 0u);
}

// A chained gradient gains writers: a later sum reading it (a hand-written
// program) is not taken for a second chain of the same weight.
TEST(FuseGradOps, AChainedGradientIsNotChainedAgain) {
  ProgramDesc p = Unrolled(DType::kFloat32);
  AppendBackward(p, "loss");
  BlockDesc& b = *p.Root();
  auto extra = std::make_unique<OpDesc>("mul_grad", VarNameMap{{"X", {"h0"}}, {"Y", {"wh"}}, {"Out@GRAD", {"c1@GRAD"}}},
                                        VarNameMap{{"Y@GRAD", {"q"}}}, AttributeMap{});
  FillDefaultAttrs(*extra, *CurrentRegistry());
  b.AppendOp(std::move(extra));
  b.AppendOp(OpDesc("sum", {{"X", {"wh@GRAD", "q"}}}, {{"Out", {"twice"}}}, {}));
  for (const char* v : {"q", "twice"}) {
    VarDesc* d = b.Var(v);
    d->SetDType(DType::kFloat32);
    d->MarkDTypeKnown();
    d->SetShape({5, 5});
  }
  ProgramDesc plain = p;
  FuseGradOps(p, {"loss", "twice"});
  EXPECT_EQ(CountOps(p, "sum"), 1u);  // "twice" stays a sum
  auto want = RunUnrolled(plain, {"wh@GRAD", "twice"});
  auto got = RunUnrolled(p, {"wh@GRAD", "twice"});
  for (const char* n : {"wh@GRAD", "twice"}) ExpectNear(got[n], want[n], 1e-6, 1e-7, n);
}

// An input read by three products (a GPT block's ln1 by its q, k and v
// projections), of rank 3: its partial gradients are chained through
// mul_grad's AccumulateX instead of summed.
constexpr const char* kThreeReaders = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      xin: {shape: [2, 3, 4], dtype: float32}
      wq: {shape: [4, 5], dtype: float32, persistable: true}
      wk: {shape: [4, 5], dtype: float32, persistable: true}
      wv: {shape: [4, 5], dtype: float32, persistable: true}
    ops:
      - {type: tanh, inputs: {X: [xin]}, outputs: {Out: [x]}}
      - {type: mul, inputs: {X: [x], Y: [wq]}, outputs: {Out: [q]}, attrs: {x_num_col_dims: 2}}
      - {type: mul, inputs: {X: [x], Y: [wk]}, outputs: {Out: [k]}, attrs: {x_num_col_dims: 2}}
      - {type: mul, inputs: {X: [x], Y: [wv]}, outputs: {Out: [v]}, attrs: {x_num_col_dims: 2}}
      - {type: elementwise_mul, inputs: {X: [q], Y: [k]}, outputs: {Out: [qk]}}
      - {type: elementwise_add, inputs: {X: [qk], Y: [v]}, outputs: {Out: [s]}}
      - {type: mean, inputs: {X: [s]}, outputs: {Out: [loss]}}
)";

TEST(FuseGradOps, InputGradientsOfSeveralProductsAccumulateInPlace) {
  ProgramDesc plain = ParseProgram(kThreeReaders, "three_readers.yaml");
  AppendBackward(plain, "loss");
  ASSERT_EQ(CountOps(plain, "sum"), 1u);  // x@GRAD from 3 parts
  ProgramDesc fused = plain;
  FuseGradOps(fused, {"loss"});
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "sum"), 0u);
  std::vector<const OpDesc*> chain;
  for (const auto& op : fused.Root()->AllOps())
    if (op->Type() == "mul_grad") chain.push_back(op.get());
  ASSERT_EQ(chain.size(), 3u);
  for (size_t i = 0; i < chain.size(); ++i) {
    EXPECT_EQ(chain[i]->Output("X@GRAD"), std::vector<std::string>{"x@GRAD"}) << i;
    EXPECT_EQ(chain[i]->HasInput("AccumulateX"), i > 0) << i;
    if (i > 0) {
      EXPECT_EQ(chain[i]->Input("AccumulateX"), std::vector<std::string>{"x@GRAD"});
    }
  }
  EXPECT_FALSE(fused.Root()->HasVar("x@GRAD@RENAME@0"));
  const Feeds feeds = {{"xin", {2, 3, 4}}, {"wq", {4, 5}}, {"wk", {4, 5}}, {"wv", {4, 5}}};
  const std::vector<std::string> names = {"loss", "xin@GRAD", "wq@GRAD", "wk@GRAD", "wv@GRAD"};
  auto want = RunWith(plain, feeds, 13, names);
  auto got = RunWith(fused, feeds, 13, names);
  for (const auto& n : names) ExpectNear(got[n], want[n], 1e-6, 1e-7, n);
  for (int run = 0; run < 20; ++run) {  // the task graph orders the links
    auto parallel = RunWith(fused, feeds, 13, names, 2);
    for (const auto& n : names) ExpectNear(parallel[n], want[n], 1e-6, 1e-7, n);
  }
  // A part that is fetched keeps its value, so nothing is chained; nor are
  // bfloat16 gradients (without the bf16 fold's force_fp32_output).
  ProgramDesc kept = plain;
  std::string part;
  for (const auto& op : kept.Root()->AllOps())
    if (op->Type() == "sum") part = op->Input("X")[1];
  FuseGradOps(kept, {"loss", part});
  EXPECT_EQ(CountOps(kept, "sum"), 1u);
  std::string low = kThreeReaders;
  for (size_t at; (at = low.find("float32")) != std::string::npos;) low.replace(at, 7, "bfloat16");
  ProgramDesc bf16 = ParseProgram(low, "three_readers_bf16.yaml");
  AppendBackward(bf16, "loss");
  FuseGradOps(bf16, {"loss"});
  EXPECT_EQ(CountOps(bf16, "sum"), 1u);
}

// mul_grad's AccumulateX on its own: into another var and in place; the
// bfloat16 kernel without force_fp32_output refuses it rather than
// dropping the partial sum.
TEST(AccumulateX, MulGradAddsItsProductToThePartialGradient) {
  const std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 2], dtype: float32}
      y: {shape: [2, 4], dtype: float32}
      g: {shape: [3, 4], dtype: float32}
      acc: {shape: [3, 2], dtype: float32}
      dx: {shape: [3, 2], dtype: float32}
    ops:
      - {type: mul_grad, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateX: [acc]}, outputs: {X@GRAD: [dx]}}
      - {type: mul_grad, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateX: [acc]}, outputs: {X@GRAD: [acc]}}
)";
  ProgramDesc p = ParseProgram(text, "acc_x.yaml");
  std::map<std::string, HostTensor> in;
  auto out = RunWith(p, {{"x", {3, 2}}, {"y", {2, 4}}, {"g", {3, 4}}, {"acc", {3, 2}}}, 3, {"dx", "acc"}, 0, &in);
  HostTensor want = in["acc"];  // acc + g y^T
  for (int r = 0; r < 3; ++r)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) want.v[r * 2 + i] += in["g"].v[r * 4 + j] * in["y"].v[i * 4 + j];
  ExpectNear(out["dx"], want, 1e-6, 1e-6, "dx");
  ExpectNear(out["acc"], want, 1e-6, 1e-6, "acc in place");

  std::string low = text;
  for (size_t at; (at = low.find("float32")) != std::string::npos;) low.replace(at, 7, "bfloat16");
  ProgramDesc b = ParseProgram(low, "acc_x_bf16.yaml");
  Scope scope;
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, Shape>>{{"x", {3, 2}}, {"y", {2, 4}}, {"g", {3, 4}}, {"acc", {3, 2}}}) {
    std::mt19937_64 rng(1);
    ToTensor(RandomTensor(shape, DType::kFloat32, -1, 1, rng), DType::kBFloat16, scope.Var(name)->GetTensor());
  }
  try {
    CreateExecutor("sequential", HostDevice(), {})->Run(b, 0, scope);
    ADD_FAILURE() << "the bfloat16 kernel ran with AccumulateX";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AccumulateX"), std::string::npos) << e.what();
  }
}

// The grad ops' AccumulateY on its own: into another var, and in place.
class AccumulateY : public ::testing::TestWithParam<std::string> {};

TEST_P(AccumulateY, GradOpAddsItsProductToThePartialGradient) {
  std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 2], dtype: float32}
      y: {shape: [2, 4], dtype: float32}
      g: {shape: [3, 4], dtype: float32}
      acc: {shape: [2, 4], dtype: float32}
      dy: {shape: [2, 4], dtype: float32}
    ops:
      - {type: GRAD, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateY: [acc]}, outputs: {Y@GRAD: [dy]}}
      - {type: GRAD, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateY: [acc]}, outputs: {Y@GRAD: [acc]}}
)";
  for (size_t at; (at = text.find("GRAD,")) != std::string::npos;) text.replace(at, 4, GetParam());
  ProgramDesc p = ParseProgram(text, "acc.yaml");
  std::map<std::string, HostTensor> in;
  auto out = RunWith(p, {{"x", {3, 2}}, {"y", {2, 4}}, {"g", {3, 4}}, {"acc", {2, 4}}}, 3, {"dy", "acc"}, 0, &in);
  HostTensor want = in["acc"];  // acc + x^T g
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 3; ++r) want.v[i * 4 + j] += in["x"].v[r * 2 + i] * in["g"].v[r * 4 + j];
  ExpectNear(out["dy"], want, 1e-6, 1e-6, "dy");
  ExpectNear(out["acc"], want, 1e-6, 1e-6, "acc in place");
}

// With LearningRate the grad op takes an sgd step: AccumulateY minus the
// rate times its gradient, into the parameter itself.
TEST_P(AccumulateY, GradOpWithALearningRateTakesAnSgdStep) {
  std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 2], dtype: float32}
      y: {shape: [2, 4], dtype: float32}
      g: {shape: [3, 4], dtype: float32}
      lr: {shape: [1], dtype: float32}
      dx: {shape: [3, 2], dtype: float32}
    ops:
      - {type: GRAD, inputs: {X: [x], Y: [y], Out@GRAD: [g], AccumulateY: [y], LearningRate: [lr]},
         outputs: {X@GRAD: [dx], Y@GRAD: [y]}}
)";
  text.replace(text.find("GRAD,"), 4, GetParam());
  ProgramDesc p = ParseProgram(text, "sgd_step.yaml");
  std::map<std::string, HostTensor> in;
  auto out = RunWith(p, {{"x", {3, 2}}, {"y", {2, 4}}, {"g", {3, 4}}, {"lr", {1}}}, 5, {"y", "dx"}, 0, &in);
  const double lr = in["lr"].v[0];
  HostTensor want_y = in["y"], want_dx{{3, 2}, std::vector<double>(6, 0.0)};
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int r = 0; r < 3; ++r) {
        want_y.v[i * 4 + j] -= lr * in["x"].v[r * 2 + i] * in["g"].v[r * 4 + j];
        want_dx.v[r * 2 + i] += in["g"].v[r * 4 + j] * in["y"].v[i * 4 + j];  // from y before the step
      }
  ExpectNear(out["y"], want_y, 1e-6, 1e-6, "y stepped");
  ExpectNear(out["dx"], want_dx, 1e-6, 1e-6, "dx");
}

INSTANTIATE_TEST_SUITE_P(GradOps, AccumulateY, ::testing::Values("mul_grad", "matmul_grad"));

// ------------------------------------------- sgd steps in the weight GEMMs

// The parameters of Net after `steps` training steps from fixed values,
// the learning rate of step i being rates[i % rates.size()].
std::map<std::string, HostTensor> TrainNet(const ProgramDesc& step, int steps, const std::vector<double>& rates,
                                           int taskgraph_threads = 0) {
  Scope scope;
  std::mt19937_64 rng(7);
  auto set = [&](const std::string& name, Shape shape, double lo, double hi) {
    ToTensor(RandomTensor(std::move(shape), DType::kFloat32, lo, hi, rng), DType::kFloat32,
             scope.Var(name)->GetTensor());
  };
  set("x", {8, 6}, -1, 1);
  const Shape shapes[] = {{6, 5}, {5}, {5, 5}, {5}, {5, 4}, {4}, {4, 3}, {3}};
  for (int i = 0; i < 4; ++i) {
    set("w" + std::to_string(i), shapes[2 * i], -1, 1);
    set("b" + std::to_string(i), shapes[2 * i + 1], -0.5, 0.5);
  }
  ToTensor(HostTensor{{8, 1}, {0, 1, 2, 1, 0, 2, 2, 1}}, DType::kInt64, scope.Var("label")->GetTensor());
  ToTensor(HostTensor{{1}, {rates[0]}}, DType::kFloat32, scope.Var(train::kLearningRateVar)->GetTensor());
  ExecutorOptions options;
  options.threads = taskgraph_threads;
  auto exec = CreateExecutor(taskgraph_threads ? "taskgraph" : "sequential", HostDevice(), options);
  for (int i = 0; i < steps; ++i) {
    train::SetLearningRate(scope, rates[static_cast<size_t>(i) % rates.size()]);
    exec->Run(step, 0, scope);
  }
  std::map<std::string, HostTensor> out;
  for (int i = 0; i < 4; ++i)
    for (const std::string p : {"w", "b"})
      out[p + std::to_string(i)] = FromTensor(scope.FindVar(p + std::to_string(i))->GetTensor());
  return out;
}

// Net's training step: backward part, `o`'s optimizer.
ProgramDesc NetStep(const train::OptimizerOptions& o, bool bf16 = false) {
  ProgramDesc p = Net(DType::kFloat32);
  if (bf16) ApplyBf16MixedPrecision(p);
  const ParamGrads pg = AppendBackward(p, "loss");
  if (bf16) FoldBf16Casts(p);
  train::AppendOptimizer(p, pg, o);
  return p;
}

TEST(FuseGradOps, WeightGradOpsTakeTheirSgdSteps) {
  train::OptimizerOptions o;
  o.lr = 0.1;
  const ProgramDesc plain = NetStep(o);
  ProgramDesc fused = plain;
  // w0..w3 (the biases keep their sgd), and the 4 bias adds' X@GRAD pass
  // through (pass_add_gradients_through).
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 8u);
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "sgd"), 4u);
  for (const auto& op : fused.Root()->AllOps()) {
    if (op->Type() != "mul_grad") continue;
    const std::string w = op->Input("Y")[0];
    EXPECT_EQ(op->Output("Y@GRAD"), std::vector<std::string>{w});
    EXPECT_EQ(op->Input("AccumulateY"), std::vector<std::string>{w});
    EXPECT_EQ(op->Input("LearningRate"), std::vector<std::string>{train::kLearningRateVar});
    EXPECT_FALSE(fused.Root()->HasVar(w + "@GRAD")) << w;
  }
  // A learning rate that changes every step (a schedule) is read each time.
  const std::vector<double> rates = {0.1, 0.05, 0.2};
  const auto want = TrainNet(plain, 5, rates);
  for (int threads : {0, 2}) {
    const auto got = TrainNet(fused, 5, rates, threads);
    for (const auto& [name, t] : want) ExpectNear(got.at(name), t, 1e-5, 1e-6, name);
  }
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 0u);
}

TEST(FuseGradOps, Bf16WeightGradOpsTakeTheirSgdSteps) {
  if (!cpu::HasBf16Gemm()) GTEST_SKIP() << "no bfloat16 GEMM on this CPU";
  train::OptimizerOptions o;
  o.lr = 0.1;
  const ProgramDesc plain = NetStep(o, /*bf16=*/true);
  ProgramDesc fused = plain;
  EXPECT_EQ(FuseGradOps(fused, {"loss"}), 8u);  // as in float32: 4 sgd steps, 4 bias gradients
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "sgd"), 4u);
  const std::vector<double> rates = {0.1, 0.3};
  const auto want = TrainNet(plain, 4, rates);
  const auto got = TrainNet(fused, 4, rates);
  // The same float32 accumulations; the step is rounded once instead of twice.
  for (const auto& [name, t] : want) ExpectNear(got.at(name), t, 1e-5, 1e-6, name);
}

TEST(FuseGradOps, SgdStepsStayWhereTheGradientIsNeededElsewhere) {
  train::OptimizerOptions o;
  ProgramDesc kept = NetStep(o);
  // Each count has the 4 bias adds' gradients passed through besides.
  EXPECT_EQ(FuseGradOps(kept, {"loss", "w1@GRAD"}), 3u + 4u);  // fetched: w1's stays
  EXPECT_TRUE(kept.Root()->HasVar("w1@GRAD"));
  o.clip_global_norm = 1.0;  // the clip reads every gradient
  ProgramDesc clipped = NetStep(o);
  EXPECT_EQ(FuseGradOps(clipped, {"loss"}), 0u + 4u);
  o.clip_global_norm = 0;
  o.weight_decay = 1e-4;  // a sum adds the L2 term to each gradient
  ProgramDesc decayed = NetStep(o);
  EXPECT_EQ(FuseGradOps(decayed, {"loss"}), 0u + 4u);
  o.weight_decay = 0;
  o.type = "momentum";
  ProgramDesc momentum = NetStep(o);
  EXPECT_EQ(FuseGradOps(momentum, {"loss"}), 0u + 4u);
}

// A product large enough for oneDNN (the policy's threshold is 1M
// multiply-adds) and for a split into blocks of C on two threads (2M): the
// step's factor, -LearningRate, is read at run time, not fixed in a cached
// primitive, in the form each block's kernel takes.
TEST(FuseGradOps, SgdStepInALargeGemmFollowsTheLearningRate) {
  const ProgramDesc net = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [128, 128], dtype: float32, stop_gradient: true}
      w: {shape: [128, 160], dtype: float32, persistable: true}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: tanh, inputs: {X: [xw]}, outputs: {Out: [h]}}
      - {type: mean, inputs: {X: [h]}, outputs: {Out: [loss]}}
)",
                                       "large.yaml");
  for (bool bf16 : {false, true}) {
    if (bf16 && !cpu::HasBf16Gemm()) continue;
    SCOPED_TRACE(bf16 ? "bf16" : "float32");
    ProgramDesc plain = net;
    if (bf16) ApplyBf16MixedPrecision(plain);
    const ParamGrads pg = AppendBackward(plain, "loss");
    if (bf16) FoldBf16Casts(plain);
    train::AppendOptimizer(plain, pg, train::OptimizerOptions{});
    ProgramDesc fused = plain;
    ASSERT_EQ(FuseGradOps(fused, {"loss"}), 1u);
    std::map<std::string, HostTensor> result[3];
    for (int f = 0; f < 3; ++f) {  // plain, fused, fused on two threads
      Scope scope;
      std::mt19937_64 rng(9);
      for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{{"x", {128, 128}}, {"w", {128, 160}}})
        ToTensor(RandomTensor(shape, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var(name)->GetTensor());
      ToTensor(HostTensor{{1}, {0}}, DType::kFloat32, scope.Var(train::kLearningRateVar)->GetTensor());
      ExecutorOptions two;
      two.threads = 2;
      auto exec = f == 2 ? CreateExecutor("taskgraph", HostDevice(), two) : CreateExecutor("sequential", HostDevice());
      for (double lr : {50.0, 10.0, 25.0}) {  // large: each step moves w well past rounding
        train::SetLearningRate(scope, lr);
        exec->Run(f ? fused : plain, 0, scope);
        result[f]["w after lr " + std::to_string(lr)] = FromTensor(scope.FindVar("w")->GetTensor());
      }
    }
    for (int f = 1; f < 3; ++f)
      for (const auto& [name, t] : result[0]) ExpectNear(result[f].at(name), t, 1e-5, 1e-5, name);
  }
}

// An op between the grad op and the sgd that reads the weight would see it
// stepped; one that writes the learning rate would change the step: both
// keep that weight's sgd where it is.
TEST(FuseGradOps, SgdStepsStayWhereTheWeightOrRateIsUsedInBetween) {
  train::OptimizerOptions o;
  for (const std::string between : {"reads w1", "writes the rate"}) {
    SCOPED_TRACE(between);
    ProgramDesc p = NetStep(o);
    BlockDesc& b = *p.Root();
    size_t grad_at = 0, sgd_at = 0;
    for (size_t i = 0; i < b.OpSize(); ++i) {
      const OpDesc& op = *b.Op(i);
      if (op.Type() == "mul_grad" && op.Input("Y")[0] == "w1") grad_at = i;
      if (op.Type() == "sgd" && op.Input("Param")[0] == "w1") sgd_at = i;
    }
    ASSERT_LT(grad_at, sgd_at);
    const bool reads = between == "reads w1";
    auto op = std::make_unique<OpDesc>("scale", VarNameMap{{"X", {reads ? "w1" : train::kLearningRateVar}}},
                                       VarNameMap{{"Out", {reads ? "w1_half" : train::kLearningRateVar}}},
                                       AttributeMap{{"scale", 0.5f}});
    FillDefaultAttrs(*op, *CurrentRegistry());
    b.InsertOp(grad_at + 1, std::move(op));
    // The rate written: no later step may move either (w0's grad op comes
    // after w1's in the backward part).
    EXPECT_EQ(FuseGradOps(p, {"loss"}), (reads ? 3u : 1u) + 4u);  // + the 4 bias gradients passed through
    bool w1_fused = false;
    for (const auto& op : b.AllOps())
      if (op->Type() == "mul_grad" && op->Input("Y")[0] == "w1") w1_fused = op->HasInput("LearningRate");
    EXPECT_FALSE(w1_fused);
  }
}

// Random unrolled recurrences: mul or matmul per product, weights shared
// by some steps and not others, inputs with and without gradients, a loss
// reading one or two states (so some gradients have several parts that are
// not products). Whatever the rewrites change, the gradients stay.
TEST(FuseGradOps, RandomRecurrencesKeepTheirGradients) {
  size_t rewritten = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
    const int steps = 2 + pick(5);
    std::string vars, ops;
    Feeds fed;
    auto var = [&](const std::string& name, Shape shape, const std::string& flags) {
      vars += "      " + name + ": {shape: [" + std::to_string(shape[0]) + ", " + std::to_string(shape[1]) +
              "], dtype: float32" + flags + "}\n";
      fed.emplace_back(name, std::move(shape));
    };
    auto op = [&](const std::string& type, const std::string& x, const std::string& y, const std::string& out) {
      ops += "      - {type: " + type + ", inputs: {X: [" + x + "], Y: [" + y + "]}, outputs: {Out: [" + out + "]}}\n";
    };
    var("w", {4, 5}, ", persistable: true");
    var("u", {5, 5}, ", persistable: true");
    var("v", {5, 5}, ", persistable: true");
    std::vector<std::string> product = {"mul", "matmul"};
    for (int t = 0; t < steps; ++t) {
      const std::string ts = std::to_string(t);
      var("x" + ts, {3, 4}, pick(2) ? ", stop_gradient: true" : "");
      op(product[pick(2)], "x" + ts, "w", "a" + ts);
      std::string pre = "a" + ts;
      if (t > 0) {
        op(product[pick(2)], "h" + std::to_string(t - 1), pick(3) ? "u" : "v", "c" + ts);
        op("elementwise_add", "a" + ts, "c" + ts, "s" + ts);
        pre = "s" + ts;
      }
      ops += "      - {type: tanh, inputs: {X: [" + pre + "]}, outputs: {Out: [h" + ts + "]}}\n";
    }
    const std::string last = "h" + std::to_string(steps - 1);
    std::string loss_of = last;
    if (pick(2)) {  // a second reader of an earlier state
      const std::string mid = "h" + std::to_string(pick(steps - 1));
      op("elementwise_add", last, mid, "both");
      loss_of = "both";
    }
    ops += "      - {type: mean, inputs: {X: [" + loss_of + "]}, outputs: {Out: [loss]}}\n";
    ProgramDesc plain = ParseProgram(
        "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n" + vars + "    ops:\n" + ops,
        "random.yaml");
    AppendBackward(plain, "loss");
    ProgramDesc fused = plain;
    rewritten += FuseGradOps(fused, {"loss"});
    VerifyProgram(fused, *CurrentRegistry());

    std::vector<std::string> names = {"loss"};
    for (const auto& [name, shape] : fed)  // u or v may be unused, an x may stop gradients
      if (plain.Root()->HasVar(name + "@GRAD")) names.push_back(name + "@GRAD");
    auto want = RunWith(plain, fed, seed + 1000, names);
    for (int threads : {0, 2}) {
      auto got = RunWith(fused, fed, seed + 1000, names, threads);
      for (const auto& n : names) ExpectNear(got[n], want[n], 1e-5, 1e-6, n + " threads " + std::to_string(threads));
    }
  }
  EXPECT_GT(rewritten, 40u);  // the rewrites did apply, to most programs
}

TEST(FuseGradOps, LeavesAWeightWrittenBetweenItsGradOpsAlone) {
  ProgramDesc p = Unrolled(DType::kFloat32);
  AppendBackward(p, "loss");
  BlockDesc& b = *p.Root();
  size_t last = 0;
  for (size_t i = 0; i < b.OpSize(); ++i)
    if (b.Op(i)->Type() == "mul_grad" && b.Op(i)->Input("Y")[0] == "wh") last = i;
  auto scale = std::make_unique<OpDesc>("scale", VarNameMap{{"X", {"wh"}}}, VarNameMap{{"Out", {"wh"}}},
                                        AttributeMap{{"scale", 0.5f}});
  FillDefaultAttrs(*scale, *CurrentRegistry());
  b.InsertOp(last, std::move(scale));  // between the two
  FuseGradOps(p, {"loss"});
  EXPECT_EQ(CountOps(p, "transpose"), 0u);
}

// After the bf16 pass the products read bfloat16 casts of the weights:
// their kernels neither gain from a transpose nor accumulate.
TEST(FuseGradOps, Bf16ProductsAreLeftAsTheyAre) {
  ProgramDesc p = Unrolled(DType::kFloat32);
  ApplyBf16MixedPrecision(p);
  AppendBackward(p, "loss");
  FoldBf16Casts(p);
  const ProgramDesc before = p;
  EXPECT_EQ(FuseGradOps(p, {"loss"}), 0u);
  EXPECT_EQ(OpTypes(p), OpTypes(before));
}

// pass_add_gradients_through: where an add's operand is never broadcast,
// its gradient is Out@GRAD, read where it is instead of copied: a bias
// add's product (mul_grad then reads the chain's first gradient), a
// residual's side, the column add's [4, 5] side; an add of a var to itself
// loses its grad op (the sum reads Out@GRAD twice). What stays: kept
// gradients (the parameters'), and operands that are or may be broadcast:
// the bias, the [4, 1] column, and v [-1, 5] + u [-1, 5] (either -1 may be
// 1), whose sum vu [-1, 5] faces t [4, 5]. The gradients are the unfused
// program's bit for bit at 1 and 2 threads.
TEST(FuseGradOps, AddGradientsPassStraightThrough) {
  const ProgramDesc net = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 6], dtype: float32, persistable: true}
      w: {shape: [6, 5], dtype: float32, persistable: true}
      b: {shape: [5], dtype: float32, persistable: true}
      r: {shape: [4, 5], dtype: float32, persistable: true}
      c: {shape: [4, 1], dtype: float32, persistable: true}
      v: {shape: [-1, 5], dtype: float32}
      u: {shape: [-1, 5], dtype: float32}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [pre]}}
      - {type: elementwise_add, inputs: {X: [pre], Y: [r]}, outputs: {Out: [res]}}
      - {type: elementwise_add, inputs: {X: [res], Y: [c]}, outputs: {Out: [col]}}
      - {type: elementwise_add, inputs: {X: [col], Y: [col]}, outputs: {Out: [dbl]}}
      - {type: tanh, inputs: {X: [dbl]}, outputs: {Out: [t]}}
      - {type: elementwise_add, inputs: {X: [v], Y: [u]}, outputs: {Out: [vu]}}
      - {type: elementwise_add, inputs: {X: [t], Y: [vu]}, outputs: {Out: [tu]}}
      - {type: elementwise_mul, inputs: {X: [tu], Y: [tu]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)",
                                       "adds.yaml");
  ProgramDesc plain = net;
  const ParamGrads pg = AppendBackward(plain, "loss");
  ASSERT_EQ(pg.size(), 5u);
  std::unordered_set<std::string> keep = {"loss", "v@GRAD", "u@GRAD"};
  for (const auto& [param, grad] : pg) keep.insert(grad);
  ProgramDesc fused = plain;
  EXPECT_EQ(FuseGradOps(fused, keep), 6u);  // tu's, dbl's (2), col's, res's and pre's X or Y
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(plain, "elementwise_add_grad"), 6u);
  EXPECT_EQ(CountOps(fused, "elementwise_add_grad"), 5u);  // dbl's is gone
  std::map<std::string, std::vector<std::string>> outs;    // Y -> X@GRAD, Y@GRAD
  for (const auto& op : fused.Root()->AllOps()) {
    if (op->Type() == "mul_grad") {
      EXPECT_EQ(op->Input("Out@GRAD"), std::vector<std::string>{"col@GRAD"});
    }
    if (op->Type() == "elementwise_add_grad")
      outs[op->Input("Y")[0]] = {op->Output("X@GRAD")[0], op->Output("Y@GRAD")[0]};
  }
  const std::string e = kEmptyVarName;
  EXPECT_EQ(outs, (std::map<std::string, std::vector<std::string>>{{"b", {e, "b@GRAD"}},
                                                                   {"r", {e, "r@GRAD"}},
                                                                   {"c", {e, "c@GRAD"}},
                                                                   {"u", {"v@GRAD", "u@GRAD"}},
                                                                   {"vu", {e, "vu@GRAD"}}}));
  for (const char* gone : {"xw@GRAD", "pre@GRAD", "res@GRAD", "t@GRAD"})
    EXPECT_FALSE(fused.Root()->HasVar(gone)) << gone;
  EXPECT_EQ(FuseGradOps(fused, keep), 0u);
  for (int threads : {1, 2}) {
    std::map<std::string, HostTensor> got[2];
    for (int f = 0; f < 2; ++f) {
      Scope scope;
      std::mt19937_64 rng(5);
      for (const auto& [name, shape] : std::vector<std::pair<std::string, Shape>>{
               {"x", {4, 6}}, {"w", {6, 5}}, {"b", {5}}, {"r", {4, 5}}, {"c", {4, 1}}, {"v", {4, 5}}, {"u", {4, 5}}})
        ToTensor(RandomTensor(shape, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var(name)->GetTensor());
      ExecutorOptions options;
      options.threads = threads;
      CreateExecutor("taskgraph", HostDevice(), options)->Run(f ? fused : plain, 0, scope);
      for (const auto& name : keep) got[f][name] = FromTensor(scope.FindVar(name)->GetTensor());
    }
    for (const auto& [name, t] : got[0]) {
      SCOPED_TRACE(name + " threads " + std::to_string(threads));
      EXPECT_EQ(got[1].at(name).shape, t.shape);
      EXPECT_TRUE(got[1].at(name).v == t.v);
    }
  }
}

// The same rewrite with Y aligned at axis 1 (Paddle's elementwise axis),
// float32 and float64: t [-1, 4, 3] + y [4] passes (its -1 is a dim y does
// not reach); w [2, -1, 3] + z [4] keeps its copy (the -1 faces z's 4, so
// it may be a broadcast 1; aligned at the end instead, it would face 3 and
// pass). Gradients equal the unfused program's bit for bit.
TEST(FuseGradOps, AddGradientsPassThroughFollowsTheAxis) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(DTypeName(dtype));
    std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      a: {shape: [-1, 4, 3], dtype: float32}
      c: {shape: [2, -1, 3], dtype: float32}
      y: {shape: [4], dtype: float32, persistable: true}
      z: {shape: [4], dtype: float32, persistable: true}
    ops:
      - {type: tanh, inputs: {X: [a]}, outputs: {Out: [t]}}
      - {type: elementwise_add, inputs: {X: [t], Y: [y]}, outputs: {Out: [ty]}, attrs: {axis: 1}}
      - {type: tanh, inputs: {X: [c]}, outputs: {Out: [w]}}
      - {type: elementwise_add, inputs: {X: [w], Y: [z]}, outputs: {Out: [wz]}, attrs: {axis: 1}}
      - {type: elementwise_mul, inputs: {X: [ty], Y: [wz]}, outputs: {Out: [p]}}
      - {type: mean, inputs: {X: [p]}, outputs: {Out: [loss]}}
)";
    if (dtype == DType::kFloat64)
      for (size_t at; (at = text.find("float32")) != std::string::npos;) text.replace(at, 7, "float64");
    ProgramDesc plain = ParseProgram(text, "axis.yaml");
    const ParamGrads pg = AppendBackward(plain, "loss");
    std::unordered_set<std::string> keep = {"loss", "a@GRAD", "c@GRAD"};
    for (const auto& [param, grad] : pg) keep.insert(grad);
    ProgramDesc fused = plain;
    EXPECT_EQ(FuseGradOps(fused, keep), 1u);
    VerifyProgram(fused, *CurrentRegistry());
    std::map<std::string, std::string> x_grad;  // Y -> X@GRAD
    for (const auto& op : fused.Root()->AllOps())
      if (op->Type() == "elementwise_add_grad") x_grad[op->Input("Y")[0]] = op->Output("X@GRAD")[0];
    EXPECT_EQ(x_grad, (std::map<std::string, std::string>{{"y", kEmptyVarName}, {"z", "w@GRAD"}}));
    std::map<std::string, HostTensor> got[2];
    for (int f = 0; f < 2; ++f) {
      Scope scope;
      std::mt19937_64 rng(11);
      for (const auto& [name, shape] :
           std::vector<std::pair<std::string, Shape>>{{"a", {2, 4, 3}}, {"c", {2, 4, 3}}, {"y", {4}}, {"z", {4}}})
        ToTensor(RandomTensor(shape, dtype, -1, 1, rng), dtype, scope.Var(name)->GetTensor());
      CreateExecutor("sequential", HostDevice())->Run(f ? fused : plain, 0, scope);
      for (const auto& name : keep) got[f][name] = FromTensor(scope.FindVar(name)->GetTensor());
    }
    for (const auto& [name, t] : got[0]) {
      SCOPED_TRACE(name);
      EXPECT_EQ(got[1].at(name).shape, t.shape);
      EXPECT_TRUE(got[1].at(name).v == t.v);
    }
  }
}

TEST(FuseGradOps, Float64ProgramsAreLeftAsTheyAre) {
  // Float32 only, where the gains were measured.
  ProgramDesc p = Unrolled(DType::kFloat64);
  AppendBackward(p, "loss");
  EXPECT_EQ(FuseGradOps(p, {"loss"}), 0u);
  EXPECT_EQ(CountOps(p, "sum"), 2u);
}

// ------------------------------------------------------------ batch_norm + relu

// A conv block's tail: batch_norm, relu, then a weighting (so each element
// of the relu's output gets its own gradient) and the mean. X is
// [-1, <dims>] with 3 channels (dim 1, or last with NHWC).
std::string BnReluNet(const std::string& dims = "3, 4, 5", const std::string& bn_attrs = "") {
  return R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, )" +
         dims + R"(], dtype: float32}
      w: {shape: [-1, )" +
         dims + R"(], dtype: float32, stop_gradient: true}
      s: {shape: [3], dtype: float32, persistable: true}
      b: {shape: [3], dtype: float32, persistable: true}
      rm: {shape: [3], dtype: float32, persistable: true, stop_gradient: true}
      rv: {shape: [3], dtype: float32, persistable: true, stop_gradient: true}
    ops:
      - {type: batch_norm, inputs: {X: [x], Scale: [s], Bias: [b], Mean: [rm], Variance: [rv]},
         outputs: {Y: [n], MeanOut: [rm], VarianceOut: [rv], SavedMean: [sm], SavedVariance: [sv]},
         attrs: {)" +
         bn_attrs + R"(}}
      - {type: relu, inputs: {X: [n]}, outputs: {Out: [h]}}
      - {type: elementwise_mul, inputs: {X: [h], Y: [w]}, outputs: {Out: [hw]}}
      - {type: mean, inputs: {X: [hw]}, outputs: {Out: [loss]}}
)";
}

TEST(Fusion, FusesBatchNormAndReluKeepingTheStatistics) {
  ProgramDesc p = ParseProgram(BnReluNet(), "bn_relu.yaml");
  EXPECT_EQ(FuseOps(p, {"loss"}), 1u);
  EXPECT_EQ(OpTypes(p), (std::vector<std::string>{"fused_batch_norm_act", "elementwise_mul", "mean"}));
  const OpDesc& op = *p.Root()->Op(0);
  EXPECT_EQ(op.Output("Y"), std::vector<std::string>{"h"});
  EXPECT_EQ(op.Output("MeanOut"), std::vector<std::string>{"rm"});
  EXPECT_EQ(op.Output("SavedVariance"), std::vector<std::string>{"sv"});
  EXPECT_EQ(op.Attr<std::string>("act_type"), "relu");
  EXPECT_FALSE(p.Root()->HasVar("n"));
  VerifyProgram(p, *CurrentRegistry());

  ProgramDesc kept = ParseProgram(BnReluNet(), "bn_relu.yaml");
  EXPECT_EQ(FuseOps(kept, {"loss", "n"}), 0u);  // the normalized X is fetched
}

// A relu of another output of batch_norm (its statistics) is no chain, even
// where it is the first op to read an output of batch_norm.
TEST(Fusion, LeavesAReluOfTheStatisticsAlone) {
  ProgramDesc p = ParseProgram(BnReluNet(), "bn_relu.yaml");
  auto relu =
      std::make_unique<OpDesc>("relu", VarNameMap{{"X", {"sm"}}}, VarNameMap{{"Out", {"sm_relu"}}}, AttributeMap{});
  FillDefaultAttrs(*relu, *CurrentRegistry());
  p.Root()->InsertOp(1, std::move(relu));
  EXPECT_EQ(FuseOps(p, {"loss", "sm_relu"}), 0u);
  EXPECT_EQ(CountOps(p, "batch_norm"), 1u);
}

// The fused kernels evaluate batch_norm's and relu's formulas in the same
// order: loss, gradients and running statistics agree bit for bit, in
// training and with fixed statistics (is_test, use_global_stats), over rows
// shorter and longer than a chunk of the gradient's sums, channels last and
// 2-D, sequentially and on two threads.
// With fixed statistics a NaN in x is one NaN in h, fused or not (the
// fused relu wrote 0 there while relu keeps NaN).
TEST(Fusion, BatchNormReluKeepsNanAsUnfused) {
  auto run = [](const ProgramDesc& program) {
    Scope scope;
    std::mt19937_64 rng(5);
    HostTensor x = RandomTensor({2, 3, 4, 5}, DType::kFloat32, -2, 2, rng);
    x.v[7] = std::numeric_limits<double>::quiet_NaN();
    ToTensor(x, DType::kFloat32, scope.Var("x")->GetTensor());
    ToTensor(RandomTensor({2, 3, 4, 5}, DType::kFloat32, -1, 1, rng), DType::kFloat32, scope.Var("w")->GetTensor());
    for (const char* n : {"s", "b", "rm", "rv"})
      ToTensor(RandomTensor({3}, DType::kFloat32, 0.5, 1.5, rng), DType::kFloat32, scope.Var(n)->GetTensor());
    CreateExecutor("sequential", HostDevice())->Run(program, 0, scope);
    return FromTensor(scope.FindVar("h")->GetTensor());
  };
  ProgramDesc unfused = ParseProgram(BnReluNet("3, 4, 5", "is_test: true"), "bn_relu.yaml");
  ProgramDesc fused = unfused;
  ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
  const HostTensor want = run(unfused), got = run(fused);
  ASSERT_EQ(got.v.size(), want.v.size());
  for (size_t i = 0; i < want.v.size(); ++i) {
    ASSERT_EQ(std::isnan(got.v[i]), i == 7) << "element " << i;
    ASSERT_EQ(std::isnan(want.v[i]), i == 7) << "element " << i;
    if (i != 7) {
      ASSERT_EQ(got.v[i], want.v[i]) << "element " << i;
    }
  }
}

TEST(Fusion, BatchNormReluIsBitIdentical) {
  struct Case {
    std::string dims, attrs;
    Shape x;
  };
  const std::vector<Case> cases = {
      {"3, 4, 5", "", {6, 3, 4, 5}},
      {"3, 4, 5", "is_test: true", {6, 3, 4, 5}},
      {"3, 17, 17", "use_global_stats: true", {2, 3, 17, 17}},
      {"3, 17, 17", "", {2, 3, 17, 17}},
      {"5, 6, 3", "data_layout: NHWC", {4, 5, 6, 3}},
      {"3", "momentum: 0.5", {7, 3}},
  };
  const std::vector<std::string> names = {"loss", "h", "rm", "rv", "x@GRAD", "s@GRAD", "b@GRAD"};
  auto run = [&names](const ProgramDesc& program, const Shape& x, int threads) {
    Scope scope;
    std::mt19937_64 rng(5);
    auto set = [&](const std::string& name, Shape shape, double lo, double hi) {
      ToTensor(RandomTensor(std::move(shape), DType::kFloat32, lo, hi, rng), DType::kFloat32,
               scope.Var(name)->GetTensor());
    };
    set("x", x, -2, 2);
    set("w", x, -1, 1);
    set("s", {3}, 0.5, 1.5);
    set("b", {3}, -0.5, 0.5);
    set("rm", {3}, -0.5, 0.5);
    set("rv", {3}, 0.5, 2);  // a variance, for the fixed-statistics cases
    ExecutorOptions options;
    options.threads = threads;
    CreateExecutor(threads ? "taskgraph" : "sequential", HostDevice(), options)->Run(program, 0, scope);
    std::map<std::string, HostTensor> out;
    for (const auto& n : names) out[n] = FromTensor(scope.FindVar(n)->GetTensor());
    return out;
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.dims + " {" + c.attrs + "}");
    ProgramDesc unfused = ParseProgram(BnReluNet(c.dims, c.attrs), "bn_relu.yaml");
    ProgramDesc fused = unfused;
    ASSERT_EQ(FuseOps(fused, {"loss"}), 1u);
    AppendBackward(unfused, "loss");
    AppendBackward(fused, "loss");
    EXPECT_EQ(CountOps(fused, "relu_grad"), 0u);
    for (int threads : {0, 2}) {
      auto want = run(unfused, c.x, threads);
      auto got = run(fused, c.x, threads);
      size_t zeros = 0;
      for (double v : want["h"].v) zeros += v == 0.0;
      EXPECT_GT(zeros, 0u);  // the mask is exercised
      for (const auto& n : names) {
        SCOPED_TRACE(n);
        EXPECT_EQ(got[n].v, want[n].v);
      }
    }
  }
}

// accumulate_residual_gradients: in a pre-norm block the stream feeding a
// layer_norm and a residual add gets its gradient from a sum of the
// layer_norm_grad's X@GRAD and the residual's; the layer_norm_grad adds the
// residual's part itself (AccumulateX) and the sum goes. Both streams here
// (the parameter x and the inner r) qualify; the sums' parts in either
// order. A part written again between the layer_norm_grad and the sum, or
// a kept part, keeps its sum. Gradients equal the unfused program's bit for
// bit at 1 and 2 threads.
TEST(FuseGradOps, LayerNormGradAddsTheResidualGradient) {
  const std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [5, 8], dtype: float32, persistable: true}
      w: {shape: [8, 8], dtype: float32, persistable: true}
      g1: {shape: [8], dtype: float32, persistable: true}
      b1: {shape: [8], dtype: float32, persistable: true}
      g2: {shape: [8], dtype: float32, persistable: true}
      b2: {shape: [8], dtype: float32, persistable: true}
    ops:
      - {type: layer_norm, inputs: {X: [x], Scale: [g1], Bias: [b1]}, outputs: {Y: [ln1], Mean: [m1], Variance: [v1]}}
      - {type: mul, inputs: {X: [ln1], Y: [w]}, outputs: {Out: [h]}}
      - {type: tanh, inputs: {X: [h]}, outputs: {Out: [t]}}
      - {type: elementwise_add, inputs: {X: [x], Y: [t]}, outputs: {Out: [r]}}
      - {type: layer_norm, inputs: {X: [r], Scale: [g2], Bias: [b2]}, outputs: {Y: [ln2], Mean: [m2], Variance: [v2]}}
      - {type: tanh, inputs: {X: [ln2]}, outputs: {Out: [u]}}
      - {type: elementwise_add, inputs: {X: [r], Y: [u]}, outputs: {Out: [r2]}}
      - {type: tanh, inputs: {X: [r2]}, outputs: {Out: [sq]}}
      - {type: mean, inputs: {X: [sq]}, outputs: {Out: [loss]}}
)";
  ProgramDesc plain = ParseProgram(text, "prenorm.yaml");
  const ParamGrads pg = AppendBackward(plain, "loss");
  std::unordered_set<std::string> keep = {"loss"};
  for (const auto& [param, grad] : pg) keep.insert(grad);
  ASSERT_EQ(CountOps(plain, "sum"), 2u);
  ProgramDesc fused = plain;
  FuseGradOps(fused, keep);
  VerifyProgram(fused, *CurrentRegistry());
  EXPECT_EQ(CountOps(fused, "sum"), 0u);
  std::set<std::string> accumulated;  // layer_norm_grad X@GRAD written with AccumulateX
  for (const auto& op : fused.Root()->AllOps())
    if (op->Type() == "layer_norm_grad" && op->HasInput("AccumulateX")) accumulated.insert(op->Output("X@GRAD")[0]);
  EXPECT_EQ(accumulated, (std::set<std::string>{"x@GRAD", "r@GRAD"}));
  EXPECT_EQ(FuseGradOps(fused, keep), 0u);
  const Feeds feeds = {{"x", {5, 8}}, {"w", {8, 8}}, {"g1", {8}}, {"b1", {8}}, {"g2", {8}}, {"b2", {8}}};
  const std::vector<std::string> names(keep.begin(), keep.end());
  auto want = RunWith(plain, feeds, 3, names);
  for (int threads : {0, 1, 2}) {
    auto got = RunWith(fused, feeds, 3, names, threads);
    for (const auto& n : names) {
      SCOPED_TRACE(n + " threads " + std::to_string(threads));
      EXPECT_EQ(got[n].shape, want[n].shape);
      EXPECT_TRUE(got[n].v == want[n].v);
    }
  }
  // A kept part keeps its sum.
  ProgramDesc kept = plain;
  std::unordered_set<std::string> keep_parts = keep;
  for (const auto& op : plain.Root()->AllOps())
    if (op->Type() == "sum")
      for (const auto& part : op->Input("X")) keep_parts.insert(part);
  FuseGradOps(kept, keep_parts);
  EXPECT_EQ(CountOps(kept, "sum"), 2u);
  // Float64 programs keep theirs (float32 only, where it was measured).
  std::string wide = text;
  for (size_t at; (at = wide.find("float32")) != std::string::npos;) wide.replace(at, 7, "float64");
  ProgramDesc wide_plain = ParseProgram(wide, "prenorm64.yaml");
  AppendBackward(wide_plain, "loss");
  FuseGradOps(wide_plain, keep);
  EXPECT_EQ(CountOps(wide_plain, "sum"), 2u);
}

// layer_norm_grad's AccumulateX on its own, into another var and in place
// (X@GRAD is AccumulateX's own var: the op reads the partial before it
// writes its rows), float32 and float64, with and without Scale, rows
// split at begin_norm_axis 1 and 2: X@GRAD is the partial plus the
// gradient without it, added in the dtype as the sum op adds.
TEST(AccumulateX, LayerNormGradAddsItsGradientToThePartial) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (bool affine : {false, true})
      for (int axis : {1, 2}) {
        SCOPED_TRACE(std::string(DTypeName(dtype)) + (affine ? " affine" : "") + " axis " + std::to_string(axis));
        const std::string t = DTypeName(dtype);
        const std::string stats = axis == 1 ? "[2]" : "[6]";
        const std::string scale = affine ? ", Scale: [g]" : "";
        const std::string ins = "X: [x], Mean: [m], Variance: [v], Y@GRAD: [dy]" + scale;
        const std::string text =
            "format: nabla-program/1\nblocks:\n  - idx: 0\n    parent: -1\n    vars:\n"
            "      x: {shape: [2, 3, 4], dtype: " +
            t +
            "}\n"
            "      dy: {shape: [2, 3, 4], dtype: " +
            t +
            "}\n"
            "      acc: {shape: [2, 3, 4], dtype: " +
            t +
            "}\n"
            "      g: {shape: " +
            (axis == 1 ? "[12]" : "[4]") + ", dtype: " + t +
            "}\n"
            "      m: {shape: " +
            stats + ", dtype: " + t +
            "}\n"
            "      v: {shape: " +
            stats + ", dtype: " + t +
            "}\n"
            "    ops:\n"
            "      - {type: layer_norm_grad, inputs: {" +
            ins +
            "}, outputs: {X@GRAD: [own]}, "
            "attrs: {begin_norm_axis: " +
            std::to_string(axis) +
            "}}\n"
            "      - {type: layer_norm_grad, inputs: {" +
            ins +
            ", AccumulateX: [acc]}, "
            "outputs: {X@GRAD: [dx]}, attrs: {begin_norm_axis: " +
            std::to_string(axis) +
            "}}\n"
            "      - {type: layer_norm_grad, inputs: {" +
            ins +
            ", AccumulateX: [acc]}, "
            "outputs: {X@GRAD: [acc]}, attrs: {begin_norm_axis: " +
            std::to_string(axis) + "}}\n";
        const ProgramDesc p = ParseProgram(text, "ln_acc.yaml");
        Scope scope;
        std::mt19937_64 rng(7);
        std::map<std::string, HostTensor> in;
        const Shape rows = {axis == 1 ? 2 : 6};
        for (const auto& [name, shape, low, high] :
             std::vector<std::tuple<std::string, Shape, double, double>>{{"x", {2, 3, 4}, -1, 1},
                                                                         {"dy", {2, 3, 4}, -1, 1},
                                                                         {"acc", {2, 3, 4}, -1, 1},
                                                                         {"g", {axis == 1 ? 12 : 4}, 0.5, 1.5},
                                                                         {"m", rows, -0.5, 0.5},
                                                                         {"v", rows, 0.5, 2}}) {
          in[name] = RandomTensor(shape, dtype, low, high, rng);
          ToTensor(in[name], dtype, scope.Var(name)->GetTensor());
        }
        CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
        const HostTensor own = FromTensor(scope.FindVar("own")->GetTensor());
        HostTensor want = in["acc"];
        for (size_t i = 0; i < want.v.size(); ++i)
          want.v[i] = dtype == DType::kFloat32
                          ? static_cast<double>(static_cast<float>(want.v[i]) + static_cast<float>(own.v[i]))
                          : want.v[i] + own.v[i];
        for (const char* name : {"dx", "acc"}) {
          const HostTensor got = FromTensor(scope.FindVar(name)->GetTensor());
          EXPECT_EQ(got.shape, want.shape) << name;
          EXPECT_TRUE(got.v == want.v) << name;
        }
      }
}

// layer_norm_grad's AccumulateX must have X's shape.
TEST(AccumulateX, LayerNormGradRefusesAPartialOfAnotherShape) {
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3, 4], dtype: float32}
      dy: {shape: [3, 4], dtype: float32}
      m: {shape: [3], dtype: float32}
      v: {shape: [3], dtype: float32}
      a: {shape: [4, 3], dtype: float32}
    ops:
      - {type: layer_norm_grad, inputs: {X: [x], Mean: [m], Variance: [v], Y@GRAD: [dy], AccumulateX: [a]}, outputs: {X@GRAD: [dx]}}
)",
                               "acc.yaml");
  Scope scope;
  std::mt19937_64 rng(1);
  for (const auto& [name, shape] :
       std::vector<std::pair<std::string, Shape>>{{"x", {3, 4}}, {"dy", {3, 4}}, {"m", {3}}, {"v", {3}}, {"a", {4, 3}}})
    ToTensor(RandomTensor(shape, DType::kFloat32, 0.5, 1, rng), DType::kFloat32, scope.Var(name)->GetTensor());
  try {
    CreateExecutor("sequential", HostDevice())->Run(p, 0, scope);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AccumulateX has shape [4, 3] but X has [3, 4]"), std::string::npos)
        << e.what();
  }
}
}  // namespace
}  // namespace nabla::op_test
