// The collective trait: the task-graph executor runs ops that declare it in
// program order even when no var orders them, so every rank enters its
// collectives in one order (two ranks entering two allreduces in different
// orders deadlock). Toy ops, no MPI: branch i sleeps less the later it
// comes, so without the trait its collective would finish first.
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"

namespace nabla {
namespace {

std::mutex order_mutex;
std::vector<std::string> entered;  // the toy collectives' X, in the order they ran

void RegisterToyCollectives() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("toy_collectives", [](Registrar& r) {
    auto like_x = [](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); };
    r.Op("toy_sleep", __FILE__, __LINE__)
        .Input("X", "x")
        .Output("Out", "x, after `ms` milliseconds")
        .Attr<int>("ms", 0, "(int, default 0) how long to sleep")
        .InferShape(like_x);
    r.Op("toy_collective", __FILE__, __LINE__).Input("X", "x").Output("Out", "x").InferShape(like_x).Collective();
    r.Op("toy_local", __FILE__, __LINE__).Input("X", "x").Output("Out", "x").InferShape(like_x);
    auto copy = [](const ExecutionContext& ctx) { ctx.Output("Out")->CopyFrom(ctx.Input("X"), ctx.GetDevice()); };
    r.Kernel(
        "toy_sleep", DeviceType::kCPU, DType::kFloat32,
        [copy](const ExecutionContext& ctx) {
          std::this_thread::sleep_for(std::chrono::milliseconds(ctx.Attr<int>("ms")));
          copy(ctx);
        },
        __FILE__, __LINE__);
    auto record = [copy](const ExecutionContext& ctx) {
      {
        std::lock_guard<std::mutex> lock(order_mutex);
        entered.push_back(ctx.Op().Input("X").at(0));
      }
      copy(ctx);
    };
    r.Kernel("toy_collective", DeviceType::kCPU, DType::kFloat32, record, __FILE__, __LINE__);
    r.Kernel("toy_local", DeviceType::kCPU, DType::kFloat32, record, __FILE__, __LINE__);
  });
}

// Four independent branches: toy_sleep (longest first), then `type`.
std::vector<std::string> RunBranches(const std::string& type) {
  cpu::InitCpuBackend();
  RegisterToyCollectives();
  ProgramDesc p;
  BlockDesc* b = p.Root();
  for (int i = 0; i < 4; ++i) {
    const std::string s = "s" + std::to_string(i);
    b->AppendOp(OpDesc("toy_sleep", {{"X", {"in"}}}, {{"Out", {s}}}, {{"ms", (4 - i) * 60}}));
    b->AppendOp(OpDesc(type, {{"X", {s}}}, {{"Out", {"c" + std::to_string(i)}}}, {}));
  }
  Scope scope;
  scope.Var("in")->GetTensor().Allocate<float>(HostDevice(), {1})[0] = 1.0f;
  ExecutorOptions o;
  o.threads = 4;
  auto exec = CreateExecutor("taskgraph", HostDevice(), o);
  entered.clear();
  exec->Run(p, 0, scope);
  return entered;
}

TEST(CollectiveTrait, TaskGraphRunsCollectivesInProgramOrder) {
  const std::vector<std::string> program_order{"s0", "s1", "s2", "s3"};
  EXPECT_EQ(RunBranches("toy_collective"), program_order);
  // The same ops without the trait overlap and finish in sleep order, which
  // is what makes the first expectation a test of the trait.
  std::vector<std::string> local = RunBranches("toy_local");
  EXPECT_EQ(local.size(), 4u);
  EXPECT_NE(local, program_order) << "the branches did not overlap; the trait was not exercised";
}

}  // namespace
}  // namespace nabla
