// The tape's rules: what is recorded, Backward's accumulation, retain_graph,
// in-place misuse, NoGradGuard, errors; a third-party plugin's ops eagerly;
// ToDot.
#include <cmath>
#include <thread>

#include "eager_util.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"

namespace nabla::eager_testing {
namespace {

using eager::Call;
using eager::Tensor;

Tensor Vec(const std::vector<float>& v, const Shape& shape, bool grad, const std::string& name = "") {
  return Tensor::FromVector<float>(v, shape, grad, name);
}
Tensor Mean(const Tensor& x) { return Call("mean", {{"X", {x}}})["Out"]; }
Tensor Tanh(const Tensor& x) { return Call("tanh", {{"X", {x}}})["Out"]; }

// Runs `fn` and returns the message of the nabla::Error it must throw.
template <typename F>
std::string ErrorOf(F fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no error thrown";
  return "";
}

// A toy op registered in-process, as a plugin would, with no GradOpDescMaker.
void ToyOpWithoutGradMaker() {
  static bool registered = [] {
    RegisterOps("eager_test_toys", [](Registrar& r) {
      r.Op("eager_test_double")
          .Input("X", "(Tensor) input")
          .Output("Out", "(Tensor) 2 X")
          .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
      r.Kernel("eager_test_double", DeviceType::kCPU, DType::kFloat32, [](const ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        float* o = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        for (int64_t i = 0; i < x.Numel(); ++i) o[i] = 2 * x.Data<float>()[i];
      });
    });
    return true;
  }();
  ASSERT_TRUE(registered);
}

// A toy op with a duplicable output and no OutputCount trait: only
// output_counts can size it.
void ToyOpWithUnsizedOutputs() {
  static bool registered = [] {
    RegisterOps("eager_test_unsized", [](Registrar& r) {
      r.Op("eager_test_copies")
          .Input("X", "(Tensor) input")
          .Output("Out", "(Tensor[]) copies of X", kDuplicable)
          .Attr<int>("n", 1, "(int, default 1) how many copies")
          .InferShape([](InferShapeContext& c) {
            const int n = c.Attr<int>("n");
            NABLA_ENFORCE(c.OutputSize("Out") == static_cast<size_t>(n), kInvalidArgument, c.Where(), ": n = ", n,
                          " needs ", n, " outputs in Out, but received ", c.OutputSize("Out"));
            for (int i = 0; i < n; ++i) c.ShareShapeAndDType("X", "Out", i, 0);
          });
      r.Kernel("eager_test_copies", DeviceType::kCPU, DType::kFloat32, [](const ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        for (nabla::Tensor* o : ctx.MultiOutput("Out")) {
          float* p = o->Allocate<float>(ctx.GetDevice(), x.GetShape());
          std::copy(x.Data<float>(), x.Data<float>() + x.Numel(), p);
        }
      });
    });
    return true;
  }();
  ASSERT_TRUE(registered);
}

class Eager : public EagerTest {};

TEST_F(Eager, OutputCountsFollowFromAttributesThroughTheOpsTrait) {
  Tensor x = Vec({0, 1, 2, 3, 4, 5}, {2, 3}, true, "x");
  // split's OutputCount: num, else sections, else SectionsTensorList.
  eager::Outputs by_num = Call("split", {{"X", {x}}}, {{"num", 3}, {"axis", 1}});
  ASSERT_EQ(by_num.List("Out").size(), 3u);
  EXPECT_EQ(by_num.List("Out")[2].ToVector<float>(), (std::vector<float>{2, 5}));
  eager::Outputs by_sections = Call("split", {{"X", {x}}}, {{"sections", std::vector<int>{1, -1}}, {"axis", 1}});
  ASSERT_EQ(by_sections.List("Out").size(), 2u);
  EXPECT_EQ(by_sections.List("Out")[1].GetShape(), (Shape{2, 2}));
  Tensor one = Tensor::FromVector<int32_t>({1}, {1}), two = Tensor::FromVector<int32_t>({2}, {1});
  eager::Outputs by_list = Call("split", {{"X", {x}}, {"SectionsTensorList", {two, one}}}, {{"axis", 1}});
  ASSERT_EQ(by_list.List("Out").size(), 2u);
  EXPECT_EQ(by_list.List("Out")[0].ToVector<float>(), (std::vector<float>{0, 1, 3, 4}));
  // The parts are recorded: the gradient reaches x through all of them.
  Tensor parts = Call("concat", {{"X", by_num.List("Out")}}, {{"axis", 1}})["Out"];
  Mean(parts).Backward();
  EXPECT_EQ(x.Grad().ToVector<float>(), std::vector<float>(6, 1.0f / 6));
  // A grad op made by DefaultGradOp sizes its duplicable gradient from its input.
  Tensor y = Vec({1, 2}, {1, 2}, false), dout = Vec({1, 1, 1, 1}, {1, 4}, false);
  eager::Outputs grads = Call("concat_grad", {{"X", {y, y}}, {"Out@GRAD", {dout}}}, {{"axis", 1}});
  EXPECT_EQ(grads.List("X@GRAD").size(), 2u);
  // A count given that the attributes contradict is an error naming output_counts.
  std::string msg = ErrorOf([&] { Call("split", {{"X", {x}}}, {{"num", 3}, {"axis", 1}}, {{"Out", 2}}); });
  EXPECT_NE(msg.find("output_counts gives output slot 'Out' 2 tensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("make it 3"), std::string::npos) << msg;
  EXPECT_EQ(Call("split", {{"X", {x}}}, {{"num", 3}, {"axis", 1}}, {{"Out", 3}}).List("Out").size(), 3u);
}

TEST_F(Eager, AttributeCheckersRunAsInAProgram) {
  Tensor x = Vec({1, 2, 3, 4}, {2, 2}, false, "x");
  // dropout_prob in [0, 1]: a program's verifier refuses 1.5, and so does
  // an eager call, rather than dropping every element.
  std::string msg = ErrorOf([&] { Call("dropout", {{"X", {x}}}, {{"dropout_prob", 1.5f}}); });
  EXPECT_NE(msg.find("eager: op 'dropout': attribute 'dropout_prob' = 1.5 is rejected by the op's checker"),
            std::string::npos)
      << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(Call("dropout", {{"X", {x}}}, {{"dropout_prob", 0.0f}})["Out"].ToVector<float>(),
            (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(Eager, AnOpWithoutOutputCountTraitNeedsOutputCountsAndSaysSo) {
  ToyOpWithUnsizedOutputs();
  Tensor x = Vec({1, 2}, {2}, false, "x");
  std::string msg = ErrorOf([&] { Call("eager_test_copies", {{"X", {x}}}, {{"n", 2}}); });
  EXPECT_NE(msg.find("n = 2 needs 2 outputs in Out, but received 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("give the count with output_counts"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  eager::Outputs out = Call("eager_test_copies", {{"X", {x}}}, {{"n", 2}}, {{"Out", 2}});
  ASSERT_EQ(out.List("Out").size(), 2u);
  EXPECT_EQ(out.List("Out")[1].ToVector<float>(), (std::vector<float>{1, 2}));
}

TEST_F(Eager, OpRunTakesSlotsWithoutAMapAndChecksTheirOrder) {
  Tensor x = Vec({1, 2}, {2}, true, "x"), y = Vec({3, 4}, {2}, false, "y");
  eager::Op add("elementwise_add");
  const std::string kX = "X", kY = "Y";
  const eager::SlotInput slots[2] = {{&kX, &x, 1}, {&kY, &y, 1}};
  eager::Outputs out = add.Run(slots, 2);
  EXPECT_EQ(out.NumSlots(), 1u);
  EXPECT_EQ(out.SlotName(0), "Out");
  ASSERT_EQ(out.SlotSize(0), 1u);
  EXPECT_EQ(out.SlotData(0)[0].ToVector<float>(), (std::vector<float>{4, 6}));
  EXPECT_TRUE(out["Out"].RequiresGrad());
  EXPECT_EQ(out.Slots().at("Out").size(), 1u);
  const eager::SlotInput reversed[2] = {{&kY, &y, 1}, {&kX, &x, 1}};
  std::string msg = ErrorOf([&] { eager::Op("elementwise_add").Run(reversed, 2); });
  EXPECT_NE(msg.find("ascending name order"), std::string::npos) << msg;
}

TEST_F(Eager, RepeatedShapesSkipInferenceButNewShapesAndBadShapesStillInfer) {
  eager::Op add("elementwise_add");
  Tensor a = Vec({1, 2}, {2}, false), b = Vec({3, 4}, {2}, false);
  EXPECT_EQ(add({{"X", {a}}, {"Y", {b}}})["Out"].GetShape(), (Shape{2}));
  EXPECT_EQ(add({{"X", {a}}, {"Y", {b}}})["Out"].ToVector<float>(), (std::vector<float>{4, 6}));
  Tensor c = Vec({1, 2, 3, 4, 5, 6}, {3, 2}, false);
  EXPECT_EQ(add({{"X", {c}}, {"Y", {b}}})["Out"].GetShape(), (Shape{3, 2}));  // a new signature infers again
  Tensor d = Vec({1, 2, 3}, {3}, false);
  EXPECT_FALSE(ErrorOf([&] { add({{"X", {a}}, {"Y", {d}}}); }).empty());  // and still checks
  EXPECT_EQ(add({{"X", {a}}, {"Y", {b}}})["Out"].ToVector<float>(), (std::vector<float>{4, 6}));
  Tensor i = Tensor::FromVector<int64_t>({1, 2}, {2});
  EXPECT_EQ(add({{"X", {i}}, {"Y", {i}}})["Out"].GetDType(), DType::kInt64);  // the dtype is part of the memo
}

TEST_F(Eager, CallRunsTheRegisteredKernelAndRecordsOnlyWhenAnInputRequiresGrad) {
  Tensor x = Vec({-1, 0, 0.5f, 2}, {2, 2}, false, "x");
  eager::Tape tape;
  Tensor y = Tanh(x);
  EXPECT_EQ(y.GetShape(), (Shape{2, 2}));
  auto v = y.ToVector<float>();
  EXPECT_FLOAT_EQ(v[0], std::tanh(-1.0f));
  EXPECT_FLOAT_EQ(v[3], std::tanh(2.0f));
  EXPECT_FALSE(y.RequiresGrad());
  EXPECT_TRUE(y.IsLeaf());
  EXPECT_EQ(tape.Size(), 0u);
  Tensor w = Vec({1, 2, 3, 4}, {2, 2}, true, "w");
  Tensor z = Call("mul", {{"X", {x}}, {"Y", {w}}})["Out"];
  EXPECT_TRUE(z.RequiresGrad());
  EXPECT_FALSE(z.IsLeaf());
  EXPECT_EQ(tape.Size(), 1u);
  // Attributes take schema defaults; the repeated call hits the cache and
  // still gives a new tensor each time.
  Tensor s1 = Call("scale", {{"X", {x}}}, {{"scale", 2.0f}})["Out"];
  Tensor s2 = Call("scale", {{"X", {x}}}, {{"scale", 2.0f}})["Out"];
  EXPECT_NE(s1.Id(), s2.Id());
  EXPECT_NE(s1.Data().RawData(), s2.Data().RawData());
  EXPECT_EQ(s1.ToVector<float>(), (std::vector<float>{-2, 0, 1, 4}));
  eager::Op scale("scale", {{"scale", 3.0f}, {"bias", 1.0f}});
  EXPECT_EQ(scale({{"X", {x}}})["Out"].ToVector<float>(), (std::vector<float>{-2, 1, 2.5f, 7}));
}

TEST_F(Eager, BadCallsAreOneLineErrorsNamingTheCulprit) {
  Tensor x = Vec({1, 2}, {2}, false, "x");
  EXPECT_NE(ErrorOf([&] { Call("no_such_op", {{"X", {x}}}); }).find("no_such_op"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Call("tanh", {{"Y", {x}}}); }).find("unknown input slot 'Y'"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Call("tanh", {{"X", {x}}}, {{"bogus", 1}}); }).find("bogus"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Call("tanh", {{"X", {x}}})["Y"]; }).find("no output slot 'Y'"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Call("mul", {{"X", {x}}}); }).find("required input slot 'Y'"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Tensor::FromVector<float>({1, 2, 3}, {2, 2}); }).find("4 elements but 3"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Tensor().GetShape(); }).find("undefined tensor"), std::string::npos);
  EXPECT_NE(ErrorOf([&] { Tensor::FromNpy("/nonexistent/w.npy"); }).find("/nonexistent/w.npy"), std::string::npos);
  Tensor w = Vec({1, 2}, {2}, true, "w");
  std::string msg = ErrorOf([&] { eager::CallInPlace("scale", {{"X", {w}}}, {{"Out", {w}}}); });
  EXPECT_NE(msg.find("NoGradGuard"), std::string::npos) << msg;
  Tensor i = Tensor::FromVector<int64_t>({1}, {1}, false, "i");
  EXPECT_NE(ErrorOf([&] { i.SetRequiresGrad(true); }).find("int64"), std::string::npos);
}

TEST_F(Eager, InitializerOpsAndNpyMakeLeaves) {
  Tensor c = Tensor::Init("fill_constant", {2, 3}, DType::kFloat32, {{"value", 0.5f}}, true, "c");
  EXPECT_TRUE(c.IsLeaf());
  EXPECT_TRUE(c.RequiresGrad());
  EXPECT_EQ(c.ToVector<float>(), std::vector<float>(6, 0.5f));
  Tensor u = Tensor::Init("uniform_random", {100}, DType::kFloat64, {{"min", -1.0f}, {"max", 1.0f}, {"seed", 7}});
  for (double v : u.ToVector<double>()) ASSERT_TRUE(v >= -1 && v <= 1);
}

TEST_F(Eager, GradientOfAVarUsedTwiceIsTheSumOfBothContributions) {
  // L = mean(x * x + tanh(x)): x feeds three slots of two ops.
  Tensor x = Vec({-1, 0.5f, 2}, {3}, true, "x");
  Tensor sq = Call("elementwise_mul", {{"X", {x}}, {"Y", {x}}})["Out"];
  Tensor loss = Mean(Call("elementwise_add", {{"X", {sq}}, {"Y", {Tanh(x)}}})["Out"]);
  loss.Backward();
  auto g = x.Grad().ToVector<float>();
  const std::vector<float> xs{-1, 0.5f, 2};
  for (size_t i = 0; i < 3; ++i) {
    float t = std::tanh(xs[i]);
    EXPECT_NEAR(g[i], (2 * xs[i] + 1 - t * t) / 3, 1e-6) << i;
  }
}

TEST_F(Eager, BackwardIsDeterministicBitForBit) {
  auto run = [] {
    Tensor x = Vec({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, {2, 3}, true, "x");
    Tensor a = Tanh(x), b = Call("scale", {{"X", {x}}}, {{"scale", 0.3f}})["Out"];
    Tensor c = Call("elementwise_mul", {{"X", {a}}, {"Y", {b}}})["Out"];
    Tensor loss = Mean(Call("sum", {{"X", {a, b, c, x}}})["Out"]);
    loss.Backward();
    return x.Grad().ToVector<float>();
  };
  auto first = run();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(run(), first);
}

TEST_F(Eager, LossMustHoldOneElement) {
  Tensor x = Vec({1, 2}, {2}, true, "x");
  std::string msg = ErrorOf([&] { Tanh(x).Backward(); });
  EXPECT_NE(msg.find("exactly one element"), std::string::npos) << msg;
  Tensor y = Vec({1}, {1}, false, "y");
  msg = ErrorOf([&] { Mean(y).Backward(); });
  EXPECT_NE(msg.find("does not require grad"), std::string::npos) << msg;
}

TEST_F(Eager, SecondBackwardWithoutRetainGraphIsAnError) {
  Tensor x = Vec({0.5f, -0.5f}, {2}, true, "x");
  Tensor loss = Mean(Tanh(x));
  loss.Backward();
  std::string msg = ErrorOf([&] { loss.Backward(); });
  EXPECT_NE(msg.find("a second time"), std::string::npos) << msg;
  EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;
}

TEST_F(Eager, RetainGraphAllowsAnotherBackwardThatAccumulates) {
  Tensor x = Vec({0.5f, -0.25f}, {2}, true, "x");
  Tensor loss = Mean(Tanh(x));
  loss.Backward(/*retain_graph=*/true);
  auto once = x.Grad().ToVector<float>();
  loss.Backward();
  auto twice = x.Grad().ToVector<float>();
  for (size_t i = 0; i < 2; ++i) {
    float t = std::tanh(i == 0 ? 0.5f : -0.25f);
    EXPECT_NEAR(once[i], (1 - t * t) / 2, 1e-6);
    EXPECT_FLOAT_EQ(twice[i], once[i] + once[i]);
  }
  x.ZeroGrad();
  EXPECT_FALSE(x.Grad().Defined());
}

TEST_F(Eager, ChangingASavedTensorInPlaceMakesBackwardThrowNamingOpAndTensor) {
  Tensor x = Vec({0.5f, -0.5f}, {2}, true, "x");
  Tensor y = Tanh(x);  // tanh's grad op reads Out and mean's reads X: y is saved twice
  y.SetName("y");
  Tensor loss = Mean(y);
  const float junk[] = {9, 9};
  y.CopyFromHost(junk, DType::kFloat32, {2});
  EXPECT_EQ(y.Version(), 1u);
  std::string msg = ErrorOf([&] { loss.Backward(); });
  EXPECT_NE(msg.find("'y'"), std::string::npos) << msg;
  // Backward meets mean first (reverse call order).
  EXPECT_NE(msg.find("op 'mean'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("in place"), std::string::npos) << msg;
  EXPECT_FALSE(x.Grad().Defined()) << "no gradient may come out of a failed Backward";

  // Saved only by tanh (scale's gradient does not read its input).
  Tensor a = Call("scale", {{"X", {x}}}, {{"scale", 2.0f}})["Out"];
  Tensor b = Tanh(a);
  b.SetName("b");
  Tensor loss2 = Mean(Call("scale", {{"X", {b}}}, {{"scale", 3.0f}})["Out"]);
  b.CopyFromHost(junk, DType::kFloat32, {2});
  msg = ErrorOf([&] { loss2.Backward(); });
  EXPECT_NE(msg.find("'b'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("op 'tanh'"), std::string::npos) << msg;
}

TEST_F(Eager, InPlaceOnALeafThatRequiresGradNeedsNoGrad) {
  Tensor w = Vec({1, 2}, {2}, true, "w");
  Tensor g = Vec({0.5f, 0.5f}, {2}, false, "g");
  std::string msg = ErrorOf([&] { w.CopyFrom(g); });
  EXPECT_NE(msg.find("NoGradGuard"), std::string::npos) << msg;
  // An optimizer step: sgd writes ParamOut = Param in place.
  Tensor lr = Vec({0.1f}, {1}, false, "lr");
  {
    eager::NoGradGuard no_grad;
    eager::CallInPlace("sgd", {{"Param", {w}}, {"Grad", {g}}, {"LearningRate", {lr}}}, {{"ParamOut", {w}}});
  }
  EXPECT_EQ(w.ToVector<float>(), (std::vector<float>{0.95f, 1.95f}));
  EXPECT_EQ(w.Version(), 1u);
}

TEST_F(Eager, NoGradGuardStopsRecordingAndNests) {
  Tensor x = Vec({1, 2}, {2}, true, "x");
  eager::Tape tape;
  {
    eager::NoGradGuard outer;
    {
      eager::NoGradGuard inner;
      EXPECT_FALSE(eager::GradEnabled());
    }
    EXPECT_FALSE(eager::GradEnabled());
    Tensor y = Tanh(x);
    EXPECT_FALSE(y.RequiresGrad());
  }
  EXPECT_TRUE(eager::GradEnabled());
  EXPECT_EQ(tape.Size(), 0u);
  EXPECT_TRUE(Tanh(x).RequiresGrad());
  EXPECT_EQ(tape.Size(), 1u);
}

TEST_F(Eager, BranchesWithoutGradientAreSkippedAndUnreachedLeavesGetNone) {
  Tensor x = Vec({0.5f, 1}, {2}, true, "x");
  Tensor unused = Vec({3, 4}, {2}, true, "unused");
  Tensor side = Tanh(unused);  // never reaches the loss
  // softmax_with_cross_entropy's Softmax output gets no gradient: zero-filled.
  Tensor logits = Call("reshape", {{"X", {x}}}, {{"shape", std::vector<int>{1, 2}}})["Out"];
  Tensor label = Tensor::FromVector<int64_t>({1}, {1, 1}, false, "label");
  Tensor loss = Mean(Call("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {label}}})["Loss"]);
  loss.Backward();
  EXPECT_FALSE(unused.Grad().Defined());
  auto g = x.Grad().ToVector<float>();
  double p0 = 1 / (1 + std::exp(0.5));
  EXPECT_NEAR(g[0], p0, 1e-6);
  EXPECT_NEAR(g[1], (1 - p0) - 1, 1e-6);  // softmax[1] - 1, softmax[1] = 1 - p0
  EXPECT_FALSE(label.RequiresGrad());
}

TEST_F(Eager, ThirdPartyPluginOpsRunEagerlyWithTheirOwnGradMakers) {
  PluginManager::Instance().Load(ACME_PLUGIN);
  // acme_swish: x * sigmoid(beta x), a grad op of its own.
  const std::vector<double> xs{-1.5, 0.25, 2};
  Tensor x = Tensor::FromVector<double>(xs, {3}, true, "x");
  Tensor loss = Mean(Call("acme_swish", {{"X", {x}}}, {{"beta", 1.5f}})["Out"]);
  loss.Backward();
  auto g = x.Grad().ToVector<double>();
  for (size_t i = 0; i < 3; ++i) {
    double s = 1 / (1 + std::exp(-1.5 * xs[i]));
    EXPECT_NEAR(g[i], (s + 1.5 * xs[i] * s * (1 - s)) / 3, 1e-12) << i;
  }
  // acme_linear: its GradOpDescMaker emits standard ops (matmul, reduce_sum);
  // the gradients match the same layer built from standard ops.
  auto layer = [](bool acme) {
    Tensor in = Tensor::FromVector<double>({0.1, -0.2, 0.3, 0.4, 0.5, -0.6}, {2, 3}, true, "in");
    Tensor w = Tensor::FromVector<double>({1, 2, -1, 0.5, 0.25, -2}, {3, 2}, true, "w");
    Tensor b = Tensor::FromVector<double>({0.3, -0.7}, {2}, true, "b");
    Tensor out;
    if (acme) {
      out = Call("acme_linear", {{"X", {in}}, {"W", {w}}, {"B", {b}}})["Out"];
    } else {
      Tensor xw = Call("mul", {{"X", {in}}, {"Y", {w}}})["Out"];
      out = Call("elementwise_add", {{"X", {xw}}, {"Y", {b}}}, {{"axis", 1}})["Out"];
    }
    Mean(Tanh(out)).Backward();
    return std::vector<std::vector<double>>{in.Grad().ToVector<double>(), w.Grad().ToVector<double>(),
                                            b.Grad().ToVector<double>()};
  };
  auto acme = layer(true), standard = layer(false);
  for (size_t k = 0; k < 3; ++k)
    ExpectClose(acme[k], standard[k], 1e-12, 1e-15, "acme_linear grad " + std::to_string(k));
}

TEST_F(Eager, ToDotDrawsForwardAndGradientEdgesApart) {
  Tensor x = Vec({1, 2}, {2}, true, "x");
  Tensor y = Vec({3, 4}, {2}, false, "y");
  eager::Tape tape;
  Tensor loss = Mean(Call("elementwise_mul", {{"X", {x}}, {"Y", {y}}})["Out"]);
  std::string dot = tape.ToDot();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u);
  EXPECT_NE(dot.find("\"v:x\" -> \"op:0\" [label=\"X\"]"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\"op:0\" -> \"v:x\" [color=red, style=dashed"), std::string::npos) << dot;
  EXPECT_NE(dot.find("elementwise_mul_grad"), std::string::npos) << dot;
  // y needs no gradient: no red edge to it.
  EXPECT_EQ(dot.find("\"op:0\" -> \"v:y\" [color=red"), std::string::npos) << dot;
}

TEST_F(Eager, ControlFlowOpsAreRefusedWithAHint) {
  PluginManager::Instance().Load(CONTROL_FLOW_PLUGIN);
  Tensor c = Tensor::FromVector<bool>({true}, {1}, false, "c");
  std::string msg = ErrorOf([&] { Call("while", {{"X", {c}}, {"Condition", {c}}}); });
  EXPECT_NE(msg.find("C++"), std::string::npos) << msg;
}

TEST_F(Eager, AnOpWithoutGradMakerRunsButBackwardThroughItIsAnError) {
  ToyOpWithoutGradMaker();
  Tensor x = Vec({1, 2}, {2}, true, "x");
  Tensor y = Call("eager_test_double", {{"X", {x}}})["Out"];
  EXPECT_EQ(y.ToVector<float>(), (std::vector<float>{2, 4}));
  std::string msg = ErrorOf([&] { Mean(y).Backward(); });
  EXPECT_NE(msg.find("eager_test_double"), std::string::npos) << msg;
  EXPECT_NE(msg.find("no GradOpDescMaker"), std::string::npos) << msg;
}

TEST_F(Eager, BranchesWhoseGradientIsZeroAreSkippedAndReachedLeavesGetZeros) {
  ToyOpWithoutGradMaker();
  // cross_entropy sends no gradient to its Label: the branch that computed a
  // soft label is skipped (were it run, the toy op in it would throw), and a
  // leaf read directly as a Label gets a zero gradient.
  Tensor x = Vec({0.2f, 0.3f, 0.5f}, {1, 3}, true, "x");
  Tensor u = Vec({1, 2, 3}, {1, 3}, true, "u");
  Tensor soft = Call("softmax", {{"X", {Call("eager_test_double", {{"X", {u}}})["Out"]}}})["Out"];
  Tensor loss1 = Mean(Call("cross_entropy", {{"X", {x}}, {"Label", {soft}}}, {{"soft_label", true}})["Y"]);
  loss1.Backward();
  EXPECT_TRUE(x.Grad().Defined());
  EXPECT_FALSE(u.Grad().Defined()) << "the skipped branch sent u nothing";

  Tensor x2 = Vec({0.2f, 0.3f, 0.5f}, {1, 3}, true, "x2");
  Tensor label = Vec({0, 1, 0}, {1, 3}, true, "label");
  Mean(Call("cross_entropy", {{"X", {x2}}, {"Label", {label}}}, {{"soft_label", true}})["Y"]).Backward();
  ASSERT_TRUE(label.Grad().Defined());
  EXPECT_EQ(label.Grad().ToVector<float>(), (std::vector<float>{0, 0, 0}));
  EXPECT_NEAR(x2.Grad().ToVector<float>()[1], -1 / 0.3f, 1e-5);
}

TEST_F(Eager, ZeroGradientsOfUnusedOutputsKeepTheirShapeAtHighRank) {
  // split's grad op (concat) reads the gradient of every part, so the part
  // the loss never reads gets zeros of its recorded shape; rank 7 is past
  // what a node keeps inline.
  Tensor x = Vec({1, 2, 3, 4}, {1, 1, 1, 1, 1, 2, 2}, true, "x");
  auto parts = Call("split", {{"X", {x}}}, {{"num", 2}, {"axis", 6}}).List("Out");
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].GetShape(), (Shape{1, 1, 1, 1, 1, 2, 1}));
  Mean(parts[0]).Backward();
  ASSERT_TRUE(x.Grad().Defined());
  EXPECT_EQ(x.Grad().GetShape(), x.GetShape());
  EXPECT_EQ(x.Grad().ToVector<float>(), (std::vector<float>{0.5f, 0, 0.5f, 0}));
}

TEST_F(Eager, SmallResultsReuseTheirBuffersAndStayIndependent) {
  // Results of tiny ops come from per-thread block lists: buffers freed by
  // one call are handed to the next, never while a tensor still holds them.
  Tensor x = Vec({1, 2, 3}, {3}, false, "x");
  std::vector<Tensor> kept;
  for (int i = 0; i < 64; ++i) {
    Tensor y = Call("scale", {{"X", {x}}}, {{"scale", static_cast<float>(i)}})["Out"];
    if (i % 2 == 0) kept.push_back(y);  // the odd ones are freed at once
  }
  for (size_t k = 0; k < kept.size(); ++k) {
    const float s = static_cast<float>(2 * k);
    EXPECT_EQ(kept[k].ToVector<float>(), (std::vector<float>{s, 2 * s, 3 * s})) << k;
  }
}

TEST_F(Eager, OnlyLeavesAndRetainedResultsKeepGradients) {
  Tensor x = Vec({0.5f, 1}, {2}, true, "x");
  Tensor a = Tanh(x), b = Tanh(a);
  b.RetainGrad();
  Mean(b).Backward();
  EXPECT_TRUE(x.Grad().Defined());
  EXPECT_FALSE(a.Grad().Defined());
  ASSERT_TRUE(b.Grad().Defined());
  EXPECT_EQ(b.Grad().ToVector<float>(), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_NE(ErrorOf([&] { a.SetRequiresGrad(false); }).find("only leaves"), std::string::npos);
  Tensor d = a.Detach();
  EXPECT_TRUE(d.IsLeaf());
  EXPECT_FALSE(d.RequiresGrad());
}

TEST_F(Eager, RecordingStateIsPerThreadAndBackwardMayRunOnAnotherThread) {
  Tensor x = Vec({0.25f, -1}, {2}, true, "x");
  eager::NoGradGuard no_grad;  // this thread only
  Tensor loss;
  std::thread worker([&] {
    EXPECT_TRUE(eager::GradEnabled());
    loss = Mean(Tanh(x));
  });
  worker.join();
  EXPECT_TRUE(loss.RequiresGrad());
  EXPECT_FALSE(Tanh(x).RequiresGrad());
  loss.Backward();
  auto g = x.Grad().ToVector<float>();
  EXPECT_NEAR(g[0], (1 - std::tanh(0.25f) * std::tanh(0.25f)) / 2, 1e-6);
}

TEST_F(Eager, ToProgramNamesTensorsUniquelyAndDeclaresLeaves) {
  Tensor x = Vec({1, 2}, {2}, true, "h");
  Tensor c = Vec({3, 4}, {2}, false, "c");
  eager::Tape tape;
  Tensor h = x;
  for (int i = 0; i < 3; ++i) {
    h = Call("elementwise_mul", {{"X", {h}}, {"Y", {c}}})["Out"];
    h.SetName("h");  // the same name each step: the program makes them unique
  }
  ProgramDesc p = tape.ToProgram();
  const BlockDesc& block = *p.Root();
  ASSERT_EQ(block.OpSize(), 3u);
  EXPECT_EQ(block.Op(0)->Input("X")[0], "h");
  EXPECT_EQ(block.Op(2)->Output("Out")[0], tape.VarName(h));
  EXPECT_NE(tape.VarName(h), "h");
  EXPECT_TRUE(block.FindVar("h")->Persistable());
  EXPECT_TRUE(block.FindVar("c")->StopGradient());
  auto leaves = tape.Leaves();
  ASSERT_EQ(leaves.size(), 2u);
  EXPECT_TRUE(leaves[0].parameter);
  EXPECT_FALSE(leaves[1].parameter);
  Tensor other = Vec({1}, {1}, false, "other");
  EXPECT_NE(ErrorOf([&] { tape.VarName(other); }).find("no call"), std::string::npos);
}

TEST_F(Eager, AFailedSecondBackwardLeavesTheGradientAsItWas) {
  Tensor x = Vec({0.5f, -1.0f}, {2}, true, "x");
  Tensor y = Mean(Tanh(x));
  y.Backward();
  const auto once = x.Grad().ToVector<float>();
  std::string msg = ErrorOf([&] { y.Backward(); });
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  EXPECT_EQ(x.Grad().ToVector<float>(), once);
  // retain_graph every time but the last: three backwards add three times.
  Tensor z = Mean(Tanh(x));
  x.ZeroGrad();
  z.Backward(/*retain_graph=*/true);
  z.Backward(/*retain_graph=*/true);
  z.Backward();
  const auto thrice = x.Grad().ToVector<float>();
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(thrice[i], 3 * once[i]);
  EXPECT_FALSE(ErrorOf([&] { z.Backward(); }).empty());
}

TEST_F(Eager, NoGradInsideATapeIsNotRecordedAndItsResultsBecomeFeeds) {
  const std::vector<float> a = {0.5f, -0.25f, 1.5f};
  Tensor w = Vec(a, {3}, true, "w");
  eager::Tape tape;
  Tensor h = Tanh(w);
  Tensor c;
  {
    eager::NoGradGuard no_grad;
    c = Call("exp", {{"X", {w}}})["Out"];  // a constant for the gradient
    { eager::NoGradGuard inner; }
    EXPECT_FALSE(eager::GradEnabled()) << "the inner guard restores the outer one's state";
  }
  Tensor loss = Mean(Call("elementwise_mul", {{"X", {h}}, {"Y", {c}}})["Out"]);
  tape.Stop();
  EXPECT_FALSE(c.RequiresGrad());
  EXPECT_TRUE(c.IsLeaf());
  ASSERT_EQ(tape.Size(), 3u);  // tanh, elementwise_mul, mean
  ProgramDesc p = tape.ToProgram();
  for (size_t i = 0; i < p.Root()->OpSize(); ++i) EXPECT_NE(p.Root()->Op(i)->Type(), "exp");
  const VarDesc* cv = p.Root()->FindVar(tape.VarName(c));
  ASSERT_NE(cv, nullptr);
  EXPECT_FALSE(cv->Persistable());
  EXPECT_TRUE(cv->StopGradient());
  loss.Backward();
  const auto g = w.Grad().ToVector<float>();
  for (size_t i = 0; i < a.size(); ++i) {
    const double t = std::tanh(a[i]);
    EXPECT_NEAR(g[i], (1 - t * t) * std::exp(a[i]) / 3, 1e-6) << i;
  }
}

TEST_F(Eager, AnUnnamedTensorIsCalledWhatTheProgramCallsIt) {
  Tensor x = Vec({1, 2}, {2}, true);
  eager::Tape tape;
  Tensor loss = Mean(Tanh(x));
  tape.Stop();
  ASSERT_FALSE(loss.Name().empty());
  EXPECT_EQ(loss.Name()[0], 't');
  EXPECT_EQ(tape.VarName(loss), loss.Name());
  EXPECT_EQ(tape.VarName(x), x.Name());
  EXPECT_NE(loss.Name(), x.Name());
}

}  // namespace
}  // namespace nabla::eager_testing
