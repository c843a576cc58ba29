#pragma once
// Private helpers of the control_flow op files for variables: deep copies,
// zeros and accumulation of dense and tensor-array vars, and a tensor
// array's entries. They compile in the standard build and over the C ABI
// SDK alike: the few accessors below read the core's Variable directly in
// the one and go through the SDK's handles (C ABI version 5) in the other.
// Nothing here is part of nabla's API.
#include <memory>
#include <string>

#include "nabla/device.h"
#include "nabla/error.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::control_flow {

// A tensor array's length, its entry i (i < its length) and resizing it
// (new entries hold no data). The var must be a tensor array.
#ifdef NABLA_PLUGIN_C_ABI
inline size_t ArraySize(const Variable& v) { return v.ArraySize(); }
inline const Tensor& ArrayEntry(const Variable& v, size_t i) { return v.ArrayEntry(i); }
inline Tensor& ArrayEntry(Variable& v, size_t i) { return v.ArrayEntry(i); }
inline void ResizeArray(Variable* v, size_t n) { v->ResizeArray(n); }
// `*t = Tensor()`: empty, sharing nothing any more.
inline void ResetTensor(Tensor* t) { t->Reset(); }
// `*t = src`: shares src's buffer (or only its shape and dtype).
inline void AssignTensor(Tensor* t, const Tensor& src) { t->AssignFrom(src); }
#else
inline size_t ArraySize(const Variable& v) { return v.GetArray().size(); }
inline const Tensor& ArrayEntry(const Variable& v, size_t i) { return v.GetArray()[i]; }
inline Tensor& ArrayEntry(Variable& v, size_t i) { return v.GetArray()[i]; }
inline void ResizeArray(Variable* v, size_t n) { v->GetArray().resize(n); }
inline void ResetTensor(Tensor* t) { *t = Tensor(); }
inline void AssignTensor(Tensor* t, const Tensor& src) { *t = src; }
// A var of no scope (the SDK's NewVariable over the C ABI, version 6).
inline std::shared_ptr<Variable> NewVariable() { return std::make_shared<Variable>(); }
#endif

// Makes `v` an empty tensor array, unless it is one already.
void MakeTensorArray(Variable* v);

// Deep copy of a dense var or a tensor array (entries that were never
// written stay empty). `dst` takes `src`'s var type.
void CopyVar(const Variable& src, Variable* dst, Device& device);
// A zero gradient shaped like `like`: zeros of its shape and dtype for a
// dense var, an empty array for a tensor array (missing entries read as 0).
void ZeroVarLike(const Variable& like, Variable* dst, Device& device);
// The tensor ZeroVarLike makes for `like`, in *out (a fresh buffer): zeros
// shaped like a dense var, an empty tensor for a tensor array.
void ZeroTensorLike(const Variable& like, Tensor* out, Device& device);
// acc += x for dense float vars; entry by entry for tensor arrays (an empty
// entry is zero). Shapes must match; the message names `what`.
void AccumulateVar(Variable* acc, const Variable& x, Device& device, const std::string& what);
// AccumulateVar of a tensor array whose only entry is x, at index i: acc
// becomes a tensor array of at least i + 1 entries and acc[i] += x.
void AccumulateArrayEntry(Variable* acc, size_t i, const Tensor& x, Device& device, const std::string& what);
// True when the var holds a value: an allocated tensor, or an array.
bool HasValue(const Variable& v);

}  // namespace nabla::control_flow
