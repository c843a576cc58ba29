// The embedding example trains: its loss falls by two orders of magnitude
// on a least-squares problem it can solve exactly, and bad input is one
// line with exit 2, as for the CLI.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "../common/cli_runner.h"

namespace {

using nabla::testing_cli::Quote;
using nabla::testing_cli::Result;
using nabla::testing_cli::RunBinary;

const std::string kProgram = std::string(NABLA_SOURCE_DIR) + "/examples/embed/regression.yaml";

Result RunEmbed(const std::string& args) {
  const nabla::test_util::TempDir dir("embed");
  return RunBinary(EMBED_BIN_PATH, args, "OPENBLAS_NUM_THREADS=1", (dir / "run").string());
}

TEST(Embed, TrainsTheRegressionToNearZeroLoss) {
  const Result r = RunEmbed(Quote(kProgram) + " 60");
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<std::string> lines = r.OutLines();
  ASSERT_EQ(lines.size(), 60u) << r.out;
  int step = 0;
  float first = 0, last = 0;
  ASSERT_EQ(std::sscanf(lines.front().c_str(), "step %d loss %f", &step, &first), 2) << lines.front();
  EXPECT_EQ(step, 1);
  ASSERT_EQ(std::sscanf(lines.back().c_str(), "step %d loss %f", &step, &last), 2) << lines.back();
  EXPECT_EQ(step, 60);
  EXPECT_GT(first, 1.0f);  // random w against a target of norm ~3.8
  EXPECT_LT(last, first * 1e-2f) << "first " << first << ", last " << last;
}

TEST(Embed, MissingProgramIsOneLineExitTwo) {
  const Result r = RunEmbed(Quote("/nonexistent/prog.yaml") + " 3");
  EXPECT_EQ(r.code, 2) << r.err;
  const auto lines = r.ErrLines();
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_NE(lines[0].find("/nonexistent/prog.yaml"), std::string::npos) << lines[0];
}

TEST(Embed, BadStepCountIsOneLineExitTwo) {
  const Result r = RunEmbed(Quote(kProgram) + " zero");
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.ErrLines().size(), 1u) << r.err;
}

}  // namespace
