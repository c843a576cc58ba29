// The seed's three networks written eagerly (examples/eager/networks.h)
// against the PyTorch values in tests/reference (scripts/torch_reference.py),
// and their traces rerun through `nabla exec --backward`.
#include <cmath>
#include <filesystem>

#include "common/cli_runner.h"
#include "eager_util.h"
#include "nabla/device.h"
#include "nabla/npy.h"
#include "networks.h"

namespace nabla::eager_testing {
namespace {

using eager::Tensor;
using namespace eager_examples;

const std::string kRef = NABLA_REFERENCE_DIR;

std::vector<double> Expected(const std::string& net, const std::string& name) {
  return Values(Tensor::FromNpy(kRef + "/" + net + "/expected/" + name + ".npy"));
}

// Reference gradients were computed in float64 by PyTorch; float32 kernels
// agree to this (the parity suite's tolerance).
constexpr double kRtol = 2e-4, kAtol = 1e-6;

class EagerNetworks : public EagerTest {};

TEST_F(EagerNetworks, SoftmaxRegressionMatchesPyTorchWithGradientsOfXAndZ) {
  auto in = LoadInputs(kRef + "/softmax_regression", {"x", "label", "w", "b"}, {"w", "b"});
  in["x"].SetRequiresGrad(true);
  SoftmaxRegression r = RunSoftmaxRegression(in["x"], in["label"], in["w"], in["b"]);
  r.z.RetainGrad();
  r.loss.Backward();
  ExpectClose(Values(r.loss), Expected("softmax_regression", "loss"), kRtol, kAtol, "loss");
  ExpectClose(Values(in["w"].Grad()), Expected("softmax_regression", "w@GRAD"), kRtol, kAtol, "w@GRAD");
  ExpectClose(Values(in["b"].Grad()), Expected("softmax_regression", "b@GRAD"), kRtol, kAtol, "b@GRAD");

  // The seed post's gradients of the input X and the logits Z, from PyTorch
  // too (scripts/torch_reference.py writes them next to the program's).
  ASSERT_TRUE(r.z.Grad().Defined()) << "RetainGrad kept no gradient for z";
  ExpectClose(Values(r.z.Grad()), Expected("softmax_regression", "logits@GRAD"), kRtol, kAtol, "z@GRAD");
  ExpectClose(Values(in["x"].Grad()), Expected("softmax_regression", "x@GRAD"), kRtol, kAtol, "x@GRAD");
}

TEST_F(EagerNetworks, MlpMatchesPyTorch) {
  auto in = LoadInputs(kRef + "/mlp", {"x", "label", "w1", "b1", "w2", "b2"}, {"w1", "b1", "w2", "b2"});
  Mlp m = RunMlp(in["x"], in["label"], in["w1"], in["b1"], in["w2"], in["b2"]);
  m.loss.Backward();
  ExpectClose(Values(m.loss), Expected("mlp", "loss"), kRtol, kAtol, "loss");
  for (const char* p : {"w1", "b1", "w2", "b2"})
    ExpectClose(Values(in[p].Grad()), Expected("mlp", std::string(p) + "@GRAD"), kRtol, kAtol, p);
  EXPECT_FALSE(in["x"].Grad().Defined()) << "x does not require grad";
}

TEST_F(EagerNetworks, RnnUnrolledByACppLoopMatchesPyTorch) {
  auto in = LoadInputs(kRef + "/rnn_unrolled", {"x0", "x1", "x2", "x3", "x4", "x5", "h0", "label", "w", "b", "v", "c"},
                       {"w", "b", "v", "c"});
  std::vector<Tensor> xs;
  for (int t = 0; t < 6; ++t) xs.push_back(in["x" + std::to_string(t)]);
  eager::Tape tape;
  Tensor loss = RunRnn(xs, in["h0"], in["label"], in["w"], in["b"], in["v"], in["c"]);
  tape.Stop();
  // Six steps of concat, mul, elementwise_add, tanh, then the head (mul,
  // elementwise_add, softmax_with_cross_entropy, mean): the loop is unrolled
  // into the tape. The first concat reads no tensor that requires grad, so
  // it is not recorded.
  EXPECT_EQ(tape.Size(), 6u * 4u + 4u - 1u);
  loss.Backward();
  ExpectClose(Values(loss), Expected("rnn_unrolled", "loss"), kRtol, kAtol, "loss");
  for (const char* p : {"w", "b", "v", "c"})
    ExpectClose(Values(in[p].Grad()), Expected("rnn_unrolled", std::string(p) + "@GRAD"), kRtol, kAtol, p);
}

// Tape::Save writes the trace and its inputs; `nabla exec --backward` on it
// computes the loss and gradients eager computed.
TEST_F(EagerNetworks, TraceRunsThroughNablaExecWithTheSameLossAndGradients) {
  namespace fs = std::filesystem;
  const test_util::TempDir scratch{"eager"};
  const fs::path& dir = scratch.Dir();
  auto in = LoadInputs(kRef + "/mlp", {"x", "label", "w1", "b1", "w2", "b2"}, {"w1", "b1", "w2", "b2"});
  eager::Tape tape;
  Mlp m = RunMlp(in["x"], in["label"], in["w1"], in["b1"], in["w2"], in["b2"]);
  tape.Stop();
  m.loss.Backward();

  ProgramDesc program = tape.ToProgram();
  const BlockDesc& block = *program.Root();
  EXPECT_EQ(block.OpSize(), 7u);
  ASSERT_TRUE(block.HasVar("w1") && block.HasVar("x") && block.HasVar("label"));
  EXPECT_TRUE(block.FindVar("w1")->Persistable());
  EXPECT_TRUE(block.FindVar("x")->StopGradient());
  EXPECT_FALSE(block.FindVar("x")->Persistable());

  const std::string args = tape.Save((dir / "trace").string());
  const std::string loss = tape.VarName(m.loss);
  EXPECT_EQ(loss, "loss");
  auto r = testing_cli::RunBinary(NABLA_BIN_PATH,
                                  "exec " + args + " --backward " + loss +
                                      " --fetch loss,w1@GRAD,b1@GRAD,w2@GRAD,b2@GRAD --out " + (dir / "out").string(),
                                  "", (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto fetched = [&](const std::string& name) {
    return Values(Tensor::FromNpy((dir / "out" / (name + ".npy")).string()));
  };
  ExpectClose(fetched("loss"), Values(m.loss), 1e-6, 0, "loss");
  for (const char* p : {"w1", "b1", "w2", "b2"})
    ExpectClose(fetched(std::string(p) + "@GRAD"), Values(in[p].Grad()), 1e-6, 1e-9, p);
}

// The RNN's C++ loop is unrolled into the trace, and the unrolled program
// gives nabla exec the same loss and gradients.
TEST_F(EagerNetworks, UnrolledRnnTraceRunsThroughNablaExec) {
  namespace fs = std::filesystem;
  const test_util::TempDir scratch{"eager"};
  const fs::path& dir = scratch.Dir();
  auto in = LoadInputs(kRef + "/rnn_unrolled", {"x0", "x1", "x2", "x3", "x4", "x5", "h0", "label", "w", "b", "v", "c"},
                       {"w", "b", "v", "c"});
  std::vector<Tensor> xs;
  for (int t = 0; t < 6; ++t) xs.push_back(in["x" + std::to_string(t)]);
  eager::Tape tape;
  Tensor loss = RunRnn(xs, in["h0"], in["label"], in["w"], in["b"], in["v"], in["c"]);
  tape.Stop();
  loss.Backward();
  const std::string args = tape.Save((dir / "trace").string());
  auto r = testing_cli::RunBinary(NABLA_BIN_PATH,
                                  "exec " + args + " --backward " + tape.VarName(loss) +
                                      " --fetch loss,w@GRAD,b@GRAD,v@GRAD,c@GRAD --out " + (dir / "out").string(),
                                  "", (dir / "run").string());
  ASSERT_EQ(r.code, 0) << r.err;
  auto fetched = [&](const std::string& name) {
    return Values(Tensor::FromNpy((dir / "out" / (name + ".npy")).string()));
  };
  ExpectClose(fetched("loss"), Values(loss), 1e-6, 0, "loss");
  for (const char* p : {"w", "b", "v", "c"})
    ExpectClose(fetched(std::string(p) + "@GRAD"), Values(in[p].Grad()), 1e-6, 1e-9, p);
}

}  // namespace
}  // namespace nabla::eager_testing
