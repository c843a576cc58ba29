// The nn_ops plugin, loaded through the plugin manager like any third-party
// plugin: every op's forward against a naive reference written here (float32
// and float64), build-time shape inference with unknown dims, the error
// paths, and every gradient through the numeric checker.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/executor.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

using Doubles = std::vector<double>;

void LoadPlugins() {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(NN_OPS_PLUGIN);
  PluginManager::Instance().Load(MATH_OPS_PLUGIN);
}

// Tensors cross the test boundary as doubles, converted to the case's dtype.
template <typename T>
void Feed(Scope& scope, const std::string& name, const Shape& shape, const Doubles& values) {
  T* p = scope.Var(name)->GetTensor().Allocate<T>(HostDevice(), shape);
  ASSERT_EQ(static_cast<int64_t>(values.size()), NumElements(shape)) << name;
  for (size_t i = 0; i < values.size(); ++i) p[i] = static_cast<T>(values[i]);
}

template <typename T>
Doubles Fetch(Scope& scope, const std::string& name) {
  const Tensor& t = scope.FindVar(name)->GetTensor();
  return Doubles(t.Data<T>(), t.Data<T>() + t.Numel());
}

Shape ShapeOf(Scope& scope, const std::string& name) { return scope.FindVar(name)->GetTensor().GetShape(); }

void RunOne(OpDesc op, Scope& scope) {
  FillDefaultAttrs(op, *CurrentRegistry());
  ExecutorOptions options;
  options.seed = 11;
  RunContext run;
  run.options = &options;
  RunOp(op, scope, HostDevice(), run);
}

Doubles Random(size_t n, double low, double high, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(low, high);
  Doubles v(n);
  for (double& x : v) x = u(gen);
  return v;
}

template <typename T>
constexpr bool IsF32 = std::is_same_v<T, float>;

// Per-dtype comparison: float32 kernels are checked to float32 rounding.
template <typename T>
double Tol() {
  return IsF32<T> ? 2e-5 : 1e-12;
}

template <typename T>
void ExpectNear(const Doubles& got, const Doubles& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], Tol<T>() * std::max(1.0, std::abs(want[i]))) << what << " at " << i;
}

// Row-major strides, for references that walk multi-indices explicitly.
std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

std::vector<int64_t> Unravel(int64_t flat, const Shape& s) {
  std::vector<int64_t> idx(s.size());
  for (int i = static_cast<int>(s.size()) - 1; i >= 0; --i) {
    idx[i] = flat % s[i];
    flat /= s[i];
  }
  return idx;
}

int64_t Ravel(const std::vector<int64_t>& idx, const Shape& s) {
  auto st = Strides(s);
  int64_t f = 0;
  for (size_t i = 0; i < idx.size(); ++i) f += idx[i] * st[i];
  return f;
}

// Softmax along `axis` by brute force over multi-indices.
Doubles RefSoftmax(const Doubles& x, const Shape& s, int axis) {
  Doubles out(x.size());
  for (size_t f = 0; f < x.size(); ++f) {
    auto idx = Unravel(static_cast<int64_t>(f), s);
    long double denom = 0;
    for (int64_t d = 0; d < s[axis]; ++d) {
      auto j = idx;
      j[axis] = d;
      denom += std::exp(static_cast<long double>(x[Ravel(j, s)]) - static_cast<long double>(x[f]));
    }
    out[f] = static_cast<double>(1.0L / denom);
  }
  return out;
}

template <typename T>
class NnForward : public ::testing::Test {
 protected:
  void SetUp() override { LoadPlugins(); }
  Scope scope;
};
using FloatTypes = ::testing::Types<float, double>;
TYPED_TEST_SUITE(NnForward, FloatTypes);

TYPED_TEST(NnForward, Activations) {
  using T = TypeParam;
  Doubles x = Random(24, -5, 5, 1);
  x[0] = 0.0;
  x[1] = -100.0;  // sigmoid must not overflow on either side
  x[2] = 100.0;
  Feed<T>(this->scope, "x", {4, 6}, x);
  Doubles relu(x.size()), sigmoid(x.size()), tanh_ref(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = static_cast<T>(x[i]);
    relu[i] = xi > 0 ? xi : 0;
    sigmoid[i] = 0.5 * (1.0 + std::tanh(xi / 2));  // another formula than the kernel's
    tanh_ref[i] = std::tanh(xi);
  }
  for (const char* type : {"relu", "sigmoid", "tanh"})
    RunOne(OpDesc(type, {{"X", {"x"}}}, {{"Out", {std::string(type) + "_out"}}}, {}), this->scope);
  ExpectNear<T>(Fetch<T>(this->scope, "relu_out"), relu, "relu");
  ExpectNear<T>(Fetch<T>(this->scope, "sigmoid_out"), sigmoid, "sigmoid");
  ExpectNear<T>(Fetch<T>(this->scope, "tanh_out"), tanh_ref, "tanh");
  EXPECT_EQ(ShapeOf(this->scope, "relu_out"), (Shape{4, 6}));
}

TYPED_TEST(NnForward, SoftmaxOverEveryAxisWithHugeLogits) {
  using T = TypeParam;
  const Shape s{3, 4, 5};
  Doubles x = Random(60, -3, 3, 2);
  x[7] = 1000.0;  // exp(1000) overflows: only a max-subtracted softmax survives
  Feed<T>(this->scope, "x", s, x);
  Doubles xt(x.size());
  for (size_t i = 0; i < x.size(); ++i) xt[i] = static_cast<T>(x[i]);
  for (int axis : {-1, 0, 1}) {
    RunOne(OpDesc("softmax", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"axis", axis}}), this->scope);
    ExpectNear<T>(Fetch<T>(this->scope, "y"), RefSoftmax(xt, s, axis < 0 ? 2 : axis),
                  "softmax axis " + std::to_string(axis));
  }
}

