// The core's side of nabla/c_api.h: the function table handed to C ABI
// plugins, and the wrappers that turn a plugin's C callbacks into the
// std::functions the registry holds. Handles are the core's own objects
// seen through opaque pointer types; every table function catches what the
// core throws and records it on the calling thread instead, because nothing
// may unwind into plugin code.
#include "c_api_internal.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <exception>
#include <memory>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "dtype_not_known.h"
#include "nabla/device.h"
#include "nabla/device_registry.h"
#include "nabla/executor.h"
#include "nabla/fusion.h"
#include "nabla/op_registry.h"
#include "nabla/scope.h"
#include "nabla/tensor.h"

// The enumerations of c_api.h are nabla's own, number for number.
static_assert(static_cast<int>(nabla::ErrorKind::kRuntime) == NABLA_C_RUNTIME);
static_assert(static_cast<int>(nabla::DType::kBFloat16) == NABLA_C_BFLOAT16);
static_assert(static_cast<int>(nabla::DeviceType::kOpenCL) == NABLA_C_DEVICE_OPENCL);
static_assert(static_cast<int>(nabla::AttrType::kBools) == NABLA_C_ATTR_BOOLS);
static_assert(unsigned{nabla::kDuplicable} == unsigned{NABLA_C_SLOT_DUPLICABLE} &&
              unsigned{nabla::kDispensable} == unsigned{NABLA_C_SLOT_DISPENSABLE} &&
              unsigned{nabla::kNoBuffer} == unsigned{NABLA_C_SLOT_NO_BUFFER} &&
              unsigned{nabla::kNoGrad} == unsigned{NABLA_C_SLOT_NO_GRAD});

namespace nabla {
namespace {

using c_api_detail::CallbackScope;
using c_api_detail::Guard;
using c_api_detail::GuardStatus;
using c_api_detail::RaisePluginError;
using c_api_detail::SetError;
using c_api_detail::Str;

struct ThreadError {
  int32_t kind = NABLA_C_RUNTIME;
  std::string message;
  bool set = false;
};

// One run of a program pass: the program it edits and the vars it keeps
// (sorted, so a plugin sees them in one order); also var-type inference's
// view and, read only, a control-flow kernel's and a grad maker's.
struct CPassContext {
  ProgramDesc& program;
  std::vector<std::string> keep;
  Tensor evaluated;        // pass_evaluate_on_host's last value
  bool vars_only = false;  // var-type inference (version 5): ops and the var list stay as they are
  bool read_only = false;  // a kernel's or grad maker's view (version 6): nothing changes
};

// What the table hands out for the length of a callback: strings and the
// lists of attribute values. Emptied when a plugin callback begins (not
// when a nested one does), so everything handed to the callback lives until
// it returns.
struct Scratch {
  std::deque<std::string> strings;
  std::deque<std::vector<const char*>> string_lists;
  std::deque<std::vector<int32_t>> bool_lists;
  std::deque<CPassContext> programs;  // kernel_program's views (version 6)
  int depth = 0;
};

}  // namespace

// The thread's error and scratch in one thread_local: every kernel call
// of a C ABI plugin touches both (CallbackScope, which looks it up once),
// and each thread_local of a shared library is a __tls_get_addr call.
struct c_api_detail::ThreadState {
  ThreadError error;
  Scratch scratch;
};

namespace {
using c_api_detail::ThreadState;
ThreadState& State() {
  thread_local ThreadState state;
  return state;
}
ThreadError& LastError() { return State().error; }
Scratch& ThreadScratch() { return State().scratch; }
const char* Keep(std::string s) {
  auto& strings = ThreadScratch().strings;
  strings.push_back(std::move(s));
  return strings.back().c_str();
}

ErrorKind KindOf(int32_t kind) {
  return static_cast<ErrorKind>(kind >= NABLA_C_INVALID_ARGUMENT && kind <= NABLA_C_RUNTIME ? kind : NABLA_C_RUNTIME);
}

Registrar& R(nabla_registrar* r) { return *reinterpret_cast<Registrar*>(r); }
OpBuilder& B(nabla_op_builder* b) { return *reinterpret_cast<OpBuilder*>(b); }
const OpDesc& Op(const nabla_op* op) { return *reinterpret_cast<const OpDesc*>(op); }
const nabla_op* COp(const OpDesc& op) { return reinterpret_cast<const nabla_op*>(&op); }
InferShapeContext& I(nabla_infer_context* c) { return *reinterpret_cast<InferShapeContext*>(c); }
const ExecutionContext& K(nabla_kernel_context* c) { return *reinterpret_cast<const ExecutionContext*>(c); }
const Tensor& T(const nabla_tensor* t) { return *reinterpret_cast<const Tensor*>(t); }

void CheckDType(int32_t dtype) {
  NABLA_ENFORCE(dtype >= NABLA_C_FLOAT32 && dtype <= NABLA_C_BFLOAT16, kInvalidArgument,
                "expected a dtype between 0 and 5 but received ", dtype);
}

Attribute FromC(const nabla_attr_value& v) {
  switch (v.type) {
    case NABLA_C_ATTR_INT:
      return static_cast<int>(v.i);
    case NABLA_C_ATTR_FLOAT:
      return static_cast<float>(v.f);
    case NABLA_C_ATTR_STRING:
      return Str(v.s);
    case NABLA_C_ATTR_BOOL:
      return v.b != 0;
    case NABLA_C_ATTR_INTS: {
      const auto* p = static_cast<const int32_t*>(v.list);
      return std::vector<int>(p, p + (p ? v.count : 0));
    }
    case NABLA_C_ATTR_FLOATS: {
      const auto* p = static_cast<const float*>(v.list);
      return std::vector<float>(p, p + (p ? v.count : 0));
    }
    case NABLA_C_ATTR_STRINGS: {
      const auto* p = static_cast<const char* const*>(v.list);
      std::vector<std::string> out;
      for (size_t i = 0; p && i < v.count; ++i) out.push_back(Str(p[i]));
      return out;
    }
    case NABLA_C_ATTR_BOOLS: {
      const auto* p = static_cast<const int32_t*>(v.list);
      std::vector<bool> out;
      for (size_t i = 0; p && i < v.count; ++i) out.push_back(p[i] != 0);
      return out;
    }
    case NABLA_C_ATTR_BLOCK:
      NABLA_ENFORCE(v.i >= 0 && v.i <= INT32_MAX, kInvalidArgument,
                    "a block attribute's index must be >= 0, but received ", v.i);
      return BlockRef{static_cast<int>(v.i)};
    default:
      NABLA_THROW(kInvalidArgument, "expected an attribute type between 0 (int) and 8 (block) but received ", v.type);
  }
}

// The value of `a` as C; lists of strings and bools live in the thread's
// scratch (until the plugin callback that asked returns).
void ToC(const Attribute& a, nabla_attr_value* out) {
  *out = nabla_attr_value{};
  out->type = static_cast<int32_t>(a.index());
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, int>) {
          out->i = x;
        } else if constexpr (std::is_same_v<X, float>) {
          out->f = x;
        } else if constexpr (std::is_same_v<X, bool>) {
          out->b = x ? 1 : 0;
        } else if constexpr (std::is_same_v<X, std::string>) {
          out->s = x.c_str();
        } else if constexpr (std::is_same_v<X, std::vector<int>>) {
          static_assert(sizeof(int) == sizeof(int32_t));
          out->list = x.data();
          out->count = x.size();
        } else if constexpr (std::is_same_v<X, std::vector<float>>) {
          out->list = x.data();
          out->count = x.size();
        } else if constexpr (std::is_same_v<X, std::vector<std::string>>) {
          auto& lists = ThreadScratch().string_lists;
          std::vector<const char*> ptrs;
          for (const std::string& s : x) ptrs.push_back(s.c_str());
          lists.push_back(std::move(ptrs));
          out->list = lists.back().data();
          out->count = x.size();
        } else if constexpr (std::is_same_v<X, std::vector<bool>>) {
          auto& lists = ThreadScratch().bool_lists;
          lists.emplace_back(x.begin(), x.end());
          out->list = lists.back().data();
          out->count = x.size();
        } else {
          // Plugins built before version 6 skip what op_get_attr refuses.
          NABLA_THROW(kUnimplemented, "a block attribute is read with op_get_block_attr (C ABI version 6)");
        }
      },
      a);
}

// Grad makers through the C ABI: the base class's helpers, made public for
// the table, and the ops the plugin appended.
class CGradContext : public GradOpDescMakerBase {
 public:
  using GradOpDescMakerBase::GradOpDescMakerBase;
  std::vector<std::unique_ptr<OpDesc>> operator()() const override { return {}; }
  std::vector<std::string> Names(bool output, const std::string& slot) const {
    return output ? OutputGrad(slot) : InputGrad(slot);
  }
  bool NoGradInput(const std::string& slot) const { return IsNoGradInput(slot); }
  const OpDesc& Forward() const { return ForwardOp(); }
  BlockDesc* Block(size_t i) const { return GradBlock(i); }
  std::vector<std::unique_ptr<OpDesc>> ops;
  std::unique_ptr<CPassContext> program;  // grad_program's view (version 6)
};
CGradContext& G(nabla_grad_context* c) { return *reinterpret_cast<CGradContext*>(c); }

// --------------------------------------------------------------- the table

void ApiSetError(int32_t kind, const char* message) { SetError(kind, Str(message)); }

const char* ApiLastError(int32_t* kind) {
  const ThreadError& e = LastError();
  if (kind) *kind = e.kind;
  return e.message.c_str();
}

nabla_op_builder* ApiOpNew(nabla_registrar* r, const char* type, const char* file, int32_t line) {
  return Guard<nabla_op_builder*>(
      nullptr, [&] { return reinterpret_cast<nabla_op_builder*>(&R(r).Op(Str(type), file ? file : "", line)); });
}

nabla_op_builder* ApiOpNewDefaultGrad(nabla_registrar* r, const char* fwd, const char* file, int32_t line) {
  return Guard<nabla_op_builder*>(nullptr, [&] {
    return reinterpret_cast<nabla_op_builder*>(&R(r).DefaultGradOp(Str(fwd), file ? file : "", line));
  });
}

int32_t ApiOpDoc(nabla_op_builder* b, const char* doc) {
  return GuardStatus([&] { B(b).Doc(Str(doc)); });
}

int32_t ApiOpInput(nabla_op_builder* b, const char* name, const char* doc, uint32_t flags) {
  return GuardStatus([&] { B(b).Input(Str(name), Str(doc), flags); });
}

int32_t ApiOpOutput(nabla_op_builder* b, const char* name, const char* doc, uint32_t flags) {
  return GuardStatus([&] { B(b).Output(Str(name), Str(doc), flags); });
}

int32_t ApiOpAttr(nabla_op_builder* b, const char* name, int32_t type, const nabla_attr_value* def, const char* doc,
                  nabla_attr_check_fn checker, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(type >= NABLA_C_ATTR_INT && type <= NABLA_C_ATTR_BLOCK, kInvalidArgument, "attribute '", Str(name),
                  "' of op '", B(b).Info().schema.type,
                  "': expected a type between 0 (int) and 8 (block) but received ", type);
    std::optional<Attribute> value;
    if (def) {
      NABLA_ENFORCE(def->type == type, kInvalidArgument, "attribute '", Str(name), "' of op '", B(b).Info().schema.type,
                    "': the default's type ", def->type, " is not the declared type ", type);
      value = FromC(*def);
    }
    AttrDef attr;
    attr.name = Str(name);
    attr.type = static_cast<AttrType>(type);
    attr.default_value = std::move(value);
    attr.doc = Str(doc);
    if (checker) {
      const nabla_api* api = CoreCApi();
      attr.checker = [api, checker, user](const Attribute& a) {
        CallbackScope scope;
        nabla_attr_value v;
        ToC(a, &v);
        if (checker(api, user, &v) != NABLA_C_OK) RaisePluginError("attribute checker");
      };
    }
    // As OpBuilder::Attr stores it: the commit checks duplicates and defaults alike for both paths.
    if (attr.type == AttrType::kBlock) B(b).Info().traits.has_sub_block = true;
    B(b).Info().schema.attrs.push_back(std::move(attr));
  });
}

// Set on this thread when infer_input_dtype met an input whose dtype is not
// known yet (build time), so the failing shape function stops inference
// instead of failing it.
bool& DTypeNotKnownYetRaised() {
  thread_local bool raised = false;
  return raised;
}

int32_t ApiOpInferShape(nabla_op_builder* b, nabla_infer_fn fn, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", B(b).Info().schema.type,
                  "': expected an inference function but received NULL");
    const nabla_api* api = CoreCApi();
    B(b).InferShape([api, fn, user](InferShapeContext& c) {
      CallbackScope scope;
      DTypeNotKnownYetRaised() = false;
      if (fn(api, user, reinterpret_cast<nabla_infer_context*>(&c)) != NABLA_C_OK) {
        // Failed on an input's dtype not known at build time: stop as a
        // shape function of nabla's tree does, outputs left unknown.
        if (DTypeNotKnownYetRaised()) throw internal::DTypeNotKnownYet{};
        RaisePluginError("shape inference");
      }
    });
  });
}

