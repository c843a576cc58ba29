// nabla.train (python/nabla/train.py): a run config run exactly as `nabla
// run` runs it (nabla/train/trainer.h), and the pass pipeline
// (nabla/train/pipeline.h) behind append_backward and append_optimizer.
#include <pybind11/numpy.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>

#include "bindings.h"
#include "nabla/error.h"
#include "nabla/train/data_parallel.h"
#include "nabla/train/dataset.h"
#include "nabla/train/run_config.h"
#include "nabla/train/trainer.h"

namespace py = pybind11;

namespace nabla::python {

namespace {

py::object Stats(const train::EpochStats& s) {
  py::dict d;
  d["loss"] = s.loss;
  d["accuracy"] = s.accuracy ? py::cast(*s.accuracy) : py::none();
  d["samples"] = s.samples;
  return std::move(d);
}

py::object OrNone(const std::string& s) { return s.empty() ? py::none() : py::cast(s); }

// `path` (a config file) or `text` (YAML, or JSON: a dict dumped by
// nabla.train.run) with the overrides `nabla run` takes as flags.
py::dict Run(const std::optional<std::string>& path, const std::optional<std::string>& text,
             const std::string& base_dir, std::optional<int64_t> steps, std::optional<int64_t> epochs, bool resume,
             std::optional<std::string> progress, std::optional<std::string> weights) {
  train::RunConfig config =
      path ? train::LoadRunConfig(*path) : train::ParseRunConfig(text.value_or(""), "<dict>", base_dir);
  train::RunOverrides ov;
  // 0 is refused, as --steps 0 and --epochs 0 are, not taken for None
  // (epochs=0 silently trained the config's epochs).
  NABLA_ENFORCE(!steps || *steps >= 1, kInvalidArgument, "nabla.train.run: steps must be >= 1, but received ",
                steps.value_or(0));
  NABLA_ENFORCE(!epochs || *epochs >= 1, kInvalidArgument, "nabla.train.run: epochs must be >= 1, but received ",
                epochs.value_or(0));
  ov.steps = steps;
  ov.epochs = epochs;
  // steps alone means "this many steps", whatever the config's epochs, as --steps.
  if (ov.steps && !ov.epochs) ov.epochs = 0;
  ov.resume = resume;
  ov.progress = progress;
  ov.weights = weights;
  train::RunSummary s;
  {
    // The steps run without the GIL: other Python threads go on, and Ctrl-C
    // reaches RunTraining's own handler (it restores Python's when it
    // returns), which stops at the next step boundary with a checkpoint.
    py::gil_scoped_release release;
    s = train::RunTraining(config, ov, std::cout, isatty(STDOUT_FILENO) == 1);
    std::cout.flush();
  }
  py::dict d;
  d["steps"] = s.steps;
  d["epochs"] = s.epochs;
  d["train"] = Stats(s.train);
  d["eval"] = s.eval ? Stats(*s.eval) : py::none();
  d["seconds"] = s.seconds;
  d["samples_per_sec"] = s.samples_per_sec;
  d["last_checkpoint"] = OrNone(s.last_checkpoint);
  d["world_size"] = s.world_size;
  d["run"] = s.run;
  d["checkpoint_dir"] = OrNone(s.checkpoint_dir);
  d["metrics_file"] = OrNone(s.metrics_file);
  d["plot"] = OrNone(s.plot);
  d["stopped_by_signal"] = s.stopped_by_signal == SIGINT    ? py::cast("SIGINT")
                           : s.stopped_by_signal == SIGTERM ? py::cast("SIGTERM")
                                                            : py::none();
  return d;
}

// The IDX reader `nabla run` reads datasets with (nabla/train/dataset.h),
// as an ndarray of the file's element type and shape.
py::array ReadIdx(const std::string& path) {
  train::Column c;
  {
    py::gil_scoped_release release;
    c = train::ReadIdxFile(path, path);
  }
  py::dtype dtype;
  switch (c.kind) {
    case train::ElemKind::kUInt8:
      dtype = py::dtype::of<uint8_t>();
      break;
    case train::ElemKind::kInt8:
      dtype = py::dtype::of<int8_t>();
      break;
    case train::ElemKind::kInt16:
      dtype = py::dtype::of<int16_t>();
      break;
    case train::ElemKind::kInt32:
      dtype = py::dtype::of<int32_t>();
      break;
    case train::ElemKind::kInt64:
      dtype = py::dtype::of<int64_t>();
      break;
    case train::ElemKind::kFloat32:
      dtype = py::dtype::of<float>();
      break;
    case train::ElemKind::kFloat64:
      dtype = py::dtype::of<double>();
      break;
    case train::ElemKind::kBool:
      dtype = py::dtype::of<bool>();
      break;
  }
  std::vector<py::ssize_t> shape{static_cast<py::ssize_t>(c.rows)};
  for (int64_t d : c.sample_shape) shape.push_back(static_cast<py::ssize_t>(d));
  py::array out(dtype, shape);
  std::memcpy(out.mutable_data(), c.bytes.data(), c.bytes.size());
  return out;
}

}  // namespace

void BindTrain(py::module_& m) {
  m.def(
      "_world",
      [] {
        const train::World w = train::DetectWorld();
        return py::make_tuple(w.rank, w.size);
      },
      "(rank, size) of this process in the MPI world its launcher started ((0, 1) without one).");
  m.def("_read_idx", &ReadIdx, py::arg("path"), "nabla.datasets.read_idx: an IDX file (gzip or plain) as an ndarray.");
  m.def("_train_run", &Run, py::arg("path"), py::arg("text"), py::arg("base_dir"), py::arg("steps"), py::arg("epochs"),
        py::arg("resume"), py::arg("progress"), py::arg("weights"),
        "nabla.train.run's engine: RunTraining on a config file or text.");
}

}  // namespace nabla::python
