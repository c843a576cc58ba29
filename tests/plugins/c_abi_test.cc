// The C ABI (nabla/c_api.h, docs/plugin-abi.md): its first table's layout,
// pinned here so that a reordered, removed or inserted function fails the
// build; plugins written in C load, run and train; plugins built for a newer
// core, or missing their entry point, are refused on one line naming the
// plugin and both versions; a failing registration leaves nothing behind.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <string>
#include <tuple>
#include <unordered_set>
#include <vector>

#include "common/cli_runner.h"
#include "common/op_case.h"
#include "common/temp_dir.h"
#include "nabla/backward.h"
#include "nabla/c_api.h"
#include "nabla/cpu/cpu.h"
#include "nabla/cpu/vmath.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "toy_gemm_epilogue.h"
#include "toy_rows.h"

namespace nabla {
namespace {

// Version 1 of the table: two uint32_t, then one function pointer per slot.
constexpr size_t Slot(size_t i) { return 8 + i * sizeof(void*); }
static_assert(NABLA_C_API_VERSION >= 1);
static_assert(offsetof(nabla_api, api_version) == 0);
static_assert(offsetof(nabla_api, struct_size) == 4);
static_assert(offsetof(nabla_api, set_error) == Slot(0));
static_assert(offsetof(nabla_api, last_error) == Slot(1));
static_assert(offsetof(nabla_api, op_new) == Slot(2));
static_assert(offsetof(nabla_api, op_new_default_grad) == Slot(3));
static_assert(offsetof(nabla_api, op_doc) == Slot(4));
static_assert(offsetof(nabla_api, op_input) == Slot(5));
static_assert(offsetof(nabla_api, op_output) == Slot(6));
static_assert(offsetof(nabla_api, op_attr) == Slot(7));
static_assert(offsetof(nabla_api, op_infer_shape) == Slot(8));
static_assert(offsetof(nabla_api, op_grad_maker) == Slot(9));
static_assert(offsetof(nabla_api, op_grad_maker_default) == Slot(10));
static_assert(offsetof(nabla_api, op_grad_maker_none) == Slot(11));
static_assert(offsetof(nabla_api, op_traits) == Slot(12));
static_assert(offsetof(nabla_api, op_grad_check) == Slot(13));
static_assert(offsetof(nabla_api, kernel) == Slot(14));
static_assert(offsetof(nabla_api, op_type) == Slot(15));
static_assert(offsetof(nabla_api, op_slot_count) == Slot(16));
static_assert(offsetof(nabla_api, op_slot_name) == Slot(17));
static_assert(offsetof(nabla_api, op_arg_count) == Slot(18));
static_assert(offsetof(nabla_api, op_arg) == Slot(19));
static_assert(offsetof(nabla_api, op_attr_count) == Slot(20));
static_assert(offsetof(nabla_api, op_attr_name) == Slot(21));
static_assert(offsetof(nabla_api, op_get_attr) == Slot(22));
static_assert(offsetof(nabla_api, infer_op) == Slot(23));
static_assert(offsetof(nabla_api, infer_is_runtime) == Slot(24));
static_assert(offsetof(nabla_api, infer_has) == Slot(25));
static_assert(offsetof(nabla_api, infer_count) == Slot(26));
static_assert(offsetof(nabla_api, infer_input_rank) == Slot(27));
static_assert(offsetof(nabla_api, infer_input_dims) == Slot(28));
static_assert(offsetof(nabla_api, infer_input_dtype) == Slot(29));
static_assert(offsetof(nabla_api, infer_set_output_shape) == Slot(30));
static_assert(offsetof(nabla_api, infer_set_output_dtype) == Slot(31));
static_assert(offsetof(nabla_api, infer_where) == Slot(32));
static_assert(offsetof(nabla_api, grad_forward_op) == Slot(33));
static_assert(offsetof(nabla_api, grad_name) == Slot(34));
static_assert(offsetof(nabla_api, grad_is_no_grad_input) == Slot(35));
static_assert(offsetof(nabla_api, grad_new_op) == Slot(36));
static_assert(offsetof(nabla_api, new_op_set_args) == Slot(37));
static_assert(offsetof(nabla_api, new_op_set_attr) == Slot(38));
static_assert(offsetof(nabla_api, kernel_op) == Slot(39));
static_assert(offsetof(nabla_api, kernel_count) == Slot(40));
static_assert(offsetof(nabla_api, kernel_input) == Slot(41));
static_assert(offsetof(nabla_api, kernel_output) == Slot(42));
static_assert(offsetof(nabla_api, kernel_device) == Slot(43));
static_assert(offsetof(nabla_api, kernel_seed) == Slot(44));
static_assert(offsetof(nabla_api, tensor_dtype) == Slot(45));
static_assert(offsetof(nabla_api, tensor_rank) == Slot(46));
static_assert(offsetof(nabla_api, tensor_dims) == Slot(47));
static_assert(offsetof(nabla_api, tensor_numel) == Slot(48));
static_assert(offsetof(nabla_api, tensor_data) == Slot(49));
static_assert(offsetof(nabla_api, tensor_allocate) == Slot(50));
static_assert(offsetof(nabla_api, device_type) == Slot(51));
static_assert(offsetof(nabla_api, parallel_for) == Slot(52));
// Version 1 has 53 functions; later versions only add after them.
static_assert(sizeof(nabla_api) >= Slot(53));
// Version 2 appends the device plugins' functions.
static_assert(NABLA_C_API_VERSION >= 2);
static_assert(offsetof(nabla_api, device_type_id) == Slot(53));
static_assert(offsetof(nabla_api, device_type_name) == Slot(54));
static_assert(offsetof(nabla_api, device_backend) == Slot(55));
static_assert(offsetof(nabla_api, device_list_add) == Slot(56));
static_assert(offsetof(nabla_api, device_state) == Slot(57));
static_assert(sizeof(nabla_api) >= Slot(58));
// Version 3 appends the CPU backend's math and views.
static_assert(NABLA_C_API_VERSION >= 3);
static_assert(offsetof(nabla_api, cpu_gemm) == Slot(58));
static_assert(offsetof(nabla_api, cpu_vmath) == Slot(59));
static_assert(offsetof(nabla_api, cpu_gelu_grad) == Slot(60));
static_assert(offsetof(nabla_api, tensor_share) == Slot(61));
static_assert(offsetof(nabla_api, infer_input_values) == Slot(62));
static_assert(offsetof(nabla_api, kernel_input_values) == Slot(63));
static_assert(offsetof(nabla_api, op_kernel_dtype) == Slot(64));
static_assert(offsetof(nabla_api, op_output_count) == Slot(65));
static_assert(offsetof(nabla_api, op_fuses) == Slot(66));
static_assert(offsetof(nabla_api, fusion_match_count) == Slot(67));
static_assert(offsetof(nabla_api, fusion_match) == Slot(68));
static_assert(offsetof(nabla_api, fusion_new_op) == Slot(69));
static_assert(offsetof(nabla_api, fusion_block_op_count) == Slot(70));
static_assert(offsetof(nabla_api, fusion_block_op) == Slot(71));
static_assert(offsetof(nabla_api, fusion_var_dtype) == Slot(72));
static_assert(offsetof(nabla_api, fusion_var_rank) == Slot(73));
static_assert(offsetof(nabla_api, fusion_var_dims) == Slot(74));
static_assert(sizeof(nabla_api) >= Slot(75));
// Version 4 appends copies and variables.
static_assert(NABLA_C_API_VERSION >= 4);
static_assert(offsetof(nabla_api, tensor_copy) == Slot(75));
static_assert(offsetof(nabla_api, kernel_input_var) == Slot(76));
static_assert(offsetof(nabla_api, op_input_no_buffer) == Slot(77));
// ... and program passes.
static_assert(offsetof(nabla_api, op_rewrites) == Slot(78));
static_assert(offsetof(nabla_api, pass_keep_count) == Slot(79));
static_assert(offsetof(nabla_api, pass_keep) == Slot(80));
static_assert(offsetof(nabla_api, pass_block_count) == Slot(81));
static_assert(offsetof(nabla_api, pass_block_parent) == Slot(82));
static_assert(offsetof(nabla_api, pass_op_count) == Slot(83));
static_assert(offsetof(nabla_api, pass_op) == Slot(84));
static_assert(offsetof(nabla_api, pass_op_pos) == Slot(85));
static_assert(offsetof(nabla_api, pass_op_set_pos) == Slot(86));
static_assert(offsetof(nabla_api, pass_op_set_args) == Slot(87));
static_assert(offsetof(nabla_api, pass_op_remove_slot) == Slot(88));
static_assert(offsetof(nabla_api, pass_op_set_attr) == Slot(89));
static_assert(offsetof(nabla_api, pass_op_remove_attr) == Slot(90));
static_assert(offsetof(nabla_api, pass_op_fill_default_attrs) == Slot(91));
static_assert(offsetof(nabla_api, pass_insert_op) == Slot(92));
static_assert(offsetof(nabla_api, pass_remove_ops) == Slot(93));
static_assert(offsetof(nabla_api, pass_var_count) == Slot(94));
static_assert(offsetof(nabla_api, pass_var_name) == Slot(95));
static_assert(offsetof(nabla_api, pass_var_get) == Slot(96));
static_assert(offsetof(nabla_api, pass_var_set) == Slot(97));
static_assert(offsetof(nabla_api, pass_remove_var) == Slot(98));
static_assert(offsetof(nabla_api, op_type_traits) == Slot(99));
static_assert(offsetof(nabla_api, pass_evaluate_on_host) == Slot(100));
static_assert(NABLA_C_TRAIT_HAS_SUB_BLOCK == 32 && NABLA_C_TRAIT_CONTROL_FLOW == 64 && NABLA_C_VAR_DECLARED == 8);
static_assert(offsetof(nabla_var_info, dims) == 16 && sizeof(nabla_var_info) == 32);
// ... and the CPU row kernels and what oneDNN users share.
static_assert(offsetof(nabla_api, cpu_row_max) == Slot(101));
static_assert(offsetof(nabla_api, cpu_exp_shifted) == Slot(102));
static_assert(offsetof(nabla_api, cpu_scale_row) == Slot(103));
static_assert(offsetof(nabla_api, cpu_dot_row) == Slot(104));
static_assert(offsetof(nabla_api, cpu_softmax_grad_row) == Slot(105));
static_assert(offsetof(nabla_api, cpu_layer_norm_row) == Slot(106));
static_assert(offsetof(nabla_api, cpu_layer_norm_grad_row) == Slot(107));
static_assert(offsetof(nabla_api, cpu_sum_arrays) == Slot(108));
static_assert(offsetof(nabla_api, cpu_to_bf16) == Slot(109));
static_assert(offsetof(nabla_api, cpu_from_bf16) == Slot(110));
static_assert(offsetof(nabla_api, cpu_dnnl_scratchpad) == Slot(111));
static_assert(offsetof(nabla_api, cpu_dnnl_budget_begin) == Slot(112));
static_assert(offsetof(nabla_api, cpu_dnnl_budget_end) == Slot(113));
static_assert(offsetof(nabla_api, cpu_has_bf16_gemm) == Slot(114));
static_assert(offsetof(nabla_api, cpu_gemm_bf16) == Slot(115));
static_assert(sizeof(nabla_api) >= Slot(116));
// Version 5: variables, tensor arrays and var-type inference.
static_assert(NABLA_C_API_VERSION >= 5);
static_assert(offsetof(nabla_api, kernel_var) == Slot(116));
static_assert(offsetof(nabla_api, var_type) == Slot(117));
static_assert(offsetof(nabla_api, var_set_type) == Slot(118));
static_assert(offsetof(nabla_api, var_tensor) == Slot(119));
static_assert(offsetof(nabla_api, var_array_size) == Slot(120));
static_assert(offsetof(nabla_api, var_array_resize) == Slot(121));
static_assert(offsetof(nabla_api, var_array_entry) == Slot(122));
static_assert(offsetof(nabla_api, tensor_initialized) == Slot(123));
static_assert(offsetof(nabla_api, tensor_assign) == Slot(124));
static_assert(offsetof(nabla_api, op_infer_var_type) == Slot(125));
static_assert(offsetof(nabla_api, pass_var_type) == Slot(126));
static_assert(offsetof(nabla_api, pass_var_set_type) == Slot(127));
static_assert(offsetof(nabla_api, infer_input_var_type) == Slot(128));
static_assert(sizeof(nabla_api) >= Slot(129));
static_assert(NABLA_C_VAR_DENSE == 0 && NABLA_C_VAR_TENSOR_ARRAY == 1 && NABLA_C_VAR_STEP_SCOPES == 2);
// Version 5 (continued): the GEMM with a fused bias and activation.
static_assert(offsetof(nabla_api, cpu_gemm_bias_act) == Slot(129));
static_assert(sizeof(nabla_api) >= Slot(130));
static_assert(NABLA_C_GEMM_ACT_IDENTITY == 0 && NABLA_C_GEMM_ACT_RELU == 1 && NABLA_C_GEMM_ACT_TANH == 2 &&
              NABLA_C_GEMM_ACT_SIGMOID == 3);
static_assert(NABLA_C_GEMM_LIB_POLICY == -1 && NABLA_C_GEMM_LIB_OPENBLAS == 0 && NABLA_C_GEMM_LIB_ONEDNN == 1);
// Version 6: control flow (scopes, running blocks, block attributes).
static_assert(NABLA_C_API_VERSION >= 6);
static_assert(offsetof(nabla_api, kernel_scope) == Slot(130));
static_assert(offsetof(nabla_api, scope_new_child) == Slot(131));
static_assert(offsetof(nabla_api, scope_delete_child) == Slot(132));
static_assert(offsetof(nabla_api, scope_find_var) == Slot(133));
static_assert(offsetof(nabla_api, scope_var) == Slot(134));
static_assert(offsetof(nabla_api, kernel_run_block) == Slot(135));
static_assert(offsetof(nabla_api, kernel_program) == Slot(136));
static_assert(offsetof(nabla_api, kernel_run_option) == Slot(137));
static_assert(offsetof(nabla_api, var_step_scope_count) == Slot(138));
static_assert(offsetof(nabla_api, var_step_scope) == Slot(139));
static_assert(offsetof(nabla_api, var_step_scope_push) == Slot(140));
static_assert(offsetof(nabla_api, var_step_scopes_truncate) == Slot(141));
static_assert(offsetof(nabla_api, var_new) == Slot(142));
static_assert(offsetof(nabla_api, var_free) == Slot(143));
static_assert(offsetof(nabla_api, op_get_block_attr) == Slot(144));
static_assert(offsetof(nabla_api, op_pos) == Slot(145));
static_assert(offsetof(nabla_api, pass_where) == Slot(146));
static_assert(offsetof(nabla_api, grad_program) == Slot(147));
static_assert(offsetof(nabla_api, grad_block) == Slot(148));
static_assert(sizeof(nabla_api) >= Slot(149));
static_assert(NABLA_C_ATTR_BLOCK == 8);

// Version 7: a kernel's attribute reads and op versions.
static_assert(NABLA_C_API_VERSION >= 7);
static_assert(offsetof(nabla_api, kernel_attr) == Slot(149));
static_assert(offsetof(nabla_api, op_version) == Slot(150));
static_assert(sizeof(nabla_api) >= Slot(151));

// Version 8: inputs a bfloat16 kernel also takes in float32.
static_assert(NABLA_C_API_VERSION >= 8);
static_assert(offsetof(nabla_api, op_bf16_takes_float32) == Slot(151));
static_assert(sizeof(nabla_api) >= Slot(152));

// Version 9: the CPU row kernels over many rows a call.
static_assert(NABLA_C_API_VERSION >= 9);
static_assert(offsetof(nabla_api, cpu_layer_norm_rows) == Slot(152));
static_assert(offsetof(nabla_api, cpu_layer_norm_grad_rows) == Slot(153));
static_assert(offsetof(nabla_api, cpu_row_max_rows) == Slot(154));
static_assert(offsetof(nabla_api, cpu_exp_shifted_rows) == Slot(155));
static_assert(offsetof(nabla_api, cpu_dot_rows) == Slot(156));
static_assert(sizeof(nabla_api) == Slot(157));
static_assert(NABLA_C_VMATH_TANH == 0 && NABLA_C_VMATH_GELU == 1 && NABLA_C_VMATH_GELU_TANH == 2);
static_assert(offsetof(nabla_device_backend, name) == 8 && offsetof(nabla_device_backend, user) == 24 &&
              offsetof(nabla_device_backend, enumerate) == 32 && offsetof(nabla_device_backend, synchronize) == 88 &&
              sizeof(nabla_device_backend) == 96);
static_assert(NABLA_C_DEVICE_HOST_FALLBACK == 1);
static_assert(offsetof(nabla_plugin_manifest, name) == 16 && offsetof(nabla_plugin_manifest, version) == 24);
static_assert(sizeof(nabla_attr_value) == 48 && offsetof(nabla_attr_value, count) == 40);
static_assert(offsetof(nabla_grad_check_input, slot) == 8 && offsetof(nabla_grad_check_input, count) == 92 &&
              sizeof(nabla_grad_check_input) == 96);
static_assert(offsetof(nabla_grad_check, max_relative_error) == 96 && sizeof(nabla_grad_check) == 120);

std::string LoadError(const std::string& path) {
  const std::vector<std::string> before = CurrentRegistry()->OpTypes();
  try {
    PluginManager::Instance().Load(path);
  } catch (const Error& e) {
    EXPECT_EQ(CurrentRegistry()->OpTypes(), before) << "a refused plugin changed the registry";
    EXPECT_TRUE(e.IsBadInput()) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "loading " << path << " succeeded";
  return "";
}

// This core's C API version, and the one after it, as messages spell them.
const std::string kVersion = std::to_string(NABLA_C_API_VERSION);
const std::string kNextVersion = std::to_string(NABLA_C_API_VERSION + 1);

TEST(CApi, NewerApiVersionIsRefusedNamingBothVersions) {
  const std::string m = LoadError(TOY_C_NEWER);
  EXPECT_NE(m.find("plugin 'toy_c_newer' 0.9 was built for the nabla C API version " + kNextVersion +
                   " but this core provides version " + kVersion),
            std::string::npos)
      << m;
  EXPECT_EQ(m.find('\n'), std::string::npos);
}

TEST(CApi, TableTooShortIsRefused) {
  const std::string m = LoadError(TOY_C_LONG_TABLE);
  EXPECT_NE(m.find("plugin 'toy_c_long_table' 0.9 (C API version " + kVersion + ") needs a function table of"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("this core's table (C API version " + kVersion + ")"), std::string::npos) << m;
}

TEST(CApi, MissingEntryPointIsRefused) {
  const std::string m = LoadError(TOY_C_NO_INIT);
  EXPECT_NE(m.find("plugin 'toy_c_no_init' 0.9 (C API version " + kVersion + ", core version " + kVersion +
                   ") exports nabla_plugin_manifest_v1 but not its entry point nabla_plugin_init"),
            std::string::npos)
      << m;
}

TEST(CApi, FailingRegistrationLeavesNothing) {
  const std::string m = LoadError(TOY_C_HALF);
  EXPECT_NE(m.find("the registration of plugin 'toy_c_half' failed: toy_c_half gives up after its first op"),
            std::string::npos)
      << m;
  EXPECT_EQ(CurrentRegistry()->Find("toy_c_half"), nullptr);
}

TEST(CApi, CPluginRegistersRunsAndChecksItsGradient) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(C_MINIMAL);
  std::shared_ptr<const OpRegistry> registry = CurrentRegistry();
  const OpInfo& info = registry->Get("c_minimal_softsign");
  EXPECT_EQ(info.origin.plugin, "c_minimal");
  EXPECT_TRUE(info.HasGradient());
  const auto* plugin = [&]() -> const OpRegistry::PluginRecord* {
    for (const auto& p : registry->Plugins())
      if (p.name == "c_minimal") return &p;
    return nullptr;
  }();
  ASSERT_NE(plugin, nullptr);
  EXPECT_EQ(plugin->abi, "nabla_c_api_v" + kVersion);
  EXPECT_NE(registry->FindKernel("c_minimal_softsign_grad", DeviceType::kCPU, DType::kFloat32), nullptr);
  const std::vector<GradCheckResult> results = CheckOpGradients("c_minimal_softsign", HostDevice());
  ASSERT_EQ(results.size(), 1u);
  EXPECT_TRUE(results[0].ok) << (results[0].failures.empty() ? "" : results[0].failures[0]);
  EXPECT_LT(results[0].max_error, 1e-6);
}

// What an SDK plugin's kernel throws reaches the caller as one nabla::Error
// with its message and (for nabla::Error) its kind.
TEST(CApi, SdkExceptionsBecomeErrors) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_THROWS);
  const std::vector<std::tuple<int, ErrorKind, std::string>> cases = {
      {1, ErrorKind::kOutOfRange, "toy_sdk_throw: mode 1 is out of range"},
      {2, ErrorKind::kRuntime, "an exception that is not a std::exception"},
      {3, ErrorKind::kRuntime, "toy_sdk_throw: a runtime_error"},
  };
  for (const auto& [mode, kind, message] : cases) {
    OpDesc op("toy_sdk_throw", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"mode", mode}});
    try {
      op_case::RunOps({op}, {{"x", DType::kFloat32, {2}, {1.0, 2.0}}}, HostDevice());
      ADD_FAILURE() << "mode " << mode << " did not throw";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), kind) << e.what();
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  OpDesc copy("toy_sdk_throw", {{"X", {"x"}}}, {{"Out", {"y"}}}, {{"mode", 0}});
  EXPECT_EQ(op_case::RunOps({copy}, {{"x", DType::kFloat32, {2}, {1.0, 2.0}}}, HostDevice()).values["y"],
            (std::vector<double>{1.0, 2.0}));
}