TYPED_TEST(NnForward, CrossEntropyHardSoftIgnoredAndZeroProbability) {
  using T = TypeParam;
  Doubles x = Random(12, 0.05, 1, 3);
  x[4 + 2] = 0.0;  // row 1's label has probability 0: the clipped log keeps it finite
  Feed<T>(this->scope, "x", {3, 4}, x);
  Feed<int64_t>(this->scope, "label", {3, 1}, {1, 2, 3});
  RunOne(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"label"}}}, {{"Y", {"y"}}}, {}), this->scope);
  EXPECT_EQ(ShapeOf(this->scope, "y"), (Shape{3, 1}));
  ExpectNear<T>(Fetch<T>(this->scope, "y"),
                {-std::log(static_cast<double>(static_cast<T>(x[1]))), -std::log(1e-20),
                 -std::log(static_cast<double>(static_cast<T>(x[11])))},
                "hard");

  RunOne(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"label"}}}, {{"Y", {"y"}}}, {{"ignore_index", 2}}),
         this->scope);
  EXPECT_EQ(Fetch<T>(this->scope, "y")[1], 0.0);

  Doubles soft = Random(12, 0, 1, 4);
  Feed<T>(this->scope, "soft", {3, 4}, soft);
  RunOne(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"soft"}}}, {{"Y", {"ys"}}}, {{"soft_label", true}}),
         this->scope);
  Doubles want(3, 0.0);
  for (int r = 0; r < 3; ++r)
    for (int j = 0; j < 4; ++j)
      want[r] -= static_cast<T>(soft[r * 4 + j]) * std::log(std::max<double>(static_cast<T>(x[r * 4 + j]), 1e-20));
  ExpectNear<T>(Fetch<T>(this->scope, "ys"), want, "soft");
}

TYPED_TEST(NnForward, SoftmaxWithCrossEntropyMatchesSoftmaxThenLog) {
  using T = TypeParam;
  const Shape s{2, 3, 4};  // class axis 1 of size 3
  Doubles x = Random(24, -4, 4, 5);
  Doubles xt(x.size());
  for (size_t i = 0; i < x.size(); ++i) xt[i] = static_cast<T>(x[i]);
  Feed<T>(this->scope, "x", s, x);
  Doubles labels{0, 2, 1, 1, 2, 0, 0, 1};
  Feed<int64_t>(this->scope, "label", {2, 1, 4}, labels);
  RunOne(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"label"}}},
                {{"Softmax", {"sm"}}, {"Loss", {"loss"}}}, {{"axis", 1}}),
         this->scope);
  Doubles sm = RefSoftmax(xt, s, 1);
  ExpectNear<T>(Fetch<T>(this->scope, "sm"), sm, "softmax");
  EXPECT_EQ(ShapeOf(this->scope, "loss"), (Shape{2, 1, 4}));
  Doubles want(8);
  for (int o = 0; o < 2; ++o)
    for (int i = 0; i < 4; ++i)
      want[o * 4 + i] = -std::log(sm[Ravel({o, static_cast<int64_t>(labels[o * 4 + i]), i}, s)]);
  ExpectNear<T>(Fetch<T>(this->scope, "loss"), want, "loss");
}

TYPED_TEST(NnForward, SoftmaxWithCrossEntropyStaysFiniteForConfidentLogits) {
  using T = TypeParam;
  // softmax underflows to 0 for the labelled class; log(softmax) would be -inf.
  Feed<T>(this->scope, "x", {2, 3}, {200, 0, -200, 0, 0, 0});
  Feed<int64_t>(this->scope, "label", {2, 1}, {2, 1});
  RunOne(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"label"}}},
                {{"Softmax", {"sm"}}, {"Loss", {"loss"}}}, {}),
         this->scope);
  ExpectNear<T>(Fetch<T>(this->scope, "loss"), {400.0, std::log(3.0)}, "loss");

  Feed<T>(this->scope, "soft", {2, 3}, {0.25, 0.25, 0.5, 1, 0, 0});
  RunOne(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"soft"}}},
                {{"Softmax", {"sm"}}, {"Loss", {"loss"}}}, {{"soft_label", true}}),
         this->scope);
  ExpectNear<T>(Fetch<T>(this->scope, "loss"), {0.25 * 200 + 0.5 * 400, std::log(3.0)}, "soft loss");
}

