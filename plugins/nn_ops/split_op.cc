// split: cuts X along `axis` into `num` equal parts or into parts of the
// given `sections`. Its gradient is a concat of the output gradients (the
// backward builder zero-fills the gradients of outputs nobody used).
#include <algorithm>
#include <string>
#include <vector>

#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

// The size of every part along the axis; -1 where unknown at build time.
// `sections` names where the sizes came from (attribute sections, input
// SectionsTensorList); unknown (build time, from inputs) gives -1 parts.
std::vector<int64_t> PartSizes(int64_t dim, int num, const AttrValue<std::vector<int64_t>>& sections, size_t outputs,
                               const std::string& where) {
  std::vector<int64_t> parts;
  const std::string given = sections.Known() ? ValuesToString(*sections) : "";
  if (num > 0) {
    NABLA_ENFORCE(sections.size == 0, kInvalidArgument, where, ": set either num or sections, but received num ", num,
                  " and ", sections.source, " ", given);
    NABLA_ENFORCE(outputs == static_cast<size_t>(num), kInvalidArgument, where, ": num = ", num, " needs ", num,
                  " outputs in Out, but received ", outputs);
    NABLA_ENFORCE(dim < 0 || dim % num == 0, kInvalidArgument, where, ": the split axis (size ", dim,
                  ") must divide evenly into num = ", num, " parts");
    parts.assign(num, dim < 0 ? -1 : dim / num);
    return parts;
  }
  NABLA_ENFORCE(sections.size != 0, kInvalidArgument, where,
                ": set num > 0 or a non-empty sections list, but received num 0 and no sections");
  NABLA_ENFORCE(sections.size < 0 || outputs == static_cast<size_t>(sections.size), kInvalidArgument, where, ": ",
                sections.source, " holds ", sections.size,
                " sections, which need as many outputs in Out, but received ", outputs);
  if (!sections.Known()) return std::vector<int64_t>(outputs, -1);
  int unknown = -1;
  int64_t known = 0;
  for (size_t i = 0; i < sections->size(); ++i) {
    const int64_t v = (*sections)[i];
    if (v == -1) {
      NABLA_ENFORCE_VALUE(unknown < 0, sections, where, ": at most one section may be -1, but received ",
                          sections.source, " ", given);
      unknown = static_cast<int>(i);
    } else {
      NABLA_ENFORCE_VALUE(v >= 0, sections, where, ": sections must be >= 0 (or one -1), but received ",
                          sections.source, " ", given);
      known += v;
    }
    parts.push_back(v);
  }
  if (dim < 0) return parts;
  if (unknown >= 0) {
    NABLA_ENFORCE_VALUE(known <= dim, sections, where, ": ", sections.source, " ", given, " sums to ", known,
                        ", which exceeds the split axis size ", dim);
    parts[unknown] = dim - known;
  } else {
    NABLA_ENFORCE_VALUE(known == dim, sections, where, ": ", sections.source, " ", given,
                        " must sum to the split axis size ", dim, ", but sums to ", known);
  }
  return parts;
}

// Paddle's precedence: SectionsTensorList before attribute sections (and
// AxisTensor before attribute axis: AxisAttrOrTensor).
template <typename Ctx>
AttrValue<std::vector<int64_t>> Sections(const Ctx& c) {
  return IntListAttrOrTensor(c, "", "SectionsTensorList", "sections");
}

template <typename T>
void SplitKernel(const ExecutionContext& ctx) {
  const Tensor& x = ctx.Input("X");
  std::vector<Tensor*> outs = ctx.MultiOutput("Out");
  const int axis = AxisAttrOrTensor(ctx, "AxisTensor", "axis", x.Rank());
  const AxisView v = ViewAround(x.GetShape(), axis);
  const std::vector<int64_t> parts = PartSizes(v.dim, ctx.Attr<int>("num"), Sections(ctx), outs.size(), "op 'split'");
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
  const std::optional<int> axis = AxisAttrOrTensor(c, "AxisTensor", "axis", x.size());
  const auto sections = Sections(c);
  if (!axis) {
    // Build time, the axis comes from an input: any dim may be the one cut.
    PartSizes(-1, c.Attr<int>("num"), sections, c.OutputSize("Out"), c.Where());
    for (size_t i = 0; i < c.OutputSize("Out"); ++i) {
      c.SetOutputShape("Out", Shape(x.size(), -1), i);
      c.SetOutputDType("Out", c.InputDType("X"), i);
    }
    return;
  }
  const std::vector<int64_t> parts = PartSizes(x[*axis], c.Attr<int>("num"), sections, c.OutputSize("Out"), c.Where());
  for (size_t i = 0; i < parts.size(); ++i) {
    Shape s = x;
    s[*axis] = parts[i];
    c.SetOutputShape("Out", s, i);
    c.SetOutputDType("Out", c.InputDType("X"), i);
  }
}

