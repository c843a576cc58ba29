// `nabla plugin new NAME [--dir D]`: writes a ready-to-build operator plugin
// project for a third-party author: a CMake file using find_package(nabla)
// and nabla_add_plugin, one op (NAME_softplus: schema, shape inference, grad
// maker, float32/float64 CPU kernels for it and its grad op, gradient check
// cases), a test program and a README with the commands to build and check it.

#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "command.h"
#include "nabla/error.h"
#include "nabla/plugin.h"

namespace nabla::app {
namespace {

namespace fs = std::filesystem;

struct PluginOptions {
  std::string action;
  std::string name;
  std::string dir;
};

// ---------------------------------------------------------------- templates
// @NAME@ is the plugin name, @PREFIX@ the nabla install prefix, @ABI@ the tag.

constexpr char kCMakeLists[] = R"(# The @NAME@ operator plugin, built against an installed nabla:
#   cmake -S . -B build -DCMAKE_PREFIX_PATH=@PREFIX@ && cmake --build build
cmake_minimum_required(VERSION 3.25)
project(@NAME@_plugin VERSION 0.1 LANGUAGES CXX)

find_package(nabla REQUIRED)

# A MODULE library named like the target (lib@NAME@.so), with hidden
# visibility, --no-undefined and C++17, on nabla's stable C ABI: any C++17
# compiler will do, and the plugin links nothing of nabla.
# nabla::opkit is nabla's op kit: grad makers, GradCheck case builders,
# kernel registration and parallel loops (include "nabla/opkit/opkit.h").
nabla_add_plugin(@NAME@ SOURCES src/plugin.cc src/@NAME@_softplus_op.cc LIBRARIES nabla::opkit)

# `ctest --test-dir build`: the plugin loads and registers its ops, and a
# program using them runs with its gradient.
enable_testing()
add_test(NAME @NAME@_loads COMMAND nabla::nabla ops --plugin $<TARGET_FILE:@NAME@> --only-plugin)
set_tests_properties(@NAME@_loads PROPERTIES PASS_REGULAR_EXPRESSION "@NAME@_softplus_grad")
add_test(NAME @NAME@_program COMMAND nabla::nabla exec ${CMAKE_CURRENT_SOURCE_DIR}/programs/test.yaml
  --plugin $<TARGET_FILE:@NAME@> --backward loss --fetch loss,x@GRAD)
# Its gradients (float64 central differences, float32 against float64) and
# every op held to its own registration (inference, inputs, determinism).
add_test(NAME @NAME@_gradcheck COMMAND nabla::nabla gradcheck --all --only-plugin --plugin $<TARGET_FILE:@NAME@>)
add_test(NAME @NAME@_opcheck COMMAND nabla::nabla opcheck --plugin $<TARGET_FILE:@NAME@>)
)";

constexpr char kPluginCc[] = R"(// The plugin's identity: exactly one file of a plugin says NABLA_PLUGIN.
// NABLA_PLUGIN_NAME is the target name given to nabla_add_plugin ("@NAME@").
#include "nabla/plugin.h"

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
)";

constexpr char kOpCc[] = R"(// @NAME@_softplus: Out = log(1 + exp(beta * X)) / beta, elementwise, and its
// gradient op @NAME@_softplus_grad: X@GRAD = Out@GRAD * sigmoid(beta * X).
// One op, one file: schema, shape inference, grad maker, kernels and the
// gradient check cases, all registered in one NABLA_REGISTER_OPS block.
// nabla/opkit is the op kit the standard plugins use too.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "nabla/opkit/opkit.h"
#include "nabla/plugin.h"

namespace @NAME@ {
namespace {

using nabla::DType;
using nabla::DeviceType;
using nabla::ExecutionContext;
using nabla::GradVarName;
using nabla::InferShapeContext;
using nabla::OpDesc;
using nabla::Tensor;

// log(1 + e^z) without overflow for large |z|.
template <typename T>
T Softplus(T z) {
  return z > T(0) ? z + std::log1p(std::exp(-z)) : std::log1p(std::exp(z));
}

using nabla::opkit::Sigmoid;  // the op kit's, overflow-free

// Kernels: one template, registered for float32 and float64 (the gradient
// check runs in float64), split over the executor's threads.
template <typename T>
void SoftplusKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  const T beta = static_cast<T>(ctx.Attr<float>("beta"));
  const T* px = x.Data<T>();
  T* out = ctx.Output("Out")->Allocate<T>(ctx.GetDevice(), x.GetShape());
  nabla::opkit::ParallelElementwise(x.Numel(), [&](int64_t i) { out[i] = Softplus(beta * px[i]) / beta; });
}

template <typename T>
void SoftplusGradKernel(const ExecutionContext& ctx) {
  Tensor* dx = ctx.Output(GradVarName("X"));
  if (!dx) return;  // the gradient is @EMPTY@: nobody needs it
  const Tensor& x = ctx.Input("X");
  const T beta = static_cast<T>(ctx.Attr<float>("beta"));
  const T* px = x.Data<T>();
  const T* pdout = ctx.Input(GradVarName("Out")).Data<T>();
  T* pdx = dx->Allocate<T>(ctx.GetDevice(), x.GetShape());
  nabla::opkit::ParallelElementwise(x.Numel(), [&](int64_t i) { pdx[i] = pdout[i] * Sigmoid(beta * px[i]); });
}

// The grad maker: what the backward builder appends for one forward op. It
// may emit any ops, standard ones included; here one op of this plugin.
class SoftplusGradMaker : public nabla::GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return nabla::opkit::OneOp("@NAME@_softplus_grad", {{"X", Input("X")}, {GradVarName("Out"), OutputGrad("Out")}},
                               {{GradVarName("X"), InputGrad("X")}}, Attrs());
  }
};

