#include "var_util.h"

#include <cstring>

namespace nabla::control_flow {

bool HasValue(const Variable& v) { return v.Type() == VarType::kTensorArray || v.GetTensor().IsInitialized(); }

void MakeTensorArray(Variable* v) {
  if (v->Type() == VarType::kTensorArray) return;
  v->SetType(VarType::kTensorArray);
  ResizeArray(v, 0);
}

void CopyVar(const Variable& src, Variable* dst, Device& device) {
  if (&src == dst) return;
  if (src.Type() == VarType::kTensorArray) {
    dst->SetType(VarType::kTensorArray);
    const size_t n = ArraySize(src);
    ResizeArray(dst, n);
    for (size_t k = 0; k < n; ++k) {
      const Tensor& from = ArrayEntry(src, k);
      Tensor& to = ArrayEntry(*dst, k);
      if (from.IsInitialized()) {
        to.CopyFrom(from, device);
      } else {
        ResetTensor(&to);
      }
    }
    return;
  }
  dst->SetType(VarType::kDense);
  if (src.GetTensor().IsInitialized()) {
    dst->GetTensor().CopyFrom(src.GetTensor(), device);
  } else {
    AssignTensor(&dst->GetTensor(), src.GetTensor());
  }
}

void ZeroTensorLike(const Variable& like, Tensor* out, Device& device) {
  // A fresh buffer: `out` may share its old one with a kept step scope.
  ResetTensor(out);
  if (like.Type() == VarType::kTensorArray) return;
  const Tensor& t = like.GetTensor();
  void* data = out->Allocate(device, t.GetDType(), t.GetShape());
  if (out->Bytes() != 0) std::memset(data, 0, out->Bytes());
}

void ZeroVarLike(const Variable& like, Variable* dst, Device& device) {
  if (like.Type() == VarType::kTensorArray) {
    dst->SetType(VarType::kTensorArray);
    ResizeArray(dst, 0);
    return;
  }
  dst->SetType(VarType::kDense);
  ZeroTensorLike(like, &dst->GetTensor(), device);
}

namespace {

template <typename T>
void AddTensor(Tensor* acc, const Tensor& x) {
  T* a = acc->MutableData<T>();
  const T* b = x.Data<T>();
  for (int64_t i = 0, n = x.Numel(); i < n; ++i) a[i] += b[i];
}

void AddInto(Tensor* acc, const Tensor& x, Device& device, const std::string& what) {
  if (!acc->IsInitialized()) {
    acc->CopyFrom(x, device);
    return;
  }
  NABLA_ENFORCE(acc->GetShape() == x.GetShape() && acc->GetDType() == x.GetDType(), kInvalidArgument,
                "accumulating gradient ", what, ": expected every step's contribution to have the shape and dtype ",
                acc->DebugString(), ", but received ", x.DebugString());
  switch (x.GetDType()) {
    case DType::kFloat32:
      AddTensor<float>(acc, x);
      break;
    case DType::kFloat64:
      AddTensor<double>(acc, x);
      break;
    case DType::kInt32:
      AddTensor<int32_t>(acc, x);
      break;
    case DType::kInt64:
      AddTensor<int64_t>(acc, x);
      break;
    case DType::kBool:
      NABLA_THROW(kInvalidArgument, "accumulating gradient ", what, ": bool tensors have no gradient");
    case DType::kBFloat16:
      NABLA_THROW(kInvalidArgument, "accumulating gradient ", what,
                  ": bfloat16 gradients are not accumulated (the mixed-precision pass casts them to float32 first)");
  }
}

}  // namespace

void AccumulateVar(Variable* acc, const Variable& x, Device& device, const std::string& what) {
  if (x.Type() == VarType::kTensorArray) {
    MakeTensorArray(acc);
    const size_t n = ArraySize(x);
    if (ArraySize(*acc) < n) ResizeArray(acc, n);
    for (size_t k = 0; k < n; ++k)
      if (ArrayEntry(x, k).IsInitialized())
        AddInto(&ArrayEntry(*acc, k), ArrayEntry(x, k), device, StrCat(what, "[", k, "]"));
    return;
  }
  if (!x.GetTensor().IsInitialized()) return;
  acc->SetType(VarType::kDense);
  AddInto(&acc->GetTensor(), x.GetTensor(), device, what);
}

void AccumulateArrayEntry(Variable* acc, size_t i, const Tensor& x, Device& device, const std::string& what) {
  MakeTensorArray(acc);
  if (ArraySize(*acc) < i + 1) ResizeArray(acc, i + 1);
  if (x.IsInitialized()) AddInto(&ArrayEntry(*acc, i), x, device, StrCat(what, "[", i, "]"));
}

}  // namespace nabla::control_flow