std::vector<double> Uniform(size_t n, uint32_t seed) {
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = (static_cast<double>(seed >> 8) / 16777216.0) * 8.0 - 4.0;
  }
  return v;
}

template <typename T>
std::vector<T> As(const std::vector<double>& v) {
  return std::vector<T>(v.begin(), v.end());
}

// Version 3: a plugin's kernel computes with nabla's own GEMM and vector
// math (the same bits as cpu::Gemm, cpu::Tanh, cpu::Gelu, cpu::GeluGrad),
// makes views, and a bad argument is one error naming the function.
TEST(CApi, SdkPluginComputesWithTheCpuBackendsMath) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_CPU_MATH);
  // Every transpose combination, both dtypes, a product large enough to be
  // split across threads, and empty ones.
  for (const auto& [m, n, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3, 5, 4}, {67, 129, 33}, {300, 200, 64}, {0, 4, 3}, {4, 0, 3}, {4, 3, 0}}) {
    for (const DType dtype : {DType::kFloat32, DType::kFloat64}) {
      for (const bool ta : {false, true}) {
        for (const bool tb : {false, true}) {
          const std::vector<double> xv = Uniform(m * k, 7), yv = Uniform(k * n, 11);
          const Shape xs = ta ? Shape{k, m} : Shape{m, k}, ys = tb ? Shape{n, k} : Shape{k, n};
          OpDesc op("toy_gemm", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}},
                    {{"trans_x", ta}, {"trans_y", tb}, {"alpha", 0.5f}, {"bad_ld", false}, {"bf16", 0}});
          const op_case::Result r = op_case::RunOps({op}, {{"x", dtype, xs, xv}, {"y", dtype, ys, yv}}, HostDevice());
          std::vector<double> want(m * n);
          if (dtype == DType::kFloat32) {
            const std::vector<float> xf = As<float>(xv), yf = As<float>(yv);
            std::vector<float> c(m * n);
            cpu::Gemm(ta, tb, m, n, k, 0.5f, xf.data(), std::max<int64_t>(1, xs[1]), yf.data(),
                      std::max<int64_t>(1, ys[1]), 0.0f, c.data(), std::max<int64_t>(1, n));
            want.assign(c.begin(), c.end());
          } else {
            std::vector<double> c(m * n);
            cpu::Gemm(ta, tb, m, n, k, 0.5, xv.data(), std::max<int64_t>(1, xs[1]), yv.data(),
                      std::max<int64_t>(1, ys[1]), 0.0, c.data(), std::max<int64_t>(1, n));
            want = c;
          }
          EXPECT_EQ(r.shapes.at("out"), (Shape{m, n}));
          EXPECT_EQ(r.values.at("out"), want)
              << m << "x" << n << "x" << k << " " << DTypeName(dtype) << " " << ta << tb;
          if (dtype != DType::kFloat32) continue;
          // The bfloat16 GEMM (version 4), into float32 and into bfloat16.
          const std::vector<float> xf = As<float>(xv), yf = As<float>(yv);
          std::vector<bfloat16> xb(xf.size()), yb(yf.size()), cb(m * n);
          cpu::ConvertToBf16(xf.data(), xb.data(), static_cast<int64_t>(xf.size()));
          cpu::ConvertToBf16(yf.data(), yb.data(), static_cast<int64_t>(yf.size()));
          for (const int bf16 : {1, 2}) {
            op.SetAttr("bf16", bf16);
            std::vector<float> c(m * n);
            const int64_t lda = std::max<int64_t>(1, xs[1]), ldb = std::max<int64_t>(1, ys[1]),
                          ldc = std::max<int64_t>(1, n);
            try {
              if (bf16 == 1) {
                cpu::GemmBf16(ta, tb, m, n, k, 0.5f, xb.data(), lda, yb.data(), ldb, 0.0f, c.data(), ldc);
              } else {
                cpu::GemmBf16(ta, tb, m, n, k, 0.5f, xb.data(), lda, yb.data(), ldb, cb.data(), ldc);
                cpu::ConvertFromBf16(cb.data(), c.data(), m * n);
              }
            } catch (const Error& e) {
              // A build without oneDNN (the sanitizer builds) has no bfloat16
              // GEMM: the plugin must get the same error, not a crash.
              ASSERT_EQ(e.kind(), ErrorKind::kUnimplemented) << e.what();
              EXPECT_THROW(op_case::RunOps({op}, {{"x", dtype, xs, xv}, {"y", dtype, ys, yv}}, HostDevice()), Error);
              continue;
            }
            const op_case::Result rb =
                op_case::RunOps({op}, {{"x", dtype, xs, xv}, {"y", dtype, ys, yv}}, HostDevice());
            EXPECT_EQ(rb.values.at("out"), std::vector<double>(c.begin(), c.end()))
                << "bf16 " << bf16 << " " << m << "x" << n << "x" << k << " " << ta << tb;
          }
        }
      }
    }
  }
  try {
    OpDesc bad("toy_gemm", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}},
               {{"trans_x", false}, {"trans_y", false}, {"alpha", 1.0f}, {"bad_ld", true}, {"bf16", 0}});
    op_case::RunOps({bad},
                    {{"x", DType::kFloat32, {2, 3}, Uniform(6, 1)}, {"y", DType::kFloat32, {3, 2}, Uniform(6, 2)}},
                    HostDevice());
    ADD_FAILURE() << "lda = 0 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_gemm: leading dimensions lda=0"), std::string::npos) << e.what();
  }

  const int64_t n = 1000;  // past one vector block and its tail
  const std::vector<double> xv = Uniform(n, 3), dyv = Uniform(n, 5);
  const std::vector<float> xf = As<float>(xv), dyf = As<float>(dyv);
  for (int fn = 0; fn < 5; ++fn) {
    OpDesc op("toy_vmath", {{"X", {"x"}}, {"Y", {"dy"}}}, {{"Out", {"out"}}}, {{"fn", fn}});
    const op_case::Result r =
        op_case::RunOps({op}, {{"x", DType::kFloat32, {n}, xv}, {"dy", DType::kFloat32, {n}, dyv}}, HostDevice());
    std::vector<float> want(n);
    if (fn == 0) cpu::Tanh(xf.data(), want.data(), n);
    if (fn == 1 || fn == 2) cpu::Gelu(xf.data(), want.data(), n, fn == 2);
    if (fn == 3 || fn == 4) cpu::GeluGrad(xf.data(), dyf.data(), want.data(), n, fn == 4);
    EXPECT_EQ(r.values.at("out"), std::vector<double>(want.begin(), want.end())) << "fn " << fn;
  }

  const std::vector<double> v = Uniform(24, 9);
  OpDesc view("toy_view", {{"X", {"x"}}}, {{"Out", {"out"}}}, {{"shape", std::vector<int>{4, 6}}});
  const op_case::Result r = op_case::RunOps({view}, {{"x", DType::kFloat32, {2, 3, 4}, v}}, HostDevice());
  EXPECT_EQ(r.shapes.at("out"), (Shape{4, 6}));
  const std::vector<float> vf = As<float>(v);
  EXPECT_EQ(r.values.at("out"), std::vector<double>(vf.begin(), vf.end()));
  try {
    OpDesc bad("toy_view", {{"X", {"x"}}}, {{"Out", {"out"}}}, {{"shape", std::vector<int>{5, 5}}});
    op_case::RunOps({bad}, {{"x", DType::kFloat32, {2, 3, 4}, v}}, HostDevice());
    ADD_FAILURE() << "a view of 25 elements over 24 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("tensor_share: [5, 5] holds 25 elements but the source float32[2, 3, 4] holds 24"),
        std::string::npos)
        << e.what();
  }
}

