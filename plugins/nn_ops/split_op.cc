// split: cuts X along `axis` into `num` equal parts or into parts of the
// given `sections`. Its gradient is a concat of the output gradients (the
// backward builder zero-fills the gradients of outputs nobody used).
#include <algorithm>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// The size of every part along the axis; -1 where unknown at build time.
std::vector<int64_t> PartSizes(int64_t dim, int num, const std::vector<int>& sections, size_t outputs,
                               const std::string& where) {
  std::vector<int64_t> parts;
  if (num > 0) {
    NABLA_ENFORCE(sections.empty(), kInvalidArgument, where, ": set either num or sections, but received num ", num,
                  " and ", sections.size(), " sections");
    NABLA_ENFORCE(outputs == static_cast<size_t>(num), kInvalidArgument, where, ": num = ", num, " needs ", num,
                  " outputs in Out, but received ", outputs);
    NABLA_ENFORCE(dim < 0 || dim % num == 0, kInvalidArgument, where, ": the split axis (size ", dim,
                  ") must divide evenly into num = ", num, " parts");
    parts.assign(num, dim < 0 ? -1 : dim / num);
    return parts;
  }
  NABLA_ENFORCE(!sections.empty(), kInvalidArgument, where,
                ": set num > 0 or a non-empty sections list, but received num 0 and no sections");
  NABLA_ENFORCE(outputs == sections.size(), kInvalidArgument, where, ": ", sections.size(),
                " sections need as many outputs in Out, but received ", outputs);
  int unknown = -1;
  int64_t known = 0;
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i] == -1) {
      NABLA_ENFORCE(unknown < 0, kInvalidArgument, where, ": at most one section may be -1, but received ",
                    "sections with -1 at ", unknown, " and ", i);
      unknown = static_cast<int>(i);
    } else {
      NABLA_ENFORCE(sections[i] >= 0, kInvalidArgument, where, ": sections must be >= 0 (or one -1), but received ",
                    sections[i], " at ", i);
      known += sections[i];
    }
    parts.push_back(sections[i]);
  }
  if (dim < 0) return parts;
  if (unknown >= 0) {
    NABLA_ENFORCE(known <= dim, kInvalidArgument, where, ": the sections sum to ", known,
                  " which exceeds the split axis size ", dim);
    parts[unknown] = dim - known;
  } else {
    NABLA_ENFORCE(known == dim, kInvalidArgument, where, ": the sections must sum to the split axis size ", dim,
                  ", but they sum to ", known);
  }
  return parts;
}

template <typename T>
void SplitKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  std::vector<Tensor*> outs = ctx.MultiOutput("Out");
  const int axis = NormalizeAxis(ctx.Attr<int>("axis"), x.Rank(), "axis", "split");
  const AxisView v = ViewAround(x.GetShape(), axis);
  const std::vector<int64_t> parts =
      PartSizes(v.dim, ctx.Attr<int>("num"), ctx.Attr<std::vector<int>>("sections"), outs.size(), "split");
  const T* px = x.Data<T>();
  int64_t offset = 0;
  for (size_t i = 0; i < outs.size(); ++i) {
    const int64_t chunk = parts[i] * v.inner;
    // @EMPTY@ outputs are parts nobody reads: skipped, not computed.
    if (outs[i]) {
      Shape shape = x.GetShape();
      shape[axis] = parts[i];
      CopyPartFromWhole(px, v.outer, v.dim * v.inner, offset, chunk, outs[i]->Allocate<T>(ctx.GetDevice(), shape));
    }
    offset += chunk;
  }
}

void InferSplit(InferShapeContext& c) {
  const Shape x = c.InputShape("X");
  EnforceFloatDType(c.InputDType("X"), c.Where(), "X");
  const int axis = NormalizeAxis(c.Attr<int>("axis"), x.size(), "axis", c.Where());
  const std::vector<int64_t> parts =
      PartSizes(x[axis], c.Attr<int>("num"), c.Attr<std::vector<int>>("sections"), c.OutputSize("Out"), c.Where());
  for (size_t i = 0; i < parts.size(); ++i) {
    Shape s = x;
    s[axis] = parts[i];
    c.SetOutputShape("Out", s, i);
    c.SetOutputDType("Out", c.InputDType("X"), i);
  }
}

// Emits concat, so split needs no grad kernel of its own.
class SplitGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    return OneOp("concat", {{"X", OutputGrad("Out")}}, {{"Out", InputGrad("X")}}, {{"axis", Attr<int>("axis")}});
  }
};

}  // namespace

NABLA_REGISTER_OPS(split) {
  GradCheckSpec num = CheckCase("num3_axis1", {CheckInput("X", {2, 6, 2})}, {{"num", 3}, {"axis", 1}}, {{"Out", 3}});
  GradCheckSpec sections = CheckCase("sections_inferred", {CheckInput("X", {4, 5})},
                                     {{"sections", std::vector<int>{1, -1, 2}}, {"axis", -1}}, {{"Out", 3}});
  registrar.Op("split", __FILE__, __LINE__)
      .Doc(
          "Splits X along `axis` into `num` equal parts, or into parts of the sizes in `sections` (one of them "
          "may be -1: the rest of the axis).")
      .Input("X", "(Tensor) the tensor to split")
      .Output("Out", "(Tensor[]) the parts, in order along the axis", kDuplicable)
      .Attr<int>("num", 0, "(int, default 0) the number of equal parts; 0 means use sections")
      .Attr<std::vector<int>>("sections", {}, "(int[], default []) the size of each part along the axis; one may be -1")
      .Attr<int>("axis", 0, "(int, default 0) the axis to split; negative counts from the end")
      .InferShape(InferSplit)
      .GradMaker<SplitGradMaker>()
      .GradCheck(num)
      .GradCheck(sections);
  RegisterFloatKernels(registrar, "split", SplitKernel<float>, SplitKernel<double>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