TYPED_TEST(NnForward, ConcatAndSplitAreInverse) {
  using T = TypeParam;
  Doubles a = Random(6, -1, 1, 6), b = Random(12, -1, 1, 7);
  Feed<T>(this->scope, "a", {2, 1, 3}, a);
  Feed<T>(this->scope, "b", {2, 2, 3}, b);
  RunOne(OpDesc("concat", {{"X", {"a", "b"}}}, {{"Out", {"c"}}}, {{"axis", 1}}), this->scope);
  ASSERT_EQ(ShapeOf(this->scope, "c"), (Shape{2, 3, 3}));
  Doubles c = Fetch<T>(this->scope, "c");
  for (int64_t f = 0; f < 18; ++f) {
    auto idx = Unravel(f, {2, 3, 3});
    double want =
        idx[1] == 0 ? a[Ravel({idx[0], 0, idx[2]}, {2, 1, 3})] : b[Ravel({idx[0], idx[1] - 1, idx[2]}, {2, 2, 3})];
    EXPECT_EQ(c[f], static_cast<double>(static_cast<T>(want))) << f;
  }
  RunOne(
      OpDesc("split", {{"X", {"c"}}}, {{"Out", {"s0", "s1"}}}, {{"sections", std::vector<int>{-1, 2}}, {"axis", -2}}),
      this->scope);
  EXPECT_EQ(ShapeOf(this->scope, "s0"), (Shape{2, 1, 3}));
  EXPECT_EQ(ShapeOf(this->scope, "s1"), (Shape{2, 2, 3}));
  ExpectNear<T>(Fetch<T>(this->scope, "s0"), Fetch<T>(this->scope, "a"), "s0");
  ExpectNear<T>(Fetch<T>(this->scope, "s1"), Fetch<T>(this->scope, "b"), "s1");
  RunOne(OpDesc("split", {{"X", {"c"}}}, {{"Out", {"t0", "t1", "t2"}}}, {{"num", 3}, {"axis", 2}}), this->scope);
  for (int k = 0; k < 3; ++k) {
    Doubles part = Fetch<T>(this->scope, "t" + std::to_string(k));
    ASSERT_EQ(part.size(), 6u);
    for (int64_t f = 0; f < 6; ++f) {
      auto idx = Unravel(f, {2, 3, 1});
      EXPECT_EQ(part[f], c[Ravel({idx[0], idx[1], k}, {2, 3, 3})]);
    }
  }
}

TYPED_TEST(NnForward, LookupTableGathersRowsAndZeroesPadding) {
  using T = TypeParam;
  Doubles w = Random(15, -1, 1, 8);
  Feed<T>(this->scope, "w", {5, 3}, w);
  Feed<int64_t>(this->scope, "ids", {2, 2, 1}, {4, 0, 2, 4});
  RunOne(OpDesc("lookup_table", {{"W", {"w"}}, {"Ids", {"ids"}}}, {{"Out", {"e"}}}, {{"padding_idx", 2}}), this->scope);
  ASSERT_EQ(ShapeOf(this->scope, "e"), (Shape{2, 2, 3}));
  Doubles e = Fetch<T>(this->scope, "e");
  const int ids[] = {4, 0, 2, 4};
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      EXPECT_EQ(e[i * 3 + j], ids[i] == 2 ? 0.0 : static_cast<double>(static_cast<T>(w[ids[i] * 3 + j])));

  Feed<int64_t>(this->scope, "bad", {2, 1}, {1, 5});
  try {
    RunOne(OpDesc("lookup_table", {{"W", {"w"}}, {"Ids", {"bad"}}}, {{"Out", {"e"}}}, {}), this->scope);
    FAIL() << "an out-of-range id was accepted";
  } catch (const Error& err) {
    EXPECT_EQ(err.kind(), ErrorKind::kOutOfRange);
    EXPECT_NE(std::string(err.what()).find("Ids[1] must be a row of W, in [0, 5), but received 5"), std::string::npos)
        << err.what();
  }
}

TYPED_TEST(NnForward, DropoutBothImplementations) {
  using T = TypeParam;
  const int64_t n = 20000;
  Doubles x = Random(n, 0.5, 1.5, 9);  // never 0, so dropped outputs are recognisable
  Feed<T>(this->scope, "x", {n / 100, 100}, x);
  const float p = 0.3f;
  for (const std::string impl : {"downgrade_in_infer", "upscale_in_train"}) {
    AttributeMap attrs{{"dropout_prob", p}, {"dropout_implementation", impl}, {"fix_seed", true}, {"seed", 5}};
    RunOne(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y"}}, {"Mask", {"m"}}}, attrs), this->scope);
    Doubles y = Fetch<T>(this->scope, "y"), m = Fetch<T>(this->scope, "m");
    const double scale = impl == "upscale_in_train" ? 1.0 / (1.0 - p) : 1.0;
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_TRUE(m[i] == 0.0 || m[i] == 1.0) << m[i];
      kept += m[i] == 1.0;
      EXPECT_NEAR(y[i], static_cast<T>(x[i]) * m[i] * scale, Tol<T>() * 4) << impl << " " << i;
    }
    // Binomial(20000, 0.7): sd ~ 65, so 5 sd is 325.
    EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 325.0) << impl;

    // The same seed gives the same mask; a different one another mask.
    RunOne(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y2"}}, {"Mask", {"m2"}}}, attrs), this->scope);
    EXPECT_EQ(Fetch<T>(this->scope, "m2"), m);
    attrs["seed"] = 6;
    RunOne(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y2"}}, {"Mask", {"m2"}}}, attrs), this->scope);
    EXPECT_NE(Fetch<T>(this->scope, "m2"), m);

    attrs["is_test"] = true;
    RunOne(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"yt"}}, {"Mask", {"mt"}}}, attrs), this->scope);
    Doubles yt = Fetch<T>(this->scope, "yt");
    const double test_scale = impl == "upscale_in_train" ? 1.0 : 1.0 - p;
    for (int64_t i = 0; i < n; i += 997) EXPECT_NEAR(yt[i], static_cast<T>(x[i]) * test_scale, Tol<T>() * 4);
  }
  // p = 1 drops everything, without 0 * inf = NaN when upscaling.
  RunOne(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y"}}, {"Mask", {"m"}}},
                {{"dropout_prob", 1.0f}, {"dropout_implementation", std::string("upscale_in_train")}}),
         this->scope);
  for (double v : Fetch<T>(this->scope, "y")) ASSERT_EQ(v, 0.0);
}