// A plugin's shape function asking for an input's dtype that is not known
// at build time (a feed declared without one) stops there, its outputs'
// dtypes left unknown, as a shape function of nabla's tree does: no error.
TEST(CApi, SdkShapeFunctionStopsAtADTypeNotKnownYet) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_CPU_MATH);
  ProgramDesc program;
  BlockDesc& block = *program.Root();
  block.Var("x")->SetShape({2, 3});
  VarDesc* y = block.Var("y");
  y->SetShape({3, 4});
  y->SetDType(DType::kFloat32);
  y->MarkDTypeKnown();
  OpDesc op("toy_gemm", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}}, {});
  FillDefaultAttrs(op, *CurrentRegistry());
  EXPECT_NO_THROW(InferOpAtBuildTime(op, block, *CurrentRegistry()));
  ASSERT_NE(block.FindVar("out"), nullptr);
  EXPECT_FALSE(block.FindVar("out")->HasDType());
  // Declared, it is inferred.
  block.Var("x")->SetDType(DType::kFloat64);
  block.Var("x")->MarkDTypeKnown();
  InferOpAtBuildTime(op, block, *CurrentRegistry());
  EXPECT_TRUE(block.FindVar("out")->HasDType());
  EXPECT_EQ(block.FindVar("out")->GetDType(), DType::kFloat64);
}

