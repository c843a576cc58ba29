#pragma once
// nabla::opkit, the op kit: what op files of any plugin share, once. Include
// this or the one header you need, and name nabla::opkit (find_package(nabla))
// for the include path: the kit is header-only.
//   axis.h        NormalizeAxis, ProductOf, AxisView, ForEachAxisRow, part copies
//   broadcast.h   Paddle's `axis` broadcasting, BroadcastIndexer
//   reduce.h      reduced dims and shapes, deterministic reduction walks
//   kernels.h     kernel registration over dtypes, AllocOutput, parallel loops
//   vectorized.h  VectorizedParallelFor: a parallel loop at the CPU's vector width
//   unary.h       unary, activation and activation-gradient op templates, Sigmoid, Softplus
//   elementwise.h unary.h and the broadcast binary op templates
//   view.h        view ops (Out shares X's buffer under a new shape)
//   grad.h        grad makers: MakeOp, OneOp, OneGradOpIfWanted, GradFrom*Maker
//   gradcheck.h   GradCheck case builders
//   random.h      a portable RNG, random-fill ops, initializer fan math
//   attrs.h       shape and dtype attributes
//   attr_tensor.h tensor-valued attribute inputs (Shape, StartsTensor, ScaleTensor, ...)
//   scalar.h      one-element tensors and index inputs
#include "nabla/opkit/attr_tensor.h"
#include "nabla/opkit/attrs.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/broadcast.h"
#include "nabla/opkit/elementwise.h"
#include "nabla/opkit/grad.h"
#include "nabla/opkit/gradcheck.h"
#include "nabla/opkit/kernels.h"
#include "nabla/opkit/random.h"
#include "nabla/opkit/reduce.h"
#include "nabla/opkit/scalar.h"
#include "nabla/opkit/unary.h"
#include "nabla/opkit/vectorized.h"
#include "nabla/opkit/view.h"
