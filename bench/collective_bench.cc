// c_allreduce_sum through the executor against raw MPI_Allreduce on the
// same buffer, 1 KB to 64 MB of float32, in place. Run under MPI:
//   mpirun -np 2 build/bin/collective_bench
// Every rank must run the same benchmarks the same number of times (each
// iteration is a collective), so iteration counts are fixed, not adaptive;
// only rank 0 reports.
#include <mpi.h>
#include <stdio.h>

#include <algorithm>
#include <memory>

#include "bench_util.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program.h"

namespace nabla::bench {
namespace {

int64_t Iterations(int64_t bytes) { return std::clamp<int64_t>((int64_t{512} << 20) / bytes, 10, 2000); }

void BM_CAllreduceSum(benchmark::State& state) {
  const int64_t bytes = state.range(0), n = bytes / 4;
  ProgramDesc program;
  BlockDesc* block = program.Root();
  VarDesc* v = block->Var("g");
  v->SetShape({n});
  v->SetDType(DType::kFloat32);
  v->MarkDTypeKnown();
  auto op = std::make_unique<OpDesc>("c_allreduce_sum", VarNameMap{{"X", {"g"}}}, VarNameMap{{"Out", {"g"}}},
                                     AttributeMap{{"timeout_s", 300.0f}});
  FillDefaultAttrs(*op, *CurrentRegistry(), &program);
  block->AppendOp(std::move(op));
  Scope scope;
  std::vector<float> data = RandomFloats(static_cast<size_t>(n), 1);
  SetTensor(scope, "g", DType::kFloat32, {n}, data.data(), HostDevice());
  ExecutorOptions o;
  o.threads = 1;
  auto exec = CreateExecutor("sequential", HostDevice(), o);
  for (auto _ : state) exec->Run(program, 0, scope);
  state.SetBytesProcessed(state.iterations() * bytes);
}

void BM_RawMpiAllreduce(benchmark::State& state) {
  const int64_t bytes = state.range(0), n = bytes / 4;
  std::vector<float> data = RandomFloats(static_cast<size_t>(n), 1);
  for (auto _ : state) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

void Register() {
  for (int64_t bytes = 1024; bytes <= (int64_t{64} << 20); bytes *= 4) {
    benchmark::RegisterBenchmark("BM_RawMpiAllreduce", BM_RawMpiAllreduce)
        ->Arg(bytes)
        ->Iterations(Iterations(bytes))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_CAllreduceSum", BM_CAllreduceSum)
        ->Arg(bytes)
        ->Iterations(Iterations(bytes))
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond);
  }
}

}  // namespace
}  // namespace nabla::bench

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0 && !freopen("/dev/null", "w", stdout)) return 1;
  nabla::cpu::InitCpuBackend();
  nabla::PluginManager::Instance().Load(NABLA_COLLECTIVE_PLUGIN);
  nabla::bench::Register();
  benchmark::Initialize(&argc, argv);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  MPI_Finalize();
  return 0;
}