// Version 5: the GEMM with a fused bias and activation gives a plugin's
// kernel the backend's own bits (cpu::GemmBiasAct with the same epilogue),
// for every activation, with and without a bias, on each library and the
// policy's choice, split over threads, and empty; what the plugin's
// epilogue throws comes back as an error, as does a bad activation.
TEST(CApi, SdkPluginComputesWithTheGemmWithBiasAndActivation) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_CPU_MATH);
  for (const auto& [m, n, k] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 5, 4}, {300, 200, 64}, {0, 4, 3}, {4, 3, 0}}) {
    const std::vector<double> xv = Uniform(m * k, 7), yv = Uniform(k * n, 11), bv = Uniform(n, 13);
    for (const DType dtype : {DType::kFloat32, DType::kFloat64})
      for (const int act : {0, 1, 2, 3})
        for (const int lib : {-1, 0, 1})
          for (const bool with_bias : {false, true}) {
            VarNameMap ins = {{"X", {"x"}}, {"Y", {"y"}}};
            if (with_bias) ins["Bias"] = {"b"};
            OpDesc op("toy_gemm_bias_act", ins, {{"Out", {"out"}}}, {{"act", act}, {"lib", lib}, {"fail", false}});
            const std::vector<op_case::Input> inputs = {
                {"x", dtype, {m, k}, xv}, {"y", dtype, {k, n}, yv}, {"b", dtype, {n}, bv}};
            std::vector<double> want;
            const cpu::GemmLib forced = lib == 1 ? cpu::GemmLib::kOneDnn : cpu::GemmLib::kOpenBlas;
            auto run = [&](auto zero) {
              using T = decltype(zero);
              const std::vector<T> x(xv.begin(), xv.end()), y(yv.begin(), yv.end()), b(bv.begin(), bv.end());
              std::vector<T> c(m * n);
              toy::BiasActEpilogue<T> e{c.data(), n, with_bias ? b.data() : nullptr, act, false};
              cpu::GemmBiasAct(lib < 0 ? nullptr : &forced, m, n, k, x.data(), k, y.data(), n, e.bias,
                               static_cast<cpu::GemmAct>(act), c.data(), n, &toy::BiasActEpilogue<T>::Run, &e);
              want.assign(c.begin(), c.end());
            };
            try {
              if (dtype == DType::kFloat32)
                run(0.0f);
              else
                run(0.0);
            } catch (const Error& e) {
              // Built without oneDNN (the sanitizer builds), forcing it
              // fails: the plugin must get the same error, not a crash.
              ASSERT_EQ(e.kind(), ErrorKind::kUnimplemented) << e.what();
              EXPECT_THROW(op_case::RunOps({op}, inputs, HostDevice()), Error);
              continue;
            }
            const op_case::Result r = op_case::RunOps({op}, inputs, HostDevice());
            EXPECT_EQ(r.values.at("out"), want) << m << "x" << n << "x" << k << " " << DTypeName(dtype) << " act "
                                                << act << " lib " << lib << " bias " << with_bias;
          }
  }
  const std::vector<op_case::Input> small = {{"x", DType::kFloat32, {2, 3}, Uniform(6, 1)},
                                             {"y", DType::kFloat32, {3, 2}, Uniform(6, 2)}};
  try {
    OpDesc bad("toy_gemm_bias_act", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}},
               {{"act", 0}, {"lib", 0}, {"fail", true}});
    op_case::RunOps({bad}, small, HostDevice());
    ADD_FAILURE() << "the epilogue's exception was lost";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("toy epilogue failed"), std::string::npos) << e.what();
  }
  try {
    OpDesc bad("toy_gemm_bias_act", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}},
               {{"act", 7}, {"lib", -1}, {"fail", false}});
    op_case::RunOps({bad}, small, HostDevice());
    ADD_FAILURE() << "activation 7 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_gemm_bias_act: unknown activation 7"), std::string::npos) << e.what();
  }
}

