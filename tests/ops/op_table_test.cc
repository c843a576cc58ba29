// The op test table, ggml's test-backend-ops pattern: one row per op case
// (op_table.inc, written by scripts/op_table_reference.py from NumPy and
// PyTorch), driven through the public registry and executors only.
//
//   OpTable.<op>            every row of the op, in every dtype it lists, on
//                           the CPU against the reference, within the row's
//                           tolerance
//   OpTableOn_<dev>.<op>    the same rows plus their grad ops, and the op's
//                           GradCheck cases, on every other registered device
//                           (OpenCL, null, ...), against the CPU
//   GradCheck.<op>          the op's GradCheck cases: float64 central
//                           differences, and its float32 grad kernels against
//                           its float64 ones
//   GradCheckOn_<dev>.<op>  the float64 check on a device with float64
//                           kernels of the op
//   OpTableCoverage.*       every op the standard plugins register has a row,
//                           or a line in kNoRow saying why not and where it
//                           is tested
//
// Everything runs in checked mode (nabla/checked.h): a kernel that writes
// past or before its output, into an input, or leaves an output of another
// shape than inferred fails its row. The sweep rows (sweep_cases in the
// script: Paddle's shape rules over ranks 1-4) also get a float64 gradient
// check on their inputs, so their grad kernels run checked too.
//
// The device list and the ops come from the registries once the standard
// plugins load, so this file has its own main().
#include <algorithm>
#include <array>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "common/op_case.h"
#include "nabla/backward.h"
#include "nabla/checked.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device_registry.h"
#include "nabla/executor.h"
#include "nabla/gradcheck.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program.h"
#include "nabla/scope.h"

