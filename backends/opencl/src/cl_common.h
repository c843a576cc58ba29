#pragma once
// Private to the OpenCL backend: the CL headers and the status check every
// call goes through. CL_TARGET_OPENCL_VERSION=120 comes from the target's
// compile definitions, before any CL header.
#include <CL/cl.h>

#include <string>

#include "nabla/error.h"
#include "nabla/opencl/opencl.h"

namespace nabla::opencl {

// Throws kExternal "<what> failed: CL_OUT_OF_RESOURCES (-5)<context>".
[[noreturn]] void ThrowCl(cl_int status, const std::string& what, const std::string& context = "");

inline void CheckCl(cl_int status, const char* what, const std::string& context = "") {
  if (status != CL_SUCCESS) ThrowCl(status, what, context);
}

inline cl_mem AsMem(const void* p) { return static_cast<cl_mem>(const_cast<void*>(p)); }

std::string DeviceString(cl_device_id device, cl_device_info param);
std::string PlatformString(cl_platform_id platform, cl_platform_info param);

// The platform and device ids in ListPlatforms() order (index = opencl:N).
struct DeviceIds {
  cl_platform_id platform;
  cl_device_id device;
};
std::vector<DeviceIds> AllDeviceIds();

}  // namespace nabla::opencl