int32_t ApiOpKernelDType(nabla_op_builder* b, nabla_kernel_dtype_fn fn, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", B(b).Info().schema.type,
                  "': expected a kernel dtype function but received NULL");
    const nabla_api* api = CoreCApi();
    B(b).KernelDType([api, fn, user](const ExecutionContext& ctx) {
      int32_t dtype = -1;
      {
        CallbackScope scope;
        if (fn(api, user, reinterpret_cast<nabla_kernel_context*>(const_cast<ExecutionContext*>(&ctx)), &dtype) !=
            NABLA_C_OK)
          RaisePluginError("kernel dtype");
      }
      CheckDType(dtype);
      return static_cast<DType>(dtype);
    });
  });
}

int32_t ApiOpOutputCount(nabla_op_builder* b, const char* slot, nabla_output_count_fn fn, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", B(b).Info().schema.type,
                  "': expected an output count function but received NULL");
    const nabla_api* api = CoreCApi();
    B(b).OutputCount(Str(slot), [api, fn, user](const OpDesc& op) {
      int32_t count = -1;
      CallbackScope scope;
      if (fn(api, user, COp(op), &count) != NABLA_C_OK) RaisePluginError("output count");
      return count < 0 ? -1 : static_cast<int>(count);
    });
  });
}

// One matched chain as a fusion callback sees it: the matched ops, and the
// block (applies) or the op being built (fuse).
struct CFusionContext {
  explicit CFusionContext(const std::vector<const OpDesc*>& m) : matched(m) {}
  const std::vector<const OpDesc*>& matched;
  const BlockDesc* block = nullptr;
  bool building = false;
  std::unique_ptr<OpDesc> result;
};
CFusionContext& FC(nabla_fusion_context* c) { return *reinterpret_cast<CFusionContext*>(c); }
nabla_fusion_context* CFC(CFusionContext& c) { return reinterpret_cast<nabla_fusion_context*>(&c); }

const BlockDesc& FusionBlock(nabla_fusion_context* c, const char* what) {
  NABLA_ENFORCE(FC(c).block, kPreconditionNotMet, what, ": the block is handed to a pattern's applies only");
  return *FC(c).block;
}

int32_t ApiOpFuses(nabla_op_builder* b, const char* const* chain, size_t length, nabla_fuse_fn fuse,
                   nabla_fuse_applies_fn applies, void* user) {
  return GuardStatus([&] {
    const std::string& type = B(b).Info().schema.type;
    NABLA_ENFORCE(fuse, kInvalidArgument, "op '", type, "': expected a fuse function but received NULL");
    NABLA_ENFORCE(chain || length == 0, kInvalidArgument, "op '", type, "': received NULL for the chain");
    std::vector<std::string> types;
    for (size_t i = 0; i < length; ++i) types.push_back(Str(chain[i]));
    const nabla_api* api = CoreCApi();
    FusionPattern::Fuse build = [api, fuse, user](const std::vector<const OpDesc*>& matched) {
      CFusionContext ctx(matched);
      ctx.building = true;
      CallbackScope scope;
      if (fuse(api, user, CFC(ctx)) != NABLA_C_OK) RaisePluginError("fusion");
      return std::move(ctx.result);
    };
    FusionPattern::Applies check;
    if (applies)
      check = [api, applies, user](const BlockDesc& block, const std::vector<const OpDesc*>& matched) {
        CFusionContext ctx(matched);
        ctx.block = &block;
        int32_t yes = 0;
        CallbackScope scope;
        if (applies(api, user, CFC(ctx), &yes) != NABLA_C_OK) RaisePluginError("fusion check");
        return yes != 0;
      };
    B(b).Fuses(FusionPattern(std::move(types), std::move(build), std::move(check)));
  });
}

size_t ApiFusionMatchCount(nabla_fusion_context* c) { return FC(c).matched.size(); }

const nabla_op* ApiFusionMatch(nabla_fusion_context* c, size_t i) {
  return Guard<const nabla_op*>(nullptr, [&] {
    NABLA_ENFORCE(i < FC(c).matched.size(), kOutOfRange, "fusion_match: op ", i, " of a chain of ",
                  FC(c).matched.size());
    return COp(*FC(c).matched[i]);
  });
}

nabla_new_op* ApiFusionNewOp(nabla_fusion_context* c, const char* type) {
  return Guard<nabla_new_op*>(nullptr, [&] {
    CFusionContext& ctx = FC(c);
    NABLA_ENFORCE(ctx.building, kPreconditionNotMet, "fusion_new_op: only a pattern's fuse builds an op");
    NABLA_ENFORCE(!ctx.result, kPreconditionNotMet, "fusion_new_op: a chain is replaced by one op, but a second (",
                  Str(type), ") was asked for");
    ctx.result = std::make_unique<OpDesc>();
    ctx.result->SetType(Str(type));
    return reinterpret_cast<nabla_new_op*>(ctx.result.get());
  });
}

size_t ApiFusionBlockOpCount(nabla_fusion_context* c) {
  return Guard<size_t>(0, [&] { return FusionBlock(c, "fusion_block_op_count").AllOps().size(); });
}

const nabla_op* ApiFusionBlockOp(nabla_fusion_context* c, size_t i) {
  return Guard<const nabla_op*>(nullptr, [&] {
    const auto& ops = FusionBlock(c, "fusion_block_op").AllOps();
    NABLA_ENFORCE(i < ops.size(), kOutOfRange, "fusion_block_op: op ", i, " of a block of ", ops.size());
    return COp(*ops[i]);
  });
}

int32_t ApiFusionVarDType(nabla_fusion_context* c, const char* name) {
  return Guard<int32_t>(-1, [&] {
    const VarDesc* v = FusionBlock(c, "fusion_var_dtype").FindVarRecursive(Str(name));
    return v && v->HasDType() ? static_cast<int32_t>(v->GetDType()) : -1;
  });
}

int64_t ApiFusionVarRank(nabla_fusion_context* c, const char* name) {
  return Guard<int64_t>(-1, [&] {
    const VarDesc* v = FusionBlock(c, "fusion_var_rank").FindVarRecursive(Str(name));
    return v ? static_cast<int64_t>(v->GetShape().size()) : int64_t{-1};
  });
}

int32_t ApiFusionVarDims(nabla_fusion_context* c, const char* name, int64_t* dims) {
  return GuardStatus([&] {
    const VarDesc* v = FusionBlock(c, "fusion_var_dims").FindVarRecursive(Str(name));
    NABLA_ENFORCE(v, kNotFound, "fusion_var_dims: no var '", Str(name), "' in the chain's block");
    const Shape& s = v->GetShape();
    if (!s.empty()) std::memcpy(dims, s.data(), s.size() * sizeof(int64_t));
  });
}

// ---- program passes (version 4)

CPassContext& PC(nabla_pass_context* c, const char* what) {
  NABLA_ENFORCE(c, kInvalidArgument, what, ": received NULL for the pass context");
  return *reinterpret_cast<CPassContext*>(c);
}

BlockDesc& PassBlock(nabla_pass_context* c, size_t block, const char* what) {
  ProgramDesc& program = PC(c, what).program;
  NABLA_ENFORCE(block < program.Size(), kOutOfRange, what, ": block ", block, " of a program of ", program.Size());
  return *program.Block(block);
}

// A kernel's or grad maker's view changes nothing: the program is running
// or being differentiated.
void CheckWritable(nabla_pass_context* c, const char* what) {
  NABLA_ENFORCE(!PC(c, what).read_only, kPreconditionNotMet, what,
                ": the program a kernel or grad maker reads (kernel_program, grad_program) is read only");
}

// The functions that edit ops or remove vars refuse a var-type inference's
// context too: the core walks the block's ops by index while it runs.
void CheckEditable(nabla_pass_context* c, const char* what) {
  CheckWritable(c, what);
  NABLA_ENFORCE(!PC(c, what).vars_only, kPreconditionNotMet, what,
                ": var-type inference may read and set vars only, not edit ops or remove vars");
}

OpDesc& PassOp(nabla_pass_context* c, size_t block, size_t i, const char* what) {
  BlockDesc& b = PassBlock(c, block, what);
  NABLA_ENFORCE(i < b.OpSize(), kOutOfRange, what, ": op ", i, " of block ", block, ", which has ", b.OpSize());
  return *b.Op(i);
}

std::string PassName(const char* name, const char* what, const char* thing) {
  NABLA_ENFORCE(name && *name, kInvalidArgument, what, ": expected a ", thing, " name but received ",
                name ? "\"\"" : "NULL");
  return name;
}

int32_t ApiOpRewrites(nabla_op_builder* b, int32_t after_backward, const char* name, nabla_pass_fn fn, void* user) {
  return GuardStatus([&] {
    const std::string& type = B(b).Info().schema.type;
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", type, "': expected a program pass function but received NULL");
    NABLA_ENFORCE(after_backward == 0 || after_backward == 1, kInvalidArgument, "op '", type,
                  "': after_backward must be 0 or 1, but received ", after_backward);
    const nabla_api* api = CoreCApi();
    ProgramPass pass{Str(name), [api, fn, user](ProgramDesc& program, const std::unordered_set<std::string>& keep) {
                       CPassContext ctx{program, std::vector<std::string>(keep.begin(), keep.end()), Tensor()};
                       std::sort(ctx.keep.begin(), ctx.keep.end());
                       size_t changed = 0;
                       CallbackScope scope;
                       if (fn(api, user, reinterpret_cast<nabla_pass_context*>(&ctx), &changed) != NABLA_C_OK)
                         RaisePluginError("program pass");
                       return changed;
                     }};
    if (after_backward)
      B(b).RewritesAfterBackward(std::move(pass));
    else
      B(b).RewritesBeforeBackward(std::move(pass));
  });
}

size_t ApiPassKeepCount(nabla_pass_context* c) {
  return Guard<size_t>(0, [&] { return PC(c, "pass_keep_count").keep.size(); });
}

const char* ApiPassKeep(nabla_pass_context* c, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const std::vector<std::string>& keep = PC(c, "pass_keep").keep;
    NABLA_ENFORCE(i < keep.size(), kOutOfRange, "pass_keep: var ", i, " of ", keep.size(), " kept");
    return keep[i].c_str();
  });
}

size_t ApiPassBlockCount(nabla_pass_context* c) {
  return Guard<size_t>(0, [&] { return PC(c, "pass_block_count").program.Size(); });
}

int32_t ApiPassBlockParent(nabla_pass_context* c, size_t block, int64_t* parent) {
  return GuardStatus([&] {
    const BlockDesc& b = PassBlock(c, block, "pass_block_parent");
    NABLA_ENFORCE(parent, kInvalidArgument, "pass_block_parent: received NULL for the result");
    *parent = b.ParentIdx() < 0 ? -1 : b.ParentIdx();
  });
}

size_t ApiPassOpCount(nabla_pass_context* c, size_t block) {
  return Guard<size_t>(0, [&] { return PassBlock(c, block, "pass_op_count").OpSize(); });
}

const nabla_op* ApiPassOp(nabla_pass_context* c, size_t block, size_t i) {
  return Guard<const nabla_op*>(nullptr, [&] { return COp(PassOp(c, block, i, "pass_op")); });
}

int32_t ApiPassOpPos(nabla_pass_context* c, size_t block, size_t i, int32_t* line, int32_t* col) {
  return GuardStatus([&] {
    const SourcePos& pos = PassOp(c, block, i, "pass_op_pos").Pos();
    NABLA_ENFORCE(line && col, kInvalidArgument, "pass_op_pos: received NULL for the result");
    *line = pos.line;
    *col = pos.col;
  });
}

int32_t ApiPassOpSetPos(nabla_pass_context* c, size_t block, size_t i, int32_t line, int32_t col) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_set_pos");
    OpDesc& op = PassOp(c, block, i, "pass_op_set_pos");
    NABLA_ENFORCE(line >= 0 && col >= 0, kInvalidArgument, "pass_op_set_pos: line and col must be >= 0, but received ",
                  line, ":", col);
    op.SetPos(SourcePos{line, col});
  });
}

int32_t ApiPassOpSetArgs(nabla_pass_context* c, size_t block, size_t i, int32_t output, const char* slot,
                         const char* const* names, size_t n) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_set_args");
    OpDesc& op = PassOp(c, block, i, "pass_op_set_args");
    const std::string s = PassName(slot, "pass_op_set_args", "slot");
    NABLA_ENFORCE(names || n == 0, kInvalidArgument, "pass_op_set_args: received NULL for the names of slot '", s, "'");
    std::vector<std::string> args;
    for (size_t k = 0; k < n; ++k) args.push_back(PassName(names[k], "pass_op_set_args", "var"));
    if (output)
      op.SetOutput(s, std::move(args));
    else
      op.SetInput(s, std::move(args));
  });
}