TYPED_TEST(NnForward, LayerNormAgainstTwoPassReference) {
  using T = TypeParam;
  const Shape s{2, 3, 4};
  Doubles x = Random(24, -2, 2, 10);
  for (double& v : x) v += 1000.0;  // a large mean: a one-pass variance would cancel badly
  Doubles scale = Random(12, 0.5, 1.5, 11), bias = Random(12, -1, 1, 12);
  Feed<T>(this->scope, "x", s, x);
  Feed<T>(this->scope, "scale", {12}, scale);
  Feed<T>(this->scope, "bias", {12}, bias);
  RunOne(OpDesc("layer_norm", {{"X", {"x"}}, {"Scale", {"scale"}}, {"Bias", {"bias"}}},
                {{"Y", {"y"}}, {"Mean", {"mean"}}, {"Variance", {"var"}}}, {{"epsilon", 1e-3f}}),
         this->scope);
  Doubles y(24), mean(2), var(2);
  for (int r = 0; r < 2; ++r) {
    for (int j = 0; j < 12; ++j) mean[r] += static_cast<T>(x[r * 12 + j]) / 12.0;
    for (int j = 0; j < 12; ++j) var[r] += std::pow(static_cast<T>(x[r * 12 + j]) - mean[r], 2) / 12.0;
    for (int j = 0; j < 12; ++j)
      y[r * 12 + j] = (static_cast<T>(x[r * 12 + j]) - mean[r]) / std::sqrt(var[r] + static_cast<double>(1e-3f)) *
                          static_cast<T>(scale[j]) +
                      static_cast<T>(bias[j]);
  }
  EXPECT_EQ(ShapeOf(this->scope, "mean"), (Shape{2}));
  ExpectNear<T>(Fetch<T>(this->scope, "mean"), mean, "mean");
  // float32 inputs near 1000 carry ~6e-5 of rounding; the variance is O(1).
  Doubles got_var = Fetch<T>(this->scope, "var");
  for (int r = 0; r < 2; ++r) EXPECT_NEAR(got_var[r], var[r], IsF32<T> ? 1e-4 : 1e-9);
  Doubles got_y = Fetch<T>(this->scope, "y");
  for (int i = 0; i < 24; ++i) EXPECT_NEAR(got_y[i], y[i], IsF32<T> ? 1e-4 : 1e-9) << i;

  // Without Scale and Bias, normalizing from axis 2: rows of 4.
  RunOne(OpDesc("layer_norm", {{"X", {"x"}}}, {{"Y", {"y2"}}, {"Mean", {"m2"}}, {"Variance", {"v2"}}},
                {{"begin_norm_axis", 2}}),
         this->scope);
  EXPECT_EQ(ShapeOf(this->scope, "m2"), (Shape{6}));
  Doubles y2 = Fetch<T>(this->scope, "y2");
  for (int r = 0; r < 6; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < 4; ++j) m += y2[r * 4 + j] / 4;
    for (int j = 0; j < 4; ++j) v += y2[r * 4 + j] * y2[r * 4 + j] / 4;
    EXPECT_NEAR(m, 0.0, 1e-4);
    EXPECT_NEAR(v, 1.0, 1e-2);  // var / (var + 1e-5)
  }
}

TYPED_TEST(NnForward, TopKAndAccuracy) {
  using T = TypeParam;
  Feed<T>(this->scope, "x", {3, 4}, {0.1, 0.7, 0.7, 0.2, 5, -1, 3, 4, -2, -3, -1, -4});
  RunOne(OpDesc("top_k", {{"X", {"x"}}}, {{"Out", {"v"}}, {"Indices", {"i"}}}, {{"k", 2}}), this->scope);
  ASSERT_EQ(ShapeOf(this->scope, "i"), (Shape{3, 2}));
  // Ties keep the lower index first.
  ExpectNear<T>(Fetch<T>(this->scope, "v"), {static_cast<T>(0.7), static_cast<T>(0.7), 5, 4, -1, -2}, "values");
  EXPECT_EQ(Fetch<int64_t>(this->scope, "i"), (Doubles{1, 2, 0, 3, 2, 0}));

  Feed<int64_t>(this->scope, "label", {3, 1}, {2, 3, 1});
  RunOne(OpDesc("accuracy", {{"Out", {"v"}}, {"Indices", {"i"}}, {"Label", {"label"}}},
                {{"Accuracy", {"acc"}}, {"Correct", {"correct"}}, {"Total", {"total"}}}, {}),
         this->scope);
  EXPECT_FLOAT_EQ(static_cast<float>(Fetch<float>(this->scope, "acc")[0]), 2.0f / 3.0f);
  EXPECT_EQ(Fetch<int32_t>(this->scope, "correct")[0], 2.0);
  EXPECT_EQ(Fetch<int32_t>(this->scope, "total")[0], 3.0);
}

