#include "nabla/train/data_parallel.h"

#include <algorithm>
#include <map>
#include <memory>
#include <tuple>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/train.h"
#include "world_env.h"

namespace nabla::train {
namespace {

constexpr const char* kAllreduce = "c_allreduce_sum";
constexpr const char* kBroadcast = "c_broadcast";
constexpr const char* kStatsVar = "data_parallel@stats";

// The registry, checked to hold the collectives, or an error that says
// where they come from.
std::shared_ptr<const OpRegistry> RegistryWithCollectives() {
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  NABLA_ENFORCE(registry->Find(kAllreduce) != nullptr && registry->Find(kBroadcast) != nullptr, kPreconditionNotMet,
                "data-parallel training needs the ops c_allreduce_sum and c_broadcast of the collective_ops plugin, "
                "which is not loaded (it is built only when CMake finds MPI: install libopenmpi-dev and rebuild)");
  return registry;
}

OpDesc* AddOp(BlockDesc& block, size_t index, const std::string& type, VarNameMap inputs, VarNameMap outputs,
              AttributeMap attrs, const OpRegistry& registry) {
  auto op = std::make_unique<OpDesc>(type, std::move(inputs), std::move(outputs), std::move(attrs));
  FillDefaultAttrs(*op, registry, block.Program());
  OpDesc* p = block.InsertOp(index, std::move(op));
  InferOpAtBuildTime(*p, block, registry);
  return p;
}

void DeclareLike(BlockDesc& block, const std::string& name, const Tensor& t) {
  VarDesc* v = block.Var(name);
  v->SetShape(t.GetShape());
  v->SetDType(t.GetDType());
  v->MarkDTypeKnown();
  v->SetPersistable(true);
  v->SetStopGradient(true);
  v->SetDeclared(true);
}

}  // namespace

World DetectWorld() {
  World w;
  if (auto launched = collective::WorldFromLauncher()) {
    w.rank = launched->rank;
    w.size = launched->size;
  }
  return w;
}

World WorldForRun(const DistributedConfig& d, const std::string& config_path) {
  World w = DetectWorld();
  if (d.world_size > 0 && d.world_size != w.size) {
    const std::string where = d.pos.file.empty() ? config_path : d.pos.Where();
    NABLA_ENFORCE(w.size > 1, kInvalidArgument, where, ": distributed.world_size asks for ", d.world_size,
                  " data-parallel ranks, but nabla was not started by an MPI launcher; run `mpirun -np ", d.world_size,
                  " nabla run ", config_path, "`");
    NABLA_THROW(kInvalidArgument, where, ": distributed.world_size asks for ", d.world_size,
                " ranks, but mpirun started ", w.size);
  }
  return w;
}

bool IsDataParallelVar(const std::string& name) { return name.rfind("data_parallel@", 0) == 0; }

std::string GradScaleVar(DType dtype) {
  std::string name = "data_parallel@grad_scale";
  if (dtype != DType::kFloat32) name += std::string("@") + DTypeName(dtype);
  return name;
}

size_t InsertGradientAllreduce(ProgramDesc& program, const ParamGrads& param_grads, const DataParallelOptions& o) {
  NABLA_ENFORCE(o.world_size >= 1, kInvalidArgument, "the data-parallel world size must be at least 1, but received ",
                o.world_size);
  NABLA_ENFORCE(o.bucket_mb >= 0, kInvalidArgument, "the bucket size must be >= 0 MiB, but received ", o.bucket_mb);
  const std::shared_ptr<const OpRegistry> keep = RegistryWithCollectives();
  const OpRegistry& registry = *keep;
  BlockDesc& block = *program.Root();

  // Where each gradient is finished: its last writer in the root block
  // (a while_grad op for parameters used inside a loop).
  struct Grad {
    std::string name;
    size_t writer;
    size_t bytes;
    DType dtype;
  };
  std::vector<Grad> grads;
  for (const auto& [param, grad] : param_grads) {
    size_t writer = SIZE_MAX;
    for (size_t i = 0; i < block.OpSize(); ++i) {
      const auto outs = block.Op(i)->OutputArgumentNames();
      if (std::find(outs.begin(), outs.end(), grad) != outs.end()) writer = i;
    }
    NABLA_ENFORCE(writer != SIZE_MAX, kPreconditionNotMet, "the gradient '", grad, "' of '", param,
                  "' has no writer in the root block, so there is no place for its allreduce");
    const VarDesc* v = block.FindVar(grad);
    NABLA_ENFORCE(v != nullptr && v->HasDType() && IsFloating(v->GetDType()), kPreconditionNotMet, "the gradient '",
                  grad, "' must be a float var of the root block");
    const int64_t numel = NumElements(v->GetShape());
    grads.push_back(
        {grad, writer, numel > 0 ? static_cast<size_t>(numel) * DTypeSize(v->GetDType()) : 0, v->GetDType()});
  }
  // Backward finishes gradients in writer order; ties keep param order.
  std::stable_sort(grads.begin(), grads.end(), [](const Grad& a, const Grad& b) { return a.writer < b.writer; });

  // The scale vars: persistable, 1/world_size unless the trainer says else.
  for (const Grad& g : grads) {
    const std::string s = GradScaleVar(g.dtype);
    if (!block.HasVar(s)) DeclareFilledVar(block, s, {1}, g.dtype, static_cast<float>(1.0 / o.world_size));
  }

  // Buckets close once they reach bucket_mb (or per gradient with 0), and
  // never mix dtypes: one allreduce moves one dtype.
  const double cap = o.bucket_mb * 1024.0 * 1024.0;
  std::vector<std::vector<size_t>> buckets;
  double filled = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    if (buckets.empty() || filled >= cap || grads[buckets.back().back()].dtype != grads[i].dtype) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(i);
    filled += static_cast<double>(grads[i].bytes);
  }

