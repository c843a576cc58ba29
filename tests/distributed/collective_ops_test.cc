// The collective ops in a world of one process (no MPI launcher): Out = X,
// for one var and for a bucket of several, every dtype they move; their
// schema (ring_id 0, no gradient, the collective trait) and bad input. The
// two-rank behaviour is tested through training in distributed_test.cc.
// The plugin ships on the C ABI: its binary imports nothing of nabla.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <sstream>

#include "ops/op_test_util.h"

namespace nabla::op_test {
namespace {

class CollectiveOps : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "this test runs outside mpirun";
    LoadStandardPlugins();
  }
};

TEST_P(CollectiveOps, AWorldOfOneCopiesEveryXToItsOut) {
  std::mt19937_64 rng(7);
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (int vars : {1, 3}) {
      OpRun run;
      run.type = GetParam();
      std::vector<HostTensor> xs;
      for (int i = 0; i < vars; ++i) xs.push_back(RandomTensor({2 + i, 3}, dtype, -50, 50, rng));
      run.inputs = {{"X", xs}};
      run.input_dtypes = {dtype};
      run.outputs = {{"Out", vars}};
      std::vector<DType> out_dtypes;
      std::vector<HostTensor> got = run.Run(&out_dtypes);
      ASSERT_EQ(got.size(), xs.size());
      for (int i = 0; i < vars; ++i) {
        EXPECT_EQ(out_dtypes[i], dtype);
        EXPECT_EQ(got[i].shape, xs[i].shape);
        EXPECT_EQ(got[i].v, xs[i].v) << GetParam() << " " << DTypeName(dtype) << " var " << i;
      }
    }
  }
}

TEST_P(CollectiveOps, SchemaIsPaddlesWithTheCollectiveTraitAndNoGradient) {
  const OpInfo& info = CurrentRegistry()->Get(GetParam());
  EXPECT_TRUE(info.traits.collective);
  ASSERT_NE(info.schema.FindAttr("ring_id"), nullptr);
  EXPECT_EQ(std::get<int>(*info.schema.FindAttr("ring_id")->default_value), 0);
  OpDesc fwd(GetParam(), {{"X", {"x"}}}, {{"Out", {"x"}}}, {});
  std::unordered_map<std::string, std::string> g2v;
  EXPECT_TRUE(info.grad_maker(fwd, {}, &g2v, {}).empty());
}

TEST_P(CollectiveOps, BadInputNamesTheOp) {
  OpRun run;
  run.type = GetParam();
  run.inputs = {{"X", {HostTensor{{2}, {1, 2}}}}};
  run.input_dtypes = {DType::kFloat32};
  run.attrs = {{"ring_id", 1}};
  try {
    run.Run();
    ADD_FAILURE() << "ring_id 1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("ring_id must be 0 (the MPI world), but received 1"), std::string::npos)
        << e.what();
  }
  run.attrs = {};
  run.outputs = {{"Out", 2}};
  try {
    run.Run();
    ADD_FAILURE() << "2 outputs for 1 input were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("X and Out must list the same number of vars"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Both, CollectiveOps, ::testing::Values("c_allreduce_sum", "c_broadcast"));

std::string Command(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// Built with nabla_add_plugin(... ABI C ...): everything crosses through the
// table nabla_plugin_init receives, so the binary needs no symbol of nabla
// (only the C and C++ runtimes and MPI) and loads into later cores.
TEST(CollectiveOpsBinary, ImportsNothingOfNabla) {
  const std::string undefined = Command(std::string(NM_PATH) + " -D --undefined-only " + COLLECTIVE_OPS_PLUGIN);
  ASSERT_NE(undefined.find("GLIBC"), std::string::npos) << "nm read nothing: " << undefined;
  EXPECT_NE(undefined.find("MPI_Iallreduce"), std::string::npos) << undefined;
  std::istringstream lines(undefined);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.find("nabla"), std::string::npos) << line;
    EXPECT_EQ(line.find("_ZN5nabla"), std::string::npos) << line;
  }
  const std::string defined = Command(std::string(NM_PATH) + " -D --defined-only " + COLLECTIVE_OPS_PLUGIN);
  EXPECT_NE(defined.find("nabla_plugin_init"), std::string::npos) << defined;
}

}  // namespace
}  // namespace nabla::op_test