namespace nabla::op_table {
namespace {

using op_case::Doubles;

struct TableTensor {
  std::string slot;
  std::string dtype;  // "" = the dtype under test
  Shape shape;
  Doubles values;
};

struct Row {
  std::string name;
  std::string op;
  std::vector<TableTensor> inputs;  // a duplicable slot repeats its name
  AttributeMap attrs;
  std::vector<TableTensor> outputs;
  std::vector<std::string> dtypes;
  std::array<double, 2> tol;  // float32, float64: |got - want| <= tol * (1 + |want|)
  // (output slot, input slot or "slot:index"): written into the input's var.
  std::vector<std::pair<std::string, std::string>> inplace;
  std::vector<std::string> dtype_attrs;  // set to the dtype under test
  bool grad_check = false;               // a sweep row: also a float64 gradient check on its inputs
};

// The sweep rows (op_sweep.inc): "name|op|attrs|inputs|outputs", attrs
// "name=T:value" joined by ';' (T: i int, b bool, f float, s string, I int
// list), tensors "slot:dtype:dims:values" joined by ';', lists by ','. As
// strings because hundreds of rows as aggregates took GCC minutes.
const char* const kSweepRows[] = {
#include "op_sweep.inc"
};

std::vector<std::string> SplitOn(const std::string& s, char sep) {
  std::vector<std::string> parts;
  if (s.empty()) return parts;
  size_t begin = 0;
  for (size_t end; (end = s.find(sep, begin)) != std::string::npos; begin = end + 1)
    parts.push_back(s.substr(begin, end - begin));
  parts.push_back(s.substr(begin));
  return parts;
}

std::vector<TableTensor> ParseTensors(const std::string& s) {
  std::vector<TableTensor> out;
  for (const std::string& t : SplitOn(s, ';')) {
    const std::vector<std::string> f = SplitOn(t, ':');
    if (f.size() != 4) throw std::runtime_error("op_sweep.inc: bad tensor " + t);
    TableTensor tensor{f[0], f[1], {}, {}};
    for (const std::string& d : SplitOn(f[2], ',')) tensor.shape.push_back(std::stoll(d));
    for (const std::string& v : SplitOn(f[3], ',')) tensor.values.push_back(std::strtod(v.c_str(), nullptr));
    out.push_back(std::move(tensor));
  }
  return out;
}

Row ParseSweepRow(const std::string& line) {
  const std::vector<std::string> f = SplitOn(line, '|');
  if (f.size() != 5) throw std::runtime_error("op_sweep.inc: bad row " + line.substr(0, 80));
  Row row;
  row.name = f[0];
  row.op = f[1];
  for (const std::string& a : SplitOn(f[2], ';')) {
    const size_t eq = a.find('=');
    const std::string name = a.substr(0, eq), value = a.substr(eq + 3);
    switch (a.at(eq + 1)) {
      case 'i':
        row.attrs[name] = std::stoi(value);
        break;
      case 'b':
        row.attrs[name] = value == "1";
        break;
      case 'f':
        row.attrs[name] = std::stof(value);
        break;
      case 's':
        row.attrs[name] = value;
        break;
      case 'I': {
        std::vector<int> ints;
        for (const std::string& v : SplitOn(value, ',')) ints.push_back(std::stoi(v));
        row.attrs[name] = ints;
        break;
      }
      default:
        throw std::runtime_error("op_sweep.inc: bad attribute " + a);
    }
  }
  row.inputs = ParseTensors(f[3]);
  row.outputs = ParseTensors(f[4]);
  row.dtypes = {"float32", "float64"};
  row.tol = {1e-5, 1e-12};
  row.grad_check = true;
  return row;
}

const std::vector<Row>& Rows() {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  (void)kInf;
  static const std::vector<Row> rows = [] {
    std::vector<Row> r = {
#include "op_table.inc"
    };
    for (const char* line : kSweepRows) r.push_back(ParseSweepRow(line));
    return r;
  }();
  return rows;
}

// Ops without a single-op row, why, and where they are tested. A _grad op
// of a registered op is covered by its forward op's GradCheck cases and
// device runs, and needs no line here.
const std::map<std::string, std::string> kNoRow = {
    {"uniform_random", "random: tests/ops/random_ops_test.cc checks range, moments and seeding"},
    {"gaussian_random", "random: tests/ops/random_ops_test.cc checks moments and seeding"},
    {"xavier_uniform", "random: tests/ops/random_ops_test.cc checks the fan-based bound"},
    {"xavier_normal", "random: tests/ops/random_ops_test.cc checks the fan-based std"},
    {"kaiming_uniform", "random: tests/ops/random_ops_test.cc checks the fan-in bound"},
    {"kaiming_normal", "random: tests/ops/random_ops_test.cc checks the fan-out std"},
    {"dropout", "random: tests/ops/random_ops_test.cc checks masks, scaling and seeds; GradCheck fixes the seed"},
    {"while", "runs a sub-block: tests/control_flow/control_flow_test.cc"},
    {"conditional_block", "runs a sub-block: tests/control_flow/control_flow_test.cc"},
    {"write_to_array", "works on a tensor array var: tests/control_flow/control_flow_test.cc"},
    {"read_from_array", "works on a tensor array var: tests/control_flow/control_flow_test.cc"},
    {"array_length", "works on a tensor array var: tests/control_flow/control_flow_test.cc"},
    {"c_allreduce_sum", "needs a communicator of several ranks: tests/distributed/collective_ops_test.cc"},
    {"c_broadcast", "needs a communicator of several ranks: tests/distributed/collective_ops_test.cc"},
};

DType DTypeOf(const std::string& name, DType row_dtype) {
  if (name.empty()) return row_dtype;
  DType d;
  if (!ParseDType(name, &d)) throw std::runtime_error("op_table.inc: unknown dtype " + name);
  return d;
}

// One row in one dtype as a single-op program: its op, the fed inputs and
// the output vars in the row's output order.
struct Instance {
  OpDesc op;
  std::vector<op_case::Input> inputs;
  std::vector<std::string> outputs;
};

Instance Instantiate(const Row& row, DType dtype) {
  Instance in;
  VarNameMap ins, outs;
  for (const TableTensor& t : row.inputs) {
    std::string name = t.slot + "_" + std::to_string(ins[t.slot].size());
    ins[t.slot].push_back(name);
    in.inputs.push_back({name, DTypeOf(t.dtype, dtype), t.shape, t.values});
  }
  for (const TableTensor& t : row.outputs) {
    std::string name = "out_" + t.slot + "_" + std::to_string(outs[t.slot].size());
    for (const auto& [out_slot, in_slot] : row.inplace) {
      if (out_slot != t.slot) continue;
      size_t colon = in_slot.find(':');
      const auto& vars = ins.at(in_slot.substr(0, colon));
      name = vars.at(colon == std::string::npos ? 0 : std::stoul(in_slot.substr(colon + 1)));
    }
    outs[t.slot].push_back(name);
    in.outputs.push_back(name);
  }
  AttributeMap attrs = row.attrs;
  for (const std::string& a : row.dtype_attrs) attrs[a] = std::string(DTypeName(dtype));
  in.op = OpDesc(row.op, ins, outs, attrs);
  FillDefaultAttrs(in.op, *CurrentRegistry());
  return in;
}

struct Var {
  Shape shape;
  DType dtype;
  Doubles values;  // empty on the null device, which holds no data
};
using Vars = std::map<std::string, Var>;

// Runs `ops` through the sequential executor on `device` and reads back
// every output var. An output of an op with a kernel for `device` must be
// there (no silent CPU fallback for ops the device claims).
Vars Run(const std::vector<OpDesc>& ops, const std::vector<op_case::Input>& inputs, Device& device) {
  ProgramDesc program;
  for (const OpDesc& op : ops) program.Root()->AppendOp(op);
  Scope scope;
  for (const op_case::Input& in : inputs) op_case::Write(scope, in, device);
  ExecutorOptions options;
  options.seed = 5;
  CreateExecutor("sequential", device, options)->Run(program, 0, scope);
  Vars vars;
  for (const OpDesc& op : ops) {
    for (const std::string& name : op.OutputArgumentNames()) {
      if (name == kEmptyVarName) continue;
      const Tensor& t = scope.FindVar(name)->GetTensor();
      if (!t.IsInitialized()) continue;
      if (CurrentRegistry()->FindKernel(op.Type(), device.Type(), t.GetDType())) {
        EXPECT_EQ(t.GetDevice(), &device) << name << " written by '" << op.Type() << "' is not on " << device.Name();
      }
      vars[name] = {t.GetShape(), t.GetDType(), IsDryRun(device) ? Doubles{} : op_case::Read(t)};
    }
  }
  return vars;
}

std::string What(const Row& row, DType dtype) { return row.name + "/" + DTypeName(dtype); }

double TolFor(const Row& row, DType dtype) {
  if (dtype == DType::kFloat32) return row.tol[0];
  if (dtype == DType::kFloat64) return row.tol[1];
  return 0.0;  // integers and bools match exactly
}

void ExpectValues(const Doubles& got, const Doubles& want, double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << "[" << i << "] = " << got[i] << ", expected NaN";
      continue;
    }
    if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << what << "[" << i << "]";
      continue;
    }
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << "[" << i << "]";
  }
}