int32_t ApiPassOpRemoveSlot(nabla_pass_context* c, size_t block, size_t i, int32_t output, const char* slot) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_remove_slot");
    OpDesc& op = PassOp(c, block, i, "pass_op_remove_slot");
    const std::string s = PassName(slot, "pass_op_remove_slot", "slot");
    if (output ? op.HasOutput(s) : op.HasInput(s)) (output ? op.MutableOutputs() : op.MutableInputs()).erase(s);
  });
}

int32_t ApiPassOpSetAttr(nabla_pass_context* c, size_t block, size_t i, const char* name,
                         const nabla_attr_value* value) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_set_attr");
    OpDesc& op = PassOp(c, block, i, "pass_op_set_attr");
    const std::string n = PassName(name, "pass_op_set_attr", "attribute");
    NABLA_ENFORCE(value, kInvalidArgument, "pass_op_set_attr: received NULL for the value of '", n, "'");
    op.SetAttr(n, FromC(*value));
  });
}

int32_t ApiPassOpRemoveAttr(nabla_pass_context* c, size_t block, size_t i, const char* name) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_remove_attr");
    OpDesc& op = PassOp(c, block, i, "pass_op_remove_attr");
    const std::string n = PassName(name, "pass_op_remove_attr", "attribute");
    if (op.HasAttr(n)) op.MutableAttrs().erase(n);
  });
}

int32_t ApiPassOpFillDefaultAttrs(nabla_pass_context* c, size_t block, size_t i) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_op_fill_default_attrs");
    OpDesc& op = PassOp(c, block, i, "pass_op_fill_default_attrs");
    FillDefaultAttrs(op, *CurrentRegistry(), &PC(c, "pass_op_fill_default_attrs").program);
  });
}

int32_t ApiPassInsertOp(nabla_pass_context* c, size_t block, size_t index, const char* type) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_insert_op");
    BlockDesc& b = PassBlock(c, block, "pass_insert_op");
    const std::string t = PassName(type, "pass_insert_op", "op type");
    NABLA_ENFORCE(index <= b.OpSize(), kOutOfRange, "pass_insert_op: index ", index, " in block ", block,
                  ", which has ", b.OpSize(), " ops");
    auto op = std::make_unique<OpDesc>();
    op->SetType(t);
    b.InsertOp(index, std::move(op));
  });
}

int32_t ApiPassRemoveOps(nabla_pass_context* c, size_t block, size_t begin, size_t end) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_remove_ops");
    BlockDesc& b = PassBlock(c, block, "pass_remove_ops");
    NABLA_ENFORCE(begin <= end && end <= b.OpSize(), kOutOfRange, "pass_remove_ops: ops [", begin, ", ", end,
                  ") of block ", block, ", which has ", b.OpSize());
    if (begin < end) b.RemoveOps(begin, end);
  });
}

size_t ApiPassVarCount(nabla_pass_context* c, size_t block) {
  return Guard<size_t>(0, [&] { return PassBlock(c, block, "pass_var_count").AllVars().size(); });
}

const char* ApiPassVarName(nabla_pass_context* c, size_t block, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const auto& vars = PassBlock(c, block, "pass_var_name").AllVars();
    NABLA_ENFORCE(i < vars.size(), kOutOfRange, "pass_var_name: var ", i, " of block ", block, ", which has ",
                  vars.size());
    return vars[i]->Name().c_str();
  });
}

void CheckVarInfo(const nabla_var_info* info, const char* what) {
  NABLA_ENFORCE(info && info->struct_size >= sizeof(nabla_var_info), kInvalidArgument, what,
                ": expected a nabla_var_info of ", sizeof(nabla_var_info), " bytes but received ",
                info ? info->struct_size : 0);
}

int32_t ApiPassVarGet(nabla_pass_context* c, size_t block, const char* name, nabla_var_info* info) {
  return GuardStatus([&] {
    const BlockDesc& b = PassBlock(c, block, "pass_var_get");
    const std::string n = PassName(name, "pass_var_get", "var");
    CheckVarInfo(info, "pass_var_get");
    const VarDesc* v = b.FindVar(n);
    NABLA_ENFORCE(v, kNotFound, "pass_var_get: block ", block, " has no var '", n, "'");
    info->dtype = static_cast<int32_t>(v->GetDType());
    info->flags = (v->HasDType() ? uint32_t{NABLA_C_VAR_DTYPE_KNOWN} : 0u) |
                  (v->Persistable() ? uint32_t{NABLA_C_VAR_PERSISTABLE} : 0u) |
                  (v->StopGradient() ? uint32_t{NABLA_C_VAR_STOP_GRADIENT} : 0u) |
                  (v->Declared() ? uint32_t{NABLA_C_VAR_DECLARED} : 0u);
    info->reserved = 0;
    info->rank = v->GetShape().size();
    info->dims = info->rank ? v->GetShape().data() : nullptr;
  });
}

int32_t ApiPassVarSet(nabla_pass_context* c, size_t block, const char* name, const nabla_var_info* info) {
  return GuardStatus([&] {
    CheckWritable(c, "pass_var_set");
    BlockDesc& b = PassBlock(c, block, "pass_var_set");
    const std::string n = PassName(name, "pass_var_set", "var");
    CheckVarInfo(info, "pass_var_set");
    CheckDType(info->dtype);
    constexpr uint32_t kKnown =
        NABLA_C_VAR_DTYPE_KNOWN | NABLA_C_VAR_PERSISTABLE | NABLA_C_VAR_STOP_GRADIENT | NABLA_C_VAR_DECLARED;
    NABLA_ENFORCE((info->flags & ~kKnown) == 0, kInvalidArgument, "pass_var_set: var '", n,
                  "': expected flags of nabla_c_var_flags but received ", info->flags);
    NABLA_ENFORCE(info->dims || info->rank == 0, kInvalidArgument, "pass_var_set: var '", n,
                  "': received NULL for dims of rank ", info->rank);
    Shape shape(info->dims, info->dims + info->rank);
    for (int64_t d : shape)
      NABLA_ENFORCE(d >= -1, kInvalidArgument, "pass_var_set: var '", n, "': dims must be >= -1, but received ",
                    ShapeToString(shape));
    VarDesc* v = b.Var(n);
    v->SetDType(static_cast<DType>(info->dtype));
    v->MarkDTypeKnown((info->flags & NABLA_C_VAR_DTYPE_KNOWN) != 0);
    v->SetShape(std::move(shape));
    v->SetPersistable((info->flags & NABLA_C_VAR_PERSISTABLE) != 0);
    v->SetStopGradient((info->flags & NABLA_C_VAR_STOP_GRADIENT) != 0);
    v->SetDeclared((info->flags & NABLA_C_VAR_DECLARED) != 0);
  });
}

int32_t ApiPassRemoveVar(nabla_pass_context* c, size_t block, const char* name) {
  return GuardStatus([&] {
    CheckEditable(c, "pass_remove_var");
    BlockDesc& b = PassBlock(c, block, "pass_remove_var");
    const std::string n = PassName(name, "pass_remove_var", "var");
    NABLA_ENFORCE(b.HasVar(n), kNotFound, "pass_remove_var: block ", block, " has no var '", n, "'");
    b.RemoveVar(n);
  });
}

const nabla_tensor* ApiPassEvaluateOnHost(nabla_pass_context* c, size_t block, const size_t* ops, size_t n,
                                          const char* var) {
  return Guard<const nabla_tensor*>(nullptr, [&] {
    CheckWritable(c, "pass_evaluate_on_host");
    CPassContext& ctx = PC(c, "pass_evaluate_on_host");
    const BlockDesc& b = PassBlock(c, block, "pass_evaluate_on_host");
    const std::string v = PassName(var, "pass_evaluate_on_host", "var");
    NABLA_ENFORCE(ops || n == 0, kInvalidArgument, "pass_evaluate_on_host: received NULL for the ops computing '", v,
                  "'");
    ctx.evaluated = EvaluateOnHost(b, std::vector<size_t>(ops, ops + n), v);
    return reinterpret_cast<const nabla_tensor*>(&ctx.evaluated);
  });
}

int32_t ApiOpTypeTraits(const char* type, uint32_t* traits, int32_t* precision) {
  return Guard<int32_t>(-1, [&] {
    const std::string t = PassName(type, "op_type_traits", "op type");
    const OpInfo* info = CurrentRegistry()->Find(t);
    if (!info) return 0;
    const OpTraits& o = info->traits;
    if (traits)
      *traits = (o.random ? uint32_t{NABLA_C_TRAIT_RANDOM} : 0u) |
                (o.updates_in_place ? uint32_t{NABLA_C_TRAIT_UPDATES_IN_PLACE} : 0u) |
                (o.array_io ? uint32_t{NABLA_C_TRAIT_ARRAY_IO} : 0u) |
                (o.collective ? uint32_t{NABLA_C_TRAIT_COLLECTIVE} : 0u) |
                (o.dtype_cast ? uint32_t{NABLA_C_TRAIT_DTYPE_CAST} : 0u) |
                (o.has_sub_block ? uint32_t{NABLA_C_TRAIT_HAS_SUB_BLOCK} : 0u) |
                (o.control_flow ? uint32_t{NABLA_C_TRAIT_CONTROL_FLOW} : 0u);
    if (precision) *precision = static_cast<int32_t>(o.precision);
    return 1;
  });
}

int32_t ApiOpGradMaker(nabla_op_builder* b, nabla_grad_fn fn, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", B(b).Info().schema.type, "': expected a grad maker but received NULL");
    const nabla_api* api = CoreCApi();
    B(b).GradMaker([api, fn, user](const OpDesc& fwd, const std::unordered_set<std::string>& no_grad,
                                   std::unordered_map<std::string, std::string>* g2v,
                                   const std::vector<BlockDesc*>& blocks) {
      CGradContext g(fwd, no_grad, g2v, blocks);
      CallbackScope scope;
      if (fn(api, user, reinterpret_cast<nabla_grad_context*>(&g)) != NABLA_C_OK) RaisePluginError("grad maker");
      return std::move(g.ops);
    });
  });
}

int32_t ApiOpGradMakerDefault(nabla_op_builder* b) {
  return GuardStatus([&] { B(b).GradMaker<DefaultGradOpDescMaker>(); });
}

int32_t ApiOpGradMakerNone(nabla_op_builder* b) {
  return GuardStatus([&] { B(b).GradMaker<EmptyGradOpDescMaker>(); });
}

int32_t ApiOpTraits(nabla_op_builder* b, uint32_t traits, int32_t precision) {
  return GuardStatus([&] {
    constexpr uint32_t kKnown = NABLA_C_TRAIT_RANDOM | NABLA_C_TRAIT_UPDATES_IN_PLACE | NABLA_C_TRAIT_ARRAY_IO |
                                NABLA_C_TRAIT_COLLECTIVE | NABLA_C_TRAIT_DTYPE_CAST | NABLA_C_TRAIT_CONTROL_FLOW |
                                NABLA_C_TRAIT_MOVES_DATA;
    NABLA_ENFORCE((traits & ~kKnown) == 0, kInvalidArgument, "op '", B(b).Info().schema.type,
                  "': expected trait bits of nabla_c_traits but received ", traits);
    NABLA_ENFORCE(precision >= NABLA_C_PRECISION_FOLLOW_INPUTS && precision <= NABLA_C_PRECISION_FLOAT32,
                  kInvalidArgument, "op '", B(b).Info().schema.type, "': expected a precision 0..2 but received ",
                  precision);
    OpBuilder& builder = B(b);
    if (traits & NABLA_C_TRAIT_RANDOM) builder.Random();
    if (traits & NABLA_C_TRAIT_UPDATES_IN_PLACE) builder.UpdatesInPlace();
    if (traits & NABLA_C_TRAIT_ARRAY_IO) builder.ArrayIO();
    if (traits & NABLA_C_TRAIT_COLLECTIVE) builder.Collective();
    if (traits & NABLA_C_TRAIT_DTYPE_CAST) builder.DTypeCast();
    if (traits & NABLA_C_TRAIT_CONTROL_FLOW) builder.ControlFlow();
    if (traits & NABLA_C_TRAIT_MOVES_DATA) builder.MovesData();
    builder.Precision(static_cast<OpPrecision>(precision));
  });
}

