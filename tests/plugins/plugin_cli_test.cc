// The failure stories of issue 8 through the `nabla` binary, as a plugin
// author meets them: a plugin built against another ABI tag, one that
// registers an op a standard plugin owns, one whose registration throws, one
// missing a core symbol, and a copy of a loaded plugin under another path.
// Each must exit 2 with exactly one stderr line naming the plugin (and the
// other side where there is one), and `nabla ops` must list exactly what it
// listed before. Also `nabla ops --only-plugin` and `nabla plugin new`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli_runner.h"

namespace {

namespace fs = std::filesystem;

using nabla::testing_cli::Quote;
using nabla::testing_cli::Result;
using nabla::testing_cli::Slurp;

std::string Canonical(const std::string& p) { return fs::canonical(p).string(); }

class PluginCliTest : public ::testing::Test {
 protected:
  Result Nabla(const std::string& args) const {
    return nabla::testing_cli::RunBinary(NABLA_BIN_PATH, args, "", (dir_ / "captured").string());
  }

  // Exit 2, nothing on stdout, one stderr line `nabla: error: ...` with every fragment.
  void ExpectRefused(const std::string& args, const std::vector<std::string>& fragments) const {
    Result r = Nabla(args);
    EXPECT_EQ(r.out, "") << args;
    nabla::testing_cli::ExpectOneLineError(r, args, fragments);
  }

  nabla::test_util::TempDir dir_{"nabla_plugin_cli_test"};
};

TEST_F(PluginCliTest, BrokenPluginsAreRefusedOnOneLineAndOpsIsUnchanged) {
  const Result before = Nabla("ops");
  ASSERT_EQ(before.code, 0) << before.err;
  ASSERT_NE(before.out.find("\nmul "), std::string::npos) << "the standard plugins did not load";

  // Another ABI tag: both tags and how to rebuild; the library never runs.
  ExpectRefused("ops --plugin " + Quote(TOY_ABI_MISMATCH),
                {Canonical(TOY_ABI_MISMATCH), "ABI tag mismatch", "nabla_abi_v999_gcc", "nabla_abi_v1_gcc", "rebuild"});
  // An op a standard plugin owns: both plugins, both files.
  ExpectRefused("ops --plugin " + Quote(TOY_STEALS_MUL),
                {Canonical(TOY_STEALS_MUL), "op 'mul'", "toy_steals_mul", "already owned by math_ops",
                 Canonical(std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libmath_ops.so"), "mul_op.cc"});
  // Registration throws: the plugin and the exception's message.
  ExpectRefused("ops --plugin " + Quote(TOY_THROWING),
                {Canonical(TOY_THROWING), "toy_throwing", "threw", "toy registration exploded on purpose"});
  // A symbol the core does not have: the plugin, the symbol and the core.
  ExpectRefused("ops --plugin " + Quote(TOY_MISSING_SYMBOL),
                {Canonical(TOY_MISSING_SYMBOL), "undefined symbol",
                 "nabla::FunctionThatThisCoreDoesNotHave(nabla::Registrar&)", "libnabla_core.so", "rebuild"});
  // A copy of a loaded plugin under another path: both paths.
  ExpectRefused("ops --plugin " + Quote(TOY_GOOD) + " --plugin " + Quote(TOY_COPY),
                {Canonical(TOY_COPY), Canonical(TOY_GOOD), "'toy_good'", "already loaded"});
  // The same stories through `exec` and `run`, which load plugins the same way.
  ExpectRefused("exec no_program.yaml --plugin " + Quote(TOY_THROWING), {Canonical(TOY_THROWING), "exploded"});

  const Result after = Nabla("ops");
  EXPECT_EQ(after.code, 0) << after.err;
  EXPECT_EQ(after.out, before.out) << "nabla ops changed after the refused plugins";
}

TEST_F(PluginCliTest, OnlyPluginListsWhatThePluginFilesRegistered) {
  Result r = Nabla("ops --plugin " + Quote(TOY_GOOD) + " --only-plugin");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("toy_double"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("toy_good"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\nmul "), std::string::npos) << "a standard op was listed:\n" << r.out;
  EXPECT_NE(r.out.find("1 ops from 1 plugins"), std::string::npos) << r.out;

  r = Nabla("ops --json --only-plugin --plugin " + Quote(TOY_GOOD));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("\"type\": \"toy_double\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"type\": \"mul\""), std::string::npos) << r.out;

  // Without it everything is listed, the plugin's op included.
  r = Nabla("ops --plugin " + Quote(TOY_GOOD));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("toy_double"), std::string::npos);
  EXPECT_NE(r.out.find("\nmul "), std::string::npos);

  ExpectRefused("ops --only-plugin", {"--only-plugin", "--plugin"});
}

TEST_F(PluginCliTest, PluginNewWritesAProjectAndRefusesToOverwrite) {
  const fs::path project = dir_ / "proj";
  Result r = Nabla("plugin new foo --dir " + Quote(project.string()));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* file :
       {"CMakeLists.txt", "src/plugin.cc", "src/foo_softplus_op.cc", "programs/test.yaml", "README.md", ".gitignore"})
    EXPECT_TRUE(fs::is_regular_file(project / file)) << file;
  const std::string cmake = Slurp(project / "CMakeLists.txt");
  EXPECT_NE(cmake.find("find_package(nabla REQUIRED)"), std::string::npos) << cmake;
  EXPECT_NE(cmake.find("nabla_add_plugin(foo SOURCES"), std::string::npos) << cmake;
  const std::string op = Slurp(project / "src/foo_softplus_op.cc");
  for (const char* part : {"registrar.Op(\"foo_softplus\"", "registrar.Op(\"foo_softplus_grad\"", ".InferShape(",
                           ".GradMaker<", ".GradCheck(", "DType::kFloat32", "DType::kFloat64", "namespace foo"})
    EXPECT_NE(op.find(part), std::string::npos) << part;
  EXPECT_EQ(op.find("@NAME@"), std::string::npos) << "a placeholder was left in";

  // A non-empty folder is never written into, and nothing in it changes.
  const std::string readme = Slurp(project / "README.md");
  ExpectRefused("plugin new foo --dir " + Quote(project.string()), {project.string(), "not empty"});
  EXPECT_EQ(Slurp(project / "README.md"), readme);
  // An empty folder is fine; the default folder is ./NAME.
  fs::create_directories(dir_ / "empty");
  EXPECT_EQ(Nabla("plugin new bar --dir " + Quote((dir_ / "empty").string())).code, 0);
  EXPECT_TRUE(fs::is_regular_file(dir_ / "empty" / "src" / "bar_softplus_op.cc"));

  ExpectRefused("plugin new Foo-Bar --dir " + Quote((dir_ / "x").string()), {"'Foo-Bar'", "lower-case"});
  EXPECT_FALSE(fs::exists(dir_ / "x"));
  ExpectRefused("plugin remove foo", {"remove"});
}

}  // namespace
