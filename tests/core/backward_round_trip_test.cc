// Programs after append_backward (grad ops, @GRAD / @RENAME@ vars, sum and
// fill_zeros_like, grad sub-blocks) survive write -> read unchanged, over
// the shared toy ops.
#include <gtest/gtest.h>

#include "common/toy_ops.h"
#include "io_test_util.h"
#include "nabla/backward.h"
#include "nabla/op_registry.h"
#include "nabla/program_io.h"

namespace nabla::io_test {
namespace {

void ExpectBackwardRoundTrip(const std::string& text, const std::string& loss) {
  toys::RegisterToyOps();
  ProgramDesc p = ParseProgram(text, "fwd.yaml");
  ParamGrads pg = AppendBackward(p, loss);
  ASSERT_FALSE(pg.empty());
  if (!p.Backward()) p.SetBackward(BackwardInfo{loss, pg});
  VerifyProgram(p, *CurrentRegistry());
  std::string written = ProgramToYaml(p);
  ProgramDesc q = ParseProgram(written, "bwd.yaml");
  ExpectSameProgram(p, q);
  EXPECT_EQ(ProgramToYaml(q), written);
  EXPECT_NE(written.find("backward: {loss: " + loss + ", param_grads: [["), std::string::npos) << written;
}

TEST(BackwardRoundTrip, SharedWeightRenamedAndSummed) {
  ExpectBackwardRoundTrip(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [3], dtype: float32, persistable: true}
      w: {shape: [3], dtype: float32, persistable: true}
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [w]}, outputs: {Out: [a]}}
      - {type: elementwise_add, inputs: {X: [a], Y: [w]}, outputs: {Out: [b]}}
      - {type: mean, inputs: {X: [b]}, outputs: {Out: [loss]}}
)",
                          "loss");
}

TEST(BackwardRoundTrip, UnusedSplitOutputIsZeroFilled) {
  ExpectBackwardRoundTrip(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [4, 2], dtype: float32, persistable: true}
    ops:
      - {type: split, inputs: {X: [x]}, outputs: {Out: [s0, s1]}, attrs: {num: 2}}
      - {type: mean, inputs: {X: [s0]}, outputs: {Out: [loss]}}
)",
                          "loss");
}

TEST(BackwardRoundTrip, GradSubBlock) {
  ExpectBackwardRoundTrip(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2], dtype: float32, persistable: true}
      w: {shape: [2], dtype: float32, persistable: true}
      y: {shape: [2], dtype: float32}
    ops:
      - {type: toy_loop, inputs: {X: [x, w]}, outputs: {Out: [y]}, attrs: {sub_block: 1}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [w]}, outputs: {Out: [t]}}
      - {type: scale, inputs: {X: [t]}, outputs: {Out: [y]}, attrs: {scale: 2}}
)",
                          "loss");
}

}  // namespace
}  // namespace nabla::io_test
