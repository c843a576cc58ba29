#include "nabla/train/generate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <numeric>
#include <random>

#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/plugin.h"
#include "nabla/scope.h"
#include "nabla/train/checkpoint.h"
#include "nabla/train/trainer.h"

namespace nabla::train {

int64_t SampleToken(const float* logits, int64_t vocab, double temperature, int64_t top_k, uint64_t random_bits) {
  NABLA_ENFORCE(vocab >= 1, kInvalidArgument, "sampling needs at least one score, but received ", vocab);
  if (temperature <= 0) return std::max_element(logits, logits + vocab) - logits;
  std::vector<int64_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  // Ties keep the lower index first, so the cut is the same everywhere.
  std::stable_sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  const int64_t k = top_k > 0 ? std::min(top_k, vocab) : vocab;
  std::vector<double> p(static_cast<size_t>(k));
  // Differences from the top score, divided: each <= 0, so a temperature
  // so small that a score over it overflows gives exp(-inf) = 0 rather than
  // inf - inf = NaN (the draw then fell through to the k-th score).
  const double top = logits[idx[0]];
  double total = 0;
  for (int64_t i = 0; i < k; ++i) total += p[i] = std::exp((logits[idx[i]] - top) / temperature);
  const double u = static_cast<double>(random_bits >> 11) * 0x1.0p-53 * total;
  double acc = 0;
  for (int64_t i = 0; i < k; ++i) {
    acc += p[i];
    if (u < acc) return idx[i];
  }
  return idx[k - 1];
}

namespace {

std::string CheckpointFile(const std::string& path) {
  if (!std::filesystem::is_directory(path)) return path;
  std::optional<CheckpointInfo> latest = LatestCheckpoint(path);
  NABLA_ENFORCE(latest.has_value(), kNotFound, path, ": the folder holds no checkpoint (ckpt-*.safetensors)");
  return latest->path;
}

}  // namespace

std::string GenerateText(const RunConfig& c, const GenerateOptions& o, const std::function<void(char)>& emit) {
  NABLA_ENFORCE(c.data.format == "text", kInvalidArgument, c.path,
                ": generate samples bytes from a model trained on text, but data.format is '", c.data.format, "'");
  NABLA_ENFORCE(o.tokens >= 0, kInvalidArgument, "generate: --tokens must be >= 0, but received ", o.tokens);
  NABLA_ENFORCE(o.temperature >= 0 && std::isfinite(o.temperature), kInvalidArgument,
                "generate: --temperature must be >= 0, but received ", o.temperature);
  NABLA_ENFORCE(o.top_k >= 0, kInvalidArgument, "generate: --top-k must be >= 0, but received ", o.top_k);
  Device& device = OpenConfigDevice(c);  // plugins first: one may add the device's backend
  TrainPrograms tp = BuildTrainPrograms(c);
  NABLA_ENFORCE(!tp.logits.empty(), kInvalidArgument, c.path,
                ": generate needs the model's scores, but no op reads the label through a Label slot");

  std::string input;
  std::vector<const FeedConfig*> others;
  for (const auto& f : c.data.train.feeds) {
    if (f.column == "inputs")
      input = f.var;
    else
      others.push_back(&f);
  }
  NABLA_ENFORCE(!input.empty(), kInvalidArgument, c.path, ": no feed of data.train reads the column 'inputs'");
  const BlockDesc& block = *tp.eval.Root();
  const int64_t T = c.data.seq_len;
  const VarDesc* logits_var = block.FindVarRecursive(tp.logits);
  const Shape& ls = logits_var->GetShape();
  NABLA_ENFORCE(ls.size() == 3 && ls[1] == T && ls[2] > 0, kInvalidArgument, c.path, ": the scores '", tp.logits,
                "' must be [batch, seq_len = ", T, ", vocabulary], but are ", ShapeToString(ls));
  const int64_t vocab = ls[2];

  ExecutorOptions eo;
  eo.threads = c.threads;
  eo.seed = c.seed;
  std::unique_ptr<Executor> exec = CreateExecutor(c.executor, device, eo);
  Scope scope;
  std::vector<std::string> feed_vars{input};
  for (const auto* f : others) feed_vars.push_back(f->var);
  exec->Run(BuildStartupProgram(tp.main, feed_vars), 0, scope);

  const std::string file = CheckpointFile(o.checkpoint);
  SafetensorsFile ckpt = ReadSafetensors(file);
  for (const auto& name : tp.persistables) {
    if (name == tp.learning_rate) continue;
    auto it = ckpt.tensors.find(name);
    // Optimizer state is not needed to sample, but the parameters are.
    if (it == ckpt.tensors.end()) {
      NABLA_ENFORCE(name.find('@') != std::string::npos, kInvalidArgument, file, ": the checkpoint has no tensor '",
                    name, "', which the program needs (was it written by another program?)");
      continue;
    }
    Tensor& dst = scope.Var(name)->GetTensor();
    NABLA_ENFORCE(dst.GetShape() == it->second.GetShape() && dst.GetDType() == it->second.GetDType(), kInvalidArgument,
                  file, ": tensor '", name, "' is ", DTypeName(it->second.GetDType()),
                  ShapeToString(it->second.GetShape()), ", but the program's var is ", DTypeName(dst.GetDType()),
                  ShapeToString(dst.GetShape()));
    dst.CopyFrom(it->second, device);
  }
  // A parameter the program lacks means another model (a checkpoint of more
  // layers sampled from only some of them); other optimizer state is fine.
  for (const auto& [name, t] : ckpt.tensors)
    NABLA_ENFORCE(
        name.find('@') != std::string::npos || std::binary_search(tp.persistables.begin(), tp.persistables.end(), name),
        kInvalidArgument, file, ": the checkpoint holds tensor '", name,
        "', which the program does not have (was it written by another program?)");

  auto int_tensor = [&](const std::string& var, const std::vector<int64_t>& values) {
    const VarDesc* v = block.FindVarRecursive(var);
    Shape shape = v->GetShape();
    NABLA_ENFORCE(!shape.empty(), kInvalidArgument, c.path, ": feed var '", var, "' has no batch dimension");
    shape[0] = 1;
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    NABLA_ENFORCE(numel == static_cast<int64_t>(values.size()), kInvalidArgument, c.path, ": feed var '", var, "' is ",
                  ShapeToString(v->GetShape()), ", which does not hold seq_len = ", T, " tokens per sample");
    Tensor host;
    host.Allocate(HostDevice(), v->GetDType(), shape);
    for (int64_t i = 0; i < numel; ++i) {
      if (v->GetDType() == DType::kInt64)
        host.MutableData<int64_t>()[i] = values[i];
      else if (v->GetDType() == DType::kInt32)
        host.MutableData<int32_t>()[i] = static_cast<int32_t>(values[i]);
      else
        NABLA_THROW(kInvalidArgument, c.path, ": feed var '", var, "' must be int64 or int32 token ids, but is ",
                    DTypeName(v->GetDType()));
    }
    if (&device == &HostDevice()) return host;
    Tensor t;
    t.CopyFrom(host, device);
    return t;
  };

  std::vector<int64_t> context(o.prompt.begin(), o.prompt.end());
  for (auto& t : context) t = static_cast<uint8_t>(t);
  // An empty prompt starts after a newline, the most common way text begins.
  if (context.empty()) context.push_back('\n');
  std::mt19937_64 rng(o.seed);
  std::string drawn;
  Scope& run_scope = scope.NewScope();
  for (const auto* f : others) run_scope.Var(f->var)->GetTensor() = int_tensor(f->var, std::vector<int64_t>(T, 0));
  std::vector<float> row(static_cast<size_t>(vocab));
  for (int64_t n = 0; n < o.tokens; ++n) {
    const int64_t len = std::min<int64_t>(T, static_cast<int64_t>(context.size()));
    std::vector<int64_t> window(T, 0);
    std::copy(context.end() - len, context.end(), window.begin());
    run_scope.Var(input)->GetTensor() = int_tensor(input, window);
    exec->Run(tp.eval, 0, run_scope);
    const Tensor& out = run_scope.FindVar(tp.logits)->GetTensor();
    NABLA_ENFORCE(out.GetDType() == DType::kFloat32, kInvalidArgument, c.path, ": the scores '", tp.logits,
                  "' must be float32, but are ", DTypeName(out.GetDType()));
    Tensor host;
    host.CopyFrom(out, HostDevice());
    std::copy_n(host.Data<float>() + (len - 1) * vocab, vocab, row.begin());
    const int64_t token = SampleToken(row.data(), vocab, o.temperature, o.top_k, rng());
    NABLA_ENFORCE(token < 256, kInvalidArgument, c.path, ": the model drew token ", token,
                  ", which is not a byte (the vocabulary has ", vocab, " entries)");
    context.push_back(token);
    drawn.push_back(static_cast<char>(token));
    if (emit) emit(static_cast<char>(token));
  }
  return drawn;
}

}  // namespace nabla::train
