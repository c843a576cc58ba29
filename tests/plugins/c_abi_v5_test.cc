// The op plugin frozen at version 5 of the C ABI (tests/plugins/abi_v5/,
// built against the headers copied there and never edited) loads into this
// core and computes as it did: var-type inference makes its packed output a
// tensor array, the array shares the packed tensors' data and holds one
// entry without data, unpacking copies the entries and says which hold data,
// an input that is not a tensor array is refused, and its fc gives the bits
// of the backend's own GEMM with a fused bias and activation.
// What every later core owes plugins built for version 5.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common/op_case.h"
#include "nabla/cpu/cpu.h"
#include "nabla/executor.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "toy_gemm_epilogue.h"

namespace nabla {
namespace {

std::vector<double> Values(size_t n, double scale) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<double>(i) * 0.7 + 0.3) * scale;
  return v;
}

void Load() {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(ABI_V5_PLUGIN);
}

void RunOps(const std::vector<OpDesc>& ops, Scope& scope) {
  ProgramDesc program;
  for (const OpDesc& op : ops) program.Root()->AppendOp(op);
  CreateExecutor("sequential", HostDevice(), ExecutorOptions{})->Run(program, 0, scope);
}

const OpDesc kPack("abi_v5_pack", {{"X", {"a", "b"}}}, {{"Out", {"arr"}}}, {});

TEST(CApiV5, FrozenPluginLoadsWithItsAbiTag) {
  Load();
  bool found = false;
  for (const auto& p : CurrentRegistry()->Plugins())
    if (p.name == "abi_v5_ops") {
      found = true;
      EXPECT_EQ(p.abi, "nabla_c_api_v5");
    }
  EXPECT_TRUE(found);
}

TEST(CApiV5, FrozenVarTypeInferenceMakesATensorArray) {
  Load();
  ProgramDesc program;
  BlockDesc* block = program.Root();
  for (const char* name : {"a", "b"}) {
    VarDesc* v = block->Var(name);
    v->SetDType(DType::kFloat32);
    v->MarkDTypeKnown(true);
    v->SetShape({2, 3});
  }
  block->AppendOp(kPack);
  block->AppendOp(OpDesc("abi_v5_unpack", {{"X", {"arr"}}}, {{"Out", {"c"}}, {"Written", {"w"}}}, {}));
  InferProgram(program);
  EXPECT_EQ(block->FindVarRecursive("arr")->Type(), VarType::kTensorArray);
  EXPECT_EQ(block->FindVarRecursive("a")->Type(), VarType::kDense);
  EXPECT_EQ(block->FindVarRecursive("w")->GetDType(), DType::kInt64);

  // Unpacking a dense var is refused at inference, by the plugin's message.
  ProgramDesc dense;
  VarDesc* a = dense.Root()->Var("a");
  a->SetDType(DType::kFloat32);
  a->MarkDTypeKnown(true);
  a->SetShape({2});
  dense.Root()->AppendOp(OpDesc("abi_v5_unpack", {{"X", {"a"}}}, {{"Out", {"c"}}, {"Written", {"w"}}}, {}));
  try {
    InferProgram(dense);
    ADD_FAILURE() << "a dense X was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("abi_v5_unpack: X must be a tensor array, not dense"), std::string::npos)
        << e.what();
  }
}