TYPED_TEST(NnForward, SquaredL2NormAndClip) {
  using T = TypeParam;
  Doubles x = Random(10, -2, 2, 13);
  Feed<T>(this->scope, "x", {2, 5}, x);
  RunOne(OpDesc("squared_l2_norm", {{"X", {"x"}}}, {{"Out", {"n"}}}, {}), this->scope);
  double want = 0;
  for (double v : x) want += static_cast<double>(static_cast<T>(v)) * static_cast<T>(v);
  EXPECT_EQ(ShapeOf(this->scope, "n"), (Shape{1}));
  ExpectNear<T>(Fetch<T>(this->scope, "n"), {want}, "squared_l2_norm");
  RunOne(OpDesc("clip", {{"X", {"x"}}}, {{"Out", {"c"}}}, {{"min", -0.5f}, {"max", 1.0f}}), this->scope);
  Doubles c = Fetch<T>(this->scope, "c");
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(c[i], std::min<double>(std::max<double>(static_cast<T>(x[i]), -0.5), 1.0));
}

// ------------------------------------------------------------- optimizers

TYPED_TEST(NnForward, SgdUpdatesInPlace) {
  using T = TypeParam;
  Doubles p = Random(6, -1, 1, 14), g = Random(6, -1, 1, 15);
  Feed<T>(this->scope, "p", {2, 3}, p);
  Feed<T>(this->scope, "g", {2, 3}, g);
  Feed<float>(this->scope, "lr", {1}, {0.1});  // a float32 rate may drive float64 params
  RunOne(OpDesc("sgd", {{"Param", {"p"}}, {"Grad", {"g"}}, {"LearningRate", {"lr"}}}, {{"ParamOut", {"p"}}}, {}),
         this->scope);
  Doubles want(6);
  for (int i = 0; i < 6; ++i) want[i] = static_cast<T>(p[i]) - static_cast<T>(0.1f) * static_cast<T>(g[i]);
  ExpectNear<T>(Fetch<T>(this->scope, "p"), want, "sgd");
}

// PyTorch's SGD with momentum (dampening 0), written from its documentation.
struct TorchMomentum {
  double lr, mu, wd;
  bool nesterov;
  Doubles buf;
  void Step(Doubles& p, const Doubles& g) {
    // PyTorch starts the buffer at the first gradient, which is what a zero
    // initial Velocity gives the op.
    if (buf.empty()) buf.assign(p.size(), 0.0);
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      buf[i] = mu * buf[i] + d;
      double step = nesterov ? d + mu * buf[i] : buf[i];
      p[i] -= lr * step;
    }
  }
};

TYPED_TEST(NnForward, MomentumMatchesTorchSgd) {
  using T = TypeParam;
  for (bool nesterov : {false, true}) {
    for (double wd : {0.0, 0.01}) {
      Scope scope;
      Doubles p = Random(8, -1, 1, 16);
      Feed<T>(scope, "p", {8}, p);
      Feed<T>(scope, "v", {8}, Doubles(8, 0.0));
      Feed<T>(scope, "lr", {1}, {0.05});
      TorchMomentum ref{
          static_cast<T>(0.05), static_cast<double>(0.9f), static_cast<double>(static_cast<float>(wd)), nesterov, {}};
      Doubles rp(p.size());
      for (size_t i = 0; i < p.size(); ++i) rp[i] = static_cast<T>(p[i]);
      AttributeMap attrs{{"mu", 0.9f}, {"use_nesterov", nesterov}};
      if (wd > 0) {
        attrs["regularization_method"] = std::string("l2_decay");
        attrs["regularization_coeff"] = 0.01f;
      }
      for (int step = 0; step < 4; ++step) {
        Doubles g = Random(8, -1, 1, 100 + step);
        Feed<T>(scope, "g", {8}, g);
        Doubles gt(8);
        for (int i = 0; i < 8; ++i) gt[i] = static_cast<T>(g[i]);
        ref.Step(rp, gt);
        RunOne(OpDesc("momentum", {{"Param", {"p"}}, {"Grad", {"g"}}, {"Velocity", {"v"}}, {"LearningRate", {"lr"}}},
                      {{"ParamOut", {"p"}}, {"VelocityOut", {"v"}}}, attrs),
               scope);
      }
      Doubles got = Fetch<T>(scope, "p");
      for (int i = 0; i < 8; ++i)
        EXPECT_NEAR(got[i], rp[i], IsF32<T> ? 1e-5 : 1e-7) << "nesterov " << nesterov << " wd " << wd << " at " << i;
    }
  }
}