int32_t ApiOpGradCheck(nabla_op_builder* b, const nabla_grad_check* c) {
  return GuardStatus([&] {
    const std::string op = B(b).Info().schema.type;
    NABLA_ENFORCE(c && c->struct_size >= sizeof(nabla_grad_check), kInvalidArgument, "op '", op,
                  "': expected a nabla_grad_check of ", sizeof(nabla_grad_check), " bytes but received ",
                  c ? c->struct_size : 0);
    GradCheckSpec spec;
    spec.name = Str(c->name);
    for (size_t k = 0; k < c->input_count; ++k) {
      const nabla_grad_check_input& in = c->inputs[k];
      NABLA_ENFORCE(in.struct_size >= sizeof(nabla_grad_check_input), kInvalidArgument, "op '", op, "' check '",
                    spec.name, "': expected nabla_grad_check_input of ", sizeof(nabla_grad_check_input),
                    " bytes but received ", in.struct_size);
      CheckDType(in.dtype);
      GradCheckInput g;
      g.slot = Str(in.slot);
      g.shape.assign(in.dims, in.dims + (in.dims ? in.rank : 0));
      g.dtype = static_cast<DType>(in.dtype);
      g.low = in.low;
      g.high = in.high;
      if (in.kinks) g.kinks.assign(in.kinks, in.kinks + in.kink_count);
      g.kink_margin = in.kink_margin;
      if (in.values) g.values.assign(in.values, in.values + in.value_count);
      g.check = in.check != 0;
      g.count = in.count > 0 ? in.count : 1;
      spec.inputs.push_back(std::move(g));
    }
    for (size_t k = 0; k < c->output_count; ++k)
      spec.outputs.emplace_back(Str(c->output_slots[k]), c->output_counts ? c->output_counts[k] : 1);
    for (size_t k = 0; k < c->no_grad_output_count; ++k) spec.no_grad_outputs.push_back(Str(c->no_grad_outputs[k]));
    for (size_t k = 0; k < c->attr_count; ++k) spec.attrs[Str(c->attr_names[k])] = FromC(c->attr_values[k]);
    if (c->max_relative_error > 0) spec.max_relative_error = c->max_relative_error;
    if (c->abs_threshold > 0) spec.abs_threshold = c->abs_threshold;
    if (c->delta > 0) spec.delta = c->delta;
    B(b).GradCheck(std::move(spec));
  });
}

int32_t ApiKernel(nabla_registrar* r, const char* type, int32_t device_type, int32_t dtype, nabla_kernel_fn fn,
                  void* user, const char* file, int32_t line) {
  return GuardStatus([&] {
    CheckDType(dtype);
    // Any type that has a name (a device plugin's, from device_type_id), but
    // not the null device's: it runs no kernels.
    NABLA_ENFORCE(
        device_type >= 0 && device_type < DeviceTypeCount() && static_cast<DeviceType>(device_type) != NullDeviceType(),
        kInvalidArgument, "kernel of op '", Str(type),
        "': expected device type 0 (cpu), 1 (opencl) or an id from device_type_id but received ", device_type);
    NABLA_ENFORCE(fn, kInvalidArgument, "kernel of op '", Str(type), "': expected a function but received NULL");
    const nabla_api* api = CoreCApi();
    R(r).Kernel(
        Str(type), static_cast<DeviceType>(device_type), static_cast<DType>(dtype),
        [api, fn, user](const ExecutionContext& ctx) {
          CallbackScope scope;
          if (fn(api, user, reinterpret_cast<nabla_kernel_context*>(const_cast<ExecutionContext*>(&ctx))) != NABLA_C_OK)
            RaisePluginError("kernel");
        },
        file ? file : "", line);
  });
}

const VarNameMap& Slots(const OpDesc& op, int32_t output) { return output ? op.Outputs() : op.Inputs(); }

const char* ApiOpType(const nabla_op* op) {
  return Guard<const char*>(nullptr, [&] { return Op(op).Type().c_str(); });
}

size_t ApiOpSlotCount(const nabla_op* op, int32_t output) {
  return Guard<size_t>(0, [&] { return Slots(Op(op), output).size(); });
}

const char* ApiOpSlotName(const nabla_op* op, int32_t output, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const VarNameMap& slots = Slots(Op(op), output);
    NABLA_ENFORCE(i < slots.size(), kOutOfRange, "op '", Op(op).Type(), "': asked for ", output ? "output" : "input",
                  " slot ", i, " but it has ", slots.size());
    return std::next(slots.begin(), static_cast<std::ptrdiff_t>(i))->first.c_str();
  });
}

size_t ApiOpArgCount(const nabla_op* op, int32_t output, const char* slot) {
  return Guard<size_t>(0, [&] {
    const VarNameMap& slots = Slots(Op(op), output);
    auto it = slots.find(Str(slot));
    return it == slots.end() ? size_t{0} : it->second.size();
  });
}

const char* ApiOpArg(const nabla_op* op, int32_t output, const char* slot, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const VarNameMap& slots = Slots(Op(op), output);
    auto it = slots.find(Str(slot));
    const size_t n = it == slots.end() ? 0 : it->second.size();
    NABLA_ENFORCE(i < n, kOutOfRange, "op '", Op(op).Type(), "': asked for argument ", i, " of ",
                  output ? "output" : "input", " slot '", Str(slot), "' but it has ", n);
    return it->second[i].c_str();
  });
}

size_t ApiOpAttrCount(const nabla_op* op) {
  return Guard<size_t>(0, [&] { return Op(op).Attrs().size(); });
}

const char* ApiOpAttrName(const nabla_op* op, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const AttributeMap& attrs = Op(op).Attrs();
    NABLA_ENFORCE(i < attrs.size(), kOutOfRange, "op '", Op(op).Type(), "': asked for attribute ", i, " but it has ",
                  attrs.size());
    return std::next(attrs.begin(), static_cast<std::ptrdiff_t>(i))->first.c_str();
  });
}

int32_t ApiOpGetAttr(const nabla_op* op, const char* name, nabla_attr_value* out) {
  return GuardStatus([&] {
    // Kernels read attributes on every call: a look through the op's few
    // attributes by length first, without making a std::string of `name`
    // (a malloc from 16 characters) or the map's string compares. A miss
    // (or no name) takes the map's path, whose error names the attribute.
    if (name != nullptr) {
      const size_t n = std::strlen(name);
      for (const auto& [key, value] : Op(op).Attrs()) {
        if (key.size() == n && std::memcmp(key.data(), name, n) == 0) {
          ToC(value, out);
          return;
        }
      }
    }
    ToC(Op(op).GetAttr(Str(name)), out);
  });
}

const nabla_op* ApiInferOp(nabla_infer_context* c) {
  return Guard<const nabla_op*>(nullptr, [&] { return COp(I(c).Op()); });
}

int32_t ApiInferIsRuntime(nabla_infer_context* c) {
  return Guard<int32_t>(-1, [&] { return I(c).IsRuntime() ? 1 : 0; });
}

int32_t ApiInferHas(nabla_infer_context* c, int32_t output, const char* slot) {
  return Guard<int32_t>(-1, [&] { return (output ? I(c).HasOutput(Str(slot)) : I(c).HasInput(Str(slot))) ? 1 : 0; });
}

size_t ApiInferCount(nabla_infer_context* c, int32_t output, const char* slot) {
  return Guard<size_t>(0, [&] { return output ? I(c).OutputSize(Str(slot)) : I(c).InputSize(Str(slot)); });
}

int64_t ApiInferInputRank(nabla_infer_context* c, const char* slot, size_t i) {
  return Guard<int64_t>(-1, [&] { return static_cast<int64_t>(I(c).InputShape(Str(slot), i).size()); });
}

int32_t ApiInferInputDims(nabla_infer_context* c, const char* slot, size_t i, int64_t* dims) {
  return GuardStatus([&] {
    const Shape s = I(c).InputShape(Str(slot), i);
    if (!s.empty()) std::memcpy(dims, s.data(), s.size() * sizeof(int64_t));
  });
}

int32_t ApiInferInputDType(nabla_infer_context* c, const char* slot, size_t i) {
  return Guard<int32_t>(-1, [&] {
    try {
      return static_cast<int32_t>(I(c).InputDType(Str(slot), i));
    } catch (const internal::DTypeNotKnownYet&) {
      DTypeNotKnownYetRaised() = true;
      NABLA_THROW(kPreconditionNotMet, "infer_input_dtype: the dtype of input ", Str(slot), "[", i,
                  "] is not known yet (build time)");
    }
  });
}

int32_t ApiInferSetOutputShape(nabla_infer_context* c, const char* slot, size_t i, const int64_t* dims, size_t rank) {
  return GuardStatus([&] { I(c).SetOutputShape(Str(slot), Shape(dims, dims + (dims ? rank : 0)), i); });
}

int32_t ApiInferSetOutputDType(nabla_infer_context* c, const char* slot, size_t i, int32_t dtype) {
  return GuardStatus([&] {
    CheckDType(dtype);
    I(c).SetOutputDType(Str(slot), static_cast<DType>(dtype), i);
  });
}

const char* ApiInferWhere(nabla_infer_context* c) {
  return Guard<const char*>(nullptr, [&] { return Keep(I(c).Where()); });
}

const nabla_op* ApiGradForwardOp(nabla_grad_context* c) {
  return Guard<const nabla_op*>(nullptr, [&] { return COp(G(c).Forward()); });
}

const char* ApiGradName(nabla_grad_context* c, int32_t output, const char* slot, size_t i) {
  return Guard<const char*>(nullptr, [&] {
    const std::vector<std::string> names = G(c).Names(output != 0, Str(slot));
    NABLA_ENFORCE(i < names.size(), kOutOfRange, "grad maker of '", G(c).Forward().Type(), "': asked for gradient ", i,
                  " of ", output ? "output" : "input", " slot '", Str(slot), "' but it has ", names.size());
    return Keep(names[i]);
  });
}

int32_t ApiGradIsNoGradInput(nabla_grad_context* c, const char* slot) {
  return Guard<int32_t>(-1, [&] { return G(c).NoGradInput(Str(slot)) ? 1 : 0; });
}

nabla_new_op* ApiGradNewOp(nabla_grad_context* c, const char* type) {
  return Guard<nabla_new_op*>(nullptr, [&] {
    auto op = std::make_unique<OpDesc>();
    op->SetType(Str(type));
    G(c).ops.push_back(std::move(op));
    return reinterpret_cast<nabla_new_op*>(G(c).ops.back().get());
  });
}

int32_t ApiNewOpSetArgs(nabla_new_op* op, int32_t output, const char* slot, const char* const* names, size_t n) {
  return GuardStatus([&] {
    std::vector<std::string> args;
    for (size_t i = 0; i < n; ++i) args.push_back(Str(names[i]));
    OpDesc& d = *reinterpret_cast<OpDesc*>(op);
    if (output)
      d.SetOutput(Str(slot), std::move(args));
    else
      d.SetInput(Str(slot), std::move(args));
  });
}

int32_t ApiNewOpSetAttr(nabla_new_op* op, const char* name, const nabla_attr_value* value) {
  return GuardStatus([&] { reinterpret_cast<OpDesc*>(op)->SetAttr(Str(name), FromC(*value)); });
}

const nabla_op* ApiKernelOp(nabla_kernel_context* c) {
  return Guard<const nabla_op*>(nullptr, [&] { return COp(K(c).Op()); });
}

size_t ApiKernelCount(nabla_kernel_context* c, int32_t output, const char* slot) {
  return Guard<size_t>(0, [&] { return output ? K(c).OutputSize(Str(slot)) : K(c).InputSize(Str(slot)); });
}

const nabla_tensor* ApiKernelInput(nabla_kernel_context* c, const char* slot, size_t i) {
  return Guard<const nabla_tensor*>(nullptr,
                                    [&] { return reinterpret_cast<const nabla_tensor*>(&K(c).Input(Str(slot), i)); });
}

nabla_tensor* ApiKernelOutput(nabla_kernel_context* c, const char* slot, size_t i) {
  return Guard<nabla_tensor*>(nullptr, [&] { return reinterpret_cast<nabla_tensor*>(K(c).Output(Str(slot), i)); });
}

nabla_device* ApiKernelDevice(nabla_kernel_context* c) {
  return Guard<nabla_device*>(nullptr, [&] { return reinterpret_cast<nabla_device*>(&K(c).GetDevice()); });
}

uint64_t ApiKernelSeed(nabla_kernel_context* c) {
  return Guard<uint64_t>(0, [&] { return K(c).Seed(); });
}

int32_t ApiTensorDType(const nabla_tensor* t) { return static_cast<int32_t>(T(t).GetDType()); }
size_t ApiTensorRank(const nabla_tensor* t) { return T(t).Rank(); }
const int64_t* ApiTensorDims(const nabla_tensor* t) { return T(t).GetShape().data(); }
int64_t ApiTensorNumel(const nabla_tensor* t) {
  return Guard<int64_t>(-1, [&] { return T(t).Numel(); });
}

void* ApiTensorData(const nabla_tensor* t, int32_t dtype) {
  return Guard<void*>(nullptr, [&] {
    CheckDType(dtype);
    const Tensor& tensor = T(t);
    NABLA_ENFORCE(tensor.GetDType() == static_cast<DType>(dtype), kInvalidArgument, "expected a tensor of ",
                  DTypeName(static_cast<DType>(dtype)), " but received ", tensor.DebugString());
    NABLA_ENFORCE(tensor.IsInitialized() || tensor.Numel() == 0, kPreconditionNotMet,
                  "expected an allocated tensor but received ", tensor.DebugString(), " without memory");
    return tensor.RawData();
  });
}

