// The seed's RNN, unrolled by a C++ loop over six steps, eagerly.
#include "example_main.h"
#include "networks.h"

using namespace nabla::eager_examples;

int main(int argc, char** argv) {
  return ExampleMain(argc, argv, NABLA_REFERENCE_DIR "/rnn_unrolled", [](const std::string& dir) {
    auto in =
        LoadInputs(dir, {"x0", "x1", "x2", "x3", "x4", "x5", "h0", "label", "w", "b", "v", "c"}, {"w", "b", "v", "c"});
    std::vector<Tensor> xs;
    for (int t = 0; t < 6; ++t) xs.push_back(in["x" + std::to_string(t)]);
    Tensor loss = RunRnn(xs, in["h0"], in["label"], in["w"], in["b"], in["v"], in["c"]);
    loss.Backward();
    return std::make_pair(loss, std::vector<Printed>{{"w", in["w"]}, {"b", in["b"]}, {"v", in["v"]}, {"c", in["c"]}});
  });
}