// Version 4: the row kernels, SumArrays and the bfloat16 conversions give a
// plugin's kernel the bits of nabla's own (vmath.h, cpu.h) on every row,
// with rows split across threads; bits compared, so NaN (layer_norm of an
// empty row) matches NaN; and what the process's oneDNN users share (the
// budget's team, the scratchpad). A bad argument is one error naming the
// function.
TEST(CApi, SdkPluginComputesWithTheCpuRowKernels) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_CPU_MATH);
  auto bits = [](const std::vector<double>& v) {
    std::vector<uint32_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(&b[i], &f, sizeof f);
    }
    return b;
  };
  for (const auto& [rows, n] :
       std::vector<std::pair<int64_t, int64_t>>{{5, 37}, {3, 1000}, {4, 1}, {300, 16}, {2, 0}}) {
    std::vector<double> xv = Uniform(rows * n, 13), yv = Uniform(rows * n, 17);
    if (n > 3) xv[3] = -100.0;  // exp(x - shift) below the cut: exactly 0
    const std::vector<float> xf = As<float>(xv), yf = As<float>(yv);
    for (int fn = n == 0 ? 1 : 0; fn < 11; ++fn) {
      const float shift = fn == 3 ? 0.75f : 1.5f;
      OpDesc op("toy_rows", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}, {"Acc", {"acc"}}},
                {{"fn", fn}, {"shift", shift}});
      const op_case::Result r = op_case::RunOps(
          {op}, {{"x", DType::kFloat32, {rows, n}, xv}, {"y", DType::kFloat32, {rows, n}, yv}}, HostDevice());
      const int64_t w = 2 * n + 3;
      std::vector<float> out(rows * w, 0.0f), acc(2 * n, 0.0f);
      for (int64_t i = 0; i < rows; ++i)
        toy::RowRun(fn, shift, xf.data() + i * n, yf.data() + i * n, yf.data() + (i + 1) % rows * n, n,
                    out.data() + i * w, acc.data());
      // fn 10's scratchpads: aligned, and none of 0 bytes is no error.
      if (fn == 10) {
        for (int64_t i = 0; i < rows; ++i) EXPECT_EQ(out[i * w + 2], 1.0f) << "rows " << rows << " n " << n;
      }
      EXPECT_EQ(bits(r.values.at("out")), bits(std::vector<double>(out.begin(), out.end())))
          << "fn " << fn << " rows " << rows << " n " << n;
      EXPECT_EQ(bits(r.values.at("acc")), bits(std::vector<double>(acc.begin(), acc.end())))
          << "fn " << fn << " rows " << rows << " n " << n;
    }
  }
  try {
    OpDesc bad("toy_rows", {{"X", {"x"}}, {"Y", {"y"}}}, {{"Out", {"out"}}, {"Acc", {"acc"}}},
               {{"fn", 0}, {"shift", 0.0f}});
    op_case::RunOps({bad}, {{"x", DType::kFloat32, {2, 0}, {}}, {"y", DType::kFloat32, {2, 0}, {}}}, HostDevice());
    ADD_FAILURE() << "the largest of no elements was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cpu_row_max: expected n >= 1"), std::string::npos) << e.what();
  }
}

