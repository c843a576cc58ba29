// oneDNN matmul for cpu::Gemm (see gemm_dnnl.h).
#include "gemm_dnnl.h"

#ifdef NABLA_WITH_DNNL
#include "dnnl_matmul.h"
#endif

#include "nabla/cpu/cpu.h"
#include "nabla/error.h"

#ifdef NABLA_WITH_DNNL
#include <omp.h>

#include <list>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include <tuple>
#include <unordered_map>
#include <utility>
#include "nabla/cpu/dnnl.h"
#endif

namespace nabla::cpu {

#ifndef NABLA_WITH_DNNL
bool DnnlGemmBuilt() { return false; }
bool DnnlBrgemmSgemm() { return false; }
bool DnnlSgemm(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*, int64_t, float,
               float*, int64_t) {
  NABLA_THROW(kUnimplemented, "nabla_cpu was built without oneDNN (libdnnl-dev): no oneDNN GEMM");
}
bool DnnlSgemmBiasAct(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, const float*, GemmAct,
                      float*, int64_t) {
  NABLA_THROW(kUnimplemented, "nabla_cpu was built without oneDNN (libdnnl-dev): no oneDNN GEMM");
}
bool DnnlGemmBf16(bool, bool, int64_t, int64_t, int64_t, float, const bfloat16*, int64_t, const bfloat16*, int64_t,
                  float, void*, bool, int64_t, bool) {
  NABLA_THROW(kUnimplemented, "nabla_cpu was built without oneDNN (libdnnl-dev): no oneDNN GEMM");
}
#else

OneOmpThread::OneOmpThread() : before_(omp_get_max_threads()) {
  if (before_ != 1) omp_set_num_threads(1);
}
OneOmpThread::~OneOmpThread() {
  if (before_ != 1) omp_set_num_threads(before_);
}

namespace {

using dnnl::memory;

// The operand and result types of a product.
enum class Types : int8_t { kF32, kBf16ToF32, kBf16ToBf16 };

// Whether alpha != 1, not alpha: see AlphaBy (dnnl_matmul.h). post: 0
// for a plain product, 1 + GemmAct for a bias and that activation as
// post-ops (DnnlSgemmBiasAct: alpha 1, beta 0).
struct Key {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  bool scaled;
  float beta;
  int post = 0;
  Types types = Types::kF32;
  // Made even where oneDNN has only its reference kernel (DnnlGemmBf16).
  bool any_kernel = false;
  bool operator==(const Key& o) const {
    return std::tie(trans_a, trans_b, m, n, k, lda, ldb, ldc, scaled, beta, post, types, any_kernel) ==
           std::tie(o.trans_a, o.trans_b, o.m, o.n, o.k, o.lda, o.ldb, o.ldc, o.scaled, o.beta, o.post, o.types,
                    o.any_kernel);
  }
};

struct KeyHash {
  size_t operator()(const Key& key) const {
    size_t h = (key.trans_a ? 1 : 0) | (key.trans_b ? 2 : 0) | (key.any_kernel ? 4 : 0) |
               static_cast<size_t>(key.types) << 3 | static_cast<size_t>(key.post) << 5;
    for (int64_t v : {key.m, key.n, key.k, key.lda, key.ldb, key.ldc}) h = h * 1000003u ^ static_cast<size_t>(v);
    return h;
  }
};

struct Prim {
  memory::desc a, b, c, scratchpad;
  memory::desc bias;  // zero desc for a plain product
  dnnl::matmul matmul;
  AlphaBy alpha = AlphaBy::kOne;
  bool reference = false;  // not made: the caller uses OpenBLAS
};

// C = A * B + bias: the bias through the matmul's own bias argument ([1, N],
// broadcast over the rows), so the product's block is finished while it is
// in the kernel's registers and cache.
Prim MakeBiasActPrim(const Key& key, const memory::desc& a, const memory::desc& b, const memory::desc& c) {
  const memory::desc bias({1, key.n}, memory::data_type::f32, memory::dims{key.n, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // see cpu::DnnlScratchpad
  const auto act = static_cast<GemmAct>(key.post - 1);
  NABLA_ENFORCE(act == GemmAct::kIdentity, kPreconditionNotMet,
                "oneDNN's matmul takes the bias only: activations run in GemmBiasAct's epilogue (oneDNN's eltwise "
                "ops do not give their bits, and its relu maps NaN to 0)");
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, bias, c), attr, DnnlEngine());
  Prim p{a, b, c, pd.scratchpad_desc(), bias, {}, AlphaBy::kOne, false};
  p.reference = std::string(pd.impl_info_str()).rfind("ref", 0) == 0;
  if (!p.reference) p.matmul = dnnl::matmul(pd);
  return p;
}

Prim MakePrim(const Key& key) {
  using dt = memory::data_type;
  const dt operands = key.types == Types::kF32 ? dt::f32 : dt::bf16;
  const dt result = key.types == Types::kBf16ToBf16 ? dt::bf16 : dt::f32;
  // Transposes and leading dimensions are strides of the plain buffers.
  const memory::desc a({key.m, key.k}, operands, key.trans_a ? memory::dims{1, key.lda} : memory::dims{key.lda, 1});
  const memory::desc b({key.k, key.n}, operands, key.trans_b ? memory::dims{1, key.ldb} : memory::dims{key.ldb, 1});
  const memory::desc c({key.m, key.n}, result, memory::dims{key.ldc, 1});
  if (key.post != 0) return MakeBiasActPrim(key, a, b, c);
  MatmulChoice choice = ChooseMatmul(a, b, c, key.scaled, key.beta);
  Prim p{a, b, c, choice.pd.scratchpad_desc(), {}, {}, choice.alpha, choice.reference && !key.any_kernel};
  if (!p.reference) p.matmul = dnnl::matmul(choice.pd);
  return p;
}

// The most recently used primitives. A network uses a few dozen GEMM shapes
// (each layer's forward and two gradients, and the blocks blas.cc splits
// them into); 64 holds them all while bounding a run whose shapes change
// (variable batch sizes). Entries are shared, so one evicted while another
// thread runs it stays alive until that call returns.
class PrimCache {
 public:
  std::shared_ptr<const Prim> Get(const Key& key) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = map_.find(key);
      if (it != map_.end()) {
        order_.splice(order_.begin(), order_, it->second.second);
        return it->second.first;
      }
    }
    // Created outside the lock (milliseconds); two threads missing on the
    // same key at once both create one and the second insert is dropped.
    auto prim = std::make_shared<const Prim>(MakePrim(key));
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it != map_.end()) return it->second.first;
    order_.push_front(key);
    map_.emplace(key, std::make_pair(prim, order_.begin()));
    if (map_.size() > kCapacity) {
      map_.erase(order_.back());
      order_.pop_back();
    }
    return prim;
  }

 private:
  static constexpr size_t kCapacity = 64;
  std::mutex mu_;
  std::list<Key> order_;  // front: most recently used
  std::unordered_map<Key, std::pair<std::shared_ptr<const Prim>, std::list<Key>::iterator>, KeyHash> map_;
};

