#pragma once
// Toy ops for the program-file tests, registered in-process. Slots and
// attributes follow Paddle where the SPEC example uses the op (mul,
// softmax_with_cross_entropy, mean, uniform_random); the toy_* ops exercise
// one feature each (every attribute type, sub-blocks, dispensable and
// duplicable slots, a checker, var-type inference, no inference at all).
#include <string>
#include <vector>

#include "nabla/op_registry.h"

namespace nabla::io_test {

inline Shape ShapeProduct(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < 0) return {-1};
    n *= s[i];
  }
  return {n};
}

inline void RegisterIoToyOps() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("io_test", [](Registrar& r) {
    r.Op("mul", __FILE__, __LINE__)
        .Input("X", "(Tensor) left")
        .Input("Y", "(Tensor) right")
        .Output("Out", "(Tensor) X * Y")
        .Attr<int>("x_num_col_dims", 1, "(int, default 1)")
        .Attr<int>("y_num_col_dims", 1, "(int, default 1)")
        .InferShape([](InferShapeContext& c) {
          Shape x = c.InputShape("X"), y = c.InputShape("Y");
          size_t xn = static_cast<size_t>(c.Attr<int>("x_num_col_dims"));
          size_t yn = static_cast<size_t>(c.Attr<int>("y_num_col_dims"));
          int64_t width = ShapeProduct(x, xn, x.size())[0], height = ShapeProduct(y, 0, yn)[0];
          NABLA_ENFORCE(width < 0 || height < 0 || width == height, kInvalidArgument, c.Where(),
                        ": X's width must equal Y's height: expected ", height, " but received ", width);
          Shape out(x.begin(), x.begin() + xn);
          out.insert(out.end(), y.begin() + yn, y.end());
          c.SetOutputShape("Out", out);
          c.SetOutputDType("Out", c.InputDType("X"));
        });
    r.Op("softmax_with_cross_entropy", __FILE__, __LINE__)
        .Input("Logits", "(Tensor) scores")
        .Input("Label", "(Tensor) labels")
        .Output("Softmax", "(Tensor) probabilities")
        .Output("Loss", "(Tensor) per-example loss")
        .Attr<bool>("soft_label", false, "(bool, default false)")
        .Attr<int>("axis", -1, "(int, default -1)")
        .InferShape([](InferShapeContext& c) {
          Shape logits = c.InputShape("Logits");
          c.ShareShapeAndDType("Logits", "Softmax");
          logits.back() = 1;
          c.SetOutputShape("Loss", logits);
          c.SetOutputDType("Loss", c.InputDType("Logits"));
        });
    r.Op("mean", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor) one element")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", {1});
          c.SetOutputDType("Out", c.InputDType("X"));
        });
    r.Op("uniform_random", __FILE__, __LINE__)
        .Output("Out", "(Tensor) samples")
        .Attr<std::vector<int>>("shape", {}, "(ints) output shape")
        .Attr<float>("min", -1.0f, "(float, default -1.0)")
        .Attr<float>("max", 1.0f, "(float, default 1.0)")
        .Attr<int>("seed", 0, "(int, default 0) 0: from the run's seed")
        .Random();
    r.Op("toy_attrs", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor)")
        .Attr<int>("i", 0, "int")
        .Attr<float>("f", 0.0f, "float")
        .Attr<std::string>("s", "", "string")
        .Attr<bool>("b", false, "bool")
        .Attr<std::vector<int>>("is", {}, "ints")
        .Attr<std::vector<float>>("fs", {}, "floats")
        .Attr<std::vector<std::string>>("ss", {}, "strings")
        .Attr<std::vector<bool>>("bs", {}, "bools")
        .Attr<int>("positive", 1, "(int, > 0)",
                   [](const int& v) { NABLA_ENFORCE(v > 0, kOutOfRange, "expected > 0 but received ", v); })
        .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
    r.Op("toy_loop", __FILE__, __LINE__)
        .Input("X", "(Tensor[]) loop inputs", kDuplicable)
        .Output("Out", "(Tensor[]) loop outputs", kDuplicable | kDispensable)
        .RequiredAttr<BlockRef>("sub_block", "(block) the body")
        .ControlFlow();
    r.Op("toy_sum", __FILE__, __LINE__)
        .Input("X", "(Tensor[])", kDuplicable)
        .Input("Bias", "(Tensor) optional", kDispensable)
        .Output("Out", "(Tensor)")
        .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); });
    r.Op("toy_opaque", __FILE__, __LINE__).Input("X", "(Tensor)").Output("Out", "(Tensor) nobody infers it");
    r.Op("toy_make_array", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(TensorArray)")
        .InferVarType([](const OpDesc& op, BlockDesc& block) {
          block.FindVarRecursive(op.Output("Out")[0])->SetType(VarType::kTensorArray);
        });
    r.Op("toy_grad_ish", __FILE__, __LINE__)
        .Input("X", "(Tensor)", kDispensable)
        .Output("X@GRAD", "(Tensor)")
        .InferShape([](InferShapeContext& c) {
          if (c.HasInput("X")) c.ShareShapeAndDType("X", "X@GRAD");
        });
  });
}

}  // namespace nabla::io_test
