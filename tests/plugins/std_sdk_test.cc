// The standard plugins' op files that build over the C ABI
// (std_sdk_ops: the files of plugins/math_ops and plugins/nn_ops as they
// are, through the SDK; tests/plugins/CMakeLists.txt) against the same files
// built as the standard plugins. The C ABI binary imports nothing of nabla;
// every op it registers has the standard build's schema and grad op, passes
// its float64 gradient checks, and computes the same bits, forward and
// gradients, in float32 and float64, over shapes with empty and size-1 dims
// and one large enough to split over threads. Both builds register the same
// op names, so each is loaded into a process of its own (fork), which writes
// what it computed to a file; this process loads no plugin.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/op_case.h"
#include "common/temp_dir.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"

namespace nabla {
namespace {

// What one process computed: a line per key.
using Records = std::map<std::string, std::string>;

void WriteRecords(const Records& records, const std::string& path) {
  std::ofstream out(path);
  for (const auto& [key, value] : records) out << key << '\t' << value << '\n';
  NABLA_ENFORCE(out.good(), kExternal, "cannot write ", path);
}

Records ReadRecords(const std::string& path) {
  Records records;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t tab = line.find('\t');
    if (tab != std::string::npos) records[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return records;
}

std::string OneLine(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\t') c = ' ';
  return s;
}

// Runs fn in a child process; its exit status (0: fn returned). The child
// leaves with _Exit, so nothing of this process's state runs twice.
int InChild(const std::function<void()>& fn) {
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      cpu::InitCpuBackend();
      fn();
    } catch (const std::exception& e) {
      std::cerr << "child: " << e.what() << std::endl;
      rc = 1;
    }
    std::fflush(nullptr);
    std::_Exit(rc);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string AttrString(const Attribute& a) {
  std::ostringstream os;
  std::visit(
      [&](const auto& v) {
        using V = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<V, int> || std::is_same_v<V, float> || std::is_same_v<V, bool> ||
                      std::is_same_v<V, std::string>) {
          os.precision(9);
          os << v;
        } else {
          os << "list";
        }
      },
      a);
  return os.str();
}

// An op's schema as text: slots with their flags, attributes with their
// types and defaults, the doc and the gradient check cases.
std::string Describe(const OpInfo& info) {
  std::ostringstream os;
  os << info.schema.doc << " |";
  for (const auto* slots : {&info.schema.inputs, &info.schema.outputs}) {
    for (const SlotDef& s : *slots)
      os << ' ' << s.name << ':' << s.duplicable << s.dispensable << s.no_buffer << s.no_grad;
    os << " |";
  }
  for (const AttrDef& a : info.schema.attrs)
    os << ' ' << a.name << ':' << static_cast<int>(a.type) << '='
       << (a.default_value ? AttrString(*a.default_value) : "?");
  os << " | gradient " << info.HasGradient() << " | checks";
  for (const GradCheckSpec& s : info.grad_checks) os << ' ' << s.name;
  return os.str();
}

// FNV-1a over the values' bits: equal bits, equal sums.
std::string Digest(const op_case::Doubles& values) {
  uint64_t h = 1469598103934665603ull;
  for (double v : values) {
    unsigned char bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    for (unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  }
  char text[24];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

// The shapes every case runs at besides its own: empty, size-1 dims, and
// one over 2 * kParallelGrain elements, which the kernels split over threads.
// Ops that take them not (rank or matching-shape rules) must refuse them as
// the standard build does.
const std::vector<Shape> kShapes = {{0}, {0, 3}, {1}, {1, 1, 5}, {2, 1, 40000}};

// One case of `type` at `dtype`, the spec's inputs reshaped to `shape`
// (none: as the spec has them): the forward op and its grad ops, with
// random inputs and upstream gradients from a fixed seed.
void RunCase(const std::string& type, GradCheckSpec spec, DType dtype, const Shape* shape, const std::string& key,
             Records* records) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  for (GradCheckInput& in : spec.inputs)
    if (shape && in.values.empty()) in.shape = *shape;
  std::mt19937_64 rng(7);
  VarNameMap ins, outs;
  std::unordered_set<std::string> no_grad;
  std::vector<op_case::Input> inputs = op_case::InputsOf(spec, &ins, &no_grad, rng);
  for (op_case::Input& in : inputs)
    if (IsFloating(in.dtype)) in.dtype = dtype;
  for (const auto& [slot, count] : spec.outputs)
    for (int j = 0; j < count; ++j) outs[slot].push_back(slot + "_out" + std::to_string(j));
  OpDesc fwd(type, ins, outs, spec.attrs);
  FillDefaultAttrs(fwd, *registry);
  std::vector<OpDesc> ops = {fwd};
  try {
    if (info.HasGradient()) {
      const op_case::Result forward = op_case::RunOps(ops, inputs, HostDevice());
      for (const auto& [slot, names] : outs)
        for (const std::string& name : names) {
          op_case::Input g{GradVarName(name), dtype, forward.shapes.at(name), {}};
          std::uniform_real_distribution<double> u(-1.0, 1.0);
          for (int64_t i = 0; i < NumElements(g.shape); ++i) g.values.push_back(u(rng));
          inputs.push_back(std::move(g));
        }
      for (auto& op : MakeGradOps(fwd, no_grad)) {
        FillDefaultAttrs(*op, *registry);
        ops.push_back(*op);
      }
    }
    std::string grad_types;
    for (size_t i = 1; i < ops.size(); ++i) grad_types += ops[i].Type() + " ";
    (*records)[key + " ops"] = grad_types;
    const op_case::Result r = op_case::RunOps(ops, inputs, HostDevice());
    for (const auto& [name, values] : r.values) {
      std::ostringstream first;
      first.precision(17);
      for (size_t i = 0; i < values.size() && i < 4; ++i) first << values[i] << ' ';
      (*records)[key + " " + name] = ShapeToString(r.shapes.at(name)) + " " + Digest(values) + " " + first.str();
    }
  } catch (const std::exception& e) {
    // At its own shapes a case must run; a shape of kShapes may not suit the
    // op (a matrix op given [0], an index input that no longer fits), and
    // then both builds must refuse it with the same message.
    (*records)[key + (shape ? " refused" : " error")] = OneLine(e.what());
  }
}

GradCheckInput In(const std::string& slot, Shape shape, double low = -1.0, double high = 1.0) {
  GradCheckInput in;
  in.slot = slot;
  in.shape = std::move(shape);
  in.low = low;
  in.high = high;
  return in;
}
GradCheckInput Value(const std::string& slot, double v) {
  GradCheckInput in = In(slot, {1});
  in.values = {v};
  return in;
}

// Forward cases for ops that declare none (no gradient to check), so their
// kernels' bits are compared too: the optimizers and fill_zeros_like.
std::vector<GradCheckSpec> ExtraCases(const std::string& type) {
  GradCheckSpec c;
  c.name = "forward";
  if (type == "sgd") {
    c.inputs = {In("Param", {2, 3}), In("Grad", {2, 3}), Value("LearningRate", 0.1)};
    c.outputs = {{"ParamOut", 1}};
  } else if (type == "momentum") {
    c.inputs = {In("Param", {2, 3}), In("Grad", {2, 3}), In("Velocity", {2, 3}), Value("LearningRate", 0.1)};
    c.outputs = {{"ParamOut", 1}, {"VelocityOut", 1}};
    c.attrs = {{"mu", 0.9f}};
  } else if (type == "adam" || type == "adamw") {
    c.inputs = {In("Param", {2, 3}),        In("Grad", {2, 3}),     Value("LearningRate", 0.01), In("Moment1", {2, 3}),
                In("Moment2", {2, 3}, 0.0), Value("Beta1Pow", 0.9), Value("Beta2Pow", 0.999)};
    c.outputs = {{"ParamOut", 1}, {"Moment1Out", 1}, {"Moment2Out", 1}, {"Beta1PowOut", 1}, {"Beta2PowOut", 1}};
    if (type == "adamw") c.attrs = {{"with_decay", true}};
  } else if (type == "fill_zeros_like") {
    c.inputs = {In("X", {2, 3})};
    c.outputs = {{"Out", 1}};
  } else {
    return {};
  }
  return {c};
}

// Everything compared, for the ops `types` of the plugins just loaded.
Records Compute(const std::vector<std::string>& types) {
  Records records;
  auto registry = CurrentRegistry();
  for (const std::string& type : types) {
    const OpInfo& info = registry->Get(type);
    records["schema " + type] = OneLine(Describe(info));
    if (const OpInfo* grad = registry->Find(type + "_grad"))
      records["schema " + type + "_grad"] = OneLine(Describe(*grad));
    for (const GradCheckResult& g : CheckOpGradients(type, HostDevice())) {
      std::string failures;
      for (const std::string& f : g.failures) failures += f + "; ";
      records["gradcheck " + type + " " + g.case_name] = g.ok ? "ok" : OneLine("FAILED " + failures);
    }
    std::vector<GradCheckSpec> cases = info.grad_checks;
    if (cases.empty()) cases = ExtraCases(type);
    for (const GradCheckSpec& spec : cases)
      for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
        const std::string key = type + "/" + spec.name + "/" + DTypeName(dtype);
        RunCase(type, spec, dtype, nullptr, key, &records);
        for (const Shape& shape : kShapes) RunCase(type, spec, dtype, &shape, key + ShapeToString(shape), &records);
      }
  }
  return records;
}

// The forward ops the C ABI build registers (each with its grad op).
std::vector<std::string> ForwardOpsOf(const std::string& plugin) {
  std::vector<std::string> types;
  for (const OpRegistry::PluginRecord& p : CurrentRegistry()->Plugins())
    if (p.name == plugin)
      for (const std::string& op : p.ops)
        if (!IsGradVarName(op) && (op.size() < 5 || op.compare(op.size() - 5, 5, "_grad") != 0)) types.push_back(op);
  return types;
}

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

std::string Command(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  pclose(p);
  return out;
}

// The binary needs no symbol of nabla: everything crosses through the table
// nabla_plugin_init receives. What it does import is the C and C++ runtimes.
TEST(StdSdk, ImportsNothingOfNabla) {
  const std::string undefined = Command(std::string(NM_PATH) + " -D --undefined-only " + STD_SDK_OPS);
  ASSERT_NE(undefined.find("GLIBC"), std::string::npos) << "nm read nothing: " << undefined;
  std::istringstream lines(undefined);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_EQ(line.find("nabla"), std::string::npos) << line;
    EXPECT_EQ(line.find("_ZN5nabla"), std::string::npos) << line;
  }
  const std::string defined = Command(std::string(NM_PATH) + " -D --defined-only " + STD_SDK_OPS);
  EXPECT_NE(defined.find("nabla_plugin_init"), std::string::npos) << defined;
}

// Bit for bit the standard build's ops, run one process each.
TEST(StdSdk, SameOpsSameBitsAsTheStandardBuild) {
  test_util::TempDir dir("std_sdk");
  const std::string sdk_file = dir.Path("sdk.txt"), std_file = dir.Path("std.txt");
  ASSERT_EQ(InChild([&] {
              PluginManager::Instance().Load(STD_SDK_OPS);
              const std::vector<std::string> types = ForwardOpsOf("std_sdk_ops");
              Records records = Compute(types);
              std::string list;
              for (const std::string& t : types) list += t + " ";
              records["ops"] = list;
              WriteRecords(records, sdk_file);
            }),
            0);
  const Records sdk = ReadRecords(sdk_file);
  ASSERT_TRUE(sdk.count("ops"));
  const std::vector<std::string> types = Split(sdk.at("ops"));
  // Every op file the C ABI build lists (tests/plugins/CMakeLists.txt)
  // registered its op.
  EXPECT_EQ(types.size(), static_cast<size_t>(STD_SDK_OP_FILES)) << sdk.at("ops");
  ASSERT_EQ(InChild([&] {
              PluginManager::Instance().Load(std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libmath_ops.so");
              PluginManager::Instance().Load(std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libnn_ops.so");
              Records records = Compute(types);
              records["ops"] = sdk.at("ops");
              WriteRecords(records, std_file);
            }),
            0);
  const Records standard = ReadRecords(std_file);
  size_t compared = 0;
  for (const auto& [key, want] : standard) {
    auto it = sdk.find(key);
    if (it == sdk.end()) {
      ADD_FAILURE() << key << ": the standard build has it, the C ABI build does not";
      continue;
    }
    EXPECT_EQ(it->second, want) << key;
    if (key.rfind("gradcheck ", 0) == 0) {
      EXPECT_EQ(it->second, "ok") << key;
    }
    EXPECT_EQ(key.find(" error"), std::string::npos) << key << ": " << want;
    ++compared;
  }
  for (const auto& [key, value] : sdk)
    EXPECT_TRUE(standard.count(key)) << key << ": the C ABI build has it, the standard build does not";
  // Per op: its schema, its grad op's, each case at 2 dtypes and 6 shapes.
  EXPECT_GT(compared, types.size() * 20);
  std::cout << "compared " << compared << " records of " << types.size() << " ops\n";
}

}  // namespace
}  // namespace nabla