void* ApiTensorAllocate(nabla_tensor* t, nabla_device* d, int32_t dtype, const int64_t* dims, size_t rank) {
  return Guard<void*>(nullptr, [&] {
    CheckDType(dtype);
    NABLA_ENFORCE(d, kInvalidArgument, "tensor_allocate: expected a device but received NULL");
    Tensor& tensor = *reinterpret_cast<Tensor*>(t);
    Device& device = *reinterpret_cast<Device*>(d);
    const size_t r = dims ? rank : 0;
    // An output allocated again at the shape it had (every step of a
    // program) needs no Shape built: a malloc and a free per call.
    const Shape& now = tensor.GetShape();
    if (now.size() == r && std::equal(now.begin(), now.end(), dims))
      return tensor.Allocate(device, static_cast<DType>(dtype), now);
    return tensor.Allocate(device, static_cast<DType>(dtype), Shape(dims, dims + r));
  });
}

int32_t ApiDeviceType(const nabla_device* d) {
  return static_cast<int32_t>(reinterpret_cast<const Device*>(d)->Type());
}

CApiParallelFor& ParallelHook() {
  static CApiParallelFor hook = nullptr;
  return hook;
}

void ApiParallelFor(int64_t n, int64_t grain, nabla_range_fn body, void* user) {
  if (n <= 0) return;
  if (CApiParallelFor hook = ParallelHook()) {
    hook(n, grain, body, user);
  } else {
    body(user, 0, n);
  }
}

CApiCpuMath& CpuMathHook() {
  static CApiCpuMath hooks{};
  return hooks;
}

// Whether every hook is set, found once: the check below ran on each call
// of a row kernel (a plugin calls one per row), 2 % of flash_attn's time
// at T = 64. The backend sets the hooks once, when it loads.
std::atomic<bool>& CpuMathComplete() {
  static std::atomic<bool> complete{false};
  return complete;
}

const CApiCpuMath& CpuMath(const char* what) {
  const CApiCpuMath& h = CpuMathHook();
  if (CpuMathComplete().load(std::memory_order_acquire)) return h;
  NABLA_ENFORCE(h.gemm_f32 && h.gemm_f64 && h.vmath && h.gelu_grad && h.row_max && h.exp_shifted && h.exp_shifted_sum &&
                    h.scale_row && h.dot_row && h.softmax_grad_row && h.layer_norm_row && h.layer_norm_grad_row &&
                    h.sum_arrays && h.to_bf16 && h.from_bf16 && h.dnnl_scratchpad && h.dnnl_budget_begin &&
                    h.dnnl_budget_end && h.has_bf16_gemm && h.gemm_bf16_f32 && h.gemm_bf16_bf16 &&
                    h.gemm_bias_act_f32 && h.gemm_bias_act_f64 && h.layer_norm_rows && h.layer_norm_grad_rows &&
                    h.row_max_rows && h.exp_shifted_rows && h.dot_rows,
                kPreconditionNotMet, what, ": the CPU backend is not initialised in this process");
  CpuMathComplete().store(true, std::memory_order_release);
  return h;
}

// Checks what BLAS would refuse (its xerbla prints and carries on) and
// raises leading dimensions of matrices with no elements to 1, which BLAS
// wants and nothing reads.
void CheckGemmArgs(const char* what, int64_t m, int64_t n, int64_t k, bool trans_a, bool trans_b, const void* a,
                   int64_t* lda, const void* b, int64_t* ldb, const void* c, int64_t* ldc) {
  NABLA_ENFORCE(m >= 0 && n >= 0 && k >= 0, kInvalidArgument, what, ": M, N, K must be >= 0, but received ", m, ", ", n,
                ", ", k);
  // The stored matrices: A is M x K (K x M transposed), B K x N (N x K).
  const int64_t a_rows = trans_a ? k : m, a_cols = trans_a ? m : k;
  const int64_t b_rows = trans_b ? n : k, b_cols = trans_b ? k : n;
  const bool a_used = a_rows > 0 && a_cols > 0 && n > 0, b_used = b_rows > 0 && b_cols > 0 && m > 0;
  const bool c_used = m > 0 && n > 0;
  NABLA_ENFORCE((!a_used || *lda >= a_cols) && (!b_used || *ldb >= b_cols) && (!c_used || *ldc >= n), kInvalidArgument,
                what, ": leading dimensions lda=", *lda, ", ldb=", *ldb, ", ldc=", *ldc,
                " are shorter than the rows of A (", a_cols, "), B (", b_cols, ") or C (", n, ")");
  NABLA_ENFORCE((!c_used || c) && (!a_used || a) && (!b_used || b), kInvalidArgument, what,
                ": received NULL for a matrix with elements");
  *lda = std::max<int64_t>({*lda, a_cols, 1});
  *ldb = std::max<int64_t>({*ldb, b_cols, 1});
  *ldc = std::max<int64_t>({*ldc, n, 1});
}

int32_t ApiCpuGemm(int32_t dtype, int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, double alpha,
                   const void* a, int64_t lda, const void* b, int64_t ldb, double beta, void* c, int64_t ldc) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_gemm");
    CheckGemmArgs("cpu_gemm", m, n, k, trans_a != 0, trans_b != 0, a, &lda, b, &ldb, c, &ldc);
    if (dtype == NABLA_C_FLOAT32) {
      h.gemm_f32(trans_a != 0, trans_b != 0, m, n, k, static_cast<float>(alpha), static_cast<const float*>(a), lda,
                 static_cast<const float*>(b), ldb, static_cast<float>(beta), static_cast<float*>(c), ldc);
    } else if (dtype == NABLA_C_FLOAT64) {
      h.gemm_f64(trans_a != 0, trans_b != 0, m, n, k, alpha, static_cast<const double*>(a), lda,
                 static_cast<const double*>(b), ldb, beta, static_cast<double*>(c), ldc);
    } else {
      NABLA_THROW(kInvalidArgument, "cpu_gemm: dtype must be float32 or float64, but received ", dtype);
    }
  });
}

int32_t ApiCpuVmath(int32_t fn, const float* x, float* y, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_vmath");
    NABLA_ENFORCE(fn >= NABLA_C_VMATH_TANH && fn <= NABLA_C_VMATH_GELU_TANH, kInvalidArgument,
                  "cpu_vmath: unknown function ", fn, " (this core knows 0 to ", int{NABLA_C_VMATH_GELU_TANH}, ")");
    NABLA_ENFORCE(n >= 0 && (n == 0 || (x && y)), kInvalidArgument, "cpu_vmath: expected n >= 0 and two arrays");
    if (n > 0) h.vmath(fn, x, y, n);
  });
}

int32_t ApiCpuGeluGrad(const float* x, const float* dy, float* dx, int64_t n, int32_t approximate) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_gelu_grad");
    NABLA_ENFORCE(n >= 0 && (n == 0 || (x && dy && dx)), kInvalidArgument,
                  "cpu_gelu_grad: expected n >= 0 and three arrays");
    if (n > 0) h.gelu_grad(x, dy, dx, n, approximate != 0);
  });
}

// Version 4's row kernels: checked like cpu_vmath, then one call of the
// backend's function on the caller's memory (a kernel calls them per row),
// n = 0 included (layer_norm of an empty row writes its NaN mean as the
// standard build does); arrays may be NULL only where n = 0.
void CheckRow(const char* what, int64_t n, int64_t min_n, bool arrays) {
  NABLA_ENFORCE(n >= min_n && (n == 0 || arrays), kInvalidArgument, what, ": expected n >= ", min_n,
                " and its arrays, but received n = ", n, arrays ? "" : " and NULL");
}

int32_t ApiCpuRowMax(const float* x, int64_t n, float* max) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_row_max");
    CheckRow("cpu_row_max", n, 1, x && max);
    *max = h.row_max(x, n);
  });
}

int32_t ApiCpuExpShifted(const float* x, float shift, float* y, int64_t n, float* sum) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_exp_shifted");
    CheckRow("cpu_exp_shifted", n, 0, x && y);
    if (sum) {
      *sum = h.exp_shifted_sum(x, shift, y, n);
    } else {
      h.exp_shifted(x, shift, y, n);
    }
  });
}

int32_t ApiCpuScaleRow(float* y, float s, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_scale_row");
    CheckRow("cpu_scale_row", n, 0, y != nullptr);
    h.scale_row(y, s, n);
  });
}

int32_t ApiCpuDotRow(const float* a, const float* b, int64_t n, float* dot) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_dot_row");
    NABLA_ENFORCE(dot, kInvalidArgument, "cpu_dot_row: received NULL for the result");
    CheckRow("cpu_dot_row", n, 0, a && b);
    *dot = h.dot_row(a, b, n);
  });
}

int32_t ApiCpuSoftmaxGradRow(const float* y, const float* dy, float* dx, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_softmax_grad_row");
    CheckRow("cpu_softmax_grad_row", n, 0, y && dy && dx);
    h.softmax_grad_row(y, dy, dx, n);
  });
}

int32_t ApiCpuLayerNormRow(const float* x, int64_t n, const float* scale, const float* bias, float eps, float* y,
                           float* mean, float* var) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_layer_norm_row");
    NABLA_ENFORCE(mean && var, kInvalidArgument, "cpu_layer_norm_row: received NULL for the mean or variance");
    CheckRow("cpu_layer_norm_row", n, 0, x && y);
    h.layer_norm_row(x, n, scale, bias, eps, y, mean, var);
  });
}

int32_t ApiCpuLayerNormGradRow(const float* x, const float* dy, int64_t n, float mean, float rstd, const float* scale,
                               float* dx, float* dscale, float* dbias) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_layer_norm_grad_row");
    CheckRow("cpu_layer_norm_grad_row", n, 0, x && dy);
    h.layer_norm_grad_row(x, dy, n, mean, rstd, scale, dx, dscale, dbias);
  });
}

// Version 9's rows kernels: a rows count and row lengths checked as
// CheckRow checks n, then one call of the backend's function.
void CheckRows(const char* what, int64_t rows, int64_t n, bool arrays) {
  NABLA_ENFORCE(rows >= 0 && n >= 0, kInvalidArgument, what,
                ": expected rows >= 0 and n >= 0, but received rows = ", rows, " and n = ", n);
  NABLA_ENFORCE(rows == 0 || n == 0 || arrays, kInvalidArgument, what, ": received NULL for an array of ", rows,
                " rows of ", n);
}

// Row lengths lens[0, rows) within [0, width], rows `ld` >= width apart.
void CheckLens(const char* what, int64_t rows, const int64_t* lens, int64_t width, int64_t ld, const char* ld_name) {
  NABLA_ENFORCE(rows >= 0 && width >= 0, kInvalidArgument, what,
                ": expected rows >= 0 and width >= 0, but received rows = ", rows, " and width = ", width);
  if (rows == 0) return;
  NABLA_ENFORCE(lens, kInvalidArgument, what, ": received NULL for the row lengths");
  NABLA_ENFORCE(ld >= width, kInvalidArgument, what, ": ", ld_name, " = ", ld, " is shorter than a row (", width, ")");
  for (int64_t r = 0; r < rows; ++r)
    NABLA_ENFORCE(lens[r] >= 0 && lens[r] <= width, kInvalidArgument, what, ": row ", r, " has length ", lens[r],
                  ", outside [0, ", width, "]");
}

int32_t ApiCpuLayerNormRows(const float* x, int64_t rows, int64_t n, const float* scale, const float* bias, float eps,
                            float* y, float* mean, float* var) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_layer_norm_rows");
    NABLA_ENFORCE(n >= 1, kInvalidArgument, "cpu_layer_norm_rows: expected rows of n >= 1, but received n = ", n);
    CheckRows("cpu_layer_norm_rows", rows, n, x && y && mean && var);
    if (rows > 0) h.layer_norm_rows(x, rows, n, scale, bias, eps, y, mean, var);
  });
}

int32_t ApiCpuLayerNormGradRows(const float* x, const float* dy, int64_t rows, int64_t n, const float* mean,
                                const float* rstd, const float* scale, const float* acc, float* dx, float* dscale,
                                float* dbias) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_layer_norm_grad_rows");
    CheckRows("cpu_layer_norm_grad_rows", rows, n, x && dy && mean && rstd);
    NABLA_ENFORCE(!acc || dx, kInvalidArgument, "cpu_layer_norm_grad_rows: acc needs a dx to add to");
    if (rows > 0 && n > 0) h.layer_norm_grad_rows(x, dy, rows, n, mean, rstd, scale, acc, dx, dscale, dbias);
  });
}

int32_t ApiCpuRowMaxRows(const float* x, int64_t ld, int64_t rows, const int64_t* lens, float* max) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_row_max_rows");
    NABLA_ENFORCE(rows >= 0 && (rows == 0 || lens), kInvalidArgument,
                  "cpu_row_max_rows: expected rows >= 0 and their lengths, but received rows = ", rows,
                  lens ? "" : " and NULL");
    int64_t width = 0;  // the longest row, which ld must hold
    for (int64_t r = 0; r < rows; ++r) width = std::max(width, lens[r]);
    CheckLens("cpu_row_max_rows", rows, lens, width, ld, "ld");
    if (rows == 0) return;
    NABLA_ENFORCE(max && (width == 0 || x), kInvalidArgument, "cpu_row_max_rows: received NULL for an array");
    h.row_max_rows(x, ld, rows, lens, max);
  });
}