// Version 3: tensor-valued attributes through the op kit's own helpers
// (the code nabla's tree compiles), read wherever the tensor lives: the
// shape from ShapeTensor (int64 or int32), ShapeTensorList or the
// attribute, the value from ValueTensor or the attribute; a wrong tensor is
// the one-line error the standard ops give.
TEST(CApi, SdkPluginReadsTensorValuedAttributes) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_ATTR_TENSOR);
  const AttributeMap attrs{{"shape", std::vector<int>{9}}, {"value", 1.5f}};
  auto run = [&](VarNameMap inputs, const std::vector<op_case::Input>& feeds) {
    OpDesc op("toy_fill", std::move(inputs), {{"Out", {"out"}}}, attrs);
    return op_case::RunOps({op}, feeds, HostDevice());
  };
  op_case::Result r = run({}, {});
  EXPECT_EQ(r.shapes.at("out"), (Shape{9}));
  EXPECT_EQ(r.values.at("out"), std::vector<double>(9, 1.5));

  r = run({{"ShapeTensor", {"s"}}, {"ValueTensor", {"v"}}},
          {{"s", DType::kInt64, {2}, {2, 3}}, {"v", DType::kFloat64, {1}, {-0.25}}});
  EXPECT_EQ(r.shapes.at("out"), (Shape{2, 3}));
  EXPECT_EQ(r.values.at("out"), std::vector<double>(6, -0.25));

  r = run({{"ShapeTensorList", {"a", "b"}}, {"ValueTensor", {"v"}}},
          {{"a", DType::kInt32, {1}, {4}}, {"b", DType::kInt64, {1}, {1}}, {"v", DType::kFloat32, {1}, {2.0}}});
  EXPECT_EQ(r.shapes.at("out"), (Shape{4, 1}));
  EXPECT_EQ(r.values.at("out"), std::vector<double>(4, 2.0));

  try {
    run({{"ShapeTensor", {"s"}}}, {{"s", DType::kFloat32, {2}, {2, 3}}});
    ADD_FAILURE() << "a float32 ShapeTensor was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find(
                  "input ShapeTensor (var 's') must be an int32 or int64 tensor of rank 1, but received float32[2]"),
              std::string::npos)
        << e.what();
  }
  try {
    run({{"ShapeTensor", {"s"}}}, {{"s", DType::kInt64, {2}, {2, -3}}});
    ADD_FAILURE() << "a negative dim was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("input ShapeTensor = [2, -3] holds -3: every dim of Out's shape must be >= 0"),
              std::string::npos)
        << e.what();
  }
}

// Version 3: an op says how many vars its duplicable output gets
// (OutputCount), which front-ends that make the outputs themselves read.
TEST(CApi, SdkPluginDeclaresItsOutputCount) {
  cpu::InitCpuBackend();
  PluginManager::Instance().Load(TOY_SDK_ATTR_TENSOR);
  const OpInfo& info = CurrentRegistry()->Get("toy_split");
  ASSERT_EQ(info.output_counts.count("Out"), 1u);
  OpDesc op("toy_split", {{"X", {"x"}}}, {{"Out", {"a", "b", "c"}}}, {{"num", 3}});
  EXPECT_EQ(info.output_counts.at("Out")(op), 3);
  const op_case::Result r = op_case::RunOps({op}, {{"x", DType::kFloat32, {6, 2}, Uniform(12, 4)}}, HostDevice());
  EXPECT_EQ(r.shapes.at("c"), (Shape{2, 2}));
  const std::vector<double> x = Uniform(12, 4);
  const std::vector<float> xf(x.begin(), x.end());
  EXPECT_EQ(r.values.at("c"), std::vector<double>(xf.begin() + 8, xf.end()));
}

