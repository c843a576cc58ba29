// The seed's softmax regression, eagerly: gradients of W and b, and of the
// input X and the logits Z as the seed computes them.
#include "example_main.h"
#include "networks.h"

using namespace nabla::eager_examples;

int main(int argc, char** argv) {
  return ExampleMain(argc, argv, NABLA_REFERENCE_DIR "/softmax_regression", [](const std::string& dir) {
    auto in = LoadInputs(dir, {"x", "label", "w", "b"}, {"w", "b"});
    in["x"].SetRequiresGrad(true);  // the seed asks for dL/dX too
    SoftmaxRegression r = RunSoftmaxRegression(in["x"], in["label"], in["w"], in["b"]);
    r.z.RetainGrad();
    r.loss.Backward();
    return std::make_pair(r.loss, std::vector<Printed>{{"w", in["w"]}, {"b", in["b"]}, {"x", in["x"]}, {"z", r.z}});
  });
}
