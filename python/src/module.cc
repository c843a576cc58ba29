// `import nabla`: the static half (docs/python.md) over the same core as the CLI.
// Programs, append_backward, an Executor that keeps its scope across runs,
// plugins and the registry. The eager half is in eager.cc.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "bindings.h"
#include "convert.h"
#include "nabla/backward.h"
#include "nabla/cpu/cpu.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/feed_fetch.h"
#include "nabla/onnx.h"
#include "nabla/op_registry.h"
#include "nabla/opcheck.h"
#include "nabla/plugin.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/train.h"
#include "nabla/train/data_parallel.h"
#include "nabla/train/ops_json.h"
#include "nabla/train/pipeline.h"
#include "nabla/train/weights.h"
#include "ndarray.h"

namespace nabla::python {
namespace {

// Slot name -> var names; a single str stands for a one-element list.
VarNameMap SlotsFromPython(const py::dict& slots, const std::string& where) {
  VarNameMap out;
  for (const auto& [key, value] : slots) {
    NABLA_ENFORCE(py::isinstance<py::str>(key), kInvalidArgument, where, ": slot names must be str but received ",
                  TypeName(key));
    std::vector<std::string> names;
    if (py::isinstance<py::str>(value)) {
      names.push_back(py::cast<std::string>(value));
    } else {
      NABLA_ENFORCE(py::isinstance<py::sequence>(value), kInvalidArgument, where, ": slot '",
                    py::cast<std::string>(key), "' expects a var name or a list of them but received ",
                    TypeName(value));
      for (const py::handle& item : value) {
        NABLA_ENFORCE(py::isinstance<py::str>(item), kInvalidArgument, where, ": slot '", py::cast<std::string>(key),
                      "' expects var names (str) but received ", TypeName(item));
        names.push_back(py::cast<std::string>(item));
      }
    }
    out[py::cast<std::string>(key)] = std::move(names);
  }
  return out;
}

std::vector<std::string> NameList(const py::handle& obj, const std::string& what) {
  std::vector<std::string> out;
  if (obj.is_none()) return out;
  NABLA_ENFORCE(!py::isinstance<py::str>(obj), kInvalidArgument, what,
                ": expected a list of var names but received the str '", py::cast<std::string>(obj), "'");
  NABLA_ENFORCE(py::isinstance<py::iterable>(obj), kInvalidArgument, what,
                ": expected a list of var names but received ", TypeName(obj));
  for (const py::handle& item : obj) {
    // Anything with a .name (a nabla.Tensor) stands for its var.
    py::object name = py::hasattr(item, "name") && !py::isinstance<py::str>(item)
                          ? item.attr("name")
                          : py::reinterpret_borrow<py::object>(item);
    NABLA_ENFORCE(py::isinstance<py::str>(name), kInvalidArgument, what, ": expected var names (str) but received ",
                  TypeName(item));
    out.push_back(py::cast<std::string>(name));
  }
  return out;
}

// ------------------------------------------------------------ programs

using ProgramPtr = std::shared_ptr<ProgramDesc>;

BlockDesc& BlockOf(const ProgramDesc& program, int block) {
  NABLA_ENFORCE(block >= 0 && static_cast<size_t>(block) < program.Size(), kOutOfRange, "block ", block,
                ": the program has blocks 0..", program.Size() - 1);
  return *program.Block(block);
}

py::dict OpToDict(const OpDesc& op) {
  py::dict d;
  d["type"] = op.Type();
  d["inputs"] = py::cast(op.Inputs());
  d["outputs"] = py::cast(op.Outputs());
  py::dict attrs;
  for (const auto& [name, value] : op.Attrs()) attrs[py::str(name)] = AttrToPython(value);
  d["attrs"] = attrs;
  return d;
}

py::dict VarToDict(const VarDesc& v) {
  py::dict d;
  d["name"] = v.Name();
  d["shape"] = py::cast(v.GetShape());
  d["dtype"] = v.HasDType() ? py::cast(std::string(DTypeName(v.GetDType()))) : py::none();
  d["type"] = std::string(VarTypeName(v.Type()));
  d["persistable"] = v.Persistable();
  d["stop_gradient"] = v.StopGradient();
  return d;
}

void AppendOp(ProgramDesc& program, const std::string& type, const py::dict& inputs, const py::dict& outputs,
              const py::object& attrs, int block_idx) {
  BlockDesc& block = BlockOf(program, block_idx);
  auto registry = CurrentRegistry();
  const OpInfo& info = registry->Get(type);
  const std::string where = "append_op('" + type + "')";
  auto op = std::make_unique<OpDesc>(type, SlotsFromPython(inputs, where), SlotsFromPython(outputs, where),
                                     AttrsFromPython(attrs, info.schema, where));
  FillDefaultAttrs(*op, *registry, &program);
  const size_t index = block.OpSize();
  OpDesc* added = block.AppendOp(std::move(op));
  try {
    // Unknown or misspelled slots are errors here, as Program.load and eager
    // calls make them: ignored, the op ran without the input it was given.
    VerifyOpSchema(*added, info.schema, where);
    for (const std::string& name : added->InputArgumentNames()) {
      NABLA_ENFORCE(name == kEmptyVarName || block.HasVarRecursive(name), kNotFound, where, ": input var '", name,
                    "' is neither declared nor produced by an earlier op of block ", block_idx);
    }
    InferOpAtBuildTime(*added, block, *registry);
  } catch (...) {
    block.RemoveOps(index, index + 1);  // leave the program as it was
    throw;
  }
}

void CreateVar(ProgramDesc& program, const std::string& name, const std::vector<int64_t>& shape,
               const std::string& dtype, bool persistable, bool stop_gradient, const py::object& init, int block_idx) {
  BlockDesc& block = BlockOf(program, block_idx);
  DType dt;
  NABLA_ENFORCE(ParseDType(dtype, &dt), kInvalidArgument, "create_var('", name,
                "'): expected dtype float32, float64, int32, int64 or bool but received '", dtype, "'");
  std::optional<InitSpec> spec;
  if (!init.is_none()) {
    NABLA_ENFORCE(py::isinstance<py::dict>(init) && init.contains("type"), kInvalidArgument, "create_var('", name,
                  "'): init must be a dict with the initializer op's 'type' and its attributes");
    InitSpec s;
    s.type = py::str(init["type"]);
    const OpInfo& info = CurrentRegistry()->Get(s.type);
    s.attrs = AttrsFromPython(init, info.schema, "create_var('" + name + "') init", {"type"});
    spec = std::move(s);
  }
  // As Program.load checks a var: dims >= 0 or -1 (unknown), their product
  // within a 64-bit count.
  int64_t n = 1;
  for (int64_t d : shape) {
    NABLA_ENFORCE(d >= -1, kInvalidArgument, "create_var('", name, "'): expected dims >= 0 or -1 (unknown) but shape ",
                  ShapeToString(Shape(shape.begin(), shape.end())), " has ", d);
    NABLA_ENFORCE(d <= 0 || !__builtin_mul_overflow(n, d, &n), kOutOfRange, "create_var('", name, "'): shape ",
                  ShapeToString(Shape(shape.begin(), shape.end())), " has more elements than a 64-bit count holds");
  }
  // A second declaration would silently retype a var the ops already read
  // with the first one's dtype and shape.
  if (const VarDesc* old = block.FindVar(name))
    NABLA_ENFORCE(!old->Declared(), kAlreadyExists, "create_var('", name, "'): block ", block_idx,
                  " already declares it (", ShapeToString(old->GetShape()), " ",
                  old->HasDType() ? DTypeName(old->GetDType()) : "of unknown dtype", ")");
  VarDesc* v = block.Var(name);
  v->SetShape(Shape(shape.begin(), shape.end()));
  v->SetDType(dt);
  v->MarkDTypeKnown();
  v->SetPersistable(persistable);
  v->SetStopGradient(stop_gradient);
  v->SetInit(std::move(spec));
  v->SetDeclared(true);
}

// The device type a device spec ("cpu", "opencl:1") runs kernels of, for
// the passes that depend on it (fusion and bf16 run on the cpu only). Any
// backend `nabla devices` could list is a name here: those registered, the
// core's, those of the device plugins loaded (load_plugin) and those found
// but not loaded yet (a type's id comes from its name, so it is the one the
// plugin will get).
DeviceType PassDevice(const std::string& device, const char* where) {
  const std::string name = device.substr(0, device.find(':'));
  DeviceType type = DeviceType::kCPU;
  if (ParseDeviceType(name, &type)) return type;
  cpu::InitCpuBackend();  // the host registers "cpu" (idempotent)
  const std::vector<std::string> names = DeviceBackendNames();
  std::string known;
  for (const std::string& n : names) {
    if (n == name) return RegisterDeviceType(name);
    known += (known.empty() ? "" : ", ") + n;
  }
  NABLA_THROW(kInvalidArgument, where, ": device must be a registered device NAME or NAME:N (", known,
              "; load_plugin adds a device plugin's), but received '", device, "'");
}

// append_backward runs the pass pipeline (nabla/train/pipeline.h) up to the
// gradients, as `nabla run` does: FuseOps, precision, AppendBackward,
// FoldBf16Casts; append_optimizer runs the rest.
py::list AppendBackwardPy(ProgramDesc& program, const py::object& loss, const py::object& parameter_list,
                          const py::object& no_grad_set, bool fuse, const std::string& precision,
                          const std::string& device, const py::object& keep, const py::object& data_parallel) {
  py::object loss_name = py::hasattr(loss, "name") && !py::isinstance<py::str>(loss) ? loss.attr("name") : loss;
  NABLA_ENFORCE(py::isinstance<py::str>(loss_name), kInvalidArgument,
                "append_backward: loss must be a var name (str) but received ", TypeName(loss));
  const std::vector<std::string> params = NameList(parameter_list, "append_backward: parameter_list");
  NABLA_ENFORCE(parameter_list.is_none() || !params.empty(), kInvalidArgument,
                "append_backward: parameter_list is empty; pass None for every parameter");
  const std::vector<std::string> no_grad = NameList(no_grad_set, "append_backward: no_grad_set");
  const std::vector<std::string> kept = NameList(keep, "append_backward: keep");
  train::PassPipelineOptions o;
  o.stages = train::PassPipelineOptions::Stages::kUntilOptimizer;
  o.device = PassDevice(device, "append_backward");
  o.fuse = fuse;
  o.keep.insert(kept.begin(), kept.end());
  o.precision = precision;
  o.precision_where = "append_backward: precision";
  o.loss = py::cast<std::string>(loss_name);
  o.params = params;
  o.no_grad.insert(no_grad.begin(), no_grad.end());
  // Under an MPI launcher with several ranks (or when asked), the gradient
  // allreduces `nabla run` inserts: each rank feeds its share of the batch
  // and every rank applies the same summed gradients.
  const train::World world = train::DetectWorld();
  const bool dp = data_parallel.is_none() ? world.Distributed() : py::cast<bool>(data_parallel);
  NABLA_ENFORCE(!dp || world.Distributed(), kInvalidArgument,
                "append_backward: data_parallel=True needs several ranks, but this process was not started by an MPI "
                "launcher with more than one (mpirun -np N python3 ...)");
  if (dp) {
    train::DataParallelOptions d;
    d.world_size = world.size;
    o.data_parallel = d;
  }
  // On failure the program must stay as it was: build on a copy.
  ProgramDesc work = program;
  const ParamGrads pairs = train::ApplyPassPipeline(work, o).param_grads;
  program = std::move(work);
  py::list out;
  for (const auto& [p, g] : pairs) out.append(py::make_tuple(p, g));
  return out;
}

// nabla/train.h's optimizer, as `nabla run` builds it, and with fuse the
// gradient rewrites after it (the pipeline's last part); returns the
// learning-rate var.
std::string AppendOptimizerPy(ProgramDesc& program, const ParamGrads& param_grads, const std::string& type, double lr,
                              double momentum, bool nesterov, double beta1, double beta2, double epsilon,
                              double weight_decay, double clip_global_norm, bool fuse, const std::string& device,
                              const py::object& keep) {
  train::OptimizerOptions opt;
  opt.type = type;
  opt.lr = lr;
  opt.momentum = momentum;
  opt.nesterov = nesterov;
  opt.beta1 = beta1;
  opt.beta2 = beta2;
  opt.epsilon = epsilon;
  opt.weight_decay = weight_decay;
  opt.clip_global_norm = clip_global_norm;
  const std::vector<std::string> kept = NameList(keep, "append_optimizer: keep");
  train::PassPipelineOptions o;
  o.stages = train::PassPipelineOptions::Stages::kFromOptimizer;
  o.device = PassDevice(device, "append_optimizer");
  o.fuse = fuse;
  o.keep.insert(kept.begin(), kept.end());
  if (program.Backward()) o.loss = program.Backward()->loss;
  o.param_grads = param_grads;
  o.optimizer = opt;
  // On failure the program must stay as it was: build on a copy.
  ProgramDesc work = program;
  train::ApplyPassPipeline(work, o);
  program = std::move(work);
  return train::kLearningRateVar;
}

// ------------------------------------------------------------ executor

// One executor, one scope: parameters live across runs (as Paddle's global
// scope), so a training loop is run() in a loop.
class PyExecutor {
 public:
  PyExecutor(const std::string& device, int threads, const std::string& executor, int64_t seed) {
    device_ = &ResolveDevice(device, "Executor");
    NABLA_ENFORCE(threads >= 0, kInvalidArgument, "Executor: threads must be non-negative but received ", threads);
    ExecutorOptions options;
    options.threads = threads;
    options.seed = static_cast<uint64_t>(seed);
    executor_ = CreateExecutor(executor, *device_, options);
  }