int32_t ApiCpuExpShiftedRows(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, const int64_t* lens,
                             int64_t width, const float* shifts, float* sums) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_exp_shifted_rows");
    CheckLens("cpu_exp_shifted_rows", rows, lens, width, ldx, "ldx");
    CheckLens("cpu_exp_shifted_rows", rows, lens, width, ldy, "ldy");
    if (rows == 0) return;
    NABLA_ENFORCE(shifts && (width == 0 || (x && y)), kInvalidArgument,
                  "cpu_exp_shifted_rows: received NULL for an array");
    h.exp_shifted_rows(x, ldx, y, ldy, rows, lens, width, shifts, sums);
  });
}

int32_t ApiCpuDotRows(const float* a, int64_t lda, const float* b, int64_t ldb, int64_t rows, int64_t n, float* dots) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_dot_rows");
    CheckRows("cpu_dot_rows", rows, n, a && b);
    NABLA_ENFORCE(lda >= n && ldb >= n, kInvalidArgument, "cpu_dot_rows: lda = ", lda, " and ldb = ", ldb,
                  " must be at least n = ", n);
    NABLA_ENFORCE(rows == 0 || dots, kInvalidArgument, "cpu_dot_rows: received NULL for the results");
    if (rows > 0) h.dot_rows(a, lda, b, ldb, rows, n, dots);
  });
}

int32_t ApiCpuSumArrays(const float* const* xs, int64_t count, float* y, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_sum_arrays");
    NABLA_ENFORCE(count >= 1 && xs, kInvalidArgument, "cpu_sum_arrays: expected count >= 1 arrays, but received ",
                  count);
    CheckRow("cpu_sum_arrays", n, 0, y != nullptr);
    if (n == 0) return;
    for (int64_t i = 0; i < count; ++i)
      NABLA_ENFORCE(xs[i], kInvalidArgument, "cpu_sum_arrays: array ", i, " of ", count, " is NULL");
    h.sum_arrays(xs, count, y, n);
  });
}

int32_t ApiCpuToBf16(const float* x, uint16_t* y, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_to_bf16");
    CheckRow("cpu_to_bf16", n, 0, x && y);
    h.to_bf16(x, y, n);
  });
}

int32_t ApiCpuFromBf16(const uint16_t* x, float* y, int64_t n) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_from_bf16");
    CheckRow("cpu_from_bf16", n, 0, x && y);
    h.from_bf16(x, y, n);
  });
}

// NULL means an error here, so a request for no bytes gets a buffer too: the
// backend's DnnlScratchpad(0) returns its thread's buffer, NULL on a thread
// that has none yet (a oneDNN primitive that needs no scratchpad).
void* ApiCpuDnnlScratchpad(size_t bytes) {
  return Guard<void*>(nullptr,
                      [&] { return CpuMath("cpu_dnnl_scratchpad").dnnl_scratchpad(std::max<size_t>(bytes, 1)); });
}

int32_t ApiCpuDnnlBudgetBegin(void** budget, int32_t* granted) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_dnnl_budget_begin");
    NABLA_ENFORCE(budget && granted, kInvalidArgument, "cpu_dnnl_budget_begin: received NULL");
    *budget = h.dnnl_budget_begin(granted);
  });
}

int32_t ApiCpuDnnlBudgetEnd(void* budget) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_dnnl_budget_end");
    NABLA_ENFORCE(budget, kInvalidArgument, "cpu_dnnl_budget_end: received NULL");
    h.dnnl_budget_end(budget);
  });
}

int32_t ApiCpuHasBf16Gemm(int32_t* has) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_has_bf16_gemm");
    NABLA_ENFORCE(has, kInvalidArgument, "cpu_has_bf16_gemm: received NULL");
    *has = h.has_bf16_gemm() ? 1 : 0;
  });
}

int32_t ApiCpuGemmBf16(int32_t trans_a, int32_t trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                       const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb, float beta, void* c,
                       int32_t c_dtype, int64_t ldc) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_gemm_bf16");
    CheckGemmArgs("cpu_gemm_bf16", m, n, k, trans_a != 0, trans_b != 0, a, &lda, b, &ldb, c, &ldc);
    if (c_dtype == NABLA_C_FLOAT32) {
      h.gemm_bf16_f32(trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, beta, static_cast<float*>(c), ldc);
    } else if (c_dtype == NABLA_C_BFLOAT16) {
      NABLA_ENFORCE(beta == 0.0f, kInvalidArgument,
                    "cpu_gemm_bf16: a bfloat16 C is only written: beta must be 0, but received ", beta);
      h.gemm_bf16_bf16(trans_a != 0, trans_b != 0, m, n, k, alpha, a, lda, b, ldb, static_cast<uint16_t*>(c), ldc);
    } else {
      NABLA_THROW(kInvalidArgument, "cpu_gemm_bf16: C's dtype must be float32 or bfloat16, but received ", c_dtype);
    }
  });
}

int32_t ApiCpuGemmBiasAct(int32_t dtype, int32_t lib, int64_t m, int64_t n, int64_t k, const void* a, int64_t lda,
                          const void* b, int64_t ldb, const void* bias, int32_t act, void* c, int64_t ldc,
                          nabla_gemm_epilogue_fn epilogue, void* user) {
  return GuardStatus([&] {
    const CApiCpuMath& h = CpuMath("cpu_gemm_bias_act");
    CheckGemmArgs("cpu_gemm_bias_act", m, n, k, false, false, a, &lda, b, &ldb, c, &ldc);
    NABLA_ENFORCE(lib >= NABLA_C_GEMM_LIB_POLICY && lib <= NABLA_C_GEMM_LIB_ONEDNN, kInvalidArgument,
                  "cpu_gemm_bias_act: lib must be -1 (the policy), 0 (OpenBLAS) or 1 (oneDNN), but received ", lib);
    NABLA_ENFORCE(act >= NABLA_C_GEMM_ACT_IDENTITY && act <= NABLA_C_GEMM_ACT_SIGMOID, kInvalidArgument,
                  "cpu_gemm_bias_act: unknown activation ", act, " (this core knows 0 to ",
                  int{NABLA_C_GEMM_ACT_SIGMOID}, ")");
    // The backend hands every block of a non-empty C to the epilogue.
    NABLA_ENFORCE(epilogue || m == 0 || n == 0, kInvalidArgument, "cpu_gemm_bias_act: received NULL for the epilogue");
    if (dtype == NABLA_C_FLOAT32) {
      h.gemm_bias_act_f32(lib, m, n, k, static_cast<const float*>(a), lda, static_cast<const float*>(b), ldb,
                          static_cast<const float*>(bias), act, static_cast<float*>(c), ldc, epilogue, user);
    } else if (dtype == NABLA_C_FLOAT64) {
      h.gemm_bias_act_f64(lib, m, n, k, static_cast<const double*>(a), lda, static_cast<const double*>(b), ldb,
                          static_cast<const double*>(bias), act, static_cast<double*>(c), ldc, epilogue, user);
    } else {
      NABLA_THROW(kInvalidArgument, "cpu_gemm_bias_act: dtype must be float32 or float64, but received ", dtype);
    }
  });
}

int32_t ApiTensorShare(nabla_tensor* t, const nabla_tensor* src, const int64_t* dims, size_t rank) {
  return GuardStatus([&] {
    NABLA_ENFORCE(t && src && (dims || rank == 0), kInvalidArgument, "tensor_share: received NULL");
    const Tensor& from = T(src);
    Shape shape(dims, dims + rank);
    int64_t numel = 1;
    for (int64_t d : shape) {
      NABLA_ENFORCE(d >= 0, kInvalidArgument, "tensor_share: dims must be >= 0, but received ", ShapeToString(shape));
      numel *= d;
    }
    NABLA_ENFORCE(numel == from.Numel(), kInvalidArgument, "tensor_share: ", ShapeToString(shape), " holds ", numel,
                  " elements but the source ", from.DebugString(), " holds ", from.Numel());
    NABLA_ENFORCE(from.IsInitialized() || numel == 0, kPreconditionNotMet, "tensor_share: the source ",
                  from.DebugString(), " has no memory");
    Tensor* out = reinterpret_cast<Tensor*>(t);
    if (out == &from) {
      out->Resize(std::move(shape));
      return;
    }
    out->ShareDataWith(from);
    out->Resize(std::move(shape));
  });
}

int32_t ApiTensorCopy(nabla_tensor* t, const nabla_tensor* src, nabla_device* d) {
  return GuardStatus([&] {
    NABLA_ENFORCE(t && src && d, kInvalidArgument, "tensor_copy: received NULL");
    const Tensor& from = T(src);
    NABLA_ENFORCE(from.IsInitialized() || from.Numel() == 0, kPreconditionNotMet, "tensor_copy: the source ",
                  from.DebugString(), " has no memory");
    reinterpret_cast<Tensor*>(t)->CopyFrom(from, *reinterpret_cast<Device*>(d));
  });
}

const nabla_tensor* ApiKernelInputVar(nabla_kernel_context* c, const char* slot, size_t i) {
  return Guard<const nabla_tensor*>(
      nullptr, [&] { return reinterpret_cast<const nabla_tensor*>(&K(c).InputVar(Str(slot), i)->GetTensor()); });
}

int32_t ApiOpBf16TakesFloat32(nabla_op_builder* b, const char* slot) {
  return GuardStatus([&] { B(b).Bf16TakesFloat32({Str(slot)}); });
}

int32_t ApiOpInputNoBuffer(nabla_op_builder* b, const char* slot) {
  return GuardStatus([&] { B(b).NoBufferInput(Str(slot)); });
}

// ---- variables, tensor arrays and var-type inference (version 5)

Variable& V(const nabla_var* v, const char* what) {
  NABLA_ENFORCE(v, kInvalidArgument, what, ": received NULL for the var");
  return *const_cast<Variable*>(reinterpret_cast<const Variable*>(v));
}

VarType CheckVarType(int32_t type, const char* what) {
  NABLA_ENFORCE(type >= NABLA_C_VAR_DENSE && type <= NABLA_C_VAR_STEP_SCOPES, kInvalidArgument, what,
                ": expected a var type between 0 (dense) and 2 (step scopes) but received ", type);
  return static_cast<VarType>(type);
}

std::vector<Tensor>& ArrayOf(const nabla_var* v, const char* what) {
  Variable& var = V(v, what);
  NABLA_ENFORCE(var.Type() == VarType::kTensorArray, kInvalidArgument, what,
                ": expected a tensor_array var but received a ", VarTypeName(var.Type()), " var");
  return var.GetArray();
}

nabla_var* ApiKernelVar(nabla_kernel_context* c, int32_t output, const char* slot, size_t i) {
  return Guard<nabla_var*>(nullptr, [&] {
    NABLA_ENFORCE(c, kInvalidArgument, "kernel_var: received NULL for the kernel context");
    NABLA_ENFORCE(output == 0 || output == 1, kInvalidArgument, "kernel_var: output must be 0 or 1, but received ",
                  output);
    const std::string name = Str(slot);
    Variable* v = output ? K(c).OutputVar(name, i) : K(c).InputVar(name, i);
    NABLA_ENFORCE(v, kNotFound, "op '", K(c).Op().Type(), "' has no ", output ? "output " : "input ", name, "[", i,
                  "]");
    return reinterpret_cast<nabla_var*>(v);
  });
}

int32_t ApiVarType(const nabla_var* v) {
  return Guard<int32_t>(-1, [&] { return static_cast<int32_t>(V(v, "var_type").Type()); });
}

int32_t ApiVarSetType(nabla_var* v, int32_t type) {
  return GuardStatus([&] {
    Variable& var = V(v, "var_set_type");
    var.SetType(CheckVarType(type, "var_set_type"));
  });
}

nabla_tensor* ApiVarTensor(nabla_var* v) {
  return Guard<nabla_tensor*>(nullptr,
                              [&] { return reinterpret_cast<nabla_tensor*>(&V(v, "var_tensor").GetTensor()); });
}

int64_t ApiVarArraySize(const nabla_var* v) {
  return Guard<int64_t>(-1, [&] { return static_cast<int64_t>(ArrayOf(v, "var_array_size").size()); });
}

int32_t ApiVarArrayResize(nabla_var* v, size_t n) {
  return GuardStatus([&] {
    std::vector<Tensor>& array = ArrayOf(v, "var_array_resize");
    NABLA_ENFORCE(n <= (size_t{1} << 31), kOutOfRange, "var_array_resize: ", n,
                  " entries is more than a tensor array holds (2^31)");
    array.resize(n);
  });
}

