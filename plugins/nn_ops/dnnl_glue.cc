// oneDNN glue (see dnnl_glue.h).
#include "dnnl_glue.h"

namespace nabla::nn {

#ifndef NABLA_WITH_DNNL
bool DnnlConvForward(const ConvGeom&, const float*, const float*, float*) { return false; }
bool DnnlConvBackward(const ConvGeom&, const float*, const float*, const float*, float*, float*) { return false; }
bool DnnlPoolForward(const PoolGeom&, const float*, float*) { return false; }
bool DnnlPoolBackward(const PoolGeom&, const float*, const float*, float*) { return false; }
#endif

}  // namespace nabla::nn
