#pragma once
// Everything an embedding program or a plugin codes against, in one include.
// Finer headers stay available for files that want less (each costs compile
// time); a backend adds its own (nabla/cpu/cpu.h for the host device and
// executors, nabla/opencl/opencl.h).
#include "nabla/attribute.h"
#include "nabla/backward.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/error.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/gradcheck.h"
#include "nabla/npy.h"
#include "nabla/op_registry.h"
#include "nabla/plugin.h"
#include "nabla/program.h"
#include "nabla/program_io.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"
#include "nabla/types.h"
