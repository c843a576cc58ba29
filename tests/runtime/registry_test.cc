#include <gtest/gtest.h>

#include "nabla/op_registry.h"
#include "toy_ops.h"

namespace nabla {
namespace {

TEST(Registry, InProcessBatchIsPublishedWithOriginAndKernels) {
  testing::RegisterToyOps();
  auto reg = CurrentRegistry();
  const OpInfo* info = reg->Find("toy_add");
  ASSERT_NE(info, nullptr);
  EXPECT_EQ(info->origin.plugin, "toy");
  EXPECT_NE(info->origin.file.find("toy_ops.h"), std::string::npos);
  EXPECT_GT(info->origin.line, 0);
  EXPECT_TRUE(info->HasGradient());
  EXPECT_FALSE(reg->Find("toy_scale")->HasGradient());
  ASSERT_EQ(reg->KernelsOf("toy_add").size(), 1u);
  EXPECT_EQ(reg->KernelsOf("toy_add")[0].first, DeviceType::kCPU);
  ASSERT_NE(reg->Find("toy_scale")->schema.FindAttr("scale"), nullptr);
  EXPECT_EQ(std::get<float>(*reg->Find("toy_scale")->schema.FindAttr("scale")->default_value), 1.0f);
}

// EmptyGradOpDescMaker declares "no gradient": the backward builder may pass
// the op (it has a maker), while `nabla ops` and gradcheck report no gradient.
// A maker registered after it (or before) decides.
TEST(Registry, EmptyGradMakerMeansNoGradient) {
  RegisterOps("grad_declarations", [](Registrar& r) {
    r.Op("declares_no_grad").Input("X", "x").Output("Out", "y").GradMaker<EmptyGradOpDescMaker>();
    r.Op("declares_default_grad").Input("X", "x").Output("Out", "y").GradMaker<DefaultGradOpDescMaker>();
    r.Op("declares_nothing").Input("X", "x").Output("Out", "y");
  });
  auto reg = CurrentRegistry();
  EXPECT_TRUE(reg->Get("declares_no_grad").HasGradMaker());
  EXPECT_FALSE(reg->Get("declares_no_grad").HasGradient());
  EXPECT_TRUE(reg->Get("declares_default_grad").HasGradient());
  EXPECT_FALSE(reg->Get("declares_nothing").HasGradMaker());
  EXPECT_FALSE(reg->Get("declares_nothing").HasGradient());
}

// A failing batch leaves the registry exactly as it was, even when part of
// the batch was fine.
TEST(Registry, FailedBatchLeavesRegistryUnchanged) {
  testing::RegisterToyOps();
  auto before = CurrentRegistry()->OpTypes();
  size_t plugins_before = CurrentRegistry()->Plugins().size();
  try {
    RegisterOps("intruder", [](Registrar& r) {
      r.Op("brand_new_op").Input("X", "x").Output("Out", "y");
      r.Op("toy_add").Input("X", "x").Output("Out", "y");
    });
    FAIL() << "duplicate op accepted";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("op 'toy_add'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("already owned by toy"), std::string::npos) << msg;
    EXPECT_TRUE(e.IsBadInput());
  }
  EXPECT_EQ(CurrentRegistry()->OpTypes(), before);
  EXPECT_EQ(CurrentRegistry()->Plugins().size(), plugins_before);
  EXPECT_EQ(CurrentRegistry()->Find("brand_new_op"), nullptr);
}

TEST(Registry, ThrowingRegistrationAndUnknownKernelOpAreRejected) {
  auto before = CurrentRegistry()->OpTypes();
  EXPECT_THROW(RegisterOps("thrower",
                           [](Registrar& r) {
                             r.Op("half_registered").Input("X", "x");
                             throw std::runtime_error("boom");
                           }),
               Error);
  try {
    RegisterOps("orphan", [](Registrar& r) {
      r.Kernel("no_such_op", DeviceType::kCPU, DType::kFloat32, [](const ExecutionContext&) {});
    });
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kernel for unknown op 'no_such_op'"), std::string::npos) << e.what();
  }
  EXPECT_EQ(CurrentRegistry()->OpTypes(), before);
}

// Kernels live beside their op: a batch adding a kernel (of any device) to
// an op another plugin owns is refused whole, naming the owner, and the
// registry keeps the owner's kernels only.
TEST(Registry, KernelForAnotherPluginsOpIsRejected) {
  testing::RegisterToyOps();
  auto before = CurrentRegistry()->OpTypes();
  const size_t kernels_before = CurrentRegistry()->KernelsOf("toy_add").size();
  try {
    RegisterOps("kernel_adder", [](Registrar& r) {
      r.Op("kernel_adder_own").Input("X", "x").Output("Out", "y");
      r.Kernel("kernel_adder_own", DeviceType::kCPU, DType::kFloat32, [](const ExecutionContext&) {});
      r.Kernel(
          "toy_add", DeviceType::kOpenCL, DType::kFloat32, [](const ExecutionContext&) {}, "adder.cc", 7);
    });
    FAIL() << "a kernel for another plugin's op was accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("kernel_adder: plugin rejected: kernel for op 'toy_add' (opencl, float32) at kernel_adder"),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("which this plugin does not define (it is owned by toy"), std::string::npos) << msg;
    EXPECT_TRUE(e.IsBadInput());
  }
  EXPECT_EQ(CurrentRegistry()->OpTypes(), before);
  EXPECT_EQ(CurrentRegistry()->Find("kernel_adder_own"), nullptr);
  EXPECT_EQ(CurrentRegistry()->KernelsOf("toy_add").size(), kernels_before);
  EXPECT_EQ(CurrentRegistry()->FindKernel("toy_add", DeviceType::kOpenCL, DType::kFloat32), nullptr);
}

TEST(Registry, DefaultGradOpDerivesSlotsFromForward) {
  RegisterOps("gradslots", [](Registrar& r) {
    r.Op("gs_mul").Input("X", "x").Input("Y", "y").Output("Out", "o").Attr<int>("x_num_col_dims", 1, "d");
    r.DefaultGradOp("gs_mul");
  });
  const OpInfo& g = CurrentRegistry()->Get("gs_mul_grad");
  std::vector<std::string> ins, outs;
  for (const auto& s : g.schema.inputs) ins.push_back(s.name);
  for (const auto& s : g.schema.outputs) outs.push_back(s.name);
  EXPECT_EQ(ins, (std::vector<std::string>{"X", "Y", "Out", "Out@GRAD"}));
  EXPECT_EQ(outs, (std::vector<std::string>{"X@GRAD", "Y@GRAD"}));
  ASSERT_NE(g.schema.FindAttr("x_num_col_dims"), nullptr);
}

// Inputs a bfloat16 kernel also takes in float32 are marked on declared
// slots (DefaultGradOp's too), each once; an undeclared slot is refused.
TEST(Registry, Bf16TakesFloat32MarksDeclaredInputs) {
  RegisterOps("bf16_f32", [](Registrar& r) {
    r.Op("bf_bias").Input("X", "x").Input("Y", "y").Output("Out", "o").Bf16TakesFloat32({"Y"});
    r.DefaultGradOp("bf_bias").Bf16TakesFloat32({"Y", "Out@GRAD"}).Bf16TakesFloat32({"Y"});
  });
  EXPECT_EQ(CurrentRegistry()->Get("bf_bias").traits.bf16_float32_inputs, std::vector<std::string>{"Y"});
  EXPECT_EQ(CurrentRegistry()->Get("bf_bias_grad").traits.bf16_float32_inputs,
            (std::vector<std::string>{"Y", "Out@GRAD"}));
  const std::vector<std::string> before = CurrentRegistry()->OpTypes();
  try {
    RegisterOps("bf16_f32_bad", [](Registrar& r) { r.Op("bf_bad").Input("X", "x").Bf16TakesFloat32({"Z"}); });
    ADD_FAILURE() << "Bf16TakesFloat32 of an undeclared slot was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'bf_bad': Bf16TakesFloat32('Z') needs an input slot of that name"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(CurrentRegistry()->OpTypes(), before);
}

// A grad op's kernel that reads an input's shape only marks that input,
// declared by DefaultGradOp, no-buffer; a slot not declared is refused.
TEST(Registry, NoBufferInputMarksADeclaredInput) {
  RegisterOps("nobuffer", [](Registrar& r) {
    r.Op("nb_mul").Input("X", "x").Input("Y", "y").Output("Out", "o");
    r.DefaultGradOp("nb_mul").NoBufferInput("Y");
  });
  const OpInfo& g = CurrentRegistry()->Get("nb_mul_grad");
  std::vector<std::string> no_buffer;
  for (const auto& s : g.schema.inputs)
    if (s.no_buffer) no_buffer.push_back(s.name);
  EXPECT_EQ(no_buffer, std::vector<std::string>{"Y"});
  const std::vector<std::string> before = CurrentRegistry()->OpTypes();
  try {
    RegisterOps("nobuffer_bad", [](Registrar& r) { r.Op("nb_bad").Input("X", "x").NoBufferInput("Z"); });
    ADD_FAILURE() << "NoBufferInput of an undeclared slot was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("op 'nb_bad': NoBufferInput('Z') needs an input slot of that name"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(CurrentRegistry()->OpTypes(), before);
}

TEST(Registry, DefaultGradMakerFollowsSeedNaming) {
  testing::RegisterToyOps();
  OpDesc fwd("toy_add", {{"X", {"a"}}, {"Y", {"b"}}}, {{"Out", {"c"}}}, {});
  std::unordered_set<std::string> no_grad{"b"};
  std::unordered_map<std::string, std::string> g2v;
  auto ops = CurrentRegistry()->Get("toy_add").grad_maker(fwd, no_grad, &g2v, {});
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0]->Type(), "toy_add_grad");
  EXPECT_EQ(ops[0]->Input("Out@GRAD"), std::vector<std::string>{"c@GRAD"});
  EXPECT_EQ(ops[0]->Output("X@GRAD"), std::vector<std::string>{"a@GRAD"});
  EXPECT_EQ(ops[0]->Output("Y@GRAD"), std::vector<std::string>{"@EMPTY@"});
  EXPECT_EQ(g2v.at("a@GRAD"), "a");
  EXPECT_EQ(g2v.count("b@GRAD"), 0u);
}

}  // namespace
}  // namespace nabla
