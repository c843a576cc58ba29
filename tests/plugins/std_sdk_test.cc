// The standard plugins math_ops and nn_ops, which ship built over the C ABI
// (their op files as they are, through the SDK), against the same files
// built over the C++ ABI (std_cxx_ops, tests/plugins/CMakeLists.txt); and
// control_flow's op files that build over the C ABI (std_sdk_cf) against the
// standard control_flow plugin. A C ABI binary imports nothing of nabla;
// every op it registers has the C++ build's schema and grad op, passes its
// float64 gradient checks, and computes the same bits, forward and
// gradients, in float32 and float64, over shapes with empty and size-1 dims
// and one large enough to split over threads. Both builds register the same
// op names, so each is loaded into a process of its own (fork), which writes
// what it computed to a file; this process loads no plugin.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
#include "nabla/device_registry.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#if STD_OPENCL_FILES
#include "nabla/opencl/opencl.h"
#endif

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
// the C++ build does.
const std::vector<Shape> kShapes = {{0}, {0, 3}, {1}, {1, 1, 5}, {2, 1, 40000}};

// Runs `ops` on `device` and records every var they write: shape, digest,
// first values, and off the CPU whether the output was made on the device.
void RecordRun(const std::vector<OpDesc>& ops, const std::vector<op_case::Input>& inputs, const std::string& key,
               Records* records, Device& device = HostDevice()) {
  const op_case::Result r = op_case::RunOps(ops, inputs, device);
  for (const auto& [name, values] : r.values) {
    std::ostringstream first;
    first.precision(17);
    for (size_t i = 0; i < values.size() && i < 4; ++i) first << values[i] << ' ';
    std::string& record = (*records)[key + " " + name];
    record = ShapeToString(r.shapes.at(name)) + " " + Digest(values) + " " + first.str();
    if (&device != &HostDevice()) record += r.devices.at(name) == &device ? "(on the device)" : "(elsewhere)";
  }
}

// Whether a case reshaped to one of kShapes would make an output of more
// than kMaxSweepElements elements (shape inference at build time says):
// matmul's transpose_x case at [2, 1, 40000] is an outer product of
// [2, 40000, 40000], 3.2e9 elements, which takes minutes and tens of GB in
// either build. It is recorded with its shape instead, by both builds alike.
constexpr int64_t kMaxSweepElements = int64_t{1} << 22;
bool TooLarge(const OpDesc& fwd, const std::vector<op_case::Input>& inputs, const std::string& key, Records* records) {
  ProgramDesc program;
  BlockDesc& block = *program.Root();
  for (const op_case::Input& in : inputs) {
    VarDesc* v = block.Var(in.name);
    v->SetShape(in.shape);
    v->SetDType(in.dtype);
    v->MarkDTypeKnown();
  }
  try {
    InferOpAtBuildTime(fwd, block, *CurrentRegistry());
  } catch (const std::exception&) {
    return false;  // refused: the run below records the message
  }
  for (const std::string& name : fwd.OutputArgumentNames()) {
    const VarDesc* v = block.FindVar(name);
    if (v && NumElements(v->GetShape()) > kMaxSweepElements) {
      (*records)[key + " too large"] = name + " " + ShapeToString(v->GetShape());
      return true;
    }
  }
  return false;
}

