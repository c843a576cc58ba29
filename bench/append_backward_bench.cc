// AppendBackward on generated programs of 1k, 10k and 100k forward ops. The
// builder must stay linear: 100k ops in well under a second.
//
//   chain:   x -> scale -> scale -> ... -> mean
//   diamond: per stage  a = prev + w;  b1 = 2a;  b2 = 3a;  prev = b1 + b2
//            (4 ops; every a@GRAD needs a rename + sum before its reader,
//            and the one shared w collects a contribution from every stage)
#include <benchmark/benchmark.h>

#include <string>

#include "common/toy_ops.h"
#include "nabla/backward.h"

namespace nabla {
namespace {

class Builder {
 public:
  Builder() : registry_(CurrentRegistry()) {}
  void Var(const std::string& name, bool persistable) {
    VarDesc* v = prog.Root()->Var(name);
    v->SetShape({16});
    v->MarkDTypeKnown();
    v->SetDeclared(true);
    v->SetPersistable(persistable);
  }
  void Op(const std::string& type, VarNameMap in, VarNameMap out, AttributeMap attrs = {}) {
    OpDesc op(type, std::move(in), std::move(out), std::move(attrs));
    FillDefaultAttrs(op, *registry_, &prog);
    OpDesc* added = prog.Root()->AppendOp(std::move(op));
    InferOpAtBuildTime(*added, *prog.Root(), *registry_);
  }
  ProgramDesc prog;

 private:
  std::shared_ptr<const OpRegistry> registry_;
};

ProgramDesc Chain(int64_t ops) {
  Builder b;
  b.Var("x", true);
  std::string prev = "x";
  for (int64_t i = 0; i + 1 < ops; ++i) {
    std::string out = "h" + std::to_string(i);
    b.Op("scale", {{"X", {prev}}}, {{"Out", {out}}}, {{"scale", 1.5f}});
    prev = out;
  }
  b.Op("mean", {{"X", {prev}}}, {{"Out", {"loss"}}});
  return std::move(b.prog);
}

ProgramDesc Diamond(int64_t ops) {
  Builder b;
  b.Var("x", true);
  b.Var("w", true);
  std::string prev = "x";
  for (int64_t i = 0; 4 * i + 1 < ops; ++i) {
    std::string s = std::to_string(i);
    b.Op("elementwise_add", {{"X", {prev}}, {"Y", {"w"}}}, {{"Out", {"a" + s}}});
    b.Op("scale", {{"X", {"a" + s}}}, {{"Out", {"b1_" + s}}}, {{"scale", 2.0f}});
    b.Op("scale", {{"X", {"a" + s}}}, {{"Out", {"b2_" + s}}}, {{"scale", 3.0f}});
    b.Op("elementwise_add", {{"X", {"b1_" + s}}, {"Y", {"b2_" + s}}}, {{"Out", {"p" + s}}});
    prev = "p" + s;
  }
  b.Op("mean", {{"X", {prev}}}, {{"Out", {"loss"}}});
  return std::move(b.prog);
}

template <ProgramDesc (*Make)(int64_t)>
void BM_AppendBackward(benchmark::State& state) {
  toys::RegisterToyOps();
  const ProgramDesc forward = Make(state.range(0));
  size_t grad_ops = 0;
  for (auto _ : state) {
    state.PauseTiming();
    ProgramDesc prog = forward;
    state.ResumeTiming();
    ParamGrads pg = AppendBackward(prog, "loss");
    benchmark::DoNotOptimize(pg);
    grad_ops = prog.Root()->OpSize() - forward.Root()->OpSize();
    state.PauseTiming();
    { ProgramDesc discard = std::move(prog); }  // destruction is not the builder's cost
    state.ResumeTiming();
  }
  state.counters["fwd_ops"] = static_cast<double>(forward.Root()->OpSize());
  state.counters["grad_ops"] = static_cast<double>(grad_ops);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(forward.Root()->OpSize()));
}

BENCHMARK_TEMPLATE(BM_AppendBackward, Chain)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_AppendBackward, Diamond)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace nabla
