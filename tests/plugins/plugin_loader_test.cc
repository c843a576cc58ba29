// Loads the plugins of tests/plugins, each broken one way, and checks that a
// failure names the file and the reason on one line and leaves the registry
// exactly as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

// Boost 1.74's library_info.hpp needs these first.
#include <boost/dll/library_info.hpp>

#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

namespace fs = std::filesystem;

std::string Canonical(const std::string& path) { return fs::canonical(path).string(); }

struct RegistryState {
  const OpRegistry* snapshot;
  std::vector<std::string> ops;
  std::vector<std::pair<std::string, std::string>> plugins;  // name, path
};

RegistryState Capture() {
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  RegistryState state{registry.get(), registry->OpTypes(), {}};
  for (const auto& p : registry->Plugins()) state.plugins.emplace_back(p.name, p.path);
  return state;
}

void ExpectUnchanged(const RegistryState& before) {
  RegistryState after = Capture();
  EXPECT_EQ(after.ops, before.ops);
  EXPECT_EQ(after.plugins, before.plugins);
  EXPECT_EQ(after.snapshot, before.snapshot) << "a new registry snapshot was published";
}

bool HasOp(const std::string& type) {
  auto ops = CurrentRegistry()->OpTypes();
  return std::find(ops.begin(), ops.end(), type) != ops.end();
}

const OpRegistry::PluginRecord* FindPlugin(const std::string& name) {
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == name) return &p;
  return nullptr;
}

// Loads `path`, expects an Error of `kind` whose one-line message contains
// each of `parts`, and checks the registry did not move.
void ExpectLoadFails(const std::string& path, ErrorKind kind, const std::vector<std::string>& parts) {
  RegistryState before = Capture();
  try {
    PluginManager::Instance().Load(path);
    ADD_FAILURE() << "loading " << path << " succeeded";
  } catch (const Error& e) {
    std::string message = e.what();
    EXPECT_EQ(e.kind(), kind) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    for (const std::string& part : parts) EXPECT_NE(message.find(part), std::string::npos) << message;
  }
  ExpectUnchanged(before);
}

void LoadGood() { PluginManager::Instance().Load(TOY_GOOD); }

TEST(PluginLoader, ExpectedAbiTagIsTheTagPluginsSpell) {
#define NABLA_TEST_STR2(x) #x
#define NABLA_TEST_STR(x) NABLA_TEST_STR2(x)
  EXPECT_EQ(ExpectedAbiTag(), NABLA_TEST_STR(NABLA_ABI_SYMBOL));
  EXPECT_EQ(ExpectedAbiTag().rfind("nabla_abi_v1_gcc", 0), 0u) << ExpectedAbiTag();
}

TEST(PluginLoader, GoodPluginRegistersItsOpAndRecord) {
  LoadGood();
  const std::string path = Canonical(TOY_GOOD);
  const OpRegistry::PluginRecord* record = FindPlugin("toy_good");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->path, path);
  EXPECT_EQ(record->abi, ExpectedAbiTag());
  EXPECT_EQ(record->ops, std::vector<std::string>{"toy_double"});

  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  const OpInfo& info = registry->Get("toy_double");
  EXPECT_EQ(info.origin.plugin, "toy_good");
  EXPECT_EQ(info.origin.path, path);
  EXPECT_NE(info.library, nullptr) << "the op does not keep its plugin mapped";
  const KernelInfo* kernel = registry->FindKernel("toy_double", DeviceType::kCPU, DType::kFloat32);
  ASSERT_NE(kernel, nullptr);
  EXPECT_NE(kernel->library, nullptr) << "the kernel does not keep its plugin mapped";
  EXPECT_EQ(kernel->library, info.library);
}