nabla_tensor* ApiVarArrayEntry(nabla_var* v, size_t i) {
  return Guard<nabla_tensor*>(nullptr, [&] {
    std::vector<Tensor>& array = ArrayOf(v, "var_array_entry");
    NABLA_ENFORCE(i < array.size(), kOutOfRange, "var_array_entry: entry ", i, " of a tensor array of ", array.size());
    return reinterpret_cast<nabla_tensor*>(&array[i]);
  });
}

int32_t ApiTensorInitialized(const nabla_tensor* t) {
  return Guard<int32_t>(-1, [&] {
    NABLA_ENFORCE(t, kInvalidArgument, "tensor_initialized: received NULL");
    return T(t).IsInitialized() ? 1 : 0;
  });
}

int32_t ApiTensorAssign(nabla_tensor* t, const nabla_tensor* src) {
  return GuardStatus([&] {
    NABLA_ENFORCE(t, kInvalidArgument, "tensor_assign: received NULL for the tensor");
    Tensor* out = reinterpret_cast<Tensor*>(t);
    if (src == nullptr) {
      *out = Tensor();
    } else if (out != &T(src)) {
      *out = T(src);
    }
  });
}

int32_t ApiOpInferVarType(nabla_op_builder* b, nabla_infer_var_type_fn fn, void* user) {
  return GuardStatus([&] {
    NABLA_ENFORCE(fn, kInvalidArgument, "op '", B(b).Info().schema.type,
                  "': expected a var-type inference function but received NULL");
    const nabla_api* api = CoreCApi();
    B(b).InferVarType([api, fn, user](const OpDesc& op, BlockDesc& block) {
      // The callback reads and sets the vars of the op's program through a
      // pass context (no op is edited: the ops stay the program's own).
      ProgramDesc* program = block.Program();
      NABLA_ENFORCE(program, kPreconditionNotMet, "op '", op.Type(),
                    "': var-type inference needs the block's program, and the block has none");
      CPassContext ctx{*program, {}, Tensor(), true};
      CallbackScope scope;
      if (fn(api, user, COp(op), reinterpret_cast<nabla_pass_context*>(&ctx), static_cast<size_t>(block.Idx())) !=
          NABLA_C_OK)
        RaisePluginError("var-type inference");
    });
  });
}

int32_t ApiInferInputVarType(nabla_infer_context* c, const char* slot, size_t i) {
  return Guard<int32_t>(-1, [&] {
    NABLA_ENFORCE(c, kInvalidArgument, "infer_input_var_type: received NULL for the inference context");
    return static_cast<int32_t>(I(c).InputVarType(Str(slot), i));
  });
}

int32_t ApiPassVarType(nabla_pass_context* c, size_t block, const char* name) {
  return Guard<int32_t>(-1, [&] {
    const BlockDesc& b = PassBlock(c, block, "pass_var_type");
    const std::string n = PassName(name, "pass_var_type", "var");
    const VarDesc* v = b.FindVar(n);
    NABLA_ENFORCE(v, kNotFound, "pass_var_type: block ", block, " has no var '", n, "'");
    return static_cast<int32_t>(v->Type());
  });
}

int32_t ApiPassVarSetType(nabla_pass_context* c, size_t block, const char* name, int32_t type) {
  return GuardStatus([&] {
    CheckWritable(c, "pass_var_set_type");
    BlockDesc& b = PassBlock(c, block, "pass_var_set_type");
    const std::string n = PassName(name, "pass_var_set_type", "var");
    const VarType t = CheckVarType(type, "pass_var_set_type");
    VarDesc* v = b.FindVar(n);
    NABLA_ENFORCE(v, kNotFound, "pass_var_set_type: block ", block, " has no var '", n, "'");
    v->SetType(t);
  });
}

// A host copy's values into the plugin's buffer, checked against what it
// expects, so a wrong dtype or size is an error, never a short or long copy.
void CopyValues(const Tensor& host, const std::string& what, int32_t dtype, void* dst, size_t count) {
  CheckDType(dtype);
  NABLA_ENFORCE(host.GetDType() == static_cast<DType>(dtype) && host.Numel() == static_cast<int64_t>(count),
                kInvalidArgument, what, " is ", host.DebugString(), ", but the plugin asked for ", count, " values of ",
                DTypeName(static_cast<DType>(dtype)));
  NABLA_ENFORCE(dst || count == 0, kInvalidArgument, what, ": received NULL for the values");
  if (count) std::memcpy(dst, host.RawData(), count * DTypeSize(host.GetDType()));
}

int32_t ApiInferInputValues(nabla_infer_context* c, const char* slot, size_t i, int32_t dtype, void* dst,
                            size_t count) {
  return GuardStatus([&] {
    const std::string s = Str(slot);
    CopyValues(I(c).InputHostTensor(s, i), StrCat("input ", s, "[", i, "]"), dtype, dst, count);
  });
}

int32_t ApiKernelInputValues(nabla_kernel_context* c, const char* slot, size_t i, int32_t dtype, void* dst,
                             size_t count) {
  return GuardStatus([&] {
    const std::string s = Str(slot);
    CopyValues(K(c).InputHostTensor(s, i), StrCat("input ", s, "[", i, "]"), dtype, dst, count);
  });
}

// --------------------------------------------------------------- version 6: control flow

Scope& Sc(nabla_scope* s, const char* what) {
  NABLA_ENFORCE(s, kInvalidArgument, what, ": received NULL for the scope");
  return *reinterpret_cast<Scope*>(s);
}
nabla_scope* CSc(Scope& s) { return reinterpret_cast<nabla_scope*>(&s); }

nabla_scope* ApiKernelScope(nabla_kernel_context* c) {
  return Guard<nabla_scope*>(nullptr, [&] {
    NABLA_ENFORCE(c, kInvalidArgument, "kernel_scope: received NULL for the kernel context");
    return CSc(K(c).GetScope());
  });
}

nabla_scope* ApiScopeNewChild(nabla_scope* s) {
  return Guard<nabla_scope*>(nullptr, [&] { return CSc(Sc(s, "scope_new_child").NewScope()); });
}

int32_t ApiScopeDeleteChild(nabla_scope* s, nabla_scope* child) {
  return GuardStatus([&] {
    // DeleteScope compares pointers only: anything that is not a child is left alone.
    Sc(s, "scope_delete_child").DeleteScope(reinterpret_cast<Scope*>(child));
  });
}

nabla_var* ApiScopeFindVar(nabla_scope* s, const char* name, int32_t local) {
  return Guard<nabla_var*>(nullptr, [&] {
    const Scope& scope = Sc(s, "scope_find_var");
    const std::string n = PassName(name, "scope_find_var", "var");
    return reinterpret_cast<nabla_var*>(local ? scope.FindLocalVar(n) : scope.FindVar(n));
  });
}

nabla_var* ApiScopeVar(nabla_scope* s, const char* name) {
  return Guard<nabla_var*>(nullptr, [&] {
    Scope& scope = Sc(s, "scope_var");
    return reinterpret_cast<nabla_var*>(scope.Var(PassName(name, "scope_var", "var")));
  });
}

int32_t ApiKernelRunBlock(nabla_kernel_context* c, int32_t block, nabla_scope* s) {
  return GuardStatus([&] {
    NABLA_ENFORCE(c, kInvalidArgument, "kernel_run_block: received NULL for the kernel context");
    const ExecutionContext& ctx = K(c);
    Scope& scope = Sc(s, "kernel_run_block");
    const OpInfo* info = CurrentRegistry()->Find(ctx.Op().Type());
    NABLA_ENFORCE(info && info->traits.control_flow, kPreconditionNotMet, "op '", ctx.Op().Type(),
                  "' runs a block, but it was not registered with the control-flow trait "
                  "(NABLA_C_TRAIT_CONTROL_FLOW), which tells the executors it does");
    const RunContext* run = ctx.Run();
    NABLA_ENFORCE(run && run->program && run->executor, kPreconditionNotMet, "op '", ctx.Op().Type(),
                  "' runs a sub-block but was not started by an executor");
    NABLA_ENFORCE(block > 0 && static_cast<size_t>(block) < run->program->Size(), kOutOfRange, "op '", ctx.Op().Type(),
                  "': kernel_run_block: block ", block, " is not a sub-block of the program (1..",
                  run->program->Size() - 1, ")");
    ctx.RunBlock(block, scope);
  });
}

nabla_pass_context* ApiKernelProgram(nabla_kernel_context* c) {
  return Guard<nabla_pass_context*>(nullptr, [&]() -> nabla_pass_context* {
    NABLA_ENFORCE(c, kInvalidArgument, "kernel_program: received NULL for the kernel context");
    const RunContext* run = K(c).Run();
    if (run == nullptr || run->program == nullptr) return nullptr;
    auto& programs = ThreadScratch().programs;
    programs.push_back(CPassContext{const_cast<ProgramDesc&>(*run->program), {}, Tensor(), false, true});
    return reinterpret_cast<nabla_pass_context*>(&programs.back());
  });
}

int32_t ApiKernelRunOption(nabla_kernel_context* c, const char* name, int64_t* value) {
  return GuardStatus([&] {
    NABLA_ENFORCE(c, kInvalidArgument, "kernel_run_option: received NULL for the kernel context");
    NABLA_ENFORCE(value, kInvalidArgument, "kernel_run_option: received NULL for the result");
    const std::string n = PassName(name, "kernel_run_option", "option");
    const RunContext* run = K(c).Run();
    const ExecutorOptions defaults;
    const ExecutorOptions& o = run != nullptr && run->options != nullptr ? *run->options : defaults;
    if (n == "max_loop_iterations") {
      *value = o.max_loop_iterations;
    } else if (n == "threads") {
      *value = o.threads;
    } else if (n == "seed") {
      *value = static_cast<int64_t>(o.seed);
    } else {
      NABLA_THROW(kNotFound, "kernel_run_option: no run option '", n,
                  "' (this core has max_loop_iterations, threads, seed)");
    }
  });
}

int64_t ApiVarStepScopeCount(const nabla_var* v) {
  return Guard<int64_t>(-1, [&] { return static_cast<int64_t>(V(v, "var_step_scope_count").GetStepScopes().size()); });
}

nabla_scope* ApiVarStepScope(nabla_var* v, size_t i) {
  return Guard<nabla_scope*>(nullptr, [&] {
    std::vector<Scope*>& scopes = V(v, "var_step_scope").GetStepScopes();
    NABLA_ENFORCE(i < scopes.size(), kOutOfRange, "var_step_scope: scope ", i, " of a var that keeps ", scopes.size());
    return reinterpret_cast<nabla_scope*>(scopes[i]);
  });
}

int32_t ApiVarStepScopePush(nabla_var* v, nabla_scope* s) {
  return GuardStatus([&] {
    std::vector<Scope*>& scopes = V(v, "var_step_scope_push").GetStepScopes();
    scopes.push_back(&Sc(s, "var_step_scope_push"));
  });
}

int32_t ApiVarStepScopesTruncate(nabla_var* v, size_t n) {
  return GuardStatus([&] {
    std::vector<Scope*>& scopes = V(v, "var_step_scopes_truncate").GetStepScopes();
    if (n < scopes.size()) scopes.resize(n);
  });
}

nabla_var* ApiVarNew() {
  return Guard<nabla_var*>(nullptr, [] { return reinterpret_cast<nabla_var*>(new Variable()); });
}

void ApiVarFree(nabla_var* v) { delete reinterpret_cast<Variable*>(v); }

int32_t ApiOpGetBlockAttr(const nabla_op* op, const char* name, int32_t* block) {
  return GuardStatus([&] {
    NABLA_ENFORCE(op, kInvalidArgument, "op_get_block_attr: received NULL for the op");
    NABLA_ENFORCE(block, kInvalidArgument, "op_get_block_attr: received NULL for the result");
    const std::string n = PassName(name, "op_get_block_attr", "attribute");
    const BlockRef* ref = std::get_if<BlockRef>(&Op(op).GetAttr(n));
    NABLA_ENFORCE(ref, kInvalidArgument, "op '", Op(op).Type(), "': attribute '", n, "' is not a block");
    *block = ref->idx;
  });
}

int32_t ApiOpPos(const nabla_op* op, int32_t* line, int32_t* col) {
  return GuardStatus([&] {
    NABLA_ENFORCE(op, kInvalidArgument, "op_pos: received NULL for the op");
    NABLA_ENFORCE(line && col, kInvalidArgument, "op_pos: received NULL for the result");
    *line = Op(op).Pos().line;
    *col = Op(op).Pos().col;
  });
}

const char* ApiPassWhere(nabla_pass_context* c, int32_t line, int32_t col) {
  return Guard<const char*>(nullptr, [&] { return Keep(PC(c, "pass_where").program.Where(SourcePos{line, col})); });
}