TYPED_TEST(NnForward, AdamMatchesTorchAdamOverSteps) {
  using T = TypeParam;
  // The op's attributes are float32 and the rate is fed as float32: the
  // reference uses exactly those values.
  const double lr = 0.01f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f;
  Doubles p = Random(10, -1, 1, 17);
  Feed<T>(this->scope, "p", {2, 5}, p);
  Feed<T>(this->scope, "m1", {2, 5}, Doubles(10, 0.0));
  Feed<T>(this->scope, "m2", {2, 5}, Doubles(10, 0.0));
  Feed<float>(this->scope, "lr", {1}, {lr});
  Feed<float>(this->scope, "b1p", {1}, {b1});
  Feed<float>(this->scope, "b2p", {1}, {b2});
  // torch.optim.Adam's update as documented: bias-corrected moments and eps
  // added to sqrt(v_hat).
  Doubles rp(10), m(10, 0.0), v(10, 0.0);
  for (int i = 0; i < 10; ++i) rp[i] = static_cast<T>(p[i]);
  // float32 powers: the same beta^t the op sees.
  float b1p = static_cast<float>(b1), b2p = static_cast<float>(b2);
  for (int t = 1; t <= 5; ++t) {
    Doubles g = Random(10, -1, 1, 200 + t);
    if (t == 3) g[0] = 0.0;  // v stays tiny: eps must sit where PyTorch puts it
    Feed<T>(this->scope, "g", {2, 5}, g);
    for (int i = 0; i < 10; ++i) {
      const double gi = static_cast<T>(g[i]);
      m[i] = b1 * m[i] + (1 - b1) * gi;
      v[i] = b2 * v[i] + (1 - b2) * gi * gi;
      const double mhat = m[i] / (1 - b1p), vhat = v[i] / (1 - b2p);
      rp[i] -= lr * mhat / (std::sqrt(vhat) + eps);
    }
    RunOne(OpDesc("adam",
                  {{"Param", {"p"}},
                   {"Grad", {"g"}},
                   {"LearningRate", {"lr"}},
                   {"Moment1", {"m1"}},
                   {"Moment2", {"m2"}},
                   {"Beta1Pow", {"b1p"}},
                   {"Beta2Pow", {"b2p"}}},
                  {{"ParamOut", {"p"}},
                   {"Moment1Out", {"m1"}},
                   {"Moment2Out", {"m2"}},
                   {"Beta1PowOut", {"b1p"}},
                   {"Beta2PowOut", {"b2p"}}},
                  {}),
           this->scope);
    b1p = static_cast<float>(b1p * b1);
    b2p = static_cast<float>(b2p * b2);
    EXPECT_FLOAT_EQ(static_cast<float>(Fetch<float>(this->scope, "b1p")[0]), b1p) << t;
  }
  Doubles got = Fetch<T>(this->scope, "p");
  for (int i = 0; i < 10; ++i) EXPECT_NEAR(got[i], rp[i], IsF32<T> ? 2e-6 : 1e-9) << i;
}

// ------------------------------------------------------- shape inference

class NnBuild : public ::testing::Test {
 protected:
  void SetUp() override { LoadPlugins(); }
  VarDesc* Declare(const std::string& name, Shape shape, DType dtype = DType::kFloat32) {
    VarDesc* v = prog.Root()->Var(name);
    v->SetShape(std::move(shape));
    v->SetDType(dtype);
    v->MarkDTypeKnown();
    v->SetDeclared(true);
    return v;
  }
  void Infer(OpDesc op) {
    FillDefaultAttrs(op, *CurrentRegistry());
    InferOpAtBuildTime(op, *prog.Root(), *CurrentRegistry());
  }
  Shape ShapeOfVar(const std::string& name) { return prog.Root()->FindVar(name)->GetShape(); }
  DType DTypeOfVar(const std::string& name) { return prog.Root()->FindVar(name)->GetDType(); }
  ProgramDesc prog;
};

TEST_F(NnBuild, UnknownBatchDimsPropagate) {
  Declare("x", {-1, 10});
  Declare("label", {-1, 1}, DType::kInt64);
  Declare("w", {100, 8});
  Declare("ids", {-1, 5, 1}, DType::kInt64);
  Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"label"}}},
               {{"Softmax", {"sm"}}, {"Loss", {"loss"}}}, {}));
  EXPECT_EQ(ShapeOfVar("sm"), (Shape{-1, 10}));
  EXPECT_EQ(ShapeOfVar("loss"), (Shape{-1, 1}));
  Infer(OpDesc("lookup_table", {{"W", {"w"}}, {"Ids", {"ids"}}}, {{"Out", {"emb"}}}, {}));
  EXPECT_EQ(ShapeOfVar("emb"), (Shape{-1, 5, 8}));
  Infer(OpDesc("concat", {{"X", {"x", "x"}}}, {{"Out", {"cat"}}}, {{"axis", 0}}));
  EXPECT_EQ(ShapeOfVar("cat"), (Shape{-1, 10}));
  Infer(OpDesc("split", {{"X", {"x"}}}, {{"Out", {"a", "b"}}}, {{"sections", std::vector<int>{3, -1}}, {"axis", 1}}));
  EXPECT_EQ(ShapeOfVar("a"), (Shape{-1, 3}));
  EXPECT_EQ(ShapeOfVar("b"), (Shape{-1, 7}));
  Infer(OpDesc("top_k", {{"X", {"x"}}}, {{"Out", {"tv"}}, {"Indices", {"ti"}}}, {{"k", 3}}));
  EXPECT_EQ(ShapeOfVar("ti"), (Shape{-1, 3}));
  EXPECT_EQ(DTypeOfVar("ti"), DType::kInt64);
  Infer(OpDesc("accuracy", {{"Out", {"tv"}}, {"Indices", {"ti"}}, {"Label", {"label"}}},
               {{"Accuracy", {"acc"}}, {"Correct", {"cor"}}, {"Total", {"tot"}}}, {}));
  EXPECT_EQ(ShapeOfVar("acc"), (Shape{1}));
  EXPECT_EQ(DTypeOfVar("cor"), DType::kInt32);
  Infer(OpDesc("layer_norm", {{"X", {"emb"}}}, {{"Y", {"ln"}}, {"Mean", {"mu"}}, {"Variance", {"var"}}},
               {{"begin_norm_axis", 2}}));
  EXPECT_EQ(ShapeOfVar("ln"), (Shape{-1, 5, 8}));
  EXPECT_EQ(ShapeOfVar("mu"), (Shape{-1}));
}