  // The ops to insert after each writer, in order; inserted from the back
  // so earlier positions stay valid.
  std::map<size_t, std::vector<std::unique_ptr<OpDesc>>> after;
  auto attrs = [&] { return AttributeMap{{"ring_id", 0}, {"timeout_s", static_cast<float>(o.timeout_s)}}; };
  std::vector<int> bucket_of(grads.size());
  for (size_t b = 0; b < buckets.size(); ++b)
    for (size_t i : buckets[b]) bucket_of[i] = static_cast<int>(b);
  for (size_t i = 0; i < grads.size(); ++i) {
    const Grad& g = grads[i];
    after[g.writer].push_back(std::make_unique<OpDesc>("elementwise_mul",
                                                       VarNameMap{{"X", {g.name}}, {"Y", {GradScaleVar(g.dtype)}}},
                                                       VarNameMap{{"Out", {g.name}}}, AttributeMap{}));
    const auto& bucket = buckets[bucket_of[i]];
    if (bucket.back() != i) continue;
    std::vector<std::string> names;
    for (size_t j : bucket) names.push_back(grads[j].name);
    after[g.writer].push_back(
        std::make_unique<OpDesc>(kAllreduce, VarNameMap{{"X", names}}, VarNameMap{{"Out", names}}, attrs()));
  }
  for (auto it = after.rbegin(); it != after.rend(); ++it) {
    size_t at = it->first + 1;
    for (auto& op : it->second) {
      OpDesc* p = block.InsertOp(at++, std::move(op));
      FillDefaultAttrs(*p, registry, &program);
      InferOpAtBuildTime(*p, block, registry);
    }
  }
  return buckets.size();
}

std::pair<int64_t, int64_t> ShardOf(int64_t b0, int64_t b1, const World& w) {
  const int64_t m = b1 - b0;
  return {b0 + m * w.rank / w.size, b0 + m * (w.rank + 1) / w.size};
}

StepShard TrainShard(int64_t b0, int64_t b1, const World& w) {
  StepShard s;
  std::tie(s.begin, s.end) = ShardOf(b0, b1, w);
  s.rows = s.end - s.begin;
  s.grad_scale = static_cast<double>(s.rows) / static_cast<double>(b1 - b0);
  if (s.rows == 0) {
    s.begin = b0;
    s.end = b0 + 1;
  }
  return s;
}

void SetGradScale(Scope& scope, double scale) {
  for (DType t : {DType::kFloat32, DType::kFloat64}) {
    Variable* v = scope.FindVar(GradScaleVar(t));
    if (v == nullptr || !v->GetTensor().IsInitialized()) continue;
    Tensor& dst = v->GetTensor();
    const float f = static_cast<float>(scale);
    const bool f64 = t == DType::kFloat64;
    dst.GetDevice()->CopyFromHost(dst.RawData(), f64 ? static_cast<const void*>(&scale) : &f,
                                  f64 ? sizeof scale : sizeof f);
  }
}

Collectives::Collectives(const World& world, Executor& executor, double timeout_s)
    : world_(world), executor_(executor), timeout_s_(timeout_s) {
  if (world_.Distributed()) RegistryWithCollectives();
}

void Collectives::BroadcastFromRoot(Scope& scope, const std::vector<std::string>& names) {
  if (!world_.Distributed()) return;
  const std::shared_ptr<const OpRegistry> registry = RegistryWithCollectives();
  // The executor caches graphs by program address, so the program lives as
  // long as this object.
  programs_.push_back(std::make_unique<ProgramDesc>());
  ProgramDesc& program = *programs_.back();
  BlockDesc& block = *program.Root();
  std::map<DType, std::vector<std::string>> by_dtype;
  for (const auto& name : names) {
    Variable* v = scope.FindVar(name);
    if (v == nullptr || !v->GetTensor().IsInitialized()) continue;
    DeclareLike(block, name, v->GetTensor());
    by_dtype[v->GetTensor().GetDType()].push_back(name);
  }
  for (auto& [dtype, vars] : by_dtype) {
    AddOp(block, block.OpSize(), kBroadcast, {{"X", vars}}, {{"Out", vars}},
          {{"ring_id", 0}, {"root", 0}, {"timeout_s", static_cast<float>(timeout_s_)}}, *registry);
  }
  executor_.Run(program, 0, scope);
}

std::vector<double> Collectives::Sum(const std::vector<double>& values) {
  if (!world_.Distributed() || values.empty()) return values;
  const int64_t n = static_cast<int64_t>(values.size());
  auto& program = sum_programs_[n];
  Tensor& t = scope_.Var(kStatsVar)->GetTensor();
  double* d = t.Allocate<double>(HostDevice(), {n});
  std::copy(values.begin(), values.end(), d);
  if (!program) {
    program = std::make_unique<ProgramDesc>();
    BlockDesc& block = *program->Root();
    DeclareLike(block, kStatsVar, t);
    AddOp(block, 0, kAllreduce, {{"X", {kStatsVar}}}, {{"Out", {kStatsVar}}},
          {{"ring_id", 0}, {"timeout_s", static_cast<float>(timeout_s_)}}, *RegistryWithCollectives());
  }
  executor_.Run(*program, 0, scope_);
  const Tensor& r = scope_.FindVar(kStatsVar)->GetTensor();
  Tensor host;
  const Tensor* src = &r;
  if (r.GetDevice() != &HostDevice()) {
    host.CopyFrom(r, HostDevice());
    src = &host;
  }
  return std::vector<double>(src->Data<double>(), src->Data<double>() + n);
}

}  // namespace nabla::train
