// nabla::opkit's helpers checked directly: the rules every standard plugin
// now takes from the kit, so a change to one shows here before it shows as
// a drifted op.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

#include "nabla/error.h"
#include "nabla/opkit/opkit.h"
#include "nabla/opkit/philox.h"
#include "nabla/program.h"

namespace nabla::opkit {
namespace {

TEST(OpkitBroadcast, PaddleAxisAlignsTheSmallerOperand) {
  BroadcastShapes s = BroadcastElementwise({2, 3, 4}, {3}, 1, "op 'elementwise_add'");
  EXPECT_EQ(s.y, (Shape{1, 3, 1}));
  EXPECT_EQ(s.out, (Shape{2, 3, 4}));
  // -1 aligns at the end (numpy); X may be the smaller operand.
  s = BroadcastElementwise({4}, {2, 3, 4}, -1, "op 'elementwise_add'");
  EXPECT_EQ(s.x, (Shape{1, 1, 4}));
  // Trailing 1s that would not fit are dropped (Paddle's [3, 1] at axis 1 of [2, 3]).
  s = BroadcastElementwise({2, 3}, {3, 1}, 1, "op 'elementwise_add'");
  EXPECT_EQ(s.y, (Shape{1, 3}));
}

TEST(OpkitBroadcast, MismatchNamesTheOpAndBothShapes) {
  try {
    BroadcastElementwise({2, 3}, {4}, -1, "op 'elementwise_mul'");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidArgument);
    const std::string m = e.what();
    EXPECT_NE(m.find("op 'elementwise_mul'"), std::string::npos) << m;
    EXPECT_NE(m.find("[2, 3]"), std::string::npos) << m;
  }
  EXPECT_FALSE(AlignAtAxis({3, 4}, 2, 1).fits);
  // The kernels' form names the op from its OpDesc, on both error paths.
  const OpDesc op("elementwise_max_grad", {}, {}, {});
  for (int axis : {-1, 5}) {
    try {
      BroadcastElementwise({2, 3}, {4}, axis, op);
      FAIL() << "expected an error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("op 'elementwise_max_grad': ", 0), 0u) << e.what();
    }
  }
  EXPECT_EQ(BroadcastElementwise({2, 3}, {3}, -1, op).y, (Shape{1, 3}));
}

TEST(OpkitBroadcast, IndexerPairsEveryOutputWithItsOperands) {
  // out [2, 3] = a [2, 1] against b [1, 3].
  std::vector<std::vector<int64_t>> seen;
  BroadcastIndexer({2, 3}, {2, 1}, {1, 3}).ForEach([&](int64_t io, int64_t ia, int64_t ib) {
    seen.push_back({io, ia, ib});
  });
  const std::vector<std::vector<int64_t>> want = {{0, 0, 0}, {1, 0, 1}, {2, 0, 2}, {3, 1, 0}, {4, 1, 1}, {5, 1, 2}};
  EXPECT_EQ(seen, want);
}

TEST(OpkitAxis, NormalizeAxisMapsNegativesAndRejectsOutOfRange) {
  EXPECT_EQ(NormalizeAxis(-1, 3, "axis", "op 'softmax'"), 2);
  EXPECT_EQ(NormalizeAxis(0, 3, "axis", "op 'softmax'"), 0);
  try {
    NormalizeAxis(3, 3, "dim", "op 'reduce_sum'");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(e.what()).find("attribute dim must be in [-3, 3)"), std::string::npos) << e.what();
  }
  const AxisView v = ViewAround({2, 3, 4}, 1);
  EXPECT_EQ(v.outer, 2);
  EXPECT_EQ(v.dim, 3);
  EXPECT_EQ(v.inner, 4);
  EXPECT_EQ(ProductOf({2, -1, 4}, 0, 3), -1);
}

