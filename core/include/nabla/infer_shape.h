#pragma once
// Shape and dtype inference of one op (part of nabla/op_registry.h).
#include <functional>
#include <string>

#include "nabla/export.h"
#include "nabla/program.h"
#include "nabla/tensor.h"
#include "nabla/types.h"

namespace nabla {

// ---------------------------------------------------------- inference

// Shape and dtype inference, at build time (over VarDescs, dims may be -1)
// and at run time (over tensors). One function serves both.
class NABLA_API InferShapeContext {
 public:
  virtual ~InferShapeContext();
  virtual const OpDesc& Op() const = 0;
  virtual bool IsRuntime() const = 0;
  // A slot is present when it has at least one argument that is not @EMPTY@.
  virtual bool HasInput(const std::string& slot) const = 0;
  virtual bool HasOutput(const std::string& slot) const = 0;
  virtual size_t InputSize(const std::string& slot) const = 0;
  virtual size_t OutputSize(const std::string& slot) const = 0;
  virtual Shape InputShape(const std::string& slot, size_t i = 0) const = 0;
  virtual DType InputDType(const std::string& slot, size_t i = 0) const = 0;
  virtual VarType InputVarType(const std::string& slot, size_t i = 0) const = 0;
  // Setting an @EMPTY@ output is a no-op.
  virtual void SetOutputShape(const std::string& slot, const Shape& shape, size_t i = 0) = 0;
  virtual void SetOutputDType(const std::string& slot, DType dtype, size_t i = 0) = 0;
  // Tensor-valued attributes: input slot[i] on the host (HostCopy), for a
  // shape function whose result depends on the values of a small input (a
  // shape, a count). Only at run time (IsRuntime()): at build time the value
  // is unknown and this throws, so callers leave the dims it decides at -1.
  // A run-time inference that reads values is never memoized.
  virtual Tensor InputHostTensor(const std::string& slot, size_t i = 0) const;

  template <typename T>
  const T& Attr(const std::string& name) const {
    return Op().Attr<T>(name);
  }
  // Out[i] gets the shape and dtype of In[j].
  void ShareShapeAndDType(const std::string& in, const std::string& out, size_t i = 0, size_t j = 0);
  // "op 'mul' (prog.yaml:3:7)": for messages.
  std::string Where() const;
  // The program the op belongs to, when known; lets Where() name the file.
  virtual const ProgramDesc* Program() const { return nullptr; }
};

using InferShapeFn = std::function<void(InferShapeContext&)>;
// Sets the VarType (and dtype where it is not a shape question) of outputs.
using InferVarTypeFn = std::function<void(const OpDesc& op, BlockDesc& block)>;

}  // namespace nabla