TEST(CApiV5, FrozenOpsPackAndUnpackATensorArray) {
  Load();
  Scope scope;
  const std::vector<double> a = Values(6, 2.0), b = Values(6, -1.5);
  op_case::Write(scope, {"a", DType::kFloat32, {2, 3}, a}, HostDevice());
  op_case::Write(scope, {"b", DType::kFloat32, {2, 3}, b}, HostDevice());
  RunOps({kPack, OpDesc("abi_v5_unpack", {{"X", {"arr"}}}, {{"Out", {"c", "d"}}, {"Written", {"w"}}}, {})}, scope);

  Variable* arr = scope.FindVar("arr");
  ASSERT_NE(arr, nullptr);
  ASSERT_EQ(arr->Type(), VarType::kTensorArray);
  ASSERT_EQ(arr->GetArray().size(), 3u);
  // The entries share the packed tensors' data; the last holds none.
  EXPECT_EQ(arr->GetArray()[0].Data<float>(), scope.FindVar("a")->GetTensor().Data<float>());
  EXPECT_EQ(arr->GetArray()[1].Data<float>(), scope.FindVar("b")->GetTensor().Data<float>());
  EXPECT_FALSE(arr->GetArray()[2].IsInitialized());
  // Unpacked entries are copies with storage of their own.
  const Tensor& c = scope.FindVar("c")->GetTensor();
  EXPECT_NE(c.Data<float>(), scope.FindVar("a")->GetTensor().Data<float>());
  EXPECT_EQ(c.GetShape(), (Shape{2, 3}));
  const std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end());
  EXPECT_EQ(op_case::Read(c), std::vector<double>(af.begin(), af.end()));
  EXPECT_EQ(op_case::Read(scope.FindVar("d")->GetTensor()), std::vector<double>(bf.begin(), bf.end()));
  const Tensor& w = scope.FindVar("w")->GetTensor();
  EXPECT_EQ(w.GetDType(), DType::kInt64);
  EXPECT_EQ(op_case::Read(w), (std::vector<double>{1, 1, 0}));

  // The entry without data cannot be unpacked: the plugin's error, whole.
  try {
    RunOps({OpDesc("abi_v5_unpack", {{"X", {"arr"}}}, {{"Out", {"c", "d", "e"}}, {"Written", {"w"}}}, {})}, scope);
    ADD_FAILURE() << "an entry without data was unpacked";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("abi_v5_unpack: entry 2 holds no data"), std::string::npos) << e.what();
  }
}

template <typename T>
std::vector<double> Expected(int64_t m, int64_t n, int64_t k, const std::vector<double>& x,
                             const std::vector<double>& w, const std::vector<double>* bias, int act) {
  const std::vector<T> xt(x.begin(), x.end()), wt(w.begin(), w.end());
  std::vector<T> bt;
  if (bias) bt.assign(bias->begin(), bias->end());
  std::vector<T> out(static_cast<size_t>(m * n));
  // toy_gemm_epilogue.h's epilogue does what the frozen plugin's does, in the
  // same operations: the same bits.
  toy::BiasActEpilogue<T> e{out.data(), n, bias ? bt.data() : nullptr, act, false};
  cpu::GemmBiasAct(nullptr, m, n, k, xt.data(), k, wt.data(), n, bias ? bt.data() : nullptr,
                   static_cast<cpu::GemmAct>(act), out.data(), n, &toy::BiasActEpilogue<T>::Run, &e);
  return std::vector<double>(out.begin(), out.end());
}

TEST(CApiV5, FrozenFcGivesTheBackendsBits) {
  Load();
  struct Size {
    int64_t m, n, k;
  };
  // Small, one large enough for the backend to split over threads (and to
  // hand float32 with a bias to oneDNN where its policy does), and empty.
  for (const Size s : {Size{7, 5, 13}, Size{96, 80, 112}, Size{0, 4, 3}, Size{3, 4, 0}})
    for (const DType dtype : {DType::kFloat32, DType::kFloat64})
      for (const bool with_bias : {false, true})
        for (int act = 0; act <= 3; ++act) {
          SCOPED_TRACE(testing::Message() << s.m << "x" << s.n << "x" << s.k << " " << DTypeName(dtype) << " bias "
                                          << with_bias << " act " << act);
          const std::vector<double> x = Values(static_cast<size_t>(s.m * s.k), 1.0),
                                    w = Values(static_cast<size_t>(s.k * s.n), 0.5),
                                    bias = Values(static_cast<size_t>(s.n), 0.25);
          VarNameMap ins = {{"X", {"x"}}, {"W", {"w"}}};
          std::vector<op_case::Input> feeds = {{"x", dtype, {s.m, s.k}, x}, {"w", dtype, {s.k, s.n}, w}};
          if (with_bias) {
            ins["Bias"] = {"bias"};
            feeds.push_back({"bias", dtype, {s.n}, bias});
          }
          const op_case::Result r =
              op_case::RunOps({OpDesc("abi_v5_fc", ins, {{"Out", {"out"}}}, {{"act", act}})}, feeds, HostDevice());
          const std::vector<double> want =
              dtype == DType::kFloat32 ? Expected<float>(s.m, s.n, s.k, x, w, with_bias ? &bias : nullptr, act)
                                       : Expected<double>(s.m, s.n, s.k, x, w, with_bias ? &bias : nullptr, act);
          EXPECT_EQ(r.values.at("out"), want);
        }
}

}  // namespace
}  // namespace nabla
