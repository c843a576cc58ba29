#pragma once
// The oneDNN objects every oneDNN user of the process shares: the CPU
// backend's GEMMs and the convolutions and pooling of plugins/nn_ops. One
// engine, and one in-order stream per thread (a stream is not meant to be
// shared between threads). Include only from code that links oneDNN
// (dep::dnnl, libdnnl-dev); cpu.h stays free of it, and this header is not
// installed with the SDK.
#include <oneapi/dnnl/dnnl.hpp>

#include "nabla/export.h"

namespace nabla::cpu {

NABLA_API dnnl::engine& DnnlEngine();
NABLA_API dnnl::stream& DnnlStream();  // the calling thread's

}  // namespace nabla::cpu