  py::list Run(const ProgramPtr& program, const py::object& feed, const py::object& fetch_list,
               const py::object& step) {
    NABLA_ENFORCE(program != nullptr, kInvalidArgument, "Executor.run: program is None");
    // step: the run's number for random ops seeded 0 (dropout), as the
    // trainer gives a training step its step number; None takes the
    // executor's next run number.
    RunOptions run_options;
    if (!step.is_none()) {
      NABLA_ENFORCE(py::isinstance<py::int_>(step) && !py::isinstance<py::bool_>(step), kInvalidArgument,
                    "Executor.run: step must be an int or None but received ", TypeName(step));
      NABLA_ENFORCE(step.attr("__ge__")(py::int_(0)).cast<bool>(), kInvalidArgument,
                    "Executor.run: step must be non-negative but received ", py::str(step).cast<std::string>());
      NABLA_ENFORCE(step.attr("__le__")(py::int_(std::numeric_limits<uint64_t>::max())).cast<bool>(), kInvalidArgument,
                    "Executor.run: step must be below 2^64 but received ", py::str(step).cast<std::string>());
      run_options.random_index = step.cast<uint64_t>();
    }
    const BlockDesc& root = *program->Root();
    const std::vector<std::string> fetches = NameList(fetch_list, "Executor.run: fetch_list");
    for (const std::string& name : fetches) {
      NABLA_ENFORCE(root.FindVar(name) != nullptr, kNotFound, "fetch_list: the program has no var '", name,
                    "' in block 0");
    }
    // Feeds: checked and converted before anything runs.
    std::vector<std::pair<std::string, Tensor>> feeds;
    if (!feed.is_none()) {
      NABLA_ENFORCE(py::isinstance<py::dict>(feed), kInvalidArgument,
                    "Executor.run: feed must be a dict {var name: array} but received ", TypeName(feed));
      for (const auto& [key, value] : py::reinterpret_borrow<py::dict>(feed)) {
        NABLA_ENFORCE(py::isinstance<py::str>(key), kInvalidArgument,
                      "feed: keys must be var names (str) but received ", TypeName(key));
        const std::string name = py::cast<std::string>(key);
        const std::string what = "feed '" + name + "'";
        const VarDesc* var = root.FindVar(name);
        NABLA_ENFORCE(var != nullptr, kNotFound, what, ": the program has no var '", name,
                      "' in block 0; feeds must be declared under vars:");
        Tensor t = TensorFromArray(value, what);
        CheckFeedMatchesVar(*program, *var, t, what);
        if (var->Persistable() || device_ != &HostDevice()) {
          // A fed parameter stays in the scope and optimizer ops update it
          // in place: it gets memory of its own, never the caller's array.
          // (On another device every feed is a copy anyway.)
          Tensor own;
          own.CopyFrom(t, *device_);
          t = std::move(own);
        }
        feeds.emplace_back(name, std::move(t));
      }
    }

    std::vector<Tensor> results;
    {
      py::gil_scoped_release release;
      std::lock_guard<std::mutex> lock(mutex_);
      Keep(program);
      // Parameters that are neither fed nor already in the scope get their
      // init: ops, so a second run (or a second program over the same
      // parameters) continues from where the last one left them.
      std::vector<std::string> skip;
      for (const auto& f : feeds) skip.push_back(f.first);
      for (const auto& b : std::vector<const BlockDesc*>{program->Root()}) {
        for (const auto& v : b->AllVars()) {
          const Variable* sv = scope_.FindVar(v->Name());
          if (sv && sv->GetTensor().IsInitialized()) skip.push_back(v->Name());
        }
      }
      auto startup = std::make_shared<ProgramDesc>(BuildStartupProgram(*program, skip));
      if (startup->Root()->OpSize() > 0) {
        Keep(startup);
        executor_->Run(*startup, 0, scope_);
      }
      // Fed data leaves the scope after the run: a later run that forgets a
      // feed is an error, not a silent rerun on stale data.
      struct DropFeeds {
        Scope& scope;
        const ProgramDesc& program;
        std::vector<std::string> names;
        ~DropFeeds() {
          for (const std::string& n : names) {
            const VarDesc* v = program.Root()->FindVar(n);
            if (v && !v->Persistable()) scope.Var(n)->GetTensor() = Tensor();
          }
        }
      } drop{scope_, *program, {}};
      // The copies in `feeds` keep each fed buffer shared while the program
      // runs, so no kernel reuses (writes into) the caller's array.
      for (const auto& [name, t] : feeds) {
        scope_.Var(name)->GetTensor() = t;
        drop.names.push_back(name);
      }
      CheckInputsProvided(*program, scope_,
                          [](const std::string& name) { return "pass it in feed={'" + name + "': array}"; });
      executor_->Run(*program, 0, scope_, run_options);
      for (const std::string& name : fetches) {
        Tensor t = FetchToHost(*program, scope_, name, "fetch_list '" + name + "'");
        if (root.FindVar(name)->Persistable()) {
          // Later runs read and update parameters in place: hand out a copy
          // so writing to the array cannot change the model behind its back.
          Tensor copy;
          copy.CopyFrom(t, HostDevice());
          t = std::move(copy);
        }
        results.push_back(std::move(t));
      }
    }
    py::list out;
    for (const Tensor& t : results) out.append(ArrayFromTensor(t));
    return out;
  }

