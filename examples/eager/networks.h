#pragma once
// The seed's three networks (seeds/004: softmax regression, an MLP with one
// hidden layer, an RNN unrolled in time) written eagerly: each line runs its
// op at once and the tape records it. The examples' mains and
// tests/eager/eager_networks_test.cc share these definitions.
#include <map>
#include <string>
#include <vector>

#include "nabla/eager.h"

namespace nabla::eager_examples {

using eager::Call;
using eager::Tensor;

// X W + b, with b broadcast over the rows (Paddle's axis=1).
inline Tensor Linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* xw_out = nullptr) {
  Tensor xw = Call("mul", {{"X", {x}}, {"Y", {w}}})["Out"];
  if (xw_out) *xw_out = xw;
  return Call("elementwise_add", {{"X", {xw}}, {"Y", {b}}}, {{"axis", 1}})["Out"];
}

// mean over the batch of the softmax cross entropy of integer labels [B, 1].
inline Tensor SoftmaxCrossEntropyMean(const Tensor& logits, const Tensor& label) {
  Tensor ce = Call("softmax_with_cross_entropy", {{"Logits", {logits}}, {"Label", {label}}})["Loss"];
  return Call("mean", {{"X", {ce}}})["Out"];
}

struct SoftmaxRegression {
  Tensor z;  // the logits: its gradient is one the seed compares
  Tensor loss;
};

// Z = X W + b; L = mean(softmax_xent(Z, y)).
inline SoftmaxRegression RunSoftmaxRegression(const Tensor& x, const Tensor& label, const Tensor& w, const Tensor& b) {
  SoftmaxRegression r;
  r.z = Linear(x, w, b);
  r.z.SetName("z");
  r.loss = SoftmaxCrossEntropyMean(r.z, label);
  r.loss.SetName("loss");
  return r;
}

struct Mlp {
  Tensor z1, h1, logits, loss;
};

// H = tanh(X W1 + b1); L = mean(softmax_xent(H W2 + b2, y)).
inline Mlp RunMlp(const Tensor& x, const Tensor& label, const Tensor& w1, const Tensor& b1, const Tensor& w2,
                  const Tensor& b2) {
  Mlp m;
  m.z1 = Linear(x, w1, b1);
  m.z1.SetName("z1");
  m.h1 = Call("tanh", {{"X", {m.z1}}})["Out"];
  m.h1.SetName("h1");
  m.logits = Linear(m.h1, w2, b2);
  m.logits.SetName("logits");
  m.loss = SoftmaxCrossEntropyMean(m.logits, label);
  m.loss.SetName("loss");
  return m;
}

// h_{t+1} = tanh([x_t, h_t] W + b) for every step (a C++ loop, unrolled into
// the tape), then L = mean(softmax_xent(h_T V + c, y)).
inline Tensor RunRnn(const std::vector<Tensor>& xs, const Tensor& h0, const Tensor& label, const Tensor& w,
                     const Tensor& b, const Tensor& v, const Tensor& c) {
  Tensor h = h0;
  for (size_t t = 0; t < xs.size(); ++t) {
    Tensor xh = Call("concat", {{"X", {xs[t], h}}}, {{"axis", 1}})["Out"];
    h = Call("tanh", {{"X", {Linear(xh, w, b)}}})["Out"];
    h.SetName("h" + std::to_string(t + 1));
  }
  Tensor loss = SoftmaxCrossEntropyMean(Linear(h, v, c), label);
  loss.SetName("loss");
  return loss;
}

// Reads DIR/inputs/NAME.npy for each name (the layout of tests/reference/*);
// `params` require grad.
inline std::map<std::string, Tensor> LoadInputs(const std::string& dir, const std::vector<std::string>& names,
                                                const std::vector<std::string>& params) {
  std::map<std::string, Tensor> out;
  for (const auto& n : names) {
    bool param = false;
    for (const auto& p : params) param = param || p == n;
    out[n] = Tensor::FromNpy(dir + "/inputs/" + n + ".npy", param, n);
  }
  return out;
}

}  // namespace nabla::eager_examples
