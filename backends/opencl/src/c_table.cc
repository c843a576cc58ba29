// nabla/opencl/opencl_c.h: the table through which plugins on the C ABI
// launch OpenCL kernels. The handles are the core's objects (nabla_device is
// a nabla::Device, nabla_tensor a nabla::Tensor, as core/src/c_api.cc hands
// them out); this library is built with the core, so it may rely on that.
#include <deque>
#include <exception>
#include <string>
#include <vector>

#include "cl_common.h"
#include "nabla/opencl/opencl_c.h"
#include "nabla/tensor.h"

namespace nabla::opencl {
namespace {

// Turns an exception into the calling thread's C API error: nothing may
// unwind into a C plugin.
template <typename F>
int32_t Guard(const nabla_api* api, F&& f) noexcept {
  try {
    return f();
  } catch (const Error& e) {
    if (api) api->set_error(static_cast<int32_t>(e.kind()), e.what());
  } catch (const std::exception& e) {
    if (api) api->set_error(NABLA_C_RUNTIME, e.what());
  } catch (...) {
    if (api) api->set_error(NABLA_C_RUNTIME, "an exception that is not a std::exception");
  }
  return NABLA_C_ERROR;
}

OpenClDevice* AsOpenCl(nabla_device* device) {
  auto* dev = reinterpret_cast<Device*>(device);
  if (!dev || dev->Type() != DeviceType::kOpenCL) return nullptr;
  return static_cast<OpenClDevice*>(dev);
}

int32_t DeviceFp64(const nabla_api* api, nabla_device* device) {
  return Guard(api, [&]() -> int32_t {
    OpenClDevice* dev = AsOpenCl(device);
    if (!dev) return -1;
    return dev->Info().fp64 ? 1 : 0;
  });
}

int32_t Launch(const nabla_api* api, nabla_device* device, const char* source, size_t source_size, const char* options,
               const char* kernel, const nabla_opencl_arg* args, size_t arg_count, size_t global, size_t local) {
  return Guard(api, [&]() -> int32_t {
    OpenClDevice* dev = AsOpenCl(device);
    NABLA_ENFORCE(dev != nullptr, kPreconditionNotMet, "OpenCL launch of kernel '", kernel ? kernel : "(null)",
                  "': expected an OpenCL device but received ",
                  device ? reinterpret_cast<Device*>(device)->Name() : std::string("NULL"));
    NABLA_ENFORCE(source && kernel && (args || arg_count == 0), kInvalidArgument,
                  "OpenCL launch: expected a source, a kernel name and arguments but received NULL");
    std::deque<Tensor> temps;  // inputs uploaded for this launch
    std::vector<KernelArg> list;
    list.reserve(arg_count);
    for (size_t i = 0; i < arg_count; ++i) {
      const nabla_opencl_arg& a = args[i];
      switch (a.kind) {
        case NABLA_OPENCL_ARG_TENSOR: {
          NABLA_ENFORCE(a.tensor != nullptr, kInvalidArgument, "OpenCL kernel '", kernel, "', argument ", i,
                        ": a tensor argument without a tensor");
          const Tensor& t = *reinterpret_cast<const Tensor*>(a.tensor);
          NABLA_ENFORCE(t.IsInitialized(), kPreconditionNotMet, "OpenCL kernel '", kernel, "', argument ", i,
                        ": the tensor holds no data (allocate an output with tensor_allocate first)");
          if (t.GetDevice() == dev) {
            list.push_back(KernelArg::Buffer(t.RawData()));
          } else {
            temps.emplace_back();
            temps.back().CopyFrom(t, *dev);
            list.push_back(KernelArg::Buffer(temps.back().RawData()));
          }
          break;
        }
        case NABLA_OPENCL_ARG_VALUE:
          NABLA_ENFORCE(a.value != nullptr || a.size == 0, kInvalidArgument, "OpenCL kernel '", kernel, "', argument ",
                        i, ": a value argument without a value");
          list.push_back(KernelArg::Raw(a.value, a.size));
          break;
        case NABLA_OPENCL_ARG_LOCAL:
          list.push_back(KernelArg::Local(a.size));
          break;
        default:
          NABLA_THROW(kInvalidArgument, "OpenCL kernel '", kernel, "', argument ", i, ": unknown kind ", a.kind,
                      " (expected 0 tensor, 1 value or 2 local)");
      }
    }
    // Commands on the in-order queue run before any later reuse of the
    // temporaries' buffers, so they may go once the kernel is enqueued.
    dev->Launch(std::string(source, source_size), options ? options : "", kernel, list, global, local);
    return NABLA_C_OK;
  });
}

}  // namespace
}  // namespace nabla::opencl

extern "C" NABLA_API const nabla_opencl_api nabla_opencl_api_v1 = {NABLA_OPENCL_API_VERSION,
                                                                   static_cast<uint32_t>(sizeof(nabla_opencl_api)),
                                                                   nabla::opencl::DeviceFp64, nabla::opencl::Launch};
