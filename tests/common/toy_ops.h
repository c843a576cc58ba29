#pragma once
// The toy ops of the tests that need no plugin (program files, the verifier,
// build-time inference, the backward builder, the fuzz targets), registered
// in-process as plugin "toys". Most mirror the slots, attributes and grad
// maker of the Paddle op of the same name; none has a kernel, because these
// tests pin structure (op lists, names, attrs, var dtypes and shapes), not
// values. The toy_* ops exercise one feature each (every attribute type,
// sub-blocks, dispensable and duplicable slots, a checker, var-type
// inference, no inference at all). Tests that run kernels load the standard
// plugins instead; those that need one special op register it themselves.
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nabla/op_registry.h"

namespace nabla::toys {

inline Shape ShapeProduct(const Shape& s, size_t begin, size_t end) {
  int64_t n = 1;
  for (size_t i = begin; i < end; ++i) {
    if (s[i] < 0) return {-1};
    n *= s[i];
  }
  return {n};
}

inline void SameAsX(InferShapeContext& c) { c.ShareShapeAndDType("X", "Out"); }

// The fuzzer reaches these inferences with any attribute and any shape, so
// whatever indexes a shape is checked first: an error, never a read past it.
// Returns value when it lies in [lo, hi], where hi is the rank of s less drop.
inline size_t CheckedAttr(const InferShapeContext& c, const Shape& s, const char* slot, const char* attr, int value,
                          int lo, int drop) {
  int hi = static_cast<int>(s.size()) - drop;
  NABLA_ENFORCE(value >= lo && value <= hi, kInvalidArgument, c.Where(), ": attribute ", attr, " must be in [", lo,
                ", ", hi, "] for ", slot, " of shape ", ShapeToString(s), ", but received ", value);
  return static_cast<size_t>(value);
}
inline void CheckMinRank(const InferShapeContext& c, const Shape& s, const char* slot, size_t rank) {
  NABLA_ENFORCE(s.size() >= rank, kInvalidArgument, c.Where(), ": ", slot, " must have rank >= ", rank,
                ", but received shape ", ShapeToString(s));
}

// minus: X - Y. Seed 003's example: the gradient is two existing ops,
// Out@GRAD scaled by 1 into X@GRAD and by -1 into Y@GRAD. This maker emits
// both unconditionally, so the builder must drop the one writing @EMPTY@.
class MinusGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{{"scale", 1.0f}}));
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("Y")}}, AttributeMap{{"scale", -1.0f}}));
    return ops;
  }
};

// scale: Out = scale * X + bias; X@GRAD = scale * Out@GRAD.
class ScaleGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}},
                                           AttributeMap{{"scale", Attr<float>("scale")}, {"bias", 0.0f}}));
    return ops;
  }
};

// split's gradient is a concat of the output gradients (Paddle's SplitGradMaker).
class SplitGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("concat", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}},
                                           AttributeMap{{"axis", Attr<int>("axis")}}));
    return ops;
  }
};

// sum's gradient: one scale by 1 per input.
class SumGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    for (const auto& g : InputGrad("X"))
      ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}}, VarNameMap{{"Out", {g}}},
                                             AttributeMap{{"scale", 1.0f}}));
    return ops;
  }
};

// lookup_table's gradient reads W, Ids and Out@GRAD only (Paddle's
// LookupTableGradOpDescMaker); Ids never gets one.
class LookupTableGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>(
        "lookup_table_grad", VarNameMap{{"W", Input("W")}, {"Ids", Input("Ids")}, {"Out@GRAD", OutputGrad("Out")}},
        VarNameMap{{"W@GRAD", InputGrad("W")}}, Attrs()));
    return ops;
  }
};

// twin: X -> A, B. One grad op per output, both writing X@GRAD, so the
// builder's drop rule decides whether a `sum` is needed.
class TwinGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    for (const char* out : {"A", "B"})
      ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad(out)}},
                                             VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{{"scale", 1.0f}}));
    return ops;
  }
};

// inplace_twice: X -> Out. Its gradient is a scale into X@GRAD followed by
// a second scale that updates X@GRAD in place (the same name in its inputs
// and outputs), which must not count as a second contribution.
class InplaceTwiceGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{{"scale", 2.0f}}));
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", InputGrad("X")}},
                                           VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{{"scale", 0.5f}}));
    return ops;
  }
};

// read_between: X, Y -> Out. Its grad ops write X@GRAD, read it (into
// Y@GRAD), then write X@GRAD again: Paddle renames the first write and the
// read together, so the read keeps seeing the first contribution only.
class ReadBetweenGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{}));
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", InputGrad("X")}},
                                           VarNameMap{{"Out", InputGrad("Y")}}, AttributeMap{}));
    ops.push_back(std::make_unique<OpDesc>("scale", VarNameMap{{"X", OutputGrad("Out")}},
                                           VarNameMap{{"Out", InputGrad("X")}}, AttributeMap{}));
    return ops;
  }
};

