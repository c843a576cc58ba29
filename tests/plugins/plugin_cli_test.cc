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

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
  std::vector<std::string> ErrLines() const {
    std::vector<std::string> lines;
    std::istringstream in(err);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string Canonical(const std::string& p) { return fs::canonical(p).string(); }

class PluginCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("nabla_plugin_cli_test_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result Nabla(const std::string& args) const {
    const std::string out = (dir_ / "stdout.txt").string(), err = (dir_ / "stderr.txt").string();
    const std::string cmd = Quote(NABLA_BIN_PATH) + " " + args + " >" + Quote(out) + " 2>" + Quote(err);
    const int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = Slurp(out);
    r.err = Slurp(err);
    return r;
  }

  // Exit 2, nothing on stdout, one stderr line `nabla: error: ...` with every fragment.
  void ExpectRefused(const std::string& args, const std::vector<std::string>& fragments) const {
    Result r = Nabla(args);
    EXPECT_EQ(r.code, 2) << args << "\nstderr: " << r.err;
    EXPECT_EQ(r.out, "") << args;
    std::vector<std::string> lines = r.ErrLines();
    ASSERT_EQ(lines.size(), 1u) << args << "\nstderr: " << r.err;
    EXPECT_EQ(lines[0].rfind("nabla: error: ", 0), 0u) << lines[0];
    for (const std::string& f : fragments) EXPECT_NE(lines[0].find(f), std::string::npos) << f << " not in: " << lines[0];
  }

  fs::path dir_;
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
  for (const char* file : {"CMakeLists.txt", "src/plugin.cc", "src/foo_softplus_op.cc", "programs/test.yaml",
                           "README.md", ".gitignore"})
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