nabla_pass_context* ApiGradProgram(nabla_grad_context* c) {
  return Guard<nabla_pass_context*>(nullptr, [&] {
    NABLA_ENFORCE(c, kInvalidArgument, "grad_program: received NULL for the grad context");
    CGradContext& g = G(c);
    if (!g.program) {
      // The grad blocks are the program's own; an op without one has no view.
      BlockDesc* block = g.Block(0);
      NABLA_ENFORCE(block->Program(), kPreconditionNotMet, "op '", g.Forward().Type(),
                    "': grad_program: its grad block belongs to no program");
      g.program = std::make_unique<CPassContext>(CPassContext{*block->Program(), {}, Tensor(), false, true});
    }
    return reinterpret_cast<nabla_pass_context*>(g.program.get());
  });
}

int64_t ApiGradBlock(nabla_grad_context* c, size_t i) {
  return Guard<int64_t>(-1, [&] {
    NABLA_ENFORCE(c, kInvalidArgument, "grad_block: received NULL for the grad context");
    return static_cast<int64_t>(G(c).Block(i)->Idx());
  });
}

int32_t ApiKernelAttr(nabla_kernel_context* c, const char* name, size_t name_len, nabla_attr_value* out) {
  return GuardStatus([&] {
    NABLA_ENFORCE(name && out, kInvalidArgument, "kernel_attr: received NULL for ", name ? "out" : "the name");
    const std::string_view n(name, name_len);
    if (const Attribute* a = K(c).FindAttr(n)) {
      ToC(*a, out);
      return;
    }
    ToC(K(c).Op().GetAttr(std::string(n)), out);  // its error names the op and the attribute
  });
}

uint64_t ApiOpVersion(const nabla_op* op) {
  return Guard<uint64_t>(0, [&] {
    NABLA_ENFORCE(op, kInvalidArgument, "op_version: received NULL for the op");
    return Op(op).Version();
  });
}

nabla_api MakeTable() {
  nabla_api api{};
  api.api_version = NABLA_C_API_VERSION;
  api.struct_size = sizeof(nabla_api);
  api.set_error = ApiSetError;
  api.last_error = ApiLastError;
  api.op_new = ApiOpNew;
  api.op_new_default_grad = ApiOpNewDefaultGrad;
  api.op_doc = ApiOpDoc;
  api.op_input = ApiOpInput;
  api.op_output = ApiOpOutput;
  api.op_attr = ApiOpAttr;
  api.op_infer_shape = ApiOpInferShape;
  api.op_grad_maker = ApiOpGradMaker;
  api.op_grad_maker_default = ApiOpGradMakerDefault;
  api.op_grad_maker_none = ApiOpGradMakerNone;
  api.op_traits = ApiOpTraits;
  api.op_grad_check = ApiOpGradCheck;
  api.kernel = ApiKernel;
  api.op_type = ApiOpType;
  api.op_slot_count = ApiOpSlotCount;
  api.op_slot_name = ApiOpSlotName;
  api.op_arg_count = ApiOpArgCount;
  api.op_arg = ApiOpArg;
  api.op_attr_count = ApiOpAttrCount;
  api.op_attr_name = ApiOpAttrName;
  api.op_get_attr = ApiOpGetAttr;
  api.infer_op = ApiInferOp;
  api.infer_is_runtime = ApiInferIsRuntime;
  api.infer_has = ApiInferHas;
  api.infer_count = ApiInferCount;
  api.infer_input_rank = ApiInferInputRank;
  api.infer_input_dims = ApiInferInputDims;
  api.infer_input_dtype = ApiInferInputDType;
  api.infer_set_output_shape = ApiInferSetOutputShape;
  api.infer_set_output_dtype = ApiInferSetOutputDType;
  api.infer_where = ApiInferWhere;
  api.grad_forward_op = ApiGradForwardOp;
  api.grad_name = ApiGradName;
  api.grad_is_no_grad_input = ApiGradIsNoGradInput;
  api.grad_new_op = ApiGradNewOp;
  api.new_op_set_args = ApiNewOpSetArgs;
  api.new_op_set_attr = ApiNewOpSetAttr;
  api.kernel_op = ApiKernelOp;
  api.kernel_count = ApiKernelCount;
  api.kernel_input = ApiKernelInput;
  api.kernel_output = ApiKernelOutput;
  api.kernel_device = ApiKernelDevice;
  api.kernel_seed = ApiKernelSeed;
  api.tensor_dtype = ApiTensorDType;
  api.tensor_rank = ApiTensorRank;
  api.tensor_dims = ApiTensorDims;
  api.tensor_numel = ApiTensorNumel;
  api.tensor_data = ApiTensorData;
  api.tensor_allocate = ApiTensorAllocate;
  api.device_type = ApiDeviceType;
  api.parallel_for = ApiParallelFor;
  c_api_detail::FillDeviceTable(&api);
  api.cpu_gemm = ApiCpuGemm;
  api.cpu_vmath = ApiCpuVmath;
  api.cpu_gelu_grad = ApiCpuGeluGrad;
  api.tensor_share = ApiTensorShare;
  api.infer_input_values = ApiInferInputValues;
  api.kernel_input_values = ApiKernelInputValues;
  api.op_kernel_dtype = ApiOpKernelDType;
  api.op_output_count = ApiOpOutputCount;
  api.op_fuses = ApiOpFuses;
  api.fusion_match_count = ApiFusionMatchCount;
  api.fusion_match = ApiFusionMatch;
  api.fusion_new_op = ApiFusionNewOp;
  api.fusion_block_op_count = ApiFusionBlockOpCount;
  api.fusion_block_op = ApiFusionBlockOp;
  api.fusion_var_dtype = ApiFusionVarDType;
  api.fusion_var_rank = ApiFusionVarRank;
  api.fusion_var_dims = ApiFusionVarDims;
  api.tensor_copy = ApiTensorCopy;
  api.kernel_input_var = ApiKernelInputVar;
  api.op_input_no_buffer = ApiOpInputNoBuffer;
  api.op_rewrites = ApiOpRewrites;
  api.pass_keep_count = ApiPassKeepCount;
  api.pass_keep = ApiPassKeep;
  api.pass_block_count = ApiPassBlockCount;
  api.pass_block_parent = ApiPassBlockParent;
  api.pass_op_count = ApiPassOpCount;
  api.pass_op = ApiPassOp;
  api.pass_op_pos = ApiPassOpPos;
  api.pass_op_set_pos = ApiPassOpSetPos;
  api.pass_op_set_args = ApiPassOpSetArgs;
  api.pass_op_remove_slot = ApiPassOpRemoveSlot;
  api.pass_op_set_attr = ApiPassOpSetAttr;
  api.pass_op_remove_attr = ApiPassOpRemoveAttr;
  api.pass_op_fill_default_attrs = ApiPassOpFillDefaultAttrs;
  api.pass_insert_op = ApiPassInsertOp;
  api.pass_remove_ops = ApiPassRemoveOps;
  api.pass_var_count = ApiPassVarCount;
  api.pass_var_name = ApiPassVarName;
  api.pass_var_get = ApiPassVarGet;
  api.pass_var_set = ApiPassVarSet;
  api.pass_remove_var = ApiPassRemoveVar;
  api.op_type_traits = ApiOpTypeTraits;
  api.pass_evaluate_on_host = ApiPassEvaluateOnHost;
  api.cpu_row_max = ApiCpuRowMax;
  api.cpu_exp_shifted = ApiCpuExpShifted;
  api.cpu_scale_row = ApiCpuScaleRow;
  api.cpu_dot_row = ApiCpuDotRow;
  api.cpu_softmax_grad_row = ApiCpuSoftmaxGradRow;
  api.cpu_layer_norm_row = ApiCpuLayerNormRow;
  api.cpu_layer_norm_grad_row = ApiCpuLayerNormGradRow;
  api.cpu_sum_arrays = ApiCpuSumArrays;
  api.cpu_to_bf16 = ApiCpuToBf16;
  api.cpu_from_bf16 = ApiCpuFromBf16;
  api.cpu_dnnl_scratchpad = ApiCpuDnnlScratchpad;
  api.cpu_dnnl_budget_begin = ApiCpuDnnlBudgetBegin;
  api.cpu_dnnl_budget_end = ApiCpuDnnlBudgetEnd;
  api.cpu_has_bf16_gemm = ApiCpuHasBf16Gemm;
  api.cpu_gemm_bf16 = ApiCpuGemmBf16;
  api.kernel_var = ApiKernelVar;
  api.var_type = ApiVarType;
  api.var_set_type = ApiVarSetType;
  api.var_tensor = ApiVarTensor;
  api.var_array_size = ApiVarArraySize;
  api.var_array_resize = ApiVarArrayResize;
  api.var_array_entry = ApiVarArrayEntry;
  api.tensor_initialized = ApiTensorInitialized;
  api.tensor_assign = ApiTensorAssign;
  api.op_infer_var_type = ApiOpInferVarType;
  api.pass_var_type = ApiPassVarType;
  api.pass_var_set_type = ApiPassVarSetType;
  api.infer_input_var_type = ApiInferInputVarType;
  api.cpu_gemm_bias_act = ApiCpuGemmBiasAct;
  api.kernel_scope = ApiKernelScope;
  api.scope_new_child = ApiScopeNewChild;
  api.scope_delete_child = ApiScopeDeleteChild;
  api.scope_find_var = ApiScopeFindVar;
  api.scope_var = ApiScopeVar;
  api.kernel_run_block = ApiKernelRunBlock;
  api.kernel_program = ApiKernelProgram;
  api.kernel_run_option = ApiKernelRunOption;
  api.var_step_scope_count = ApiVarStepScopeCount;
  api.var_step_scope = ApiVarStepScope;
  api.var_step_scope_push = ApiVarStepScopePush;
  api.var_step_scopes_truncate = ApiVarStepScopesTruncate;
  api.var_new = ApiVarNew;
  api.var_free = ApiVarFree;
  api.op_get_block_attr = ApiOpGetBlockAttr;
  api.op_pos = ApiOpPos;
  api.pass_where = ApiPassWhere;
  api.grad_program = ApiGradProgram;
  api.grad_block = ApiGradBlock;
  api.kernel_attr = ApiKernelAttr;
  api.op_version = ApiOpVersion;
  api.op_bf16_takes_float32 = ApiOpBf16TakesFloat32;
  api.cpu_layer_norm_rows = ApiCpuLayerNormRows;
  api.cpu_layer_norm_grad_rows = ApiCpuLayerNormGradRows;
  api.cpu_row_max_rows = ApiCpuRowMaxRows;
  api.cpu_exp_shifted_rows = ApiCpuExpShiftedRows;
  api.cpu_dot_rows = ApiCpuDotRows;
  return api;
}

}  // namespace

namespace c_api_detail {

void SetError(int32_t kind, const std::string& message) {
  ThreadError& e = LastError();
  e.kind = kind >= NABLA_C_INVALID_ARGUMENT && kind <= NABLA_C_RUNTIME ? kind : NABLA_C_RUNTIME;
  e.message = message;
  e.set = true;
}

CallbackScope::CallbackScope() : state_(&State()) {
  ThreadState& state = *state_;
  Scratch& s = state.scratch;
  if (s.depth++ == 0) {
    if (!s.strings.empty()) s.strings.clear();
    if (!s.string_lists.empty()) s.string_lists.clear();
    if (!s.bool_lists.empty()) s.bool_lists.clear();
    if (!s.programs.empty()) s.programs.clear();
  } else {
    // A callback inside another (the kernels of a block a control-flow
    // kernel runs, once per loop step): what it is handed dies with it, so
    // a long loop does not pile up scratch until the outer one returns.
    nested_ = true;
    marks_[0] = s.strings.size();
    marks_[1] = s.string_lists.size();
    marks_[2] = s.bool_lists.size();
    marks_[3] = s.programs.size();
  }
  state.error.set = false;
}

CallbackScope::~CallbackScope() {
  Scratch& s = state_->scratch;
  --s.depth;
  if (!nested_) return;
  if (s.strings.size() > marks_[0]) s.strings.resize(marks_[0]);
  if (s.string_lists.size() > marks_[1]) s.string_lists.resize(marks_[1]);
  if (s.bool_lists.size() > marks_[2]) s.bool_lists.resize(marks_[2]);
  while (s.programs.size() > marks_[3]) s.programs.pop_back();
}

void RaisePluginError(const char* what) {
  ThreadError& e = LastError();
  if (!e.set) NABLA_THROW(kRuntime, "the plugin's ", what, " failed without setting an error");
  e.set = false;
  ThrowError(KindOf(e.kind), e.message);
}

}  // namespace c_api_detail

const nabla_api* CoreCApi() {
  static const nabla_api table = MakeTable();
  return &table;
}

void SetCApiParallelFor(CApiParallelFor fn) { ParallelHook() = fn; }

void SetCApiCpuMath(const CApiCpuMath& hooks) {
  CpuMathComplete().store(false, std::memory_order_release);
  CpuMathHook() = hooks;
}

std::string TakeCApiError() {
  ThreadError& e = LastError();
  if (!e.set) return "";
  e.set = false;
  return e.message;
}

}  // namespace nabla