// op_case::BuildCase runs a check case in float32; a case whose attributes
// name a dtype (cast's in_dtype) cannot change it. Such ops' rows cover
// every dtype pair instead.
bool NamesADType(const GradCheckSpec& spec) {
  for (const auto& [name, value] : spec.attrs) {
    DType d;
    if (const auto* s = std::get_if<std::string>(&value); s && ParseDType(*s, &d)) return true;
  }
  return false;
}

std::vector<DType> DTypesOf(const Row& row) {
  std::vector<DType> out;
  for (const std::string& d : row.dtypes) out.push_back(DTypeOf(d, DType::kFloat32));
  return out;
}

std::vector<const Row*> RowsOf(const std::string& op) {
  std::vector<const Row*> out;
  for (const Row& r : Rows())
    if (r.op == op) out.push_back(&r);
  return out;
}

// ---------------------------------------------------------------- the CPU against the reference

void CheckForward(const Row& row, DType dtype) {
  SCOPED_TRACE(What(row, dtype));
  Instance in = Instantiate(row, dtype);
  Vars got = Run({in.op}, in.inputs, HostDevice());
  ASSERT_EQ(in.outputs.size(), row.outputs.size());
  for (size_t i = 0; i < row.outputs.size(); ++i) {
    const TableTensor& want = row.outputs[i];
    const std::string what = row.op + " " + want.slot + " (" + in.outputs[i] + ")";
    auto it = got.find(in.outputs[i]);
    ASSERT_NE(it, got.end()) << what << " was not written";
    const DType want_dtype = DTypeOf(want.dtype, dtype);
    EXPECT_EQ(it->second.dtype, want_dtype) << what;
    ASSERT_EQ(it->second.shape, want.shape)
        << what << ": " << ShapeToString(it->second.shape) << " vs expected " << ShapeToString(want.shape);
    const double tol = TolFor(row, want_dtype);
    ExpectValues(it->second.values, want.values, tol, tol, what);
  }
}