  // Whether the scope holds an initialized tensor for `name` (no copy).
  bool HasValue(const std::string& name) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(mutex_);
    const Variable* v = scope_.FindVar(name);
    return v && v->Type() == VarType::kDense && v->GetTensor().IsInitialized();
  }

  // The var's current value in this executor's scope, or None.
  py::object Get(const std::string& name) {
    Tensor copy;
    {
      py::gil_scoped_release release;  // a run holding the lock may need the GIL to free a fed array
      std::lock_guard<std::mutex> lock(mutex_);
      const Variable* v = scope_.FindVar(name);
      if (!v || v->Type() != VarType::kDense || !v->GetTensor().IsInitialized()) return py::none();
      copy.CopyFrom(v->GetTensor(), HostDevice());
    }
    return ArrayFromTensor(copy);
  }

 private:
  // Executors cache prepared blocks by the program's address: a program
  // freed and another allocated in its place must never meet a stale cache,
  // so every program this executor ran stays alive as long as it does.
  void Keep(const ProgramPtr& p) {
    for (const auto& k : kept_)
      if (k == p) return;
    kept_.push_back(p);
  }

  Device* device_;
  std::unique_ptr<Executor> executor_;
  std::vector<ProgramPtr> kept_;  // declared before scope_: outlives nothing that points into it
  Scope scope_;
  std::mutex mutex_;
};

}  // namespace

