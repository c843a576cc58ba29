#include "ndarray.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "nabla/device.h"
#include "nabla/error.h"

namespace nabla::python {
namespace {

bool DTypeFromNumpy(const py::dtype& dt, DType* out) {
  // Exact kinds and sizes: NumPy's 'l' and 'q' are both int64 on Linux.
  const char kind = dt.kind();
  const size_t size = static_cast<size_t>(dt.itemsize());
  if (kind == 'f' && size == 4)
    *out = DType::kFloat32;
  else if (kind == 'f' && size == 8)
    *out = DType::kFloat64;
  else if (kind == 'i' && size == 4)
    *out = DType::kInt32;
  else if (kind == 'i' && size == 8)
    *out = DType::kInt64;
  else if (kind == 'b' && size == 1)
    *out = DType::kBool;
  else
    return false;
  return true;
}

}  // namespace

std::string DTypeString(DType dtype) { return DTypeName(dtype); }

py::dtype NumpyDType(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return py::dtype::of<float>();
    case DType::kFloat64:
      return py::dtype::of<double>();
    case DType::kInt32:
      return py::dtype::of<int32_t>();
    case DType::kInt64:
      return py::dtype::of<int64_t>();
    case DType::kBool:
      return py::dtype::of<bool>();
    case DType::kBFloat16:  // NumPy has none
      break;
  }
  NABLA_THROW(kInvalidArgument, "no NumPy dtype for nabla dtype ", static_cast<int>(dtype));
}

Tensor TensorFromArray(const py::handle& obj, const std::string& what) {
  py::array arr = py::array::ensure(obj);
  NABLA_ENFORCE(arr, kInvalidArgument, what, ": expected a NumPy array (or something np.asarray takes) but received ",
                std::string(py::str(py::type::of(obj).attr("__name__"))));
  DType dtype;
  NABLA_ENFORCE(DTypeFromNumpy(arr.dtype(), &dtype), kInvalidArgument, what,
                ": expected dtype float32, float64, int32, int64 or bool but received ",
                std::string(py::str(arr.dtype())));
  const int flags = py::array::c_style | py::array::forcecast;
  const bool native = arr.dtype().byteorder() != '>';
  const bool aligned = reinterpret_cast<uintptr_t>(arr.data()) % DTypeSize(dtype) == 0;
  // A read-only array (np.frombuffer of bytes, a memmap opened 'r') is
  // copied too: shared, an in-place write (Tensor.copy_) or a fetched alias
  // of the feed would write to memory its owner declared immutable.
  const bool writeable = py::array::check_(arr) && arr.writeable();
  if (!native || !aligned || !writeable || !(arr.flags() & py::array::c_style)) {
    // A view with strides, a byte-swapped, misaligned or read-only array:
    // one copy into the C-contiguous native layout the kernels read.
    arr = py::array::ensure(py::module_::import("numpy").attr("array")(arr, arr.dtype().attr("newbyteorder")("="),
                                                                       py::arg("copy") = true, py::arg("order") = "C"),
                            flags);
  }
  Shape shape(arr.shape(), arr.shape() + arr.ndim());
  const size_t bytes = static_cast<size_t>(NumElements(shape)) * DTypeSize(dtype);
  // The tensor owns a reference to the array; dropping it needs the GIL,
  // and a buffer may die on an executor thread or after the interpreter.
  auto* owner = new py::object(arr);
  auto release = [owner] {
    if (!Py_IsInitialized()) return;  // the interpreter is gone: nothing to free
    py::gil_scoped_acquire gil;
    delete owner;
  };
  auto buffer = std::make_shared<Buffer>(&HostDevice(), const_cast<void*>(arr.data()), bytes, std::move(release));
  return Tensor::FromBuffer(std::move(buffer), dtype, std::move(shape));
}

py::array ArrayFromTensor(const Tensor& tensor) {
  NABLA_ENFORCE(tensor.IsInitialized() || tensor.Numel() == 0, kPreconditionNotMet, "tensor ", tensor.DebugString(),
                " holds no data yet");
  auto* held = new Tensor();
  if (tensor.GetDevice() == nullptr || tensor.GetDevice() == &HostDevice()) {
    held->ShareDataWith(tensor);
  } else {
    held->CopyFrom(tensor, HostDevice());
  }
  const Shape& shape = held->GetShape();
  std::vector<py::ssize_t> dims(shape.begin(), shape.end());
  if (held->GetDType() == DType::kBFloat16) {
    // NumPy has no bfloat16: a float32 copy, exact, as `nabla exec --fetch`
    // writes bfloat16 vars to .npy.
    std::unique_ptr<Tensor> owned(held);
    py::array_t<float> wide(dims);
    const bfloat16* from = owned->IsInitialized() ? owned->Data<bfloat16>() : nullptr;
    float* to = wide.mutable_data();
    for (int64_t i = 0; from != nullptr && i < owned->Numel(); ++i) to[i] = Bf16ToFloat(from[i]);
    return std::move(wide);
  }
  py::capsule base(held, [](void* p) { delete static_cast<Tensor*>(p); });
  if (!held->IsInitialized()) return py::array(NumpyDType(held->GetDType()), dims);  // no elements
  return py::array(NumpyDType(held->GetDType()), dims, {}, held->RawData(), base);
}

}  // namespace nabla::python