// Version 3: a C-ABI op replaces a chain of standard ops in the fusion pass
// where its applies (reading the chain's block) and fuse accept the match,
// and the fused program computes what the chain computes.
TEST(CApi, SdkPluginFusesAChainOfStandardOps) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_SDK_FUSION);
  auto program = [](const char* dtype, const char* after) {
    return ParseProgram(StrCat(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: )",
                               dtype, R"(}
    ops:
      - {type: scale, inputs: {X: [x]}, outputs: {Out: [s]}, attrs: {scale: 2.0, bias: -0.5, bias_after_scale: )",
                               after, R"(}}
      - {type: relu, inputs: {X: [s]}, outputs: {Out: [y]}}
)"),
                        "fusion.yaml");
  };
  ProgramDesc fused = program("float32", "true");
  EXPECT_EQ(FuseOps(fused, {"y"}), 1u);
  ASSERT_EQ(fused.Root()->AllOps().size(), 1u);
  const OpDesc& op = *fused.Root()->AllOps()[0];
  EXPECT_EQ(op.Type(), "toy_scale_relu");
  EXPECT_EQ(op.Input("X"), std::vector<std::string>{"x"});
  EXPECT_EQ(op.Output("Out"), std::vector<std::string>{"y"});
  EXPECT_EQ(op.Attr<float>("scale"), 2.0f);

  const std::vector<double> x = {-1.0, -0.25, 0.0, 0.25, 0.5, 3.0};
  const ProgramDesc plain = program("float32", "true");
  std::vector<OpDesc> chain;
  for (const auto& o : plain.Root()->AllOps()) chain.push_back(*o);
  const op_case::Result want = op_case::RunOps(chain, {{"x", DType::kFloat32, {2, 3}, x}}, HostDevice());
  const op_case::Result got = op_case::RunOps({op}, {{"x", DType::kFloat32, {2, 3}, x}}, HostDevice());
  EXPECT_EQ(got.values.at("y"), want.values.at("y"));

  ProgramDesc f64 = program("float64", "true");  // applies says no: not float32
  EXPECT_EQ(FuseOps(f64, {"y"}), 0u);
  EXPECT_EQ(f64.Root()->AllOps().size(), 2u);
  ProgramDesc before = program("float32", "false");  // fuse says no: bias before the scale
  EXPECT_EQ(FuseOps(before, {"y"}), 0u);
  EXPECT_EQ(before.Root()->AllOps().size(), 2u);
}

// Version 4: mul's and matmul's after-backward rewrites (the standard
// source file, gemm_grad_passes.cc) built over the C ABI rewrite programs
// exactly as the standard build's do: the same ops, slots, attributes,
// positions and vars. The programs share weights across products (the
// shared transpose, the chained gradients) and end in sgd steps (folded
// into the weight GEMMs).
std::string ProgramText(const ProgramDesc& p) {
  std::string text;
  for (size_t b = 0; b < p.Size(); ++b) {
    const BlockDesc& block = *p.Block(b);
    for (const auto& op : block.AllOps()) {
      text += StrCat(op->Type(), " @", op->Pos().line, ":", op->Pos().col);
      for (const auto* slots : {&op->Inputs(), &op->Outputs()}) {
        text += " |";
        for (const auto& [slot, args] : *slots) {
          text += " " + slot + ":";
          for (const auto& a : args) text += a + ",";
        }
      }
      text += " |";
      for (const auto& [name, value] : op->Attrs()) text += " " + name + "=" + AttrToString(value);
      text += "\n";
    }
    for (const auto& v : block.AllVars())
      text += StrCat("var ", v->Name(), " ", DTypeName(v->GetDType()), v->HasDType(), " ", ShapeToString(v->GetShape()),
                     " ", v->Persistable(), v->StopGradient(), v->Declared(), "\n");
  }
  return text;
}

size_t RunPasses(const std::string& type, ProgramDesc& p, const std::unordered_set<std::string>& keep) {
  size_t changed = 0;
  for (const ProgramPass& pass : CurrentRegistry()->Get(type).grad_passes) changed += pass.run(p, keep);
  return changed;
}

TEST(CApi, SdkProgramPassesRewriteAsTheStandardBuild) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_SDK_GEMM_PASSES);
  for (const std::string product : {"mul", "matmul"}) {
    for (bool sgd : {false, true}) {
      std::string text = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x0: {shape: [3, 4], dtype: float32, stop_gradient: true}
      x1: {shape: [3, 4], dtype: float32, stop_gradient: true}
      wx: {shape: [4, 5], dtype: float32, persistable: true}
      wh: {shape: [5, 5], dtype: float32, persistable: true}
      lr: {shape: [1], dtype: float32, persistable: true}
    ops:
      - {type: PRODUCT, inputs: {X: [x0], Y: [wx]}, outputs: {Out: [a0]}}
      - {type: tanh, inputs: {X: [a0]}, outputs: {Out: [h0]}}
      - {type: PRODUCT, inputs: {X: [x1], Y: [wx]}, outputs: {Out: [a1]}}
      - {type: PRODUCT, inputs: {X: [h0], Y: [wh]}, outputs: {Out: [c1]}}
      - {type: elementwise_add, inputs: {X: [a1], Y: [c1]}, outputs: {Out: [s1]}}
      - {type: tanh, inputs: {X: [s1]}, outputs: {Out: [h1]}}
      - {type: PRODUCT, inputs: {X: [h1], Y: [wh]}, outputs: {Out: [c2]}}
      - {type: mean, inputs: {X: [c2]}, outputs: {Out: [loss]}}
)";
      for (size_t at; (at = text.find("PRODUCT")) != std::string::npos;) text.replace(at, 7, product);
      ProgramDesc plain = ParseProgram(text, "passes.yaml");
      AppendBackward(plain, "loss");
      if (sgd)
        for (const std::string w : {"wx", "wh"})
          plain.Root()->AppendOp(OpDesc("sgd", {{"Param", {w}}, {"Grad", {w + "@GRAD"}}, {"LearningRate", {"lr"}}},
                                        {{"ParamOut", {w}}}, {}));
      ProgramDesc standard = plain, sdk = plain;
      const size_t want = RunPasses("matmul", standard, {"loss"}) + RunPasses("mul", standard, {"loss"});
      const size_t got = RunPasses("toy_gemm_passes", sdk, {"loss"});
      EXPECT_EQ(got, want) << product << " sgd " << sgd;
      EXPECT_GE(want, sgd ? 3u : 2u) << product << " sgd " << sgd;  // the rewrites apply here
      EXPECT_NE(ProgramText(standard), ProgramText(plain));
      EXPECT_EQ(ProgramText(sdk), ProgramText(standard)) << product << " sgd " << sgd;
      VerifyProgram(sdk, *CurrentRegistry());
      // A kept partial gradient: both builds leave its sum alone.
      ProgramDesc kept_std = plain, kept_sdk = plain;
      const std::unordered_set<std::string> keep = {"loss", "wx@GRAD@RENAME@1"};
      EXPECT_EQ(RunPasses("toy_gemm_passes", kept_sdk, keep),
                RunPasses("matmul", kept_std, keep) + RunPasses("mul", kept_std, keep));
      EXPECT_EQ(ProgramText(kept_sdk), ProgramText(kept_std)) << product << " sgd " << sgd;
    }
  }
}

