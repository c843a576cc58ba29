#pragma once
// nabla/cpu/dnnl.h for plugins on the C ABI that link oneDNN themselves
// (see ../plugin.h): the CPU backend's scratchpad and thread budget come
// through the table (nabla/sdk/cpu.h); the engine and the per-thread
// in-order streams are the plugin's own, made as the backend makes its
// (oneDNN objects do not cross the C ABI). Include only from code that
// links oneDNN.
#include <oneapi/dnnl/dnnl.hpp>

#include "nabla/sdk/cpu.h"

namespace nabla {
inline namespace c_sdk {
namespace cpu {

inline dnnl::engine& DnnlEngine() {
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}
inline dnnl::stream& DnnlStream() {  // the calling thread's
  thread_local dnnl::stream stream(DnnlEngine());
  return stream;
}

}  // namespace cpu
}  // namespace c_sdk
}  // namespace nabla