// A row's inputs as a gradient check case: its values (float inputs in
// float64), its attributes, every output graded.
void CheckRowGradient(const Row& row) {
  SCOPED_TRACE(row.name + " gradient");
  GradCheckSpec spec;
  spec.name = row.name;
  spec.attrs = row.attrs;
  for (const TableTensor& t : row.inputs) {
    GradCheckInput in;
    in.slot = t.slot;
    in.shape = t.shape;
    in.dtype = DTypeOf(t.dtype, DType::kFloat64);
    in.values = t.values;
    in.check = IsFloating(in.dtype);
    spec.inputs.push_back(std::move(in));
  }
  for (const TableTensor& t : row.outputs) {
    auto it = std::find_if(spec.outputs.begin(), spec.outputs.end(), [&](const auto& o) { return o.first == t.slot; });
    if (it == spec.outputs.end()) {
      spec.outputs.emplace_back(t.slot, 1);
    } else {
      ++it->second;
    }
  }
  const GradCheckResult r = CheckGradient(row.op, spec, HostDevice());
  std::string failures;
  for (const std::string& f : r.failures) failures += "\n  " + f;
  EXPECT_TRUE(r.ok) << row.name << " (max error " << r.max_error << "):" << failures;
}

// ---------------------------------------------------------------- every device against the CPU

// The row's forward op and, for float rows of an op with a gradient, the
// grad ops its maker emits, fed random upstream gradients: one program
// that runs the op's forward and backward kernels.
std::pair<std::vector<OpDesc>, std::vector<op_case::Input>> WithGradOps(const Row& row, DType dtype) {
  Instance in = Instantiate(row, dtype);
  std::vector<OpDesc> ops = {in.op};
  std::vector<op_case::Input> inputs = in.inputs;
  const OpInfo& info = CurrentRegistry()->Get(row.op);
  if (!IsFloating(dtype) || !info.HasGradient() || !row.inplace.empty()) return {ops, inputs};
  std::unordered_set<std::string> no_grad;
  for (const op_case::Input& x : in.inputs)
    if (!IsFloating(x.dtype)) no_grad.insert(x.name);
  std::vector<std::unique_ptr<OpDesc>> grads = MakeGradOps(in.op, no_grad);
  if (grads.empty()) return {ops, inputs};
  Vars fwd = Run(ops, inputs, HostDevice());
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const std::string& name : in.outputs) {
    const Var& v = fwd.at(name);
    op_case::Input g{GradVarName(name), v.dtype, v.shape, {}};
    for (int64_t i = 0; i < NumElements(v.shape); ++i) g.values.push_back(IsFloating(v.dtype) ? u(rng) : 0.0);
    inputs.push_back(std::move(g));
  }
  for (auto& g : grads) {
    FillDefaultAttrs(*g, *CurrentRegistry());
    ops.push_back(*g);
  }
  return {ops, inputs};
}

