#pragma once
// Thrown by build-time shape inference when a shape function asks for the
// dtype of an input whose dtype is not known yet (a feed declared without
// dtype, or the output of an op without inference). Inference never
// guesses, so the op's inference simply stops and its outputs stay unknown
// until run time (inference.cc catches it). Deliberately not a
// std::exception, so shape functions that catch those do not swallow it.
// The C ABI (c_api.cc) carries it across a plugin's shape function.
namespace nabla::internal {
struct DTypeNotKnownYet {};
}  // namespace nabla::internal