TEST(OpkitReduce, ReducedShapesFollowPaddle) {
  const Shape x = {2, 3, 4};
  const std::vector<bool> mask = ReducedDims(x, {-1, 0}, false, "op 'reduce_sum'");
  EXPECT_EQ(mask, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(ReducedShape(x, mask, false), (Shape{3}));
  EXPECT_EQ(ReducedShape(x, mask, true), (Shape{1, 3, 1}));
  // A full reduction is [1], never rank 0.
  EXPECT_EQ(ReducedShape(x, ReducedDims(x, {}, true, "op 'reduce_sum'"), false), (Shape{1}));
  ReduceView v;
  ASSERT_TRUE(MakeReduceView(x, {2, 1, 4}, &v));
  EXPECT_EQ(v.outer, 2);
  EXPECT_EQ(v.r, 3);
  EXPECT_EQ(v.inner, 4);
  EXPECT_FALSE(MakeReduceView(x, {1, 3, 1}, &v));  // two separate reduced stretches
  EXPECT_EQ(DeterministicSum<int64_t>(1000000, [](int64_t i) { return i; }), int64_t{499999500000});
}

TEST(OpkitRandom, RngIsMt19937_64WithFixedConversions) {
  std::mt19937_64 gen(42);
  Rng rng(42);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(rng.Uniform01(), static_cast<double>(gen() >> 11) * 0x1.0p-53);
  Rng a(7), b(7);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(a.Normal(1.0, 2.0), b.Normal(1.0, 2.0));
}

TEST(OpkitRandom, FansOfDenseAndConvWeights) {
  Fans f = ComputeFans({784, 10});  // [in, out]
  EXPECT_EQ(f.in, 784.0);
  EXPECT_EQ(f.out, 10.0);
  f = ComputeFans({16, 3, 5, 5});  // [out_channels, in_channels, kh, kw]
  EXPECT_EQ(f.in, 75.0);
  EXPECT_EQ(f.out, 400.0);
}

TEST(OpkitGrad, OneGradOpIfWantedEmitsNothingForANoGradInput) {
  const OpDesc fwd("assign", {{"X", {"x"}}}, {{"Out", {"y"}}}, {});
  GradOpMakerFn maker = OneGradOpIfWanted("X", [](const GradContext& g, const std::vector<std::string>& dx) {
    return MakeOp("assign", {{"X", g.OutputGrad("Out")}}, {{"Out", dx}});
  });
  std::vector<std::unique_ptr<OpDesc>> ops = maker(fwd, {}, nullptr, {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "assign");
  EXPECT_EQ(ops[0]->Input("X"), (std::vector<std::string>{"y@GRAD"}));
  EXPECT_EQ(ops[0]->Output("Out"), (std::vector<std::string>{"x@GRAD"}));
  const std::unordered_set<std::string> no_grad = {"x"};
  EXPECT_TRUE(maker(fwd, no_grad, nullptr, {}).empty());
}

TEST(OpkitGradCheck, BuildersFillTheSpec) {
  GradCheckSpec s =
      CheckCase("ties", {AwayFromKinks(CheckInput("X", {2, 3}, -2.0, 2.0), {0.0}, 0.1), IndexIn("Label", {2, 1}, 3)},
                {{"axis", 1}});
  ASSERT_EQ(s.inputs.size(), 2u);
  EXPECT_EQ(s.inputs[0].low, -2.0);
  EXPECT_EQ(s.inputs[0].kinks, (std::vector<double>{0.0}));
  EXPECT_FALSE(s.inputs[1].check);
  EXPECT_EQ(s.inputs[1].dtype, DType::kInt64);
  EXPECT_EQ(s.outputs, (std::vector<std::pair<std::string, int>>{{"Out", 1}}));
}

// Random123's known-answer vectors for Philox4x32-10: the OpenCL kernels
// spell the rounds out again, and both must draw the same masks.
TEST(OpkitPhilox, MatchesTheKnownAnswers) {
  using W = std::array<uint32_t, 4>;
  EXPECT_EQ(Philox4x32(0, {0, 0, 0, 0}), (W{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(Philox4x32(~uint64_t{0}, {~0u, ~0u, ~0u, ~0u}), (W{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(Philox4x32(0x299f31d0a4093822ull, {0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}),
            (W{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
  EXPECT_EQ(PhiloxUniform(0xffffffffu), 16777215.0f / 16777216.0f);
  EXPECT_EQ(PhiloxUniform(0xffu), 0.0f);
}

}  // namespace
}  // namespace nabla::opkit