// Same vars, shapes and dtypes; values within the row's tolerance or
// float32 round-off of a different summation order, whichever is larger.
void ExpectSameAsCpu(const Vars& cpu, const Vars& dev, bool dry_run, double tol32, double tol64,
                     const std::string& what) {
  ASSERT_EQ(cpu.size(), dev.size()) << what;
  for (const auto& [name, want] : cpu) {
    auto it = dev.find(name);
    ASSERT_NE(it, dev.end()) << what << ": the device run left no " << name;
    EXPECT_EQ(it->second.shape, want.shape) << what << ": " << name;
    EXPECT_EQ(it->second.dtype, want.dtype) << what << ": " << name;
    if (dry_run || it->second.shape != want.shape) continue;
    double atol = 0, rtol = 0;
    if (want.dtype == DType::kFloat32) {
      atol = std::max(tol32, 2e-5);
      rtol = std::max(tol32, 2e-4);
    } else if (want.dtype == DType::kFloat64) {
      atol = std::max(tol64, 1e-10);
      rtol = std::max(tol64, 1e-9);
    }
    ExpectValues(it->second.values, want.values, atol, rtol, what + ": " + name);
  }
}

bool Fp64(const std::string& spec) {
  DeviceListing listing;
  return FindDeviceListing(spec, &listing) && listing.fp64;
}

// A row that feeds a tensor-valued attribute (a kNoGrad slot: reshape's
// Shape) needs that tensor's values to infer shapes, which a dry run on the
// null device does not hold.
bool FeedsATensorAttr(const Row& row) {
  const OpSchema& schema = CurrentRegistry()->Get(row.op).schema;
  for (const TableTensor& t : row.inputs)
    if (const SlotDef* s = schema.FindInput(t.slot); s && s->no_grad) return true;
  return false;
}

void CheckOnDevice(const std::string& op, const std::string& spec) {
  Device& dev = ResolveDevice(spec);
  const bool fp64 = Fp64(spec);
  for (const Row* row : RowsOf(op)) {
    if (IsDryRun(dev) && FeedsATensorAttr(*row)) continue;
    for (DType dtype : DTypesOf(*row)) {
      if (dtype == DType::kFloat64 && !fp64) continue;
      SCOPED_TRACE(What(*row, dtype));
      auto [ops, inputs] = WithGradOps(*row, dtype);
      ExpectSameAsCpu(Run(ops, inputs, HostDevice()), Run(ops, inputs, dev), IsDryRun(dev), row->tol[0], row->tol[1],
                      What(*row, dtype) + " on " + spec);
    }
  }
  // The GradCheck cases as float32 programs: the check cases are where
  // each op's author put its edge cases.
  for (const GradCheckSpec& gc : CurrentRegistry()->Get(op).grad_checks) {
    if (NamesADType(gc)) continue;
    SCOPED_TRACE(op + " check case " + gc.name);
    const op_case::Case c = op_case::BuildCase(op, gc);
    ExpectSameAsCpu(Run(c.ops, c.inputs, HostDevice()), Run(c.ops, c.inputs, dev), IsDryRun(dev), 0, 0,
                    op + "/" + gc.name + " on " + spec);
  }
}

// ---------------------------------------------------------------- gradients

void ExpectGradCheck(const std::vector<GradCheckResult>& results, const std::string& where) {
  for (const GradCheckResult& r : results) {
    std::string failures;
    for (const std::string& f : r.failures) failures += "\n  " + f;
    EXPECT_TRUE(r.ok) << r.op_type << " case '" << r.case_name << "' on " << where << " (max error " << r.max_error
                      << "):" << failures;
  }
}

// The numeric check runs the float64 kernels; the float32 grad kernels are
// held to them: each check case's float32 program (op_case::BuildCase) run
// again with its float inputs in float64, every output compared.
void ExpectFloat32GradsMatchFloat64(const std::string& op) {
  for (const GradCheckSpec& gc : CurrentRegistry()->Get(op).grad_checks) {
    if (NamesADType(gc)) continue;
    SCOPED_TRACE(op + " check case " + gc.name);
    op_case::Case c = op_case::BuildCase(op, gc);
    std::vector<op_case::Input> as64 = c.inputs;
    for (op_case::Input& in : as64)
      if (in.dtype == DType::kFloat32) in.dtype = DType::kFloat64;
    Vars v32 = Run(c.ops, c.inputs, HostDevice()), v64 = Run(c.ops, as64, HostDevice());
    ASSERT_EQ(v32.size(), v64.size());
    for (const auto& [name, want] : v64) {
      const Var& got = v32.at(name);
      ASSERT_EQ(got.shape, want.shape) << name;
      if (!IsFloating(want.dtype)) {
        EXPECT_EQ(got.values, want.values) << name;
        continue;
      }
      ExpectValues(got.values, want.values, 1e-4, 1e-4, op + " " + name + " float32 vs float64");
    }
  }
}