// toy_cond's maker reads the grad block it is handed and names it itself.
inline int& LastCondGradBlock() {
  static int idx = -1;
  return idx;
}
class ToyCondGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    LastCondGradBlock() = GradBlock(0)->Idx();
    std::vector<std::unique_ptr<OpDesc>> ops;
    ops.push_back(std::make_unique<OpDesc>(
        "toy_cond_grad", VarNameMap{{"Input", Input("Input")}, {"Out@GRAD", OutputGrad("Out")}},
        VarNameMap{{"Input@GRAD", InputGrad("Input")}}, AttributeMap{{"sub_block", BlockRef{GradBlock(0)->Idx()}}}));
    return ops;
  }
};

inline void RegisterToyOps() {
  static bool done = false;
  if (done) return;
  done = true;
  RegisterOps("toys", [](Registrar& r) {
    // mul and mean: Paddle's slots, full shape inference (with the width
    // check the program-file tests expect), and the default gradient.
    r.Op("mul", __FILE__, __LINE__)
        .Input("X", "(Tensor) left")
        .Input("Y", "(Tensor) right")
        .Output("Out", "(Tensor) X * Y")
        .Attr<int>("x_num_col_dims", 1, "(int, default 1)")
        .Attr<int>("y_num_col_dims", 1, "(int, default 1)")
        .InferShape([](InferShapeContext& c) {
          Shape x = c.InputShape("X"), y = c.InputShape("Y");
          size_t xn = CheckedAttr(c, x, "X", "x_num_col_dims", c.Attr<int>("x_num_col_dims"), 1, 0);
          size_t yn = CheckedAttr(c, y, "Y", "y_num_col_dims", c.Attr<int>("y_num_col_dims"), 1, 0);
          int64_t width = ShapeProduct(x, xn, x.size())[0], height = ShapeProduct(y, 0, yn)[0];
          NABLA_ENFORCE(width < 0 || height < 0 || width == height, kInvalidArgument, c.Where(),
                        ": X's width must equal Y's height: expected ", height, " but received ", width);
          Shape out(x.begin(), x.begin() + xn);
          out.insert(out.end(), y.begin() + yn, y.end());
          c.SetOutputShape("Out", out);
          c.SetOutputDType("Out", c.InputDType("X"));
        })
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("mul", __FILE__, __LINE__);
    r.Op("mean", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor) one element")
        .InferShape([](InferShapeContext& c) {
          c.SetOutputShape("Out", {1});
          c.SetOutputDType("Out", c.InputDType("X"));
        })
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("mean", __FILE__, __LINE__);

    // A while-like loop: its block attribute gives it the has_sub_block
    // trait, ControlFlow the executor's; Out may be left out.
    r.Op("toy_loop", __FILE__, __LINE__)
        .Input("X", "(Tensor[]) vars the body reads", kDuplicable)
        .Output("Out", "(Tensor[]) vars the body writes", kDuplicable | kDispensable)
        .RequiredAttr<BlockRef>("sub_block", "(block) the body")
        .ControlFlow()
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("toy_loop", __FILE__, __LINE__);

    r.Op("elementwise_add", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Input("Y", "(Tensor)")
        .Output("Out", "(Tensor) X + Y")
        .Attr<int>("axis", -1, "(int, default -1)")
        .InferShape(SameAsX)
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("elementwise_add", __FILE__, __LINE__);

    r.Op("relu", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor)")
        .InferShape(SameAsX)
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("relu", __FILE__, __LINE__);

    r.Op("split", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor[])", kDuplicable)
        .Attr<int>("num", 0, "(int, default 0)")
        .Attr<std::vector<int>>("sections", {}, "(int[], default [])")
        .Attr<int>("axis", 0, "(int, default 0)")
        .InferShape([](InferShapeContext& c) {
          Shape s = c.InputShape("X");
          size_t axis = CheckedAttr(c, s, "X", "axis", c.Attr<int>("axis"), 0, 1);
          size_t n = c.OutputSize("Out");
          NABLA_ENFORCE(n > 0, kInvalidArgument, c.Where(), ": Out must name at least one var");
          if (s[axis] > 0) s[axis] /= static_cast<int64_t>(n);
          for (size_t i = 0; i < n; ++i) {
            c.SetOutputShape("Out", s, i);
            c.SetOutputDType("Out", c.InputDType("X"), i);
          }
        })
        .GradMaker<SplitGradMaker>();

    r.Op("concat", __FILE__, __LINE__)
        .Input("X", "(Tensor[])", kDuplicable)
        .Output("Out", "(Tensor)")
        .Attr<int>("axis", 0, "(int, default 0)")
        .InferShape([](InferShapeContext& c) {
          Shape s = c.InputShape("X");
          size_t axis = CheckedAttr(c, s, "X", "axis", c.Attr<int>("axis"), 0, 1);
          for (size_t i = 1; i < c.InputSize("X"); ++i) {
            Shape si = c.InputShape("X", i);
            NABLA_ENFORCE(si.size() == s.size(), kInvalidArgument, c.Where(), ": X[", i, "] has shape ",
                          ShapeToString(si), ", but X[0] has rank ", s.size());
            s[axis] = s[axis] < 0 || si[axis] < 0 ? -1 : s[axis] + si[axis];
          }
          c.SetOutputShape("Out", s);
          c.SetOutputDType("Out", c.InputDType("X"));
        })
        .GradMaker<DefaultGradOpDescMaker>();
    r.DefaultGradOp("concat", __FILE__, __LINE__);

    r.Op("minus", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Input("Y", "(Tensor)")
        .Output("Out", "(Tensor) X - Y")
        .InferShape(SameAsX)
        .GradMaker<MinusGradMaker>();

    r.Op("lookup_table", __FILE__, __LINE__)
        .Input("W", "(Tensor) the table")
        .Input("Ids", "(Tensor, int64) rows")
        .Output("Out", "(Tensor) the rows")
        .Attr<int>("padding_idx", -1, "(int, default -1)")
        .InferShape([](InferShapeContext& c) {
          Shape ids = c.InputShape("Ids"), w = c.InputShape("W");
          CheckMinRank(c, ids, "Ids", 1);
          CheckMinRank(c, w, "W", 2);
          c.SetOutputShape("Out", {ids[0], w[1]});
          c.SetOutputDType("Out", c.InputDType("W"));
        })
        .GradMaker<LookupTableGradMaker>();
    r.Op("lookup_table_grad", __FILE__, __LINE__)
        .Input("W", "(Tensor)")
        .Input("Ids", "(Tensor)")
        .Input("Out@GRAD", "(Tensor)")
        .Output("W@GRAD", "(Tensor)")
        .Attr<int>("padding_idx", -1, "(int, default -1)")
        .InferShape([](InferShapeContext& c) { c.ShareShapeAndDType("W", "W@GRAD"); });

    r.Op("sum", __FILE__, __LINE__)
        .Input("X", "(Tensor[])", kDuplicable)
        .Output("Out", "(Tensor) the sum")
        .InferShape(SameAsX)
        .GradMaker<SumGradMaker>();

    r.Op("scale", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor) scale * X + bias")
        .Attr<float>("scale", 1.0f, "(float, default 1.0)")
        .Attr<float>("bias", 0.0f, "(float, default 0.0)")
        .Attr<bool>("bias_after_scale", true, "(bool, default true)")
        .InferShape(SameAsX)
        .GradMaker<ScaleGradMaker>();

    r.Op("fill_constant", __FILE__, __LINE__)
        .Output("Out", "(Tensor)")
        .Attr<std::vector<int>>("shape", {}, "(int[]) the shape")
        .Attr<float>("value", 0.0f, "(float, default 0.0)")
        .Attr<std::string>("dtype", "float32", "(string, default float32)")
        .InferShape([](InferShapeContext& c) {
          const auto& dims = c.Attr<std::vector<int>>("shape");
          c.SetOutputShape("Out", Shape(dims.begin(), dims.end()));
          DType d;
          NABLA_ENFORCE(ParseDType(c.Attr<std::string>("dtype"), &d), kInvalidArgument, "bad dtype");
          c.SetOutputDType("Out", d);
        })
        .GradMaker<EmptyGradOpDescMaker>();

    r.Op("fill_zeros_like", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor) zeros shaped like X")
        .InferShape(SameAsX)
        .GradMaker<EmptyGradOpDescMaker>();

    r.Op("twin", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("A", "(Tensor)")
        .Output("B", "(Tensor)")
        .InferShape([](InferShapeContext& c) {
          c.ShareShapeAndDType("X", "A");
          c.ShareShapeAndDType("X", "B");
        })
        .GradMaker<TwinGradMaker>();

    r.Op("inplace_twice", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Output("Out", "(Tensor)")
        .InferShape(SameAsX)
        .GradMaker<InplaceTwiceGradMaker>();

    r.Op("read_between", __FILE__, __LINE__)
        .Input("X", "(Tensor)")
        .Input("Y", "(Tensor)")
        .Output("Out", "(Tensor)")
        .InferShape(SameAsX)
        .GradMaker<ReadBetweenGradMaker>();

    // No GradMaker at all: asking it for a gradient is an error.
    r.Op("no_grad_op", __FILE__, __LINE__).Input("X", "(Tensor)").Output("Out", "(Tensor)").InferShape(SameAsX);

    // Ops that own a block (a while-like loop, a conditional): the block
    // attribute gives them the has_sub_block trait.
    r.Op("toy_cond", __FILE__, __LINE__)
        .Input("Input", "(Tensor[])", kDuplicable)
        .Output("Out", "(Tensor[])", kDuplicable)
        .RequiredAttr<BlockRef>("sub_block", "(block) the branch")
        .GradMaker<ToyCondGradMaker>();
    r.Op("toy_cond_grad", __FILE__, __LINE__)
        .Input("Input", "(Tensor[])", kDuplicable)
        .Input("Out@GRAD", "(Tensor[])", kDuplicable)
        .Output("Input@GRAD", "(Tensor[])", kDuplicable)
        .RequiredAttr<BlockRef>("sub_block", "(block) the branch's backward");
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

}  // namespace nabla::toys
