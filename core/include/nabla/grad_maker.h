#pragma once
// Grad makers: what the backward builder appends for one forward op (part
// of nabla/op_registry.h).
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "nabla/attribute.h"
#include "nabla/export.h"
#include "nabla/program.h"

namespace nabla {

// ---------------------------------------------------------- grad makers

// Builds the grad ops of one forward op (seed 003). Helpers give the names a
// maker needs; a maker may return zero, one or several ops of any type.
class NABLA_API GradOpDescMakerBase {
 public:
  GradOpDescMakerBase(const OpDesc& fwd, const std::unordered_set<std::string>& no_grad_set,
                      std::unordered_map<std::string, std::string>* grad_to_var,
                      const std::vector<BlockDesc*>& grad_blocks);
  virtual ~GradOpDescMakerBase();
  virtual std::vector<std::unique_ptr<OpDesc>> operator()() const = 0;

 protected:
  const std::vector<std::string>& Input(const std::string& slot) const { return fwd_.Input(slot); }
  const std::vector<std::string>& Output(const std::string& slot) const { return fwd_.Output(slot); }
  // x@GRAD for every arg of the slot; @EMPTY@ for args in the no-grad set
  // and for every arg of a kNoGrad slot. Records grad -> forward var names
  // for the builder.
  std::vector<std::string> InputGrad(const std::string& slot) const;
  std::vector<std::string> OutputGrad(const std::string& slot) const;
  std::vector<std::string> InputSlots() const;
  std::vector<std::string> OutputSlots() const;
  // Whether the forward op's schema declares input `slot` kNoGrad.
  bool IsNoGradInput(const std::string& slot) const;
  const AttributeMap& Attrs() const { return fwd_.Attrs(); }
  template <typename T>
  const T& Attr(const std::string& name) const {
    return fwd_.Attr<T>(name);
  }
  const OpDesc& ForwardOp() const { return fwd_; }
  // The grad block built for the forward op's i-th sub-block (non-owning).
  BlockDesc* GradBlock(size_t i = 0) const;

 private:
  std::vector<std::string> GradNames(const std::vector<std::string>& names, bool is_input) const;

  const OpDesc& fwd_;
  const std::unordered_set<std::string>& no_grad_set_;
  std::unordered_map<std::string, std::string>* grad_to_var_;  // non-owning, may be null
  std::vector<BlockDesc*> grad_blocks_;
};

// `<type>_grad` with every forward input, output and output gradient as
// inputs (`X`, `Out`, `Out@GRAD`) and every input gradient as output (`X@GRAD`).
class NABLA_API DefaultGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override;
};

// For ops that deliberately have no gradient (accuracy, fill_constant, ...).
class NABLA_API EmptyGradOpDescMaker : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
};

using GradOpMakerFn = std::function<std::vector<std::unique_ptr<OpDesc>>(
    const OpDesc& fwd, const std::unordered_set<std::string>& no_grad_set,
    std::unordered_map<std::string, std::string>* grad_to_var, const std::vector<BlockDesc*>& grad_blocks)>;

}  // namespace nabla