void CheckGradients(const std::string& op) {
  std::vector<GradCheckResult> results = CheckOpGradients(op, HostDevice());
  if (results.empty()) {
    const OpTraits& traits = CurrentRegistry()->Get(op).traits;
    if (traits.has_sub_block || traits.control_flow)
      GTEST_SKIP() << "'" << op << "' runs a sub-block: its gradient is checked through programs";
    if (traits.array_io) GTEST_SKIP() << "'" << op << "' works on tensor arrays: checked through programs";
    GTEST_SKIP() << "'" << op << "' emits no grad ops (EmptyGradOpDescMaker)";
  }
  ExpectGradCheck(results, "cpu");
  ExpectFloat32GradsMatchFloat64(op);
}

// ---------------------------------------------------------------- registration

// The ops of the standard plugins, taken before any test registers toys.
std::vector<std::string>& StandardOps() {
  static std::vector<std::string> ops;
  return ops;
}

bool IsGradOpOfARegisteredOp(const std::string& op) {
  const std::string suffix = "_grad";
  return op.size() > suffix.size() && op.compare(op.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         CurrentRegistry()->Find(op.substr(0, op.size() - suffix.size())) != nullptr;
}

TEST(OpTableCoverage, EveryOpHasARowOrASaidReason) {
  ASSERT_FALSE(StandardOps().empty());
  std::set<std::string> with_row;
  for (const Row& r : Rows()) with_row.insert(r.op);
  for (const std::string& op : StandardOps()) {
    if (IsGradOpOfARegisteredOp(op)) continue;
    EXPECT_TRUE(with_row.count(op) || kNoRow.count(op))
        << "op '" << op << "' has no row in tests/ops/op_table.inc (add one in scripts/op_table_reference.py)";
  }
  for (const auto& [op, why] : kNoRow) {
    EXPECT_TRUE(CurrentRegistry()->Find(op)) << "kNoRow lists '" << op << "', which no plugin registers";
    EXPECT_FALSE(with_row.count(op)) << "'" << op << "' has rows; drop it from kNoRow (" << why << ")";
  }
}

// The backward builder asks every op on a loss's path for its gradient, so
// every op says what it is: a GradMaker, or EmptyGradOpDescMaker. Those with
// one get a GradCheck.<op> test, which fails if the op has no check case.
TEST(OpTableCoverage, EveryOpDeclaresItsGradient) {
  for (const std::string& op : StandardOps()) {
    if (IsGradOpOfARegisteredOp(op)) continue;
    EXPECT_TRUE(CurrentRegistry()->Get(op).HasGradMaker()) << "op '" << op << "' registers no GradOpDescMaker";
  }
}

TEST(OpTableCoverage, RowsAreWellFormed) {
  std::set<std::string> names;
  for (const Row& r : Rows()) {
    EXPECT_TRUE(names.insert(r.name).second) << "two rows named " << r.name;
    EXPECT_NE(CurrentRegistry()->Find(r.op), nullptr) << r.name << ": no op '" << r.op << "'";
    EXPECT_FALSE(r.dtypes.empty()) << r.name;
    for (const auto* list : {&r.inputs, &r.outputs})
      for (const TableTensor& t : *list)
        EXPECT_EQ(static_cast<int64_t>(t.values.size()), NumElements(t.shape)) << r.name << " " << t.slot;
  }
}

template <typename F>
void Register(const std::string& suite, const std::string& name, F body) {
  ::testing::RegisterTest(suite.c_str(), name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                          [body]() -> ::testing::Test* {
                            struct T : ::testing::Test {
                              explicit T(F f) : f_(std::move(f)) {}
                              void TestBody() override { f_(); }
                              F f_;
                            };
                            return new T(body);
                          });
}

// Every registered device but the CPU, as `--device` spells it.
std::vector<std::string> OtherDevices() {
  std::vector<std::string> specs;
  for (const std::string& backend : DeviceBackendNames()) {
    if (backend == "cpu") continue;
    try {
      for (const DeviceListing& d : EnumerateDevices(backend)) specs.push_back(d.spec);
    } catch (const std::exception& e) {
      std::cerr << "op table: no " << backend << " device (" << e.what() << ")\n";
    }
  }
  return specs;
}

std::string SuiteName(const std::string& prefix, const std::string& spec) {
  std::string s = prefix + "_" + spec;
  std::replace(s.begin(), s.end(), ':', '_');
  return s;
}

// ctest runs one test per process (--gtest_filter=Suite.name); listing the
// OpenCL platforms costs PoCL about a quarter of a second, so a filter that
// names only CPU tests skips the device registry.
bool FilterMayRunOnDevices() {
  const std::string filter = GTEST_FLAG_GET(filter);
  if (filter.find_first_of("*?-") != std::string::npos) return true;
  size_t begin = 0;
  while (begin <= filter.size()) {
    size_t end = filter.find(':', begin);
    if (end == std::string::npos) end = filter.size();
    const std::string name = filter.substr(begin, end - begin);
    if (name.rfind("OpTableOn_", 0) == 0 || name.rfind("GradCheckOn_", 0) == 0) return true;
    begin = end + 1;
  }
  return false;
}

void RegisterTableTests() {
  std::set<std::string> ops_with_rows;
  for (const Row& r : Rows()) ops_with_rows.insert(r.op);
  for (const std::string& op : ops_with_rows) {
    Register("OpTable", op, [op] {
      // A row whose run throws (checked mode's errors) fails alone, named.
      for (const Row* row : RowsOf(op)) {
        for (DType dtype : DTypesOf(*row)) {
          try {
            CheckForward(*row, dtype);
          } catch (const std::exception& e) {
            ADD_FAILURE() << What(*row, dtype) << ": " << e.what();
          }
        }
        if (row->grad_check) CheckRowGradient(*row);
      }
    });
  }
  const std::vector<std::string> devices = FilterMayRunOnDevices() ? OtherDevices() : std::vector<std::string>{};
  for (const std::string& spec : devices) {
    for (const std::string& op : ops_with_rows)
      Register(SuiteName("OpTableOn", spec), op, [op, spec] { CheckOnDevice(op, spec); });
  }
  for (const std::string& op : StandardOps()) {
    if (!CurrentRegistry()->Get(op).grad_maker) continue;
    Register("GradCheck", op, [op] { CheckGradients(op); });
    for (const std::string& spec : devices) {
      // The registry's kernel key for the backend, without opening the device.
      const DeviceType type = RegisterDeviceType(spec.substr(0, spec.find(':')));
      if (type == NullDeviceType() || !Fp64(spec) || CurrentRegistry()->Get(op).grad_checks.empty() ||
          !CurrentRegistry()->FindKernel(op, type, DType::kFloat64))
        continue;
      Register(SuiteName("GradCheckOn", spec), op,
               [op, spec] { ExpectGradCheck(CheckOpGradients(op, ResolveDevice(spec)), spec); });
    }
  }
}

}  // namespace
}  // namespace nabla::op_table

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // Before the first tensor, so every host buffer of the run is guarded.
  nabla::SetCheckedMode(true);
  try {
    nabla::cpu::InitCpuBackend();
    nabla::PluginManager::Instance().LoadDefaults();
    nabla::op_table::StandardOps() = nabla::CurrentRegistry()->OpTypes();
    nabla::op_table::RegisterTableTests();
  } catch (const std::exception& e) {
    std::cerr << "ops_test: cannot load the standard plugins: " << e.what() << "\n";
    return 1;
  }
  return RUN_ALL_TESTS();
}