// One case of `type` at `dtype`, the spec's inputs reshaped to `shape`
// (none: as the spec has them): the forward op and its grad ops, with
// random inputs and upstream gradients from a fixed seed, run on `device`
// (off the CPU each output also records whether it was made there). The
// upstream gradients are of `grad_dtype` where given (cast's Out), else of
// `dtype`; an input of a dtype that is not floating gets no gradient.
void RunCase(const std::string& type, GradCheckSpec spec, DType dtype, const Shape* shape, const std::string& key,
             Records* records, Device& device = HostDevice(), const DType* grad_dtype = nullptr) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  for (GradCheckInput& in : spec.inputs)
    if (shape && in.values.empty()) in.shape = *shape;
  std::mt19937_64 rng(7);
  VarNameMap ins, outs;
  std::unordered_set<std::string> no_grad;
  std::vector<op_case::Input> inputs = op_case::InputsOf(spec, &ins, &no_grad, rng);
  for (op_case::Input& in : inputs) {
    if (IsFloating(in.dtype)) in.dtype = dtype;
    if (!IsFloating(in.dtype)) no_grad.insert(in.name);
  }
  for (const auto& [slot, count] : spec.outputs)
    for (int j = 0; j < count; ++j) outs[slot].push_back(slot + "_out" + std::to_string(j));
  OpDesc fwd(type, ins, outs, spec.attrs);
  FillDefaultAttrs(fwd, *registry);
  std::vector<OpDesc> ops = {fwd};
  if (shape && TooLarge(fwd, inputs, key, records)) return;
  try {
    if (info.HasGradient()) {
      const op_case::Result forward = op_case::RunOps(ops, inputs, HostDevice());
      for (const auto& [slot, names] : outs)
        for (const std::string& name : names) {
          op_case::Input g{GradVarName(name), grad_dtype ? *grad_dtype : dtype, forward.shapes.at(name), {}};
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
    RecordRun(ops, inputs, key, records, device);
  } catch (const std::exception& e) {
    // At its own shapes a case must run; a shape of kShapes may not suit the
    // op (a matrix op given [0], an index input that no longer fits), and
    // then both builds must refuse it with the same message.
    (*records)[key + (shape ? " refused" : " error")] = OneLine(e.what());
  }
}

// Ops with no gradient check case (they have no gradient) run at cases
// built here. One whose inputs are all dispensable creates Out from its
// attributes (fill_constant, the random fills): it runs at attribute shapes
// (empty, small, and large) and both float dtypes, and where it has a seed
// attribute at seed 0 (derived from the run's seed) and at a seed of its
// own, so both paths to the kernel's seed are compared bit for bit. Ops with
// inputs get them from kInputCases; an op in neither fails the test, so a
// file added to math_ops or nn_ops cannot go unrun.
struct InputCase {
  std::string name;
  std::vector<op_case::Input> inputs;  // named <slot>_in
  AttributeMap attrs;
  bool may_refuse = false;  // both builds refusing it alike passes
};

std::vector<InputCase> InputCasesOf(const std::string& type) {
  auto ids = [](const Shape& shape, int64_t depth) {
    op_case::Doubles v;
    for (int64_t i = 0; i < NumElements(shape); ++i) v.push_back(static_cast<double>((i * 7 + 3) % depth));
    return v;
  };
  if (type == "reduce_all" || type == "reduce_any") {
    std::vector<InputCase> cases;
    for (const Shape& shape : std::vector<Shape>{{3, 4}, {0}, {0, 3}, {1, 1, 5}, {2, 1, 40000}}) {
      // Rows all true, all false and mixed, so both answers occur.
      op_case::Doubles v;
      for (int64_t i = 0; i < NumElements(shape); ++i) v.push_back(i % 4 == 0 || (i / 5) % 3 == 1 ? 1.0 : 0.0);
      op_case::Input x{"X_in", DType::kBool, shape, v};
      cases.push_back({"dim0" + ShapeToString(shape), {x}, {}});
      cases.push_back({"last_keep" + ShapeToString(shape), {x}, {{"dim", std::vector<int>{-1}}, {"keep_dim", true}}});
      cases.push_back({"all" + ShapeToString(shape), {x}, {{"reduce_all", true}}});
    }
    return cases;
  }
  if (type == "arg_max" || type == "arg_min") {
    std::vector<InputCase> cases;
    for (DType dtype : {DType::kFloat32, DType::kFloat64})
      for (const Shape& shape : std::vector<Shape>{{3, 4}, {0}, {0, 3}, {1, 1, 5}, {2, 1, 40000}}) {
        // Few distinct values, so ties (the first index wins) occur.
        op_case::Input x{"X_in", dtype, shape, ids(shape, 4)};
        const std::string at = std::string(DTypeName(dtype)) + ShapeToString(shape);
        // An empty X has nothing to search: refused alike.
        const bool empty = NumElements(shape) == 0;
        cases.push_back({"axis0" + at, {x}, {}, empty});
        cases.push_back({"last_keep" + at, {x}, {{"axis", -1}, {"keepdims", true}}, empty});
        cases.push_back({"flatten" + at, {x}, {{"flatten", true}}, empty});
      }
    return cases;
  }
  if (type == "accuracy") {
    std::vector<InputCase> cases;
    for (const Shape& shape : std::vector<Shape>{{6, 3}, {0, 3}, {40000, 2}}) {
      const Shape label{shape[0], 1};
      cases.push_back({ShapeToString(shape),
                       {{"Out_in", DType::kFloat32, shape, op_case::Doubles(NumElements(shape), 0.5)},
                        {"Indices_in", DType::kInt64, shape, ids(shape, 5)},
                        {"Label_in", DType::kInt64, label, ids(label, 3)}},
                       {}});
    }
    return cases;
  }
  if (type == "one_hot") {
    std::vector<InputCase> cases;
    for (DType ids_dtype : {DType::kInt64, DType::kInt32})
      for (const Shape& shape : std::vector<Shape>{{4, 1}, {0, 1}, {2, 3, 1}, {40000, 1}})
        for (const char* dtype : {"float32", "float64", "int32", "int64", "bool"})
          cases.push_back({std::string(DTypeName(ids_dtype)) + ShapeToString(shape) + dtype,
                           {{"X_in", ids_dtype, shape, ids(shape, 5)}},
                           {{"depth", 5}, {"dtype", std::string(dtype)}}});
    // Out of range: refused, or a row of zeros.
    cases.push_back({"out_of_range", {{"X_in", DType::kInt64, {3, 1}, {1, 7, 2}}}, {{"depth", 5}}, true});
    cases.push_back({"allow_out_of_range",
                     {{"X_in", DType::kInt64, {3, 1}, {1, 7, -1}}},
                     {{"depth", 5}, {"allow_out_of_range", true}}});
    return cases;
  }
  const bool compare = type == "less_than" || type == "less_equal" || type == "greater_than" ||
                       type == "greater_equal" || type == "equal" || type == "not_equal";
  if (compare) {
    // Few distinct values, so every comparison holds somewhere and fails
    // elsewhere; Y broadcast at the default axis, at an inner axis, as one
    // element, and shapes that cannot broadcast (refused alike).
    struct Pair {
      Shape x, y;
      int axis;
      bool bad;
    };
    const std::vector<Pair> pairs = {{{3, 4}, {3, 4}, -1, false},
                                     {{2, 3, 4}, {3}, 1, false},
                                     {{2, 3, 4}, {4}, -1, false},
                                     {{2, 3}, {1}, -1, false},
                                     {{0, 3}, {3}, -1, false},
                                     {{1, 1, 5}, {1, 5}, -1, false},
                                     {{2, 1, 40000}, {40000}, -1, false},
                                     {{3, 4}, {3}, -1, true},
                                     {{3}, {2, 3}, -1, true},
                                     {{3, 4}, {4}, 5, true}};
    std::vector<InputCase> cases;
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBool})
      for (const Pair& p : pairs) {
        const int64_t depth = dtype == DType::kBool ? 2 : 3;
        // Only equal and not_equal take bool: refused alike by the others.
        const bool refused = p.bad || (dtype == DType::kBool && type != "equal" && type != "not_equal");
        cases.push_back(
            {std::string(DTypeName(dtype)) + ShapeToString(p.x) + ShapeToString(p.y) + "/axis" + std::to_string(p.axis),
             {{"X_in", dtype, p.x, ids(p.x, depth)}, {"Y_in", dtype, p.y, ids(p.y, depth + 1)}},
             {{"axis", p.axis}},
             refused});
      }
    // X and Y of different dtypes: refused alike.
    cases.push_back(
        {"mixed", {{"X_in", DType::kFloat32, {2}, {1, 2}}, {"Y_in", DType::kInt64, {2}, {1, 2}}}, {}, true});
    return cases;
  }
  if (type == "logical_and" || type == "logical_or" || type == "logical_xor" || type == "logical_not") {
    const bool unary = type == "logical_not";
    std::vector<InputCase> cases;
    const std::vector<std::pair<Shape, Shape>> pairs = {{{3, 4}, {3, 4}}, {{2, 3, 4}, {4}},         {{2, 3}, {1}},
                                                        {{0, 3}, {3}},    {{2, 1, 40000}, {40000}}, {{3, 4}, {3}}};
    for (const auto& [x, y] : pairs) {
      std::vector<op_case::Input> in = {{"X_in", DType::kBool, x, ids(x, 2)}};
      if (!unary) in.push_back({"Y_in", DType::kBool, y, ids(y, 3)});
      // [3, 4] with [3] cannot broadcast: refused alike.
      cases.push_back({ShapeToString(x) + ShapeToString(y), in, {}, !unary && y == Shape{3}});
    }
    // Not bool: refused alike, naming the slot.
    std::vector<op_case::Input> f = {{"X_in", DType::kFloat32, {2}, {1, 0}}};
    if (!unary) f.push_back({"Y_in", DType::kFloat32, {2}, {1, 1}});
    cases.push_back({"float", f, {}, true});
    return cases;
  }
  return {};
}

