// The seed's MLP with one tanh hidden layer, eagerly.
#include "example_main.h"
#include "networks.h"

using namespace nabla::eager_examples;

int main(int argc, char** argv) {
  return ExampleMain(argc, argv, NABLA_REFERENCE_DIR "/mlp", [](const std::string& dir) {
    auto in = LoadInputs(dir, {"x", "label", "w1", "b1", "w2", "b2"}, {"w1", "b1", "w2", "b2"});
    Mlp m = RunMlp(in["x"], in["label"], in["w1"], in["b1"], in["w2"], in["b2"]);
    m.h1.RetainGrad();
    m.loss.Backward();
    return std::make_pair(
        m.loss,
        std::vector<Printed>{{"w1", in["w1"]}, {"b1", in["b1"]}, {"w2", in["w2"]}, {"b2", in["b2"]}, {"h1", m.h1}});
  });
}
