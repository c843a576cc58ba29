#pragma once
// The op kit for plugins on the C ABI (nabla/sdk/plugin.h): what
// nabla/opkit/opkit.h gives, all of it, under NABLA_PLUGIN_C_ABI. The op kit
// is header-only; here its headers compile against the SDK's classes (the
// shim maps the core headers they include to the SDK): grad makers,
// gradient check cases, kernel registration and parallel loops, the unary,
// activation and broadcast binary op templates, tensor-valued attributes
// (C ABI version 3), axis arithmetic, broadcasting, the index plans and
// deterministic sums of reductions, views, attribute parsing, random numbers
// and initializer fans, and scalar and index inputs.
#include "nabla/sdk/cpu.h"
#include "nabla/sdk/plugin.h"

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