void RunUnchecked(const std::string& type, Records* records) {
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  VarNameMap outs;
  for (const SlotDef& s : info.schema.outputs) outs[s.name] = {s.name + "_out"};
  std::vector<InputCase> cases;
  bool creator = true;
  for (const SlotDef& s : info.schema.inputs) creator = creator && s.dispensable;
  if (creator) {
    const bool seeded = info.schema.FindAttr("seed") != nullptr;
    for (const std::vector<int>& shape : std::vector<std::vector<int>>{{0}, {3, 5}, {2, 1, 40000}})
      for (const char* dtype : {"float32", "float64"})
        for (int seed : seeded ? std::vector<int>{0, 11} : std::vector<int>{-1}) {
          AttributeMap attrs = {{"shape", shape}, {"dtype", std::string(dtype)}};
          if (seed >= 0) attrs["seed"] = seed;
          // The initializers refuse an empty shape (its fan is 0).
          cases.push_back({ShapeToString(Shape(shape.begin(), shape.end())) + dtype +
                               (seed >= 0 ? "/seed" + std::to_string(seed) : ""),
                           {},
                           attrs,
                           shape[0] == 0});
        }
  } else {
    cases = InputCasesOf(type);
  }
  if (cases.empty()) {
    (*records)["unchecked " + type + " error"] = "no case: add one to InputCasesOf (std_sdk_test.cc)";
    return;
  }
  for (const InputCase& c : cases) {
    VarNameMap ins;
    for (const op_case::Input& in : c.inputs) ins[in.name.substr(0, in.name.size() - 3)] = {in.name};
    OpDesc op(type, ins, outs, c.attrs);
    const std::string key = "unchecked " + type + "/" + c.name;
    try {
      FillDefaultAttrs(op, *registry);
      RecordRun({op}, c.inputs, key, records);
    } catch (const std::exception& e) {
      (*records)[key + (c.may_refuse ? " refused" : " error")] = OneLine(e.what());
    }
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

// The tensor-array ops, which take arrays no input case can feed, run as a
// chain: two writes (entries 0 and 2; entry 1 never written), the length,
// two reads, then the reads' and writes' grad ops (the reads' gradients
// accumulate in place into one array; entry 1's gradient is zeros), at both
// float dtypes and shapes with empty, size-1 and threaded sizes; a read of
// the unwritten entry and one past the end must be refused alike. Var-type
// inference (InferVarType) runs over the chain's program too: each var's
// type, dtype and shape after it.
void RunArrayChains(Records* records) {
  auto op = [](const std::string& type, VarNameMap ins, VarNameMap outs) { return OpDesc(type, ins, outs, {}); };
  auto index = [](const std::string& name, double i) { return op_case::Input{name, DType::kInt64, {1}, {i}}; };
  for (DType dtype : {DType::kFloat32, DType::kFloat64})
    for (const Shape& shape : std::vector<Shape>{{2, 3}, {0, 3}, {1}, {2, 1, 40000}}) {
      const std::string key = std::string("arrays/") + DTypeName(dtype) + ShapeToString(shape);
      op_case::Doubles a, b, ga, gb;
      for (int64_t i = 0; i < NumElements(shape); ++i) {
        a.push_back(0.25 * static_cast<double>(i % 7) - 0.5);
        b.push_back(1.0 / static_cast<double>(i % 5 + 1));
        ga.push_back(0.125 * static_cast<double>(i % 3));
        gb.push_back(-0.375 * static_cast<double>(i % 4));
      }
      std::vector<op_case::Input> inputs = {{"a", dtype, shape, a},
                                            {"b", dtype, shape, b},
                                            {"y@GRAD", dtype, shape, ga},
                                            {"z@GRAD", dtype, shape, gb},
                                            index("i0", 0),
                                            index("i1", 1),
                                            index("i2", 2),
                                            index("i5", 5)};
      std::vector<OpDesc> ops = {op("write_to_array", {{"X", {"a"}}, {"I", {"i0"}}}, {{"Out", {"arr"}}}),
                                 op("write_to_array", {{"X", {"b"}}, {"I", {"i2"}}}, {{"Out", {"arr"}}}),
                                 op("array_length", {{"X", {"arr"}}}, {{"Out", {"len"}}}),
                                 op("read_from_array", {{"X", {"arr"}}, {"I", {"i2"}}}, {{"Out", {"y"}}}),
                                 op("read_from_array", {{"X", {"arr"}}, {"I", {"i0"}}}, {{"Out", {"z"}}}),
                                 op("read_from_array_grad", {{"I", {"i2"}}, {"Out@GRAD", {"y@GRAD"}}, {"X", {"arr"}}},
                                    {{"X@GRAD", {"arr@GRAD"}}}),
                                 op("read_from_array_grad",
                                    {{"I", {"i0"}}, {"Out@GRAD", {"z@GRAD"}}, {"X", {"arr"}}, {"X@GRAD", {"arr@GRAD"}}},
                                    {{"X@GRAD", {"arr@GRAD"}}}),
                                 op("write_to_array_grad", {{"X", {"b"}}, {"I", {"i2"}}, {"Out@GRAD", {"arr@GRAD"}}},
                                    {{"X@GRAD", {"b@GRAD"}}}),
                                 op("write_to_array_grad", {{"X", {"a"}}, {"I", {"i0"}}, {"Out@GRAD", {"arr@GRAD"}}},
                                    {{"X@GRAD", {"a@GRAD"}}}),
                                 op("write_to_array_grad", {{"X", {"a"}}, {"I", {"i1"}}, {"Out@GRAD", {"arr@GRAD"}}},
                                    {{"X@GRAD", {"c@GRAD"}}})};
      try {
        RecordRun(ops, inputs, key, records);
      } catch (const std::exception& e) {
        (*records)[key + " error"] = OneLine(e.what());
      }
      for (const char* bad : {"i1", "i5"}) {
        std::vector<OpDesc> read = {ops[0], ops[1],
                                    op("read_from_array", {{"X", {"arr"}}, {"I", {bad}}}, {{"Out", {"w"}}})};
        try {
          RecordRun(read, inputs, key + "/read_" + bad, records);
        } catch (const std::exception& e) {
          (*records)[key + "/read_" + bad + " refused"] = OneLine(e.what());
        }
      }
      ProgramDesc program;
      BlockDesc* block = program.Root();
      for (const op_case::Input& in : inputs) {
        VarDesc* v = block->Var(in.name);
        v->SetDType(in.dtype);
        v->MarkDTypeKnown(true);
        v->SetShape(in.shape);
      }
      for (const OpDesc& o : ops) block->AppendOp(o);
      try {
        InferProgram(program);
        for (const auto& v : block->AllVars())
          (*records)[key + "/infer " + v->Name()] = StrCat(VarTypeName(v->Type()), " ", DTypeName(v->GetDType()), " ",
                                                           v->HasDType(), " ", ShapeToString(v->GetShape()));
      } catch (const std::exception& e) {
        (*records)[key + "/infer error"] = OneLine(e.what());
      }
    }
}

// A conversion op (cast: in_dtype and out_dtype attributes) runs at cases of
// its own instead of at its checks in float32 and float64, which contradict
// in_dtype: every pair of the dtypes it converts, X of in_dtype, at [2, 3]
// and kShapes, with its grad op where X is floating (the upstream gradient
// of out_dtype); X's values in [-3, 3], so conversions to integers round
// negative and positive values toward zero, and to bool see zeros.
void RunConversionCases(const std::string& type, Records* records) {
  const std::vector<DType> dtypes = {DType::kFloat32, DType::kFloat64, DType::kInt32,
                                     DType::kInt64,   DType::kBool,    DType::kBFloat16};
  for (DType from : dtypes)
    for (DType to : dtypes) {
      GradCheckSpec spec;
      spec.name = std::string(DTypeName(from)) + "_to_" + DTypeName(to);
      spec.inputs = {In("X", {2, 3}, -3.0, 3.0)};
      spec.outputs = {{"Out", 1}};
      spec.attrs = {{"in_dtype", std::string(DTypeName(from))}, {"out_dtype", std::string(DTypeName(to))}};
      const std::string key = type + "/" + spec.name;
      RunCase(type, spec, from, nullptr, key, records, HostDevice(), &to);
      for (const Shape& shape : kShapes)
        RunCase(type, spec, from, &shape, key + ShapeToString(shape), records, HostDevice(), &to);
    }
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
    // Ops without gradient checks: the forward cases of ExtraCases, else
    // the attribute- and input-built cases of RunUnchecked.
    // Ops that run blocks: in programs of their own (ControlFlowRuns).
    if (info.traits.control_flow) continue;
    if (info.schema.FindAttr("in_dtype") && info.schema.FindAttr("out_dtype")) {
      RunConversionCases(type, &records);
      continue;
    }
    std::vector<GradCheckSpec> specs = info.grad_checks;
    if (specs.empty()) specs = ExtraCases(type);
    if (specs.empty() && (type == "write_to_array" || type == "read_from_array" || type == "array_length")) {
      if (type == "write_to_array") RunArrayChains(&records);
      continue;
    }
    if (specs.empty()) RunUnchecked(type, &records);
    // An op whose checks pin its seed (dropout's fix_seed) runs them once
    // more with the seed the run derives, which reaches the kernel through
    // the C ABI's kernel_seed.
    if (info.schema.FindAttr("fix_seed"))
      for (const GradCheckSpec& spec : info.grad_checks) {
        GradCheckSpec unpinned = spec;
        unpinned.name += "/run_seed";
        unpinned.attrs["fix_seed"] = false;
        specs.push_back(unpinned);
      }
    for (const GradCheckSpec& spec : specs)
      for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
        const std::string key = type + "/" + spec.name + "/" + DTypeName(dtype);
        RunCase(type, spec, dtype, nullptr, key, &records);
        for (const Shape& shape : kShapes) RunCase(type, spec, dtype, &shape, key + ShapeToString(shape), &records);
      }
  }
  return records;
}

