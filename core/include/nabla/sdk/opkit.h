#pragma once
// The op kit for plugins on the C ABI (nabla/sdk/plugin.h): what
// nabla/opkit/opkit.h gives under NABLA_PLUGIN_C_ABI. These are the op kit's
// own header-only parts, compiled against the SDK's classes (the shim maps
// the core headers they include to the SDK): grad makers, gradient check
// cases, kernel registration and parallel loops, the unary and activation
// op templates with the overflow-free sigmoid and softplus, tensor-valued
// attributes (C ABI version 3), axis arithmetic, the index plans and
// deterministic sums of reductions, and scalar and index inputs. The rest
// of the op kit (broadcasting, attribute parsing, views, random numbers) is
// not header-only yet and is not here.
#include "nabla/sdk/cpu.h"
#include "nabla/sdk/plugin.h"

#include "nabla/opkit/attr_tensor.h"
#include "nabla/opkit/axis.h"
#include "nabla/opkit/grad.h"
#include "nabla/opkit/gradcheck.h"
#include "nabla/opkit/kernels.h"
#include "nabla/opkit/reduce.h"
#include "nabla/opkit/scalar.h"
#include "nabla/opkit/unary.h"