TEST(PluginLoader, GoodPluginKernelRuns) {
  cpu::InitCpuBackend();
  LoadGood();
  Scope scope;
  Tensor& x = scope.Var("x")->GetTensor();
  float* data = x.Allocate<float>(HostDevice(), Shape{2, 3});
  for (int i = 0; i < 6; ++i) data[i] = static_cast<float>(i) - 2.5f;
  scope.Var("out");
  OpDesc op("toy_double", {{"X", {"x"}}}, {{"Out", {"out"}}}, {});

  const KernelInfo* kernel = CurrentRegistry()->FindKernel("toy_double", DeviceType::kCPU, DType::kFloat32);
  ASSERT_NE(kernel, nullptr);
  ExecutionContext ctx(op, scope, HostDevice(), nullptr);
  kernel->fn(ctx);

  const Tensor& out = scope.FindVar("out")->GetTensor();
  ASSERT_EQ(out.GetShape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(out.Data<float>()[i], 2.0f * (static_cast<float>(i) - 2.5f));
}

TEST(PluginLoader, SameFileTwiceIsANoOp) {
  LoadGood();
  RegistryState before = Capture();
  LoadGood();
  // The same file through another spelling of its path.
  fs::path good(TOY_GOOD);
  PluginManager::Instance().Load((good.parent_path() / "." / good.filename()).string());
  ExpectUnchanged(before);
}

TEST(PluginLoader, SamePluginNameFromAnotherFileIsRejected) {
  LoadGood();
  ExpectLoadFails(TOY_COPY, ErrorKind::kAlreadyExists, {Canonical(TOY_COPY), Canonical(TOY_GOOD), "'toy_good'"});
}

TEST(PluginLoader, MissingFileIsNotFound) {
  ExpectLoadFails(TOY_MISSING_FILE, ErrorKind::kNotFound, {TOY_MISSING_FILE});
}

TEST(PluginLoader, DirectoryIsNotAPlugin) {
  ExpectLoadFails(TOY_EXTRA_DIR, ErrorKind::kInvalidArgument, {Canonical(TOY_EXTRA_DIR), "not a nabla plugin"});
}

TEST(PluginLoader, TextFileIsNotAPlugin) {
  ExpectLoadFails(TOY_NOT_ELF, ErrorKind::kInvalidArgument, {Canonical(TOY_NOT_ELF), "not a nabla plugin", "ELF"});
}

TEST(PluginLoader, TruncatedElfIsNotAPlugin) {
  // The first 200 bytes of a real plugin: a valid ELF header whose tables
  // point past the end of the file.
  const fs::path dir = fs::path(testing::TempDir()) / "nabla_plugin_loader_test";
  fs::create_directories(dir);
  const std::string truncated = (dir / "libtoy_truncated.so").string();
  {
    std::ifstream in(TOY_GOOD, std::ios::binary);
    std::vector<char> head(200);
    in.read(head.data(), static_cast<std::streamsize>(head.size()));
    std::ofstream(truncated, std::ios::binary).write(head.data(), in.gcount());
  }
  ExpectLoadFails(truncated, ErrorKind::kInvalidArgument, {Canonical(truncated), "not a nabla plugin", "truncated"});
}

TEST(PluginLoader, StrippedPluginIsFoundThroughDynsym) {
  std::vector<std::string> symtab = boost::dll::library_info(TOY_STRIPPED).symbols();
  ASSERT_TRUE(
      std::none_of(symtab.begin(), symtab.end(), [](const std::string& s) { return s.rfind("nabla_abi_", 0) == 0; }))
      << "the build did not strip " << TOY_STRIPPED << ", so this test checks nothing";
  PluginManager::Instance().Load(TOY_STRIPPED);
  const OpRegistry::PluginRecord* record = FindPlugin("toy_stripped");
  ASSERT_NE(record, nullptr);
  EXPECT_EQ(record->abi, ExpectedAbiTag());
  EXPECT_TRUE(HasOp("toy_stripped_identity"));
}

TEST(PluginLoader, LibraryWithoutTagIsNotAPluginAndNeverRuns) {
  // toy_not_plugin aborts from its static initialiser if it is ever opened.
  ExpectLoadFails(TOY_NOT_PLUGIN, ErrorKind::kInvalidArgument,
                  {Canonical(TOY_NOT_PLUGIN), "not a nabla plugin", "nabla_abi_"});
}

TEST(PluginLoader, LibraryWithoutEntryPointIsNotAPlugin) {
  ExpectLoadFails(TOY_NO_ENTRY, ErrorKind::kInvalidArgument,
                  {Canonical(TOY_NO_ENTRY), "not a nabla plugin", "nabla_plugin_register_v1"});
}

TEST(PluginLoader, AbiMismatchNamesBothTagsAndNeverRuns) {
  // toy_abi_mismatch aborts from its static initialiser if it is ever opened.
  ExpectLoadFails(TOY_ABI_MISMATCH, ErrorKind::kPreconditionNotMet,
                  {Canonical(TOY_ABI_MISMATCH), ExpectedAbiTag(), "nabla_abi_v999_gcc", "rebuild"});
}

TEST(PluginLoader, MissingCoreSymbolIsRefusedByTheDynamicLoader) {
  ExpectLoadFails(TOY_MISSING_SYMBOL, ErrorKind::kInvalidArgument,
                  {Canonical(TOY_MISSING_SYMBOL), "undefined symbol",
                   "nabla::FunctionThatThisCoreDoesNotHave(nabla::Registrar&)", "rebuild"});
}

TEST(PluginLoader, ThrowingRegistrationLeavesNothingBehind) {
  ExpectLoadFails(TOY_THROWING, ErrorKind::kInvalidArgument,
                  {Canonical(TOY_THROWING), "toy_throwing", "toy registration exploded on purpose"});
  EXPECT_FALSE(HasOp("toy_throwing_staged"));
  // A failed file is not remembered as loaded: it fails the same way again.
  ExpectLoadFails(TOY_THROWING, ErrorKind::kInvalidArgument, {"toy registration exploded on purpose"});
}

TEST(PluginLoader, DuplicateOpNamesBothOrigins) {
  LoadGood();
  ExpectLoadFails(TOY_DUPLICATE_OP, ErrorKind::kInvalidArgument,
                  {Canonical(TOY_DUPLICATE_OP), "toy_double", "toy_good", "toy_duplicate_op"});
  EXPECT_FALSE(HasOp("toy_duplicate_only"));
  EXPECT_EQ(FindPlugin("toy_duplicate_op"), nullptr);
}

TEST(PluginLoader, FailuresDoNotPoisonLaterLoads) {
  ExpectLoadFails(TOY_THROWING, ErrorKind::kInvalidArgument, {"exploded"});
  ExpectLoadFails(TOY_ABI_MISMATCH, ErrorKind::kPreconditionNotMet, {"nabla_abi_v999"});
  LoadGood();
  EXPECT_TRUE(HasOp("toy_double"));
  EXPECT_NE(FindPlugin("toy_good"), nullptr);
}

TEST(PluginLoader, DefaultPluginDirIsNextToTheBinary) {
  EXPECT_EQ(fs::path(PluginManager::DefaultPluginDir()), fs::path(NABLA_STANDARD_PLUGIN_DIR).lexically_normal());
}

class ScopedPluginPath {
 public:
  explicit ScopedPluginPath(const std::string& value) { setenv("NABLA_PLUGIN_PATH", value.c_str(), 1); }
  ~ScopedPluginPath() { unsetenv("NABLA_PLUGIN_PATH"); }
};

TEST(PluginLoader, LoadDefaultsLoadsStandardPluginsAndPluginPath) {
  ScopedPluginPath env(std::string("::") + TOY_EXTRA_DIR + ":");
  PluginManager::Instance().LoadDefaults();

  // Every standard plugin came in through the same loader.
  std::vector<std::string> standard;
  for (const auto& entry : fs::directory_iterator(PluginManager::DefaultPluginDir())) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("lib", 0) == 0 && entry.path().extension() == ".so") standard.push_back(Canonical(entry.path()));
  }
  ASSERT_FALSE(standard.empty()) << "no standard plugin was built into " << PluginManager::DefaultPluginDir();
  std::vector<std::string> loaded;
  for (const auto& p : CurrentRegistry()->Plugins()) loaded.push_back(p.path);
  for (const std::string& path : standard)
    EXPECT_NE(std::find(loaded.begin(), loaded.end(), path), loaded.end()) << path << " was not loaded";

  const OpRegistry::PluginRecord* extra = FindPlugin("toy_extra");
  ASSERT_NE(extra, nullptr);
  EXPECT_EQ(extra->path, Canonical(std::string(TOY_EXTRA_DIR) + "/libtoy_extra.so"));
  EXPECT_TRUE(HasOp("toy_extra_identity"));

  // Again: every file is already loaded, so nothing changes.
  RegistryState before = Capture();
  PluginManager::Instance().LoadDefaults();
  ExpectUnchanged(before);
}

TEST(PluginLoader, LoadDefaultsRejectsAMissingPluginPathFolder) {
  const std::string missing = std::string(TOY_EXTRA_DIR) + "/no_such_folder";
  ScopedPluginPath env(missing);
  try {
    PluginManager::Instance().LoadDefaults();
    ADD_FAILURE() << "LoadDefaults accepted a missing folder";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("NABLA_PLUGIN_PATH"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace nabla