template <typename F>
void ExpectError(F&& f, ErrorKind kind, const std::string& fragment) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing: " << fragment;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(NnBuild, BadInputsAreReportedWithBothSides) {
  Declare("x", {-1, 10});
  Declare("label3", {-1, 1, 1}, DType::kInt64);
  Declare("flabel", {-1, 1});
  Declare("odd", {4, 7});
  ExpectError(
      [&] {
        Infer(OpDesc("cross_entropy", {{"X", {"x"}}, {"Label", {"label3"}}}, {{"Y", {"y"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "Label must have the rank of X (2), but received Label [-1, 1, 1]");
  ExpectError(
      [&] {
        Infer(OpDesc("softmax_with_cross_entropy", {{"Logits", {"x"}}, {"Label", {"flabel"}}},
                     {{"Softmax", {"s"}}, {"Loss", {"l"}}}, {}));
      },
      ErrorKind::kInvalidArgument, "input Label must be int64 (or int32), but received float32");
  ExpectError(
      [&] {
        Infer(OpDesc("split", {{"X", {"odd"}}}, {{"Out", {"a", "b"}}}, {{"num", 2}, {"axis", 1}}));
      },
      ErrorKind::kInvalidArgument, "the split axis (size 7) must divide evenly into num = 2 parts");
  ExpectError(
      [&] {
        Infer(OpDesc("softmax", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"axis", 2}}));
      },
      ErrorKind::kOutOfRange, "attribute axis must be in [-2, 2) for an input of rank 2, but received 2");
  ExpectError(
      [&] {
        Infer(OpDesc("concat", {{"X", {"x", "odd"}}}, {{"Out", {"c"}}}, {{"axis", 0}}));
      },
      ErrorKind::kInvalidArgument, "X must agree on every dim but axis 0");
  ExpectError(
      [&] {
        Infer(OpDesc("top_k", {{"X", {"odd"}}}, {{"Out", {"v"}}, {"Indices", {"i"}}}, {{"k", 8}}));
      },
      ErrorKind::kOutOfRange, "k = 8 must not exceed the last dim of X");
  // Attribute checkers run in the verifier, which every loaded program passes.
  prog.Root()->AppendOp(OpDesc("dropout", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"dropout_prob", 1.5f}}));
  ExpectError([&] { VerifyProgram(prog, *CurrentRegistry()); }, ErrorKind::kInvalidArgument,
              "attribute dropout_prob must be in [0, 1], but received 1.5");
}

// ------------------------------------------------------------ gradients

class NnGradient : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { LoadPlugins(); }
};

TEST_P(NnGradient, NumericCheckPasses) {
  std::vector<GradCheckResult> results = CheckOpGradients(GetParam(), HostDevice());
  ASSERT_FALSE(results.empty()) << GetParam() << " has no gradient-check case";
  for (const GradCheckResult& r : results) {
    std::string why;
    for (const auto& f : r.failures) why += "\n  " + f;
    EXPECT_TRUE(r.ok) << GetParam() << " case '" << r.case_name << "' max error " << r.max_error << why;
  }
}

INSTANTIATE_TEST_SUITE_P(NnOps, NnGradient,
                         ::testing::Values("relu", "sigmoid", "tanh", "softmax", "cross_entropy",
                                           "softmax_with_cross_entropy", "concat", "split", "lookup_table", "dropout",
                                           "layer_norm", "squared_l2_norm", "clip", "gelu", "leaky_relu",
                                           "log_softmax"));

// The numeric check runs the float64 kernels; the float32 grad kernels are
// held to them here: each op's first check case, run forward and backward in
// both dtypes on the same values and upstream gradients.
TEST_P(NnGradient, Float32GradKernelsMatchFloat64) {
  const OpInfo& info = CurrentRegistry()->Get(GetParam());
  ASSERT_FALSE(info.grad_checks.empty());
  const GradCheckSpec& spec = info.grad_checks.front();
  std::mt19937 gen(21);
  VarNameMap inputs, outputs;
  std::vector<std::pair<std::string, std::pair<Shape, Doubles>>> float_inputs;
  std::vector<std::string> checked;
  Scope s32, s64;
  for (const GradCheckInput& in : spec.inputs) {
    for (int j = 0; j < in.count; ++j) {
      std::string name = in.slot + std::to_string(j);
      inputs[in.slot].push_back(name);
      Doubles v = in.values;
      if (v.empty()) {
        std::uniform_real_distribution<double> u(in.low, in.high);
        v.resize(NumElements(in.shape));
        for (double& x : v) {
          do x = IsFloating(in.dtype) ? u(gen) : std::floor(u(gen));
          while (std::any_of(in.kinks.begin(), in.kinks.end(),
                             [&](double k) { return std::abs(x - k) < in.kink_margin; }));
        }
      }
      if (IsFloating(in.dtype)) {
        Feed<float>(s32, name, in.shape, v);
        Feed<double>(s64, name, in.shape, v);
        if (in.check) checked.push_back(name);
      } else {
        Feed<int64_t>(s32, name, in.shape, v);
        Feed<int64_t>(s64, name, in.shape, v);
      }
    }
  }
  for (const auto& [slot, count] : spec.outputs)
    for (int j = 0; j < count; ++j) outputs[slot].push_back(slot + "_out" + std::to_string(j));
  OpDesc fwd(GetParam(), inputs, outputs, spec.attrs);
  FillDefaultAttrs(fwd, *CurrentRegistry());
  RunOne(fwd, s32);
  RunOne(fwd, s64);
  std::unordered_set<std::string> no_grad;
  for (const auto& [slot, names] : inputs)
    for (const auto& n : names)
      if (std::find(checked.begin(), checked.end(), n) == checked.end()) no_grad.insert(n);
  std::vector<std::unique_ptr<OpDesc>> grad_ops = MakeGradOps(fwd, no_grad);
  ASSERT_FALSE(grad_ops.empty());
  // Upstream gradients for graded outputs, zeros for the rest (as the
  // backward builder's fill_zeros_like would give).
  for (const auto& [slot, names] : outputs) {
    const bool graded =
        std::find(spec.no_grad_outputs.begin(), spec.no_grad_outputs.end(), slot) == spec.no_grad_outputs.end();
    for (const auto& n : names) {
      const Tensor& t = s64.FindVar(n)->GetTensor();
      if (!IsFloating(t.GetDType())) continue;
      Doubles g = graded ? Random(t.Numel(), -1, 1, 31) : Doubles(t.Numel(), 0.0);
      Feed<float>(s32, GradVarName(n), t.GetShape(), g);
      Feed<double>(s64, GradVarName(n), t.GetShape(), g);
    }
  }
  for (const auto& op : grad_ops) {
    RunOne(*op, s32);
    RunOne(*op, s64);
  }
  for (const std::string& n : checked) {
    Doubles g32 = Fetch<float>(s32, GradVarName(n)), g64 = Fetch<double>(s64, GradVarName(n));
    ASSERT_EQ(g32.size(), g64.size()) << n;
    for (size_t i = 0; i < g32.size(); ++i)
      EXPECT_NEAR(g32[i], g64[i], 1e-4 * std::max(1.0, std::abs(g64[i])))
          << GetParam() << " " << n << "@GRAD[" << i << "]";
  }
}

