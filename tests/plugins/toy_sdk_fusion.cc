// A plugin on the C ABI through the C++ SDK whose op replaces a chain of
// standard ops (C ABI version 3's fusion patterns, OpBuilder::Fuses):
//   toy_scale_relu: Out = relu(scale * X + bias), float32, in place of
//   `scale` then `relu` where X is a known float32 var of rank 2 (the
//   pattern's applies reads the block) and bias_after_scale holds (fuse
//   leaves any other match alone).
#include <memory>
#include <string>
#include <vector>

#include "nabla/plugin.h"

NABLA_REGISTER_OPS(toy_sdk_fusion) {
  registrar.Op("toy_scale_relu", __FILE__, __LINE__)
      .Doc("Out = relu(scale * X + bias).")
      .Input("X", "(Tensor) float32")
      .Output("Out", "(Tensor) X's shape")
      .Attr<float>("scale", 1.0f, "(float) the factor")
      .Attr<float>("bias", 0.0f, "(float) added after scaling")
      .InferShape([](nabla::InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); })
      .Fuses(nabla::FusionPattern(
          {"scale", "relu"},
          [](const std::vector<const nabla::OpDesc*>& m) -> std::unique_ptr<nabla::OpDesc> {
            if ((m[0]->HasAttr("bias_after_scale") && !m[0]->Attr<bool>("bias_after_scale")) ||
                !m[0]->Input("ScaleTensor").empty())
              return nullptr;
            auto op = std::make_unique<nabla::OpDesc>(
                "toy_scale_relu", nabla::VarNameMap{{"X", m[0]->Input("X")}},
                nabla::VarNameMap{{"Out", m[1]->Output("Out")}},
                nabla::AttributeMap{{"scale", m[0]->Attr<float>("scale")}, {"bias", m[0]->Attr<float>("bias")}});
            return op;
          },
          [](const nabla::BlockDesc& block, const std::vector<const nabla::OpDesc*>& m) {
            const nabla::VarDesc* x = block.FindVarRecursive(m[0]->Input("X").at(0));
            bool has_relu = false;  // the block is the chain's: it holds the matched relu
            for (const auto& op : block.AllOps()) has_relu = has_relu || op->Type() == "relu";
            return has_relu && x && x->HasDType() && x->GetDType() == nabla::DType::kFloat32 &&
                   x->GetShape().size() == 2;
          }));
  registrar.Kernel(
      "toy_scale_relu", nabla::DeviceType::kCPU, nabla::DType::kFloat32,
      [](const nabla::ExecutionContext& ctx) {
        const nabla::Tensor& x = ctx.Input("X");
        float* out = ctx.Output("Out")->Allocate<float>(ctx.GetDevice(), x.GetShape());
        const float s = ctx.Attr<float>("scale"), b = ctx.Attr<float>("bias");
        for (int64_t i = 0; i < x.Numel(); ++i) {
          const float v = x.Data<float>()[i] * s + b;
          out[i] = v > 0.0f ? v : 0.0f;
        }
      },
      __FILE__, __LINE__);
}

NABLA_PLUGIN(NABLA_PLUGIN_NAME);
