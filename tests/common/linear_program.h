#pragma once
// The seed scenario as a program file: y = x·w + b, loss = mean(y), with w
// and b initialised to constants so results can be worked out by hand
// (x: [-1, 3], w: 3x2 of 0.25, b: [2] of 0.5).
namespace nabla::testing_cli {

inline constexpr const char* kLinearProgram = R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 3], dtype: float32, stop_gradient: true}
      w: {shape: [3, 2], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.25}}
      b: {shape: [2], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
      - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
)";

}  // namespace nabla::testing_cli