PrimCache& Cache() {
  static PrimCache cache;
  return cache;
}

}  // namespace

bool DnnlGemmBuilt() { return true; }

bool DnnlBrgemmSgemm() {
  static const bool brgemm = [] {
    // One of the MLP's products; oneDNN picks the kernel by ISA, not shape,
    // for plain float32 products of this size.
    constexpr auto kF32 = memory::data_type::f32;
    const memory::desc a({128, 512}, kF32, memory::format_tag::ab), b({512, 512}, kF32, memory::format_tag::ab),
        c({128, 512}, kF32, memory::format_tag::ab);
    try {
      OneOmpThread one;
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), DnnlEngine());
      return std::string(pd.impl_info_str()).rfind("brg", 0) == 0;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return brgemm;
}

namespace {
// alpha as a binary post-op's second operand, broadcast over C.
const memory::desc& AlphaDesc() {
  static const memory::desc d({1, 1}, memory::data_type::f32, memory::dims{1, 1});
  return d;
}
}  // namespace

MatmulChoice ChooseMatmul(const memory::desc& a, const memory::desc& b, const memory::desc& c, bool scaled,
                          float beta) {
  auto make = [&](AlphaBy by) {
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);  // see cpu::DnnlScratchpad
    dnnl::post_ops ops;
    if (by == AlphaBy::kBinaryPostOp) ops.append_binary(dnnl::algorithm::binary_mul, AlphaDesc());
    if (by == AlphaBy::kOutputScale) attr.set_output_scales(0, {DNNL_RUNTIME_F32_VAL});
    if (beta != 0.0f) ops.append_sum(beta);
    attr.set_post_ops(ops);
    MatmulChoice choice{dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, c), attr, DnnlEngine()), by};
    choice.reference = std::string(choice.pd.impl_info_str()).rfind("ref", 0) == 0;
    return choice;
  };
  if (!scaled) return make(AlphaBy::kOne);
  MatmulChoice choice = make(AlphaBy::kBinaryPostOp);
  return choice.reference ? make(AlphaBy::kOutputScale) : choice;
}

void AddAlphaArg(AlphaBy by, float* alpha, std::unordered_map<int, memory>& args) {
  static const memory::desc scale({1}, memory::data_type::f32, memory::dims{1});
  if (by == AlphaBy::kBinaryPostOp)
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, memory(AlphaDesc(), DnnlEngine(), alpha));
  else if (by == AlphaBy::kOutputScale)
    args.emplace(DNNL_ARG_ATTR_OUTPUT_SCALES, memory(scale, DnnlEngine(), alpha));
}