// The forward ops the plugins `names` register (each with its grad op).
std::vector<std::string> ForwardOpsOf(const std::vector<std::string>& names) {
  std::vector<std::string> types;
  for (const OpRegistry::PluginRecord& p : CurrentRegistry()->Plugins())
    if (std::find(names.begin(), names.end(), p.name) != names.end())
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

// The shipped plugins math_ops and nn_ops, over the C ABI.
const std::vector<std::string> kShipped = {std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libmath_ops.so",
                                           std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libnn_ops.so"};
const std::vector<std::string> kShippedNames = {"math_ops", "nn_ops"};

// The binaries need no symbol of nabla: everything crosses through the table
// nabla_plugin_init receives. What they do import is the C and C++ runtimes.
TEST(StdSdk, ImportsNothingOfNabla) {
  for (const std::string& path : kShipped) {
    const std::string undefined = Command(std::string(NM_PATH) + " -D --undefined-only " + path);
    ASSERT_NE(undefined.find("GLIBC"), std::string::npos) << "nm read nothing: " << path << ": " << undefined;
    std::istringstream lines(undefined);
    for (std::string line; std::getline(lines, line);) {
      EXPECT_EQ(line.find("nabla"), std::string::npos) << path << ": " << line;
      EXPECT_EQ(line.find("_ZN5nabla"), std::string::npos) << path << ": " << line;
    }
    const std::string defined = Command(std::string(NM_PATH) + " -D --defined-only " + path);
    EXPECT_NE(defined.find("nabla_plugin_init"), std::string::npos) << path << ": " << defined;
  }
  // The reference really is the C++ ABI build: it binds to the core's C++
  // symbols (what the shipped binaries must not).
  const std::string reference = Command(std::string(NM_PATH) + " -D --undefined-only " + STD_CXX_OPS);
  EXPECT_NE(reference.find("_ZN5nabla"), std::string::npos) << reference;
}

// The C ABI build `sdk_paths` (plugins `names`, `count` forward ops) against
// the C++ ABI build `standard_paths`, bit for bit, one process each; the C
// ABI build's records.
Records SameOpsSameBits(const std::vector<std::string>& sdk_paths, const std::vector<std::string>& names, size_t count,
                        const std::vector<std::string>& standard_paths, bool seeded_ops) {
  test_util::TempDir dir("std_sdk");
  const std::string sdk_file = dir.Path("sdk.txt"), std_file = dir.Path("std.txt");
  EXPECT_EQ(InChild([&] {
              for (const std::string& path : sdk_paths) PluginManager::Instance().Load(path);
              const std::vector<std::string> types = ForwardOpsOf(names);
              Records records = Compute(types);
              std::string list;
              for (const std::string& t : types) list += t + " ";
              records["ops"] = list;
              WriteRecords(records, sdk_file);
            }),
            0);
  const Records sdk = ReadRecords(sdk_file);
  if (!sdk.count("ops")) {
    ADD_FAILURE() << names.front() << " computed nothing";
    return sdk;
  }
  const std::vector<std::string> types = Split(sdk.at("ops"));
  // Every op file of the C ABI build (tests/plugins/CMakeLists.txt counts
  // them) registered its ops.
  EXPECT_EQ(types.size(), count) << sdk.at("ops");
  EXPECT_EQ(InChild([&] {
              for (const std::string& path : standard_paths) PluginManager::Instance().Load(path);
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
      ADD_FAILURE() << key << ": the C++ ABI build has it, the C ABI build does not";
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
    EXPECT_TRUE(standard.count(key)) << key << ": the C ABI build has it, the C++ ABI build does not: " << value;
  if (seeded_ops) {
    // The seed reaches a random op's kernel through the C ABI (kernel_seed):
    // its own seed gives other values than the one derived from the run's.
    size_t seeded = 0;
    for (const auto& [key, value] : sdk) {
      const size_t at = key.find("/seed0 ");
      if (key.rfind("unchecked ", 0) != 0 || at == std::string::npos || key.find("[0]") != std::string::npos) continue;
      auto own = sdk.find(key.substr(0, at) + "/seed11 " + key.substr(at + 7));
      if (own == sdk.end()) {
        ADD_FAILURE() << key;
        continue;
      }
      EXPECT_NE(own->second, value) << key << ": seeds 0 and 11 drew the same values";
      ++seeded;
    }
    EXPECT_GT(seeded, 0u) << "no random op compared";
  }
  // Per op: its schema, its grad op's, each case at 2 dtypes and 6 shapes.
  EXPECT_GT(compared, types.size() * 20);
  std::cout << "compared " << compared << " records of " << types.size() << " ops\n";
  return sdk;
}

// The shipped math_ops and nn_ops bit for bit the C++ build's ops, run one
// process each.
TEST(StdSdk, SameOpsSameBitsAsTheCxxBuild) {
  (void)SameOpsSameBits(kShipped, kShippedNames, STD_OP_COUNT, {STD_CXX_OPS}, true);
}

// The control_flow plugin, which ships on the C ABI, against the same files
// built on the C++ ABI (std_cxx_cf): the comparisons and logical ops at the
// input cases of InputCasesOf, increment at its gradient check, the array
// ops' chain; while and conditional_block in ControlFlowRunsAsTheStandardBuild.
TEST(StdSdk, ControlFlowSameBitsAsTheStandardBuild) {
  const std::string cf = STD_SDK_CF;
  const std::string undefined = Command(std::string(NM_PATH) + " -D --undefined-only " + cf);
  ASSERT_NE(undefined.find("GLIBC"), std::string::npos) << "nm read nothing: " << undefined;
  std::istringstream lines(undefined);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.find("nabla"), std::string::npos) << line;
  const Records sdk = SameOpsSameBits({cf}, {"control_flow"}, STD_SDK_CF_OP_COUNT, {STD_CXX_CF}, false);
  // The cases ran, not only were refused alike: X = 0 1 2 0 ... against
  // Y = 3 2 1 0 ... and broadcasts.
  auto value = [&](const std::string& key) { return sdk.count(key) ? sdk.at(key) : "missing " + key; };
  EXPECT_EQ(value("unchecked less_than/int64[2, 3][1]/axis-1 Out_out").substr(0, 6), "[2, 3]");
  EXPECT_NE(value("unchecked less_equal/float32[2, 1, 40000][40000]/axis-1 Out_out").find(" 1 1 0 1 "),
            std::string::npos);
  EXPECT_NE(value("unchecked equal/bool[2, 3, 4][3]/axis1 Out_out").find("[2, 3, 4]"), std::string::npos);
  EXPECT_NE(value("unchecked logical_xor/[2, 3, 4][4] Out_out").find("[2, 3, 4]"), std::string::npos);
  EXPECT_TRUE(sdk.count("unchecked greater_than/bool[3, 4][3, 4]/axis-1 refused"));
  EXPECT_NE(value("increment/scalar/float64 Out_out0").find("[1]"), std::string::npos);
  // The array chain ran: the length, a read, accumulated and zero gradients,
  // the refusals, and the inferred var types.
  EXPECT_EQ(value("arrays/float32[2, 3] len").substr(0, 4), "[1] ");
  EXPECT_NE(value("arrays/float32[2, 3] len").find(" 3 "), std::string::npos);
  EXPECT_EQ(value("arrays/float64[2, 1, 40000] y").substr(0, 13), "[2, 1, 40000]");
  EXPECT_NE(value("arrays/float32[2, 3] c@GRAD").find(" 0 0 0 0 "), std::string::npos);
  EXPECT_NE(value("arrays/float32[2, 3] a@GRAD").find(" -0 -0.375 -0.75 -1.125 "), std::string::npos)
      << value("arrays/float32[2, 3] a@GRAD");
  EXPECT_NE(value("arrays/float32[2, 3] b@GRAD").find(" 0 0.125 0.25 0 "), std::string::npos);
  EXPECT_NE(value("arrays/float32[2, 3]/read_i1 refused").find("never written"), std::string::npos);
  EXPECT_NE(value("arrays/float32[2, 3]/read_i5 refused").find("out of range"), std::string::npos);
  EXPECT_EQ(value("arrays/float64[2, 3]/infer arr").substr(0, 21), "tensor_array float64 ");
  EXPECT_EQ(value("arrays/float64[2, 3]/infer arr@GRAD").substr(0, 13), "tensor_array ");
}

// One attention layer as a user writes it (projections with mul, heads by
// reshape + transpose, matmul, an additive mask, softmax), which
// flash_attn's rewrite (flash_attn_fusion.cc) turns into flash_attn; MASK is
// a mask fed in, or made by fill_constant and tril_triu, a constant causal
// mask the rewrite evaluates on the host (EvaluateOnHost) and drops.
constexpr const char* kAttention = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 5, 12], dtype: float32, stop_gradient: true}
      wq: {shape: [12, 12], dtype: float32, persistable: true}
      wk: {shape: [12, 12], dtype: float32, persistable: true}
      wv: {shape: [12, 12], dtype: float32, persistable: true}
      wo: {shape: [12, 12], dtype: float32, persistable: true}
      b: {shape: [12], dtype: float32, persistable: true}
MASK_VAR    ops:
      - {type: mul, inputs: {X: [x], Y: [wq]}, outputs: {Out: [q]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [q]}, outputs: {Out: [q4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [q4]}, outputs: {Out: [qt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: mul, inputs: {X: [x], Y: [wk]}, outputs: {Out: [k]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [k]}, outputs: {Out: [k4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [k4]}, outputs: {Out: [kt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: mul, inputs: {X: [x], Y: [wv]}, outputs: {Out: [v]}, attrs: {x_num_col_dims: 2}}
      - {type: reshape, inputs: {X: [v]}, outputs: {Out: [v4]}, attrs: {shape: [0, 0, 3, 4]}}
      - {type: transpose, inputs: {X: [v4]}, outputs: {Out: [vt]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: matmul, inputs: {X: [qt], Y: [kt]}, outputs: {Out: [s]}, attrs: {transpose_Y: true, alpha: 0.5}}
MASK_OPS      - {type: elementwise_add, inputs: {X: [s], Y: [mask]}, outputs: {Out: [sm]}}
      - {type: softmax, inputs: {X: [sm]}, outputs: {Out: [p]}, attrs: {axis: -1}}
      - {type: matmul, inputs: {X: [p], Y: [vt]}, outputs: {Out: [o]}}
      - {type: transpose, inputs: {X: [o]}, outputs: {Out: [ot]}, attrs: {axis: [0, 2, 1, 3]}}
      - {type: reshape, inputs: {X: [ot]}, outputs: {Out: [a]}, attrs: {shape: [0, 0, 12]}}
      - {type: mul, inputs: {X: [a], Y: [wo]}, outputs: {Out: [y]}, attrs: {x_num_col_dims: 2}}
      - {type: elementwise_add, inputs: {X: [y], Y: [b]}, outputs: {Out: [yb]}, attrs: {axis: 2}}
      - {type: relu, inputs: {X: [yb]}, outputs: {Out: [yr]}}
      - {type: mean, inputs: {X: [yr]}, outputs: {Out: [loss]}}
)";

// The loaded plugins' rewrites (FuseOps: the attention rewrite, the fusion
// patterns such as fc's) on the attention layer, with a fed and with a
// constant causal mask: the programs they leave, and how many rewrites ran.
Records Rewrites() {
  Records records;
  for (const bool constant_mask : {false, true}) {
    std::string text = kAttention;
    auto put = [&](const std::string& from, const std::string& to) { text.replace(text.find(from), from.size(), to); };
    put("MASK_VAR", constant_mask ? "" : "      mask: {shape: [5, 5], dtype: float32, stop_gradient: true}\n");
    put("MASK_OPS", constant_mask ? "      - {type: fill_constant, outputs: {Out: [big]}, attrs: {shape: [5, 5], "
                                    "dtype: float32, value: -1e9}}\n      - {type: tril_triu, inputs: {X: [big]}, "
                                    "outputs: {Out: [mask]}, attrs: {lower: false, diagonal: 1}}\n"
                                  : "");
    ProgramDesc program = ParseProgram(text, "attention.yaml");
    const std::string key = std::string("rewrites ") + (constant_mask ? "constant_mask" : "fed_mask");
    records[key + " count"] = std::to_string(FuseOps(program, {"loss"}));
    // Less the header naming the plugins the ops came from, which differ.
    std::string yaml = ProgramToYaml(program);
    const size_t from = yaml.find("plugins:"), to = yaml.find("blocks:");
    if (from != std::string::npos && to != std::string::npos && from < to) yaml.erase(from, to - from);
    records[key + " program"] = OneLine(yaml);
    std::string types;
    for (const auto& op : program.Root()->AllOps()) types += op->Type() + " ";
    records[key + " ops"] = types;
  }
  return records;
}

// The op files' program rewrites over the C ABI (flash_attn_fusion.cc,
// fc's fusion pattern) leave the programs the C++ build's leave.
TEST(StdSdk, RewritesAsTheCxxBuild) {
  test_util::TempDir dir("std_sdk_rewrites");
  const std::string sdk_file = dir.Path("sdk.txt"), std_file = dir.Path("std.txt");
  ASSERT_EQ(InChild([&] {
              for (const std::string& path : kShipped) PluginManager::Instance().Load(path);
              WriteRecords(Rewrites(), sdk_file);
            }),
            0);
  ASSERT_EQ(InChild([&] {
              PluginManager::Instance().Load(STD_CXX_OPS);
              WriteRecords(Rewrites(), std_file);
            }),
            0);
  const Records sdk = ReadRecords(sdk_file), standard = ReadRecords(std_file);
  EXPECT_EQ(sdk, standard);
  // The rewrites apply: flash_attn replaces the attention, causal without
  // its constant mask.
  for (const char* mask : {"fed_mask", "constant_mask"}) {
    const std::string ops = standard.count(std::string("rewrites ") + mask + " ops")
                                ? standard.at(std::string("rewrites ") + mask + " ops")
                                : "";
    EXPECT_NE(ops.find("flash_attn"), std::string::npos) << mask << ": " << ops;
    EXPECT_EQ(ops.find("softmax"), std::string::npos) << mask << ": " << ops;
  }
  EXPECT_EQ(standard.at("rewrites constant_mask ops").find("tril_triu"), std::string::npos)
      << standard.at("rewrites constant_mask ops");
}

// Control flow over the C ABI (version 6): while and conditional_block run
// their blocks in child scopes, keep them for the gradient and build their
// grad ops from the grad blocks. Programs with a loop-carried var, a nested
// loop and a branch taken and not, at float64 and float32, through both
// executors: the values, the gradients, the programs the backward builder
// leaves, and the errors (the iteration cap, a loop input left out).
constexpr const char* kLoop = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: DTYPE}
      w: {shape: [2, 3], dtype: DTYPE}
      i: {shape: [1], dtype: int64}
      n: {shape: [1], dtype: int64}
      kn: {shape: [1], dtype: int64}
      scopes: {type: step_scopes}
    ops:
      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [c]}}
      - type: while
        inputs: {X: [x, w, i, n, kn], Condition: [c]}
        outputs: {Out: [x, i, c], StepScopes: [scopes]}
        attrs: {sub_block: 1}
      - {type: mean, inputs: {X: [x]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    vars:
      k: {shape: [1], dtype: int64}
      inner: {type: step_scopes}
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: tanh, inputs: {X: [xw]}, outputs: {Out: [x]}}
      - {type: fill_constant, outputs: {Out: [k]}, attrs: {shape: [1], dtype: int64, value: 0.0}}
      - {type: less_than, inputs: {X: [k], Y: [kn]}, outputs: {Out: [kc]}}
      - type: while
        inputs: {X: [x, w, k, kn], Condition: [kc]}
        outputs: {Out: [x, k, kc], StepScopes: [inner]}
        attrs: {sub_block: 2}
      - {type: increment, inputs: {X: [i]}, outputs: {Out: [i]}}
      - {type: less_than, inputs: {X: [i], Y: [n]}, outputs: {Out: [c]}}
  - idx: 2
    parent: 1
    ops:
      - {type: elementwise_add, inputs: {X: [x], Y: [w]}, outputs: {Out: [xa]}}
      - {type: scale, inputs: {X: [xa]}, outputs: {Out: [x]}, attrs: {scale: 0.5}}
      - {type: increment, inputs: {X: [k]}, outputs: {Out: [k]}}
      - {type: less_than, inputs: {X: [k], Y: [kn]}, outputs: {Out: [kc]}}
)";

constexpr const char* kBranch = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: DTYPE}
      w: {shape: [2, 3], dtype: DTYPE}
      flag: {shape: [1], dtype: bool}
      branch: {type: step_scopes}
    ops:
      - {type: assign, inputs: {X: [x]}, outputs: {Out: [y]}}
      - type: conditional_block
        inputs: {Cond: [flag], Input: [x, w]}
        outputs: {Out: [y], Scope: [branch]}
        attrs: {sub_block: 1, is_scalar_condition: true}
      - {type: elementwise_mul, inputs: {X: [y], Y: [x]}, outputs: {Out: [z]}}
      - {type: mean, inputs: {X: [z]}, outputs: {Out: [loss]}}
  - idx: 1
    parent: 0
    ops:
      - {type: elementwise_mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [t]}}
      - {type: sigmoid, inputs: {X: [t]}, outputs: {Out: [y]}}
)";

std::string WithDType(std::string text, DType dtype) {
  for (size_t at; (at = text.find("DTYPE")) != std::string::npos;) text.replace(at, 5, DTypeName(dtype));
  return text;
}

// Runs `program` with `feeds` and records `fetches` under `key`; an error
// is recorded as its message.
void RecordProgram(const ProgramDesc& program, const std::vector<op_case::Input>& feeds,
                   const std::vector<std::string>& fetches, const std::string& executor, const ExecutorOptions& options,
                   const std::string& key, Records* records) {
  try {
    auto exec = CreateExecutor(executor, HostDevice(), options);
    Scope scope;
    for (const op_case::Input& in : feeds) op_case::Write(scope, in, HostDevice());
    exec->Run(program, 0, scope);
    for (const std::string& name : fetches) {
      const Variable* v = scope.FindVar(name);
      if (v == nullptr || !v->GetTensor().IsInitialized()) {
        (*records)[key + " " + name] = "no value";
        continue;
      }
      const op_case::Doubles values = op_case::Read(v->GetTensor());
      std::ostringstream first;
      first.precision(17);
      for (size_t i = 0; i < values.size() && i < 4; ++i) first << values[i] << ' ';
      (*records)[key + " " + name] =
          StrCat(ShapeToString(v->GetTensor().GetShape()), " ", Digest(values), " ", first.str());
    }
    // The forward while kept one scope per iteration for its grad op, which
    // freed them as it used them.
    if (const Variable* v = scope.FindVar("scopes"))
      (*records)[key + " scopes kept"] = std::to_string(const_cast<Variable*>(v)->GetStepScopes().size());
  } catch (const std::exception& e) {
    (*records)[key + " refused"] = OneLine(e.what());
  }
}

// The program YAML less the header naming the plugins the ops came from.
std::string ProgramText(const ProgramDesc& program) {
  std::string yaml = ProgramToYaml(program);
  const size_t from = yaml.find("plugins:"), to = yaml.find("blocks:");
  if (from != std::string::npos && to != std::string::npos && from < to) yaml.erase(from, to - from);
  return OneLine(yaml);
}

Records ControlFlowRuns() {
  Records records;
  auto values = [](size_t n, double a, double b) {
    op_case::Doubles v;
    for (size_t i = 0; i < n; ++i) v.push_back(a + b * static_cast<double>(i % 5));
    return v;
  };
  auto index = [](const std::string& name, double v) { return op_case::Input{name, DType::kInt64, {1}, {v}}; };
  for (DType dtype : {DType::kFloat64, DType::kFloat32}) {
    const std::string d = DTypeName(dtype);
    const std::vector<op_case::Input> loop_feeds = {{"x", dtype, {2, 3}, values(6, -0.7, 0.3)},
                                                    {"w", dtype, {2, 3}, values(6, 0.9, -0.2)},
                                                    index("i", 0),
                                                    index("n", 2),
                                                    index("kn", 3)};
    const std::vector<std::string> loop_fetches = {"loss", "x", "i", "x@GRAD", "w@GRAD"};
    try {
      ProgramDesc program = ParseProgram(WithDType(kLoop, dtype), "loop.yaml");
      AppendBackward(program, "loss", {}, {});
      records["loop/" + d + " program"] = ProgramText(program);
      for (const char* executor : {"sequential", "taskgraph"}) {
        RecordProgram(program, loop_feeds, loop_fetches, executor, {}, "loop/" + d + "/" + executor, &records);
        // No iteration: the gradients pass through.
        std::vector<op_case::Input> none = loop_feeds;
        none[3] = index("n", 0);
        RecordProgram(program, none, loop_fetches, executor, {}, "loop/" + d + "/" + executor + "/none", &records);
      }
      ExecutorOptions capped;
      capped.max_loop_iterations = 1;
      RecordProgram(program, loop_feeds, loop_fetches, "sequential", capped, "loop/" + d + "/capped", &records);
      std::string is_test = WithDType(kLoop, dtype);
      is_test.replace(is_test.find("attrs: {sub_block: 1}"), 21, "attrs: {sub_block: 1, is_test: true}");
      RecordProgram(ParseProgram(is_test, "loop.yaml"), loop_feeds, {"loss", "x"}, "sequential", {},
                    "loop/" + d + "/is_test", &records);
    } catch (const std::exception& e) {
      records["loop/" + d + " error"] = OneLine(e.what());
    }
    try {
      std::string missing = WithDType(kLoop, dtype);
      missing.replace(missing.find("X: [x, w, i, n, kn]"), 19, "X: [x, i, n, kn]");
      ParseProgram(missing, "missing.yaml");
      records["loop/" + d + "/missing"] = "accepted";
    } catch (const std::exception& e) {
      records["loop/" + d + "/missing refused"] = OneLine(e.what());
    }
    for (const bool flag : {true, false}) {
      const std::string key = "branch/" + d + (flag ? "/taken" : "/not_taken");
      try {
        ProgramDesc program = ParseProgram(WithDType(kBranch, dtype), "branch.yaml");
        AppendBackward(program, "loss", {}, {});
        records[key + " program"] = ProgramText(program);
        const std::vector<op_case::Input> feeds = {{"x", dtype, {2, 3}, values(6, -0.7, 0.3)},
                                                   {"w", dtype, {2, 3}, values(6, 0.9, -0.2)},
                                                   {"flag", DType::kBool, {1}, {flag ? 1.0 : 0.0}}};
        for (const char* executor : {"sequential", "taskgraph"})
          RecordProgram(program, feeds, {"loss", "y", "x@GRAD", "w@GRAD"}, executor, {}, key + "/" + executor,
                        &records);
        // An op of the block that fails at run time (w fed [3, 2]): the
        // message that comes out through the branch's kernel.
        std::vector<op_case::Input> bad = feeds;
        bad[1].shape = {3, 2};
        RecordProgram(program, bad, {"loss"}, "sequential", {}, key + "/bad_w", &records);
      } catch (const std::exception& e) {
        records[key + " refused"] = OneLine(e.what());
      }
    }
    // Without is_scalar_condition: taken when every Cond holds an element.
    for (const bool empty : {false, true}) {
      const std::string key = "branch/" + d + (empty ? "/empty_cond" : "/full_conds");
      try {
        std::string text = WithDType(kBranch, dtype);
        text.replace(text.find("Cond: [flag]"), 12, "Cond: [c1, c2]");
        text.replace(text.find("is_scalar_condition: true"), 25, "is_scalar_condition: false");
        const std::string flag = "flag: {shape: [1], dtype: bool}";
        text.replace(text.find(flag), flag.size(),
                     "c1: {shape: [2], dtype: float32}\n      c2: {shape: [-1], dtype: int64}");
        ProgramDesc program = ParseProgram(text, "branch.yaml");
        AppendBackward(program, "loss", {}, {});
        records[key + " program"] = ProgramText(program);
        const std::vector<op_case::Input> feeds = {
            {"x", dtype, {2, 3}, values(6, -0.7, 0.3)},
            {"w", dtype, {2, 3}, values(6, 0.9, -0.2)},
            {"c1", DType::kFloat32, {2}, {0.0, 0.0}},
            empty ? op_case::Input{"c2", DType::kInt64, {0}, {}} : op_case::Input{"c2", DType::kInt64, {1}, {7.0}}};
        for (const char* executor : {"sequential", "taskgraph"})
          RecordProgram(program, feeds, {"loss", "y", "x@GRAD", "w@GRAD"}, executor, {}, key + "/" + executor,
                        &records);
      } catch (const std::exception& e) {
        records[key + " refused"] = OneLine(e.what());
      }
    }
  }
  return records;
}

// The shipped control_flow plugin (C ABI) against the same files built on
// the C++ ABI: the same values, gradients, programs and messages.
TEST(StdSdk, ControlFlowRunsAsTheStandardBuild) {
  test_util::TempDir dir("std_sdk_cf_runs");
  const std::string sdk_file = dir.Path("sdk.txt"), std_file = dir.Path("std.txt");
  const std::string math = std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libmath_ops.so";
  const std::string nn = std::string(NABLA_STANDARD_PLUGIN_DIR) + "/libnn_ops.so";
  ASSERT_EQ(InChild([&] {
              for (const std::string& p : {math, nn, std::string(STD_SDK_CF)}) PluginManager::Instance().Load(p);
              WriteRecords(ControlFlowRuns(), sdk_file);
            }),
            0);
  ASSERT_EQ(InChild([&] {
              for (const std::string& p : {math, nn, std::string(STD_CXX_CF)}) PluginManager::Instance().Load(p);
              WriteRecords(ControlFlowRuns(), std_file);
            }),
            0);
  const Records sdk = ReadRecords(sdk_file), standard = ReadRecords(std_file);
  EXPECT_EQ(sdk, standard);
  for (const auto& [key, v] : standard) EXPECT_EQ(key.find(" error"), std::string::npos) << key << ": " << v;
  auto value = [&](const std::string& key) { return sdk.count(key) ? sdk.at(key) : "missing " + key; };
  // The loops ran (i counted to 2), the grad ops used and freed every step
  // scope, and a branch not taken passes y = x through.
  for (const char* d : {"float64", "float32"}) {
    const std::string loop = std::string("loop/") + d;
    EXPECT_EQ(value(loop + "/taskgraph i").substr(0, 4), "[1] ") << value(loop + "/taskgraph i");
    EXPECT_NE(value(loop + "/taskgraph i").find(" 2 "), std::string::npos) << value(loop + "/taskgraph i");
    EXPECT_EQ(value(loop + "/sequential scopes kept"), "0");
    EXPECT_EQ(value(loop + "/sequential x@GRAD").substr(0, 7), "[2, 3] ");
    EXPECT_NE(value(loop + " program").find("while_grad"), std::string::npos);
    EXPECT_NE(value(loop + "/capped refused").find("max_loop_iterations = 1"), std::string::npos)
        << value(loop + "/capped refused");
    EXPECT_NE(value(loop + "/missing refused").find("missing.yaml:"), std::string::npos)
        << value(loop + "/missing refused");
    EXPECT_NE(value(loop + "/missing refused").find("these are missing: w"), std::string::npos);
    EXPECT_EQ(value(loop + "/is_test x"), value(loop + "/sequential x"));
    const std::string branch = std::string("branch/") + d;
    EXPECT_NE(value(branch + "/taken program").find("conditional_block_grad"), std::string::npos);
    EXPECT_NE(value(branch + "/taken/sequential y"), value(branch + "/not_taken/sequential y"));
    EXPECT_EQ(value(branch + "/not_taken/taskgraph w@GRAD").substr(0, 7), "[2, 3] ");
    EXPECT_NE(value(branch + "/taken/bad_w refused").find("elementwise_mul"), std::string::npos)
        << value(branch + "/taken/bad_w refused");
  }
  std::cout << "compared " << standard.size() << " records\n";
}

// The ops of the plugins just loaded with float32 kernels for `device`
// (their OpenCL kernel files), run there: forward and grad ops, float32 and
// float64 where the device has it, at the cases' shapes and kShapes.
Records ComputeOn(const std::vector<std::string>& types, Device& device, bool fp64) {
  Records records;
  auto registry = CurrentRegistry();
  std::string list;
  for (const std::string& type : types) {
    if (!registry->FindKernel(type, device.Type(), DType::kFloat32)) continue;
    list += type + " ";
    for (const GradCheckSpec& spec : registry->Get(type).grad_checks)
      for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
        if (dtype == DType::kFloat64 && !fp64) continue;
        const std::string key = type + "/" + spec.name + "/" + DTypeName(dtype);
        RunCase(type, spec, dtype, nullptr, key, &records, device);
        for (const Shape& shape : kShapes)
          RunCase(type, spec, dtype, &shape, key + ShapeToString(shape), &records, device);
      }
  }
  records["ops"] = list;
  return records;
}

// The shipped plugins' OpenCL kernels (their *_opencl.cc files through
// nabla/opencl/kernel.h over the OpenCL device plugin's C table) against the
// same files built over the C++ ABI (std_cxx_ops), on the OpenCL
// device: the same bits, each output made on the device. Exit code 77 from a
// child: no OpenCL device here.
TEST(StdSdk, OpenClKernelsSameBitsAsTheCxxBuild) {
  if (STD_OPENCL_FILES == 0) GTEST_SKIP() << "built without OpenCL";
  test_util::TempDir dir("std_sdk_cl");
  const std::string sdk_file = dir.Path("sdk.txt"), std_file = dir.Path("std.txt");
  constexpr int kNoDevice = 77;
  // Each process opens the device itself: OpenCL must not be started before
  // a fork.
  auto run = [&](const std::vector<std::string>& plugins, const std::string& file, const std::string* only) {
    return InChild([&] {
      DeviceListing listing;
      if (!FindDeviceListing("opencl:0", &listing)) std::_Exit(kNoDevice);
      for (const std::string& p : plugins) PluginManager::Instance().Load(p);
      std::vector<std::string> types = only ? Split(*only) : ForwardOpsOf(kShippedNames);
      Device& device = ResolveDevice("opencl:0");
      Records records = ComputeOn(types, device, listing.fp64);
#if STD_OPENCL_FILES
      // Every case's tensors are gone: what the device still holds is a
      // kernel's leak (a Staging or Scratch buffer never given back).
      records["device bytes held after the cases"] =
          std::to_string(static_cast<opencl::OpenClDevice&>(device).LiveBytes());
#endif
      WriteRecords(records, file);
    });
  };
  const int rc = run(kShipped, sdk_file, nullptr);
  if (rc == kNoDevice) GTEST_SKIP() << "no OpenCL device";
  ASSERT_EQ(rc, 0);
  const Records sdk = ReadRecords(sdk_file);
  ASSERT_TRUE(sdk.count("ops"));
  ASSERT_TRUE(sdk.count("device bytes held after the cases"));
  EXPECT_EQ(sdk.at("device bytes held after the cases"), "0");
  const std::string ops = sdk.at("ops");
  // Each listed kernel file registered kernels (unary and activation: a
  // dozen ops or more each).
  EXPECT_GE(Split(ops).size(), static_cast<size_t>(STD_OPENCL_FILES)) << ops;
  ASSERT_EQ(run({STD_CXX_OPS}, std_file, &ops), 0);
  const Records standard = ReadRecords(std_file);
  size_t compared = 0, on_device = 0;
  for (const auto& [key, want] : standard) {
    auto it = sdk.find(key);
    if (it == sdk.end()) {
      ADD_FAILURE() << key << ": the C++ ABI build has it, the C ABI build does not";
      continue;
    }
    EXPECT_EQ(it->second, want) << key;
    EXPECT_EQ(key.find(" error"), std::string::npos) << key << ": " << want;
    if (it->second.find("(on the device)") != std::string::npos) ++on_device;
    ++compared;
  }
  for (const auto& [key, value] : sdk)
    EXPECT_TRUE(standard.count(key)) << key << ": the C ABI build has it, the C++ ABI build does not: " << value;
  EXPECT_GT(on_device, Split(ops).size() * 6) << "the kernels ran elsewhere than on the OpenCL device";
  std::cout << "compared " << compared << " records (" << on_device << " made on the device) of " << Split(ops).size()
            << " ops\n";
}

}  // namespace
}  // namespace nabla