void BindStatic(py::module_& m) {
  // dynamic_attr: Tape.to_program() hangs the recorded leaf values on the
  // program it returns (nabla/__init__.py).
  py::class_<ProgramDesc, ProgramPtr>(m, "Program", "A nabla program (docs/program-format.md): blocks of vars and ops.",
                                      py::dynamic_attr())
      .def(py::init<>(), "An empty program (one root block).")
      .def_static(
          "load", [](const py::object& path) { return std::make_shared<ProgramDesc>(LoadProgram(py::str(path))); },
          py::arg("path"), "Reads a program file (YAML). Errors name file:line:col.")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::string& source) {
            return std::make_shared<ProgramDesc>(ParseProgram(text, source));
          },
          py::arg("text"), py::arg("source") = "<string>", "Parses a program from YAML text.")
      .def("to_yaml", &ProgramToYaml, "The program as YAML (reads back to the same program).")
      .def(
          "save", [](const ProgramDesc& p, const py::object& path) { SaveProgram(p, py::str(path)); }, py::arg("path"),
          "Writes the program to a YAML file (atomically).")
      .def(
          "clone", [](const ProgramDesc& p) { return std::make_shared<ProgramDesc>(p); }, "A deep copy.")
      .def_property_readonly("num_blocks", &ProgramDesc::Size)
      .def(
          "ops",
          [](const ProgramDesc& p, int block) {
            py::list out;
            for (const auto& op : BlockOf(p, block).AllOps()) out.append(OpToDict(*op));
            return out;
          },
          py::arg("block") = 0, "The ops of a block as dicts {type, inputs, outputs, attrs}, in order.")
      .def(
          "vars",
          [](const ProgramDesc& p, int block) {
            py::list out;
            for (const auto& v : BlockOf(p, block).AllVars()) out.append(VarToDict(*v));
            return out;
          },
          py::arg("block") = 0, "The vars of a block as dicts {name, shape, dtype, type, persistable, stop_gradient}.")
      .def(
          "has_var",
          [](const ProgramDesc& p, const std::string& name, int block) {
            return BlockOf(p, block).FindVar(name) != nullptr;
          },
          py::arg("name"), py::arg("block") = 0)
      .def("create_var", &CreateVar, py::arg("name"), py::arg("shape"), py::arg("dtype") = "float32",
           py::arg("persistable") = false, py::arg("stop_gradient") = false, py::arg("init") = py::none(),
           py::arg("block") = 0,
           "Declares a var; init={'type': 'fill_constant', 'value': 0.0} gives a persistable var its initializer.")
      .def("append_op", &AppendOp, py::arg("type"), py::arg("inputs"), py::arg("outputs"),
           py::arg("attrs") = py::none(), py::arg("block") = 0,
           "Appends an op (slots map to a var name or a list of them); attributes are typed by the op's schema, "
           "defaults filled in, output vars inferred.")
      .def_property_readonly(
          "backward",
          [](const ProgramDesc& p) -> py::object {
            if (!p.Backward()) return py::none();
            py::list pairs;
            for (const auto& [a, b] : p.Backward()->param_grads) pairs.append(py::make_tuple(a, b));
            return py::make_tuple(p.Backward()->loss, pairs);
          },
          "(loss, [(param, grad), ...]) once append_backward ran, else None.")
      .def("__repr__", [](const ProgramDesc& p) {
        size_t ops = 0;
        for (size_t b = 0; b < p.Size(); ++b) ops += p.Block(b)->OpSize();
        return StrCat("<nabla.Program ", p.Size(), " block", p.Size() == 1 ? "" : "s", ", ", ops, " op",
                      ops == 1 ? "" : "s", p.SourceFile().empty() ? "" : " from " + p.SourceFile(), ">");
      });

  m.def("append_backward", &AppendBackwardPy, py::arg("program"), py::arg("loss"),
        py::arg("parameter_list") = py::none(), py::arg("no_grad_set") = py::none(), py::kw_only(),
        py::arg("fuse") = false, py::arg("precision") = "fp32", py::arg("device") = "cpu", py::arg("keep") = py::none(),
        py::arg("data_parallel") = py::none(),
        "Appends the backward part of `loss` (one element) to the program, as seed 002's append_backward, through "
        "the pass pipeline `nabla run` uses: with fuse=True the fusion pass first (on the cpu; vars in keep and the "
        "loss stay fetchable), precision='bf16' mixed precision, and under mpirun with several ranks "
        "(data_parallel=None: then; True: required; False: never) the gradient allreduces. Returns [(parameter, "
        "gradient), ...]: all "
        "trainable parameters, or those of parameter_list in its order; vars in no_grad_set get no gradient. On "
        "error the program is unchanged.");

  m.def("append_optimizer", &AppendOptimizerPy, py::arg("program"), py::arg("param_grads"), py::arg("type") = "sgd",
        py::arg("lr") = 0.01, py::arg("momentum") = 0.9, py::arg("nesterov") = false, py::arg("beta1") = 0.9,
        py::arg("beta2") = 0.999, py::arg("epsilon") = 1e-8, py::arg("weight_decay") = 0.0,
        py::arg("clip_global_norm") = 0.0, py::kw_only(), py::arg("fuse") = false, py::arg("device") = "cpu",
        py::arg("keep") = py::none(),
        "Appends the update of every (parameter, gradient) pair of append_backward's result, as `nabla run` does: "
        "clipping by global norm (clip_global_norm > 0), L2 (weight_decay > 0), then one sgd, momentum or adam op "
        "per parameter, its state in persistable vars P@velocity or P@moment1, P@moment2, P@beta1_pow, "
        "P@beta2_pow; with fuse=True then the gradient rewrites `nabla run` applies (on the cpu). Returns the "
        "learning-rate var. On error the program is unchanged.");

  py::class_<PyExecutor>(m, "Executor",
                         "Runs block 0 of programs on a device (NAME or NAME:N as `nabla devices` lists them: 'cpu', "
                         "'opencl:0', 'null'). Parameters live in the executor's scope across runs. run() releases "
                         "the GIL: threads with executors of their own run side by side.")
      .def(py::init<const std::string&, int, const std::string&, int64_t>(), py::arg("device") = "cpu",
           py::arg("threads") = 0, py::arg("executor") = "taskgraph", py::arg("seed") = 0)
      .def("run", &PyExecutor::Run, py::arg("program"), py::arg("feed") = py::none(),
           py::arg("fetch_list") = py::none(), py::arg("step") = py::none(),
           "Initializes parameters not yet in the scope, feeds {name: ndarray}, runs block 0 once and returns the "
           "fetched vars as ndarrays, in fetch_list's order. step (int): the number random ops seeded 0 (dropout) "
           "draw by, so a run repeated with the same step draws the same masks; None: the executor's next run "
           "number.")
      .def("get", &PyExecutor::Get, py::arg("name"), "A copy of a var's value in the scope (None if it has none).")
      .def("_has_value", &PyExecutor::HasValue, py::arg("name"));

  m.def(
      "load_plugin",
      [](const py::object& path) {
        const std::string p = py::str(path);
        {
          py::gil_scoped_release release;
          PluginManager::Instance().Load(p);
        }
        std::error_code ec;
        const std::string canonical = std::filesystem::canonical(p, ec).string();
        for (const auto& rec : CurrentRegistry()->Plugins()) {
          if (rec.path == canonical || rec.path == p) return py::cast(rec.ops);
        }
        return py::cast(std::vector<std::string>{});
      },
      py::arg("path"), "Loads a plugin file; returns the op types it registered.");
  m.def(
      "_registry_json", [] { return train::RegistryJson(*CurrentRegistry(), train::OpSelection{}); },
      "What `nabla ops --json` prints.");
  m.def("default_plugin_dir", &PluginManager::DefaultPluginDir, "The folder of the standard plugins.");

  // nabla.onnx (python/nabla/onnx.py) wraps these two.
  m.def(
      "_onnx_load",
      [](const std::string& path, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
        onnx_io::ImportOptions options;
        options.input_shapes = input_shapes;
        onnx_io::ImportResult r = [&] {
          py::gil_scoped_release release;
          return onnx_io::ImportOnnx(path, options);
        }();
        py::dict weights;
        for (const auto& [name, t] : r.weights) weights[py::str(name)] = ArrayFromTensor(t);
        return py::make_tuple(std::make_shared<ProgramDesc>(std::move(r.program)), weights);
      },
      py::arg("path"), py::arg("input_shapes"));
  m.def(
      "_onnx_save",
      [](const ProgramPtr& program, const std::string& path, const py::dict& weights,
         const std::vector<std::string>& outputs, int opset) {
        NABLA_ENFORCE(program != nullptr, kInvalidArgument, "nabla.onnx.save: program is None");
        std::map<std::string, Tensor> given;
        for (const auto& [key, value] : weights) {
          const std::string name = py::cast<std::string>(key);
          given[name] = TensorFromArray(value, "weights['" + name + "']");
        }
        // As --weights checks them: a misspelled name or a wrong shape is an
        // error, not an export of the var's init: values.
        train::CheckWeights(given, *program, "nabla.onnx.save: weights");
        py::gil_scoped_release release;
        // Persistable vars not given take their init: values.
        std::vector<std::string> skip;
        for (const auto& [name, t] : given) skip.push_back(name);
        Scope scope;
        CreateExecutor("sequential", HostDevice(), ExecutorOptions{})
            ->Run(BuildStartupProgram(*program, skip), 0, scope);
        onnx_io::NamedTensors named;
        for (const auto& v : program->Root()->AllVars()) {
          if (!v->Persistable()) continue;
          auto it = given.find(v->Name());
          const Variable* var = scope.FindVar(v->Name());
          if (it != given.end()) {
            named.emplace_back(v->Name(), it->second);
          } else if (var && var->Type() == VarType::kDense && var->GetTensor().IsInitialized()) {
            named.emplace_back(v->Name(), var->GetTensor());
          }
        }
        onnx_io::ExportOptions options;
        options.outputs = outputs;
        options.opset = opset;
        onnx_io::ExportOnnx(*program, named, path, options);
      },
      py::arg("program"), py::arg("path"), py::arg("weights"), py::arg("outputs"), py::arg("opset"));
}

}  // namespace nabla::python

PYBIND11_MODULE(_nabla, m) {
  namespace py = pybind11;
  m.doc() = "nabla's C++ core; import nabla, not this module.";
  static py::exception<nabla::Error> error(m, "Error", PyExc_RuntimeError);
  error.attr("__module__") = "nabla";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const nabla::Error& e) {
      error(nabla::OneLineMessage(e.what()).c_str());
    }
  });
  nabla::cpu::InitCpuBackend();
  // The standard plugins of this build or install, and NABLA_PLUGIN_PATH's,
  // exactly as the nabla binary loads them.
  nabla::PluginManager::Instance().LoadDefaults();
  nabla::python::BindStatic(m);
  nabla::python::BindEager(m);
  nabla::python::BindTrain(m);
}