// Version 4: an SDK pass evaluates ops of its program on the host
// (EvaluateOnHost) after its own pending edits, and is refused ops that are
// not constant.
TEST(CApi, SdkPassEvaluatesConstantOpsOnTheHost) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_SDK_GEMM_PASSES);
  const std::string head = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 2], dtype: float32}
    ops:
)";
  ProgramDesc p =
      ParseProgram(head + R"(      - {type: fill_constant, outputs: {Out: [c]}, attrs: {shape: [2, 2], value: 1.5}}
      - {type: scale, inputs: {X: [c]}, outputs: {Out: [s]}, attrs: {scale: 2.0}}
      - {type: toy_gemm_passes, inputs: {X: [s]}, outputs: {Out: [y]}}
)",
                   "fold.yaml");
  size_t changed = 0;
  for (const ProgramPass& pass : CurrentRegistry()->Get("toy_gemm_passes").forward_passes)
    changed += pass.run(p, {"y"});
  EXPECT_EQ(changed, 1u);
  EXPECT_EQ(p.Root()->Op(1)->Attr<float>("scale"), 3.0f);
  EXPECT_EQ(p.Root()->Op(2)->Attr<float>("folded"), 18.0f);  // 4 * 1.5 * 3: the edited scale ran
  // x is fed: not a constant.
  ProgramDesc fed = ParseProgram(head + R"(      - {type: toy_gemm_passes, inputs: {X: [x]}, outputs: {Out: [y]}}
)",
                                 "fed.yaml");
  try {
    for (const ProgramPass& pass : CurrentRegistry()->Get("toy_gemm_passes").forward_passes) pass.run(fed, {"y"});
    ADD_FAILURE() << "a fed var was evaluated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no op of the list writes 'x'"), std::string::npos) << e.what();
  }
}

// Version 4: a C plugin's pass gets errors, never a crash, for bad
// arguments (the probe checks each), and an error it passes on names the
// pass and its op.
TEST(CApi, ProgramPassFunctionsRefuseBadArguments) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_C_PASS);
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: relu, inputs: {X: [x]}, outputs: {Out: [y]}}
)",
                               "probe.yaml");
  const std::string before = ProgramToYaml(p);
  EXPECT_EQ(FuseOps(p, {"y"}), 0u);
  EXPECT_EQ(ProgramToYaml(p), before);
  try {
    FuseOps(p, {"y", "probe_fails"});
    ADD_FAILURE() << "the failing pass did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pass 'probe' of op 'toy_c_pass_probe'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pass_op: block 99 of a program of 1"), std::string::npos) << e.what();
  }
}

// Version 5: a C plugin's var-type inference, shape inference and kernel
// get errors, never a crash, for bad arguments to the variable and
// tensor-array functions (the probe checks each, failing the op when one
// does not fail), and the op still computes Out = X.
TEST(CApi, VariableFunctionsRefuseBadArguments) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_C_VARS);
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: toy_c_var_probe, inputs: {X: [x]}, outputs: {Out: [y]}}
)",
                               "probe.yaml");
  InferProgram(p);
  const VarDesc* y = p.Root()->FindVar("y");
  ASSERT_NE(y, nullptr);
  EXPECT_EQ(y->Type(), VarType::kDense);
  EXPECT_EQ(y->GetShape(), (Shape{2, 3}));
  const op_case::Result r =
      op_case::RunOps({*p.Root()->Op(0)}, {{"x", DType::kFloat32, {2, 3}, {1, -2, 3, -4, 5, -6}}}, HostDevice());
  EXPECT_EQ(r.values.at("y"), (op_case::Doubles{1, -2, 3, -4, 5, -6}));
}

// Version 6: a C plugin's kernel and grad maker get errors, never a crash,
// for bad arguments to the control-flow functions (scopes, kept scopes, vars
// of no scope, block attributes, the run's read-only program and options);
// the probe checks each and fails the op when one does not fail, and still
// computes Out = X through a var of no scope.
TEST(CApi, ControlFlowFunctionsRefuseBadArguments) {
  cpu::InitCpuBackend();
  PluginManager::Instance().LoadDefaults();
  PluginManager::Instance().Load(TOY_C_SCOPES);
  ProgramDesc p = ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [2, 3], dtype: float32}
    ops:
      - {type: toy_c_scope_probe, inputs: {X: [x]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
)",
                               "probe.yaml");
  ProgramDesc with_backward = p;
  AppendBackward(with_backward, "loss", {}, {});  // the probe's grad maker checks grad_block and grad_program
  for (const char* name : {"sequential", "taskgraph"}) {
    auto executor = CreateExecutor(name, HostDevice());
    Scope scope;
    op_case::Write(scope, {"x", DType::kFloat32, {2, 3}, {1, -2, 3, -4, 5, -6}}, HostDevice());
    executor->Run(p, 0, scope);
    EXPECT_EQ(op_case::Read(scope.FindVar("y")->GetTensor()), (op_case::Doubles{1, -2, 3, -4, 5, -6})) << name;
    Variable* kept = scope.FindVar("toy_c_scope_probe_kept");
    ASSERT_NE(kept, nullptr) << name;
    EXPECT_EQ(kept->GetStepScopes().size(), 0u) << name;
  }
}

// The CLI's contract for each refused plugin: exit 2, one line naming the
// plugin file, the plugin and the versions.
TEST(CApi, RefusedPluginsExitTwoWithOneLine) {
  test_util::TempDir dir("c_abi_cli");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {TOY_C_NEWER,
       {"libtoy_c_newer.so", "plugin 'toy_c_newer' 0.9", "version " + kNextVersion, "provides version " + kVersion}},
      {TOY_C_LONG_TABLE, {"libtoy_c_long_table.so", "plugin 'toy_c_long_table' 0.9", "table is too short"}},
      {TOY_C_NO_INIT,
       {"libtoy_c_no_init.so", "plugin 'toy_c_no_init' 0.9", "core version " + kVersion, "nabla_plugin_init"}},
      {TOY_C_HALF, {"libtoy_c_half.so", "toy_c_half gives up after its first op"}},
  };
  for (const auto& [path, fragments] : cases) {
    const testing_cli::Result r = testing_cli::RunBinary(
        NABLA_BIN_PATH, "ops --only-plugin --plugin " + testing_cli::Quote(path), "", dir.Path("captured"));
    testing_cli::ExpectOneLineError(r, path, fragments);
  }
}

}  // namespace
}  // namespace nabla