// A gradient check case: float64 central differences against the grad op.
nabla::GradCheckSpec Case(const std::string& name, float beta) {
  return nabla::opkit::CheckCase(name, {nabla::opkit::CheckInput("X", {3, 4}, -3.0, 3.0)}, {{"beta", beta}});
}

void CheckBeta(const float& beta) {
  NABLA_ENFORCE(beta > 0.0f, kInvalidArgument, "attribute beta of @NAME@_softplus must be > 0 but received ", beta);
}

}  // namespace

NABLA_REGISTER_OPS(@NAME@_softplus) {
  registrar.Op("@NAME@_softplus", __FILE__, __LINE__)
      .Doc("Softplus: Out = log(1 + exp(beta * X)) / beta, elementwise.")
      .Input("X", "(Tensor) input of any shape, float32 or float64")
      .Output("Out", "(Tensor) softplus(X), shape and dtype of X")
      .Attr<float>("beta", 1.0f, "(float, default 1.0) sharpness; must be > 0", CheckBeta)
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .GradMaker<SoftplusGradMaker>()
      .GradCheck(Case("beta_1", 1.0f))
      .GradCheck(Case("beta_2", 2.0f));
  registrar.Op("@NAME@_softplus_grad", __FILE__, __LINE__)
      .Doc("Gradient of @NAME@_softplus: X@GRAD = Out@GRAD * sigmoid(beta * X).")
      .Input("X", "(Tensor) the forward input")
      .Input(GradVarName("Out"), "(Tensor) gradient of Out")
      .Output(GradVarName("X"), "(Tensor) gradient of X", nabla::kDispensable)
      .Attr<float>("beta", 1.0f, "(float, default 1.0) sharpness; must be > 0", CheckBeta)
      .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", GradVarName("X")); });
  registrar.Kernel("@NAME@_softplus", DeviceType::kCPU, DType::kFloat32, SoftplusKernel<float>, __FILE__, __LINE__);
  registrar.Kernel("@NAME@_softplus", DeviceType::kCPU, DType::kFloat64, SoftplusKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("@NAME@_softplus_grad", DeviceType::kCPU, DType::kFloat32, SoftplusGradKernel<float>, __FILE__,
                   __LINE__);
  registrar.Kernel("@NAME@_softplus_grad", DeviceType::kCPU, DType::kFloat64, SoftplusGradKernel<double>, __FILE__,
                   __LINE__);
}

}  // namespace @NAME@
)";

constexpr char kProgram[] = R"(# A program using @NAME@_softplus, with initialised inputs so it runs as is:
#   nabla exec programs/test.yaml --plugin build/lib@NAME@.so --backward loss --fetch loss,x@GRAD
format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32, persistable: true,
          init: {type: uniform_random, min: -2.0, max: 2.0, seed: 1}}
    ops:
      - {type: @NAME@_softplus, inputs: {X: [x]}, outputs: {Out: [y]}, attrs: {beta: 2.0}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
)";

constexpr char kReadme[] = R"(# @NAME@: a nabla operator plugin

Made by `nabla plugin new @NAME@`. It holds one op, `@NAME@_softplus`
(`src/@NAME@_softplus_op.cc`), with its gradient op `@NAME@_softplus_grad`;
add more ops as more files (one op per file) and list them in `CMakeLists.txt`.
The full guide is `@DOCS@/writing-plugins.md`, installed with nabla.

Build against an installed nabla (its prefix holds `bin/nabla` and
`lib/cmake/nabla`), with any C++17 compiler: the plugin talks to nabla
through its versioned C ABI (`nabla/c_api.h`), so it keeps loading into
later nabla releases:

```sh
cmake -S . -B build -DCMAKE_PREFIX_PATH=@PREFIX@
cmake --build build
ctest --test-dir build --output-on-failure
```

Check it:

```sh
nabla ops --plugin build/lib@NAME@.so --only-plugin     # what it registers, or why it does not load
nabla gradcheck --all --only-plugin --plugin build/lib@NAME@.so  # its gradients (float64, and float32 against it)
nabla opcheck --plugin build/lib@NAME@.so               # each op against its registration
nabla exec programs/test.yaml --plugin build/lib@NAME@.so --backward loss --fetch loss,x@GRAD
```

Use it with `--plugin build/lib@NAME@.so` on any command, with `plugins:
[path/to/lib@NAME@.so]` in a run config (relative to the config file), or
install it where `nabla` loads plugins by default:

```sh
cmake --install build --prefix @PREFIX@                  # -> lib/nabla/plugins/lib@NAME@.so
cmake --install build --prefix ~/.local/nabla-plugins    # elsewhere, then:
export NABLA_PLUGIN_PATH=~/.local/nabla-plugins/lib/nabla/plugins
```
)";

constexpr char kGitignore[] = "build/\n";

std::string Fill(std::string text, const std::vector<std::pair<std::string, std::string>>& values) {
  for (const auto& [key, value] : values) {
    for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + value.size()))
      text.replace(at, key.size(), value);
  }
  return text;
}

// C++ namespace, CMake target and op prefix at once.
void CheckName(const std::string& name) {
  bool ok = !name.empty() && name.size() <= 48 && name[0] >= 'a' && name[0] <= 'z';
  for (char c : name) ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  NABLA_ENFORCE(ok, kInvalidArgument, "plugin new: expected a NAME of lower-case letters, digits and '_', starting ",
                "with a letter (it names the library, the C++ namespace and the op prefix) but received '", name, "'");
  NABLA_ENFORCE(name != "nabla", kInvalidArgument, "plugin new: the NAME 'nabla' is taken by nabla itself");
  // Two plugins of one name never load together, and the standard ones
  // always load first.
  const fs::path standard = PluginManager::DefaultPluginDir();
  std::error_code ec;
  NABLA_ENFORCE(!fs::exists(standard / ("lib" + name + ".so"), ec), kAlreadyExists, "plugin new: the NAME '", name,
                "' is taken by a standard plugin (", (standard / ("lib" + name + ".so")).string(),
                "), so a plugin of that name could never load; expected another name");
}

// The prefix this `nabla` is installed in, when it is an install (it has
// the CMake package); otherwise a placeholder for the README.
std::string InstallPrefix() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = exe.parent_path().parent_path();
    if (fs::exists(prefix / "lib" / "cmake" / "nabla" / "nablaConfig.cmake", ec)) return prefix.string();
  }
  return "/path/to/nabla/install";
}

void WriteFile(const fs::path& path, const std::string& text) {
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  NABLA_ENFORCE(!ec, kInvalidArgument, "plugin new: cannot create folder '", path.parent_path().string(),
                "': ", ec.message());
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  NABLA_ENFORCE(out.good(), kInvalidArgument, "plugin new: cannot write '", path.string(), "'");
}

int NewPlugin(const PluginOptions& opts) {
  CheckName(opts.name);
  const fs::path dir = opts.dir.empty() ? fs::path(opts.name) : fs::path(opts.dir);
  std::error_code ec;
  if (fs::exists(dir, ec)) {
    NABLA_ENFORCE(fs::is_directory(dir, ec), kAlreadyExists, "plugin new: '", dir.string(),
                  "' exists and is not a folder; expected a new or empty folder");
    NABLA_ENFORCE(fs::is_empty(dir, ec), kAlreadyExists, "plugin new: folder '", dir.string(),
                  "' is not empty; expected a new or empty folder (nothing is overwritten)");
  }
  const std::string prefix = InstallPrefix();
  const std::vector<std::pair<std::string, std::string>> values = {{"@NAME@", opts.name},
                                                                   {"@PREFIX@", prefix},
                                                                   {"@ABI@", ExpectedAbiTag()},
                                                                   {"@DOCS@", prefix + "/share/doc/nabla"}};
  const std::vector<std::pair<std::string, const char*>> files = {
      {"CMakeLists.txt", kCMakeLists},  {"src/plugin.cc", kPluginCc}, {"src/" + opts.name + "_softplus_op.cc", kOpCc},
      {"programs/test.yaml", kProgram}, {"README.md", kReadme},       {".gitignore", kGitignore},
  };
  for (const auto& [file, text] : files) WriteFile(dir / file, Fill(text, values));
  std::cout << "wrote plugin project '" << opts.name << "' to " << dir.string() << "/\n";
  for (const auto& entry : files) std::cout << "  " << entry.first << "\n";
  std::cout << "next:\n"
            << "  cmake -S " << dir.string() << " -B " << (dir / "build").string() << " -DCMAKE_PREFIX_PATH=" << prefix
            << "\n"
            << "  cmake --build " << (dir / "build").string() << "\n"
            << "  nabla ops --plugin " << (dir / "build" / ("lib" + opts.name + ".so")).string() << " --only-plugin\n";
  return 0;
}

}  // namespace

Command PluginCommand() {
  auto opts = std::make_shared<PluginOptions>();
  Command c("plugin", "Tools for plugin authors: 'plugin new NAME' writes a ready-to-build plugin project");
  c.Positional("ACTION", &opts->action, "what to do: new").Required().Choices({"new"});
  c.Positional("NAME", &opts->name, "plugin name: lower-case letters, digits and '_'").Required();
  c.Option("--dir", &opts->dir, "Folder to write the project to (default ./NAME); must be new or empty", "DIR");
  c.WithoutPlugins();
  c.SetRun([opts](const GlobalOptions&) { return NewPlugin(*opts); });
  return c;
}

}  // namespace nabla::app