// Emits concat, so split needs no grad kernel of its own.
class SplitGradMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override {
    // An integer or bool X gets no gradient (the backward builder's no-grad
    // set holds it): no op then.
    std::vector<std::string> dx = InputGrad("X");
    if (!GradWanted(dx)) return {};
    VarNameMap inputs{{"X", OutputGrad("Out")}};
    // concat reads the axis from the same tensor where split did.
    if (ForwardOp().HasInput("AxisTensor")) inputs["AxisTensor"] = Input("AxisTensor");
    return OneOp("concat", std::move(inputs), {{"Out", std::move(dx)}}, {{"axis", Attr<int>("axis")}});
  }
};

// One part per tensor of SectionsTensorList, else per section, else `num`:
// the precedence InferSplit reads them in. -1 (unknown) when none is set, so
// inference reports that.
int SplitCount(const OpDesc& op) {
  if (const size_t n = op.Input("SectionsTensorList").size()) return static_cast<int>(n);
  const auto& sections = op.Attr<std::vector<int>>("sections");
  const int num = op.Attr<int>("num");
  if (num > 0) return num;
  return sections.empty() ? -1 : static_cast<int>(sections.size());
}

}  // namespace

NABLA_REGISTER_OPS(split) {
  GradCheckSpec num = CheckCase("num3_axis1", {CheckInput("X", {2, 6, 2})}, {{"num", 3}, {"axis", 1}}, {{"Out", 3}});
  GradCheckSpec sections = CheckCase("sections_inferred", {CheckInput("X", {4, 5})},
                                     {{"sections", std::vector<int>{1, -1, 2}}, {"axis", -1}}, {{"Out", 3}});
  registrar.Op("split", __FILE__, __LINE__)
      .Doc(
          "Splits X along `axis` into `num` equal parts, or into parts of the sizes in `sections` (one of them "
          "may be -1: the rest of the axis). Any dtype; only a float X gets a gradient.")
      .Input("X", "(Tensor) the tensor to split")
      .Input("AxisTensor",
             "(Tensor<int32|int64>, optional) one element: the axis at run time; before attribute axis; no gradient",
             kTensorAttrInput)
      .Input("SectionsTensorList",
             "(Tensors<int32|int64>, optional) one single-element tensor per part: the sections at run time; before "
             "attribute sections; no gradient",
             kTensorAttrListInput)
      .Output("Out", "(Tensor[]) the parts, in order along the axis", kDuplicable)
      .Attr<int>("num", 0, "(int, default 0) the number of equal parts; 0 means use sections")
      .Attr<std::vector<int>>("sections", {}, "(int[], default []) the size of each part along the axis; one may be -1")
      .Attr<int>("axis", 0, "(int, default 0) the axis to split; negative counts from the end")
      .OutputCount("Out", SplitCount)
      .InferShape(InferSplit)
      .GradMaker<SplitGradMaker>()
      .GradCheck(num)
      .GradCheck(sections);
  // Pure copies, so every dtype (Paddle registers ints and bool too).
  RegisterFloatKernels(registrar, "split", SplitKernel<float>, SplitKernel<double>, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kCPU, DType::kInt32, SplitKernel<int32_t>, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kCPU, DType::kInt64, SplitKernel<int64_t>, __FILE__, __LINE__);
  registrar.Kernel("split", DeviceType::kCPU, DType::kBool, SplitKernel<bool>, __FILE__, __LINE__);
}

}  // namespace nabla::nn