namespace {

// A primitive with its memory objects and argument map, made once per
// thread and shape and then only pointed at each call's buffers: creating
// four memory objects and the map every call cost about as much as a
// 128 x 64 x 128 product's tenth (flash_attn's tiles, hundreds a step).
struct Bound {
  std::shared_ptr<const Prim> prim;
  memory a, b, c, scratchpad, bias;
  std::unordered_map<int, memory> args;
  std::unique_ptr<float> alpha;  // the run-time alpha's one element, stable across rehashes
};

Bound& BoundFor(const Key& key, const void* a, const void* b, void* c, const float* bias = nullptr) {
  // Per thread, so no lock; bounded like the shared cache (cleared whole
  // when a run's shapes keep changing).
  thread_local std::unordered_map<Key, Bound, KeyHash> bound;
  auto it = bound.find(key);
  if (it != bound.end()) return it->second;
  if (bound.size() >= 128) bound.clear();
  Bound entry;
  entry.prim = Cache().Get(key);
  if (!entry.prim->reference) {
    const Prim& p = *entry.prim;
    entry.a = memory(p.a, DnnlEngine(), const_cast<void*>(a));
    entry.b = memory(p.b, DnnlEngine(), const_cast<void*>(b));
    entry.c = memory(p.c, DnnlEngine(), c);
    entry.scratchpad = memory(p.scratchpad, DnnlEngine(), DnnlScratchpad(p.scratchpad.get_size()));
    entry.args = {{DNNL_ARG_SRC, entry.a},
                  {DNNL_ARG_WEIGHTS, entry.b},
                  {DNNL_ARG_DST, entry.c},
                  {DNNL_ARG_SCRATCHPAD, entry.scratchpad}};
    entry.alpha = std::make_unique<float>(1.0f);
    AddAlphaArg(p.alpha, entry.alpha.get(), entry.args);
    if (key.post != 0) {
      entry.bias = memory(p.bias, DnnlEngine(), const_cast<float*>(bias));
      entry.args.emplace(DNNL_ARG_BIAS, entry.bias);
    }
  }
  return bound.emplace(key, std::move(entry)).first->second;
}

// Runs the bound primitive of `key` on these buffers; false, computing
// nothing, where oneDNN offers only its reference kernel (and the key does
// not take any kernel).
bool RunBound(const Key& key, const void* a, const void* b, void* c, float alpha) {
  OneOmpThread one;  // first: creating a primitive asks OpenMP for its thread count
  Bound* bound;
  try {
    bound = &BoundFor(key, a, b, c);
  } catch (const dnnl::error& e) {
    NABLA_THROW(kExternal, "oneDNN matmul ", key.m, "x", key.n, "x", key.k, " (trans ", key.trans_a, key.trans_b,
                key.types == Types::kF32 ? "" : ", bfloat16", "): ", e.what());
  }
  if (bound->prim->reference) return false;
  bound->a.set_data_handle(const_cast<void*>(a));
  bound->b.set_data_handle(const_cast<void*>(b));
  bound->c.set_data_handle(c);
  // The thread's scratchpad may have grown (and moved) for another primitive.
  bound->scratchpad.set_data_handle(DnnlScratchpad(bound->prim->scratchpad.get_size()));
  *bound->alpha = alpha;
  dnnl::stream& s = DnnlStream();
  bound->prim->matmul.execute(s, bound->args);
  s.wait();
  return true;
}

}  // namespace

bool DnnlSgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
               const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return RunBound(Key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha != 1.0f, beta}, a, b, c, alpha);
}

bool DnnlGemmBf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const bfloat16* a,
                  int64_t lda, const bfloat16* b, int64_t ldb, float beta, void* c, bool c_bf16, int64_t ldc,
                  bool any_kernel) {
  Key key{trans_a, trans_b, m, n, k, lda, ldb, ldc, alpha != 1.0f, beta};
  key.types = c_bf16 ? Types::kBf16ToBf16 : Types::kBf16ToF32;
  key.any_kernel = any_kernel;
  return RunBound(key, a, b, c, alpha);
}

bool DnnlSgemmBiasAct(int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb,
                      const float* bias, GemmAct act, float* c, int64_t ldc) {
  OneOmpThread one;  // first: creating a primitive asks OpenMP for its thread count
  Bound* bound;
  try {
    bound = &BoundFor(Key{false, false, m, n, k, lda, ldb, ldc, false, 0.0f, 1 + static_cast<int>(act)}, a, b, c, bias);
  } catch (const dnnl::error& e) {
    NABLA_THROW(kExternal, "oneDNN matmul with bias and activation ", m, "x", n, "x", k, ": ", e.what());
  }
  if (bound->prim->reference) return false;
  bound->a.set_data_handle(const_cast<float*>(a));
  bound->b.set_data_handle(const_cast<float*>(b));
  bound->c.set_data_handle(c);
  bound->bias.set_data_handle(const_cast<float*>(bias));
  bound->scratchpad.set_data_handle(DnnlScratchpad(bound->prim->scratchpad.get_size()));
  dnnl::stream& s = DnnlStream();
  bound->prim->matmul.execute(s, bound->args);
  s.wait();
  return true;
}

#endif  // NABLA_WITH_DNNL

}  // namespace nabla::cpu