// Every op of the plugin is either in the list above or deliberately
// gradient-free; a new op cannot slip through without a decision.
TEST(NnOpsPlugin, EveryOpIsCoveredAndGradientFreeOpsEmitNothing) {
  LoadPlugins();
  const OpRegistry::PluginRecord* nn = nullptr;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "nn_ops") nn = &p;
  ASSERT_NE(nn, nullptr);
  const std::vector<std::string> no_grad{"top_k", "accuracy", "sgd", "momentum", "adam"};
  for (const std::string& type : nn->ops) {
    if (type.size() > 5 && type.compare(type.size() - 5, 5, "_grad") == 0) continue;
    const OpInfo& info = CurrentRegistry()->Get(type);
    ASSERT_TRUE(info.HasGradient()) << type << " registers no GradOpDescMaker";
    const bool listed = std::find(no_grad.begin(), no_grad.end(), type) != no_grad.end();
    EXPECT_EQ(info.grad_checks.empty(), listed) << type;
    EXPECT_FALSE(CurrentRegistry()->KernelsOf(type).empty()) << type;
  }
  for (const std::string& type : no_grad) {
    OpDesc op(type, {}, {}, {});
    for (const auto& s : CurrentRegistry()->Get(type).schema.inputs) op.SetInput(s.name, {"in_" + s.name});
    for (const auto& s : CurrentRegistry()->Get(type).schema.outputs) op.SetOutput(s.name, {"out_" + s.name});
    if (type == "momentum") op.SetAttr("mu", 0.9f);
    EXPECT_TRUE(MakeGradOps(op, {}).empty()) << type;
  }
}

// split's gradient is a concat; the builder zero-fills the gradient of the
// part nobody used, so X@GRAD is dOut on the used part and 0 elsewhere.
TEST(NnOpsPlugin, SplitGradientZeroFillsUnusedParts) {
  LoadPlugins();
  ProgramDesc prog;
  BlockDesc* b = prog.Root();
  VarDesc* x = b->Var("x");
  x->SetShape({2, 3});
  x->SetDType(DType::kFloat64);
  x->MarkDTypeKnown();
  x->SetDeclared(true);
  std::vector<std::unique_ptr<OpDesc>> ops;
  ops.push_back(std::make_unique<OpDesc>("split", VarNameMap{{"X", {"x"}}}, VarNameMap{{"Out", {"a", "b"}}},
                                         AttributeMap{{"sections", std::vector<int>{1, 2}}, {"axis", 1}}));
  ops.push_back(std::make_unique<OpDesc>("squared_l2_norm", VarNameMap{{"X", {"b"}}}, VarNameMap{{"Out", {"loss"}}},
                                         AttributeMap{}));
  for (auto& op : ops) {
    FillDefaultAttrs(*op, *CurrentRegistry());
    InferOpAtBuildTime(*op, *b, *CurrentRegistry());
    b->AppendOp(std::move(op));
  }
  AppendBackward(prog, "loss", {}, {});
  bool has_concat = false;
  for (const auto& op : b->AllOps()) has_concat = has_concat || op->Type() == "concat";
  EXPECT_TRUE(has_concat);
  Scope scope;
  Feed<double>(scope, "x", {2, 3}, {1, 2, 3, 4, 5, 6});
  auto exec = CreateExecutor("sequential", HostDevice());
  exec->Run(prog, 0, scope);
  EXPECT_EQ(Fetch<double>(scope, "loss"), (Doubles{4 + 9 + 25 + 36}));
  EXPECT_EQ(Fetch<double>(scope, "x@GRAD"), (Doubles{0, 4, 6, 0, 10, 12}));
}

}  // namespace
}  // namespace nabla
