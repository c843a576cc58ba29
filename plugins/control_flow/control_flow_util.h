#pragma once
// Private helpers shared by the control_flow op files at the tensor level:
// the comparisons' and logical ops' broadcast of Y onto X and the array ops'
// index. They compile in the standard build and over the C ABI SDK alike;
// what handles variables and blocks is in sub_block_util.h. Nothing here is
// part of nabla's API.
#include <string>
#include <vector>

#include "nabla/error.h"
#include "nabla/op_registry.h"
#include "nabla/opkit/opkit.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla::control_flow {

using namespace nabla::opkit;  // NOLINT: every op file here builds on the kit

// Paddle's elementwise broadcast of Y onto X for comparisons and logical
// ops: Y aligns with X by opkit::AlignAtAxis (a one-element Y of higher rank
// broadcasts everywhere); each aligned Y dim equals X's or is 1.
// Returns, for every element of X (row-major), the index of its Y element.
std::vector<int64_t> BroadcastYOntoX(const Shape& x, const Shape& y, int axis, const std::string& where);
// Build-time form: throws on shapes that can never broadcast (unknown dims pass).
void CheckBroadcast(const Shape& x, const Shape& y, int axis, const std::string& where);

// The index in a one-element int32/int64 tensor (I of the array ops); a
// negative index or another dtype is an error naming `where`.
size_t ReadArrayIndex(const Tensor& t, const std::string& where);
// Build-time check of an array index slot: int32/int64, one element.
void CheckIndexSlot(InferShapeContext& c, const std::string& slot);

}  // namespace nabla::control_flow
