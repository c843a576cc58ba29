// oneDNN glue (see dnnl_glue.h). Tensors stay plain NCHW / OIHW in nabla;
// each primitive is created with `any` layouts so oneDNN picks its fast
// blocked formats, and cached reorders move data in and out of them.
#include "dnnl_glue.h"

#include "nabla/cpu/cpu.h"

#ifdef NABLA_WITH_DNNL

#include <omp.h>
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>

#include <optional>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>
#include "nabla/cpu/dnnl.h"
#endif

namespace nabla::nn {

#ifndef NABLA_WITH_DNNL
bool DnnlConvForward(const ConvGeom&, const float*, const float*, float*) { return false; }
bool DnnlConvBackward(const ConvGeom&, const float*, const float*, const float*, float*, float*) { return false; }
bool DnnlConvForward(const ConvGeom&, const bfloat16*, const bfloat16*, bfloat16*) { return false; }
bool DnnlConvBackward(const ConvGeom&, const bfloat16*, const bfloat16*, const bfloat16*, float*, float*) {
  return false;
}
bool DnnlConvBackward(const ConvGeom&, const bfloat16*, const bfloat16*, const bfloat16*, bfloat16*, bfloat16*) {
  return false;
}
bool DnnlPoolForward(const PoolGeom&, const float*, float*) { return false; }
bool DnnlPoolBackward(const PoolGeom&, const float*, const float*, float*) { return false; }
#else

namespace {

using dnnl::memory;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

// NABLA_DNNL=0 sends float32 to the reference kernels too: for comparing
// the two (bench/conv_bench.cc) and for ruling oneDNN out when debugging.
// Read on every call, so a process can switch.
bool Enabled() {
  const char* v = std::getenv("NABLA_DNNL");
  return v == nullptr || std::string(v) != "0";
}

// One budget for every oneDNN call of the process (the cpu backend's bf16
// GEMMs too): see nabla/cpu/cpu.h.
using ThreadBudget = cpu::DnnlThreadBudget;
using cpu::DnnlEngine;
using cpu::DnnlStream;

// Primitives live as long as the process, keyed by everything that shapes
// them; after the first step of a run every lookup hits.
template <typename Entry>
class Cache {
 public:
  // `make` runs under the lock: creating a primitive takes milliseconds and
  // happens once per shape.
  template <typename Make>
  const Entry& Get(const std::string& key, Make&& make) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map_.find(key);
    if (it == map_.end()) it = map_.emplace(key, std::make_unique<Entry>(make())).first;
    return *it->second;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, std::unique_ptr<Entry> > map_;
};

// A buffer of layout `desc` owned by this thread, made on first use and kept
// for the process: the blocked copies and workspaces a step needs are
// allocated once, not per call. `owner` (a cache entry's member) tells
// buffers apart; entries live as long as the process, so addresses are
// stable, and one thread runs one op at a time.
memory& ThreadScratch(const void* owner, const memory::desc& desc) {
  thread_local std::unordered_map<const void*, memory> scratch;
  auto it = scratch.find(owner);
  if (it == scratch.end()) it = scratch.emplace(owner, memory(desc, DnnlEngine())).first;
  return it->second;
}

// Every primitive here runs with a scratchpad the calling thread owns
// (cpu::DnnlScratchpad explains why): made with this attribute, run with
// Scratchpad(pd.scratchpad_desc()).
dnnl::primitive_attr UserScratchpad() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}
memory Scratchpad(const memory::desc& desc) { return memory(desc, DnnlEngine(), cpu::DnnlScratchpad(desc.get_size())); }

// A primitive argument in the layout the primitive chose, and the reorders
// between it and nabla's plain layout (absent when they are the same).
struct Operand {
  memory::desc plain, chosen;
  std::optional<dnnl::reorder> to_chosen, to_plain;
  memory::desc to_chosen_scratch, to_plain_scratch;

  static Operand Make(const memory::desc& plain, const memory::desc& chosen, bool input, bool output) {
    Operand o{plain, chosen, std::nullopt, std::nullopt, {}, {}};
    if (plain != chosen) {
      memory a(plain, DnnlEngine(), DNNL_MEMORY_NONE), b(chosen, DnnlEngine(), DNNL_MEMORY_NONE);
      if (input) {
        dnnl::reorder::primitive_desc pd(a, b, UserScratchpad());
        o.to_chosen = dnnl::reorder(pd);
        o.to_chosen_scratch = pd.scratchpad_desc();
      }
      if (output) {
        dnnl::reorder::primitive_desc pd(b, a, UserScratchpad());
        o.to_plain = dnnl::reorder(pd);
        o.to_plain_scratch = pd.scratchpad_desc();
      }
    }
    return o;
  }

  // The memory the primitive reads: the user's buffer, or a reordered copy.
  memory In(dnnl::stream& s, const void* data) const {
    memory user(plain, DnnlEngine(), const_cast<void*>(data));
    if (!to_chosen) return user;
    memory m = ThreadScratch(this, chosen);
    to_chosen->execute(s,
                       {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, m}, {DNNL_ARG_SCRATCHPAD, Scratchpad(to_chosen_scratch)}});
    return m;
  }
  // The memory the primitive writes; Finish copies it to the user's buffer.
  memory Out(void* data) const { return to_plain ? ThreadScratch(this, chosen) : memory(plain, DnnlEngine(), data); }
  void Finish(dnnl::stream& s, memory& m, void* data) const {
    if (!to_plain) return;
    memory user(plain, DnnlEngine(), data);
    to_plain->execute(s,
                      {{DNNL_ARG_FROM, m}, {DNNL_ARG_TO, user}, {DNNL_ARG_SCRATCHPAD, Scratchpad(to_plain_scratch)}});
  }
};

// ---------------------------------------------------------------- convolution

std::string ConvKey(const ConvGeom& g, int threads, memory::data_type dt, memory::data_type out_dt) {
  std::ostringstream k;
  k << threads << '|' << static_cast<int>(dt) << '>' << static_cast<int>(out_dt) << '|' << g.n << ',' << g.c << ','
    << g.m << ',' << g.groups;
  for (const WindowAxis* a : {&g.h, &g.w})
    k << ';' << a->in << ',' << a->k << ',' << a->stride << ',' << a->dilation << ',' << a->pad_before << ','
      << a->pad_after << ',' << a->out;
  return k.str();
}

struct ConvPrims {
  dnnl::convolution_forward fwd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_backward_weights bwd_weights;
  Operand src, weights, dst;                     // forward
  Operand bd_diff_src, bd_weights, bd_diff_dst;  // backward data
  Operand bw_src, bw_diff_weights, bw_diff_dst;  // backward weights
  memory::desc fwd_scratch, bd_scratch, bw_scratch;
};

// `dt` is the data type of every tensor the primitives read, `out_dt` of
// every one they write (Output, the gradients): f32 and f32, bf16 and bf16
// (mixed precision: oneDNN accumulates in float32 and rounds the results),
// or bf16 and f32 (conv2d_grad's force_fp32_output: the float32 gradients
// as they are; the forward primitive is then only the others' hint).
ConvPrims MakeConvPrims(const ConvGeom& g, memory::data_type dt, memory::data_type out_dt) {
  const memory::dims src_dims{g.n, g.c, g.h.in, g.w.in}, dst_dims{g.n, g.m, g.h.out, g.w.out};
  const memory::dims w_dims = g.groups == 1 ? memory::dims{g.m, g.c, g.h.k, g.w.k}
                                            : memory::dims{g.groups, g.CoutPerGroup(), g.CinPerGroup(), g.h.k, g.w.k};
  const Tag w_tag = g.groups == 1 ? Tag::oihw : Tag::goihw;
  const memory::desc src_plain(src_dims, dt, Tag::nchw), dst_plain(dst_dims, dt, Tag::nchw), w_plain(w_dims, dt, w_tag);
  const memory::desc src_out_plain(src_dims, out_dt, Tag::nchw), dst_out_plain(dst_dims, out_dt, Tag::nchw),
      w_out_plain(w_dims, out_dt, w_tag);
  const memory::desc src_any(src_dims, dt, Tag::any), dst_any(dst_dims, dt, Tag::any), w_any(w_dims, dt, Tag::any);
  const memory::desc src_out_any(src_dims, out_dt, Tag::any), dst_out_any(dst_dims, out_dt, Tag::any),
      w_out_any(w_dims, out_dt, Tag::any);
  const memory::dims strides{g.h.stride, g.w.stride}, dilates{g.h.dilation - 1, g.w.dilation - 1};
  const memory::dims pad_l{g.h.pad_before, g.w.pad_before}, pad_r{g.h.pad_after, g.w.pad_after};
  const auto algo = dnnl::algorithm::convolution_direct;
  dnnl::convolution_forward::primitive_desc fwd_pd(
      {dnnl::prop_kind::forward_training, algo, src_any, w_any, dst_out_any, strides, dilates, pad_l, pad_r},
      UserScratchpad(), DnnlEngine());
  dnnl::convolution_backward_data::primitive_desc bd_pd(
      {algo, src_out_any, w_any, dst_any, strides, dilates, pad_l, pad_r}, UserScratchpad(), DnnlEngine(), fwd_pd);
  dnnl::convolution_backward_weights::primitive_desc bw_pd(
      {algo, src_any, w_out_any, dst_any, strides, dilates, pad_l, pad_r}, UserScratchpad(), DnnlEngine(), fwd_pd);
  return ConvPrims{dnnl::convolution_forward(fwd_pd),
                   dnnl::convolution_backward_data(bd_pd),
                   dnnl::convolution_backward_weights(bw_pd),
                   Operand::Make(src_plain, fwd_pd.src_desc(), true, false),
                   Operand::Make(w_plain, fwd_pd.weights_desc(), true, false),
                   Operand::Make(dst_out_plain, fwd_pd.dst_desc(), false, true),
                   Operand::Make(src_out_plain, bd_pd.diff_src_desc(), false, true),
                   Operand::Make(w_plain, bd_pd.weights_desc(), true, false),
                   Operand::Make(dst_plain, bd_pd.diff_dst_desc(), true, false),
                   Operand::Make(src_plain, bw_pd.src_desc(), true, false),
                   Operand::Make(w_out_plain, bw_pd.diff_weights_desc(), false, true),
                   Operand::Make(dst_plain, bw_pd.diff_dst_desc(), true, false),
                   fwd_pd.scratchpad_desc(),
                   bd_pd.scratchpad_desc(),
                   bw_pd.scratchpad_desc()};
}

Cache<ConvPrims>& ConvCache() {
  static Cache<ConvPrims> cache;
  return cache;
}

// ---------------------------------------------------------------- pooling

// oneDNN's windows are [o * stride - pad_l, + k) over an input padded by
// pad_l and pad_r, and the output size must be the floor formula's. A
// ceil_mode output with one more window fits by growing pad_r; an inclusive
// average would then count those extra cells where PyTorch and the loops do
// not, so that case (and adaptive pooling, whose windows vary) stays with
// the loops.
bool PoolFits(const PoolGeom& g, int64_t* pad_r_h, int64_t* pad_r_w) {
  if (g.adaptive) return false;
  const WindowAxis* axes[2] = {&g.h, &g.w};
  int64_t* pads[2] = {pad_r_h, pad_r_w};
  for (int i = 0; i < 2; ++i) {
    const WindowAxis& a = *axes[i];
    const int64_t floor_out = (a.in + a.pad_before + a.pad_after - a.k) / a.stride + 1;
    int64_t pad_r = a.pad_after;
    if (a.out != floor_out) {
      if (!g.max && !g.exclusive) return false;
      pad_r = (a.out - 1) * a.stride + a.k - a.in - a.pad_before;
    }
    if (a.pad_before >= a.k || pad_r < 0 || pad_r >= a.k) return false;
    *pads[i] = pad_r;
  }
  return true;
}

std::string PoolKey(const PoolGeom& g, int threads) {
  std::ostringstream k;
  k << threads << '|' << g.n << ',' << g.c << ',' << g.max << ',' << g.exclusive;
  for (const WindowAxis* a : {&g.h, &g.w})
    k << ';' << a->in << ',' << a->k << ',' << a->stride << ',' << a->pad_before << ',' << a->pad_after << ','
      << a->out;
  return k.str();
}

struct PoolPrims {
  // Whether oneDNN pools these plain NCHW buffers with JIT kernels (as on
  // AVX-512), forward and backward (its forward_training included). Without
  // AVX-512 oneDNN 2.6 has only simple_nchw for them, 4x slower than
  // pool2d's general loops (bench/conv_bench.cc BM_MaxPool2dStep, one core
  // of an AVX2-only EPYC: 45.8 against 11.2 ms), so pool2d keeps its loops.
  bool fwd_jit, bwd_jit;
  dnnl::pooling_forward fwd_infer, fwd_train;
  dnnl::pooling_backward bwd;
  memory::desc src, dst, workspace;
  memory::desc infer_scratch, train_scratch, bwd_scratch;
};

PoolPrims MakePoolPrims(const PoolGeom& g, int64_t pad_r_h, int64_t pad_r_w) {
  const memory::desc src({g.n, g.c, g.h.in, g.w.in}, kF32, Tag::nchw);
  const memory::desc dst({g.n, g.c, g.h.out, g.w.out}, kF32, Tag::nchw);
  const auto algo = g.max ? dnnl::algorithm::pooling_max
                          : (g.exclusive ? dnnl::algorithm::pooling_avg_exclude_padding
                                         : dnnl::algorithm::pooling_avg_include_padding);
  const memory::dims strides{g.h.stride, g.w.stride}, kernel{g.h.k, g.w.k};
  const memory::dims pad_l{g.h.pad_before, g.w.pad_before}, pad_r{pad_r_h, pad_r_w};
  dnnl::pooling_forward::primitive_desc infer_pd(
      {dnnl::prop_kind::forward_inference, algo, src, dst, strides, kernel, pad_l, pad_r}, UserScratchpad(),
      DnnlEngine());
  dnnl::pooling_forward::primitive_desc train_pd(
      {dnnl::prop_kind::forward_training, algo, src, dst, strides, kernel, pad_l, pad_r}, UserScratchpad(),
      DnnlEngine());
  dnnl::pooling_backward::primitive_desc bwd_pd({algo, src, dst, strides, kernel, pad_l, pad_r}, UserScratchpad(),
                                                DnnlEngine(), train_pd);
  const auto jit = [](const auto& pd) { return std::string(pd.impl_info_str()).rfind("jit", 0) == 0; };
  return PoolPrims{jit(infer_pd),
                   jit(bwd_pd) && (!g.max || jit(train_pd)),
                   dnnl::pooling_forward(infer_pd),
                   dnnl::pooling_forward(train_pd),
                   dnnl::pooling_backward(bwd_pd),
                   src,
                   dst,
                   train_pd.workspace_desc(),
                   infer_pd.scratchpad_desc(),
                   train_pd.scratchpad_desc(),
                   bwd_pd.scratchpad_desc()};
}

Cache<PoolPrims>& PoolCache() {
  static Cache<PoolPrims> cache;
  return cache;
}

}  // namespace

namespace {

bool ConvForward(const ConvGeom& g, memory::data_type dt, const void* x, const void* w, void* y) {
  if (g.n == 0 || !Enabled()) return false;
  ThreadBudget budget;  // first: creating primitives may run OpenMP regions too
  const ConvPrims& p = ConvCache().Get(ConvKey(g, budget.Granted(), dt, dt), [&] { return MakeConvPrims(g, dt, dt); });
  dnnl::stream& s = DnnlStream();
  memory src = p.src.In(s, x), weights = p.weights.In(s, w), dst = p.dst.Out(y);
  p.fwd.execute(s, {{DNNL_ARG_SRC, src},
                    {DNNL_ARG_WEIGHTS, weights},
                    {DNNL_ARG_DST, dst},
                    {DNNL_ARG_SCRATCHPAD, Scratchpad(p.fwd_scratch)}});
  p.dst.Finish(s, dst, y);
  s.wait();
  return true;
}

bool ConvBackward(const ConvGeom& g, memory::data_type dt, memory::data_type out_dt, const void* x, const void* w,
                  const void* dy, void* dx, void* dw) {
  if (g.n == 0 || !Enabled()) return false;
  ThreadBudget budget;  // first: creating primitives may run OpenMP regions too
  const ConvPrims& p =
      ConvCache().Get(ConvKey(g, budget.Granted(), dt, out_dt), [&] { return MakeConvPrims(g, dt, out_dt); });
  dnnl::stream& s = DnnlStream();
  if (dx) {
    memory diff_dst = p.bd_diff_dst.In(s, dy), weights = p.bd_weights.In(s, w), diff_src = p.bd_diff_src.Out(dx);
    p.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                           {DNNL_ARG_WEIGHTS, weights},
                           {DNNL_ARG_DIFF_SRC, diff_src},
                           {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bd_scratch)}});
    p.bd_diff_src.Finish(s, diff_src, dx);
  }
  if (dw) {
    memory src = p.bw_src.In(s, x), diff_dst = p.bw_diff_dst.In(s, dy), diff_w = p.bw_diff_weights.Out(dw);
    p.bwd_weights.execute(s, {{DNNL_ARG_SRC, src},
                              {DNNL_ARG_DIFF_DST, diff_dst},
                              {DNNL_ARG_DIFF_WEIGHTS, diff_w},
                              {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bw_scratch)}});
    p.bw_diff_weights.Finish(s, diff_w, dw);
  }
  s.wait();
  return true;
}

}  // namespace

namespace {

// float32 conv2d gives the same bits at every --threads: a oneDNN primitive
// made for several threads splits its reductions by thread count (the
// weight gradient sums per-thread partial results over the batch), and the
// budget a call is granted varies with what runs beside it. So the batch is
// cut into a fixed number of blocks (at most `most`, never depending on the
// thread count), each block runs a primitive made for one thread on an arena
// thread, and the weight gradient adds the blocks' partial results in block
// order. One-thread primitives also start no OpenMP team, so no arena worker
// spins beside one (see dnnl_glue.h).
// Forward and data gradient: images are independent, so more blocks only
// cost a primitive call each.
constexpr int64_t kMostImageBlocks = 16;
// Weight gradient: every block past the first needs a partial result the
// size of Filter, so fewer, and all partials together hold at most
// kMostPartialFloats floats.
constexpr int64_t kMostWeightBlocks = 8;
constexpr int64_t kMostPartialFloats = int64_t{16} << 20;  // 64 MiB

struct BatchBlocks {
  int64_t n, count;
  BatchBlocks(int64_t n, int64_t most) : n(n), count(std::min(n, most)) {}
  int64_t Begin(int64_t b) const { return b * n / count; }
  ConvGeom Geom(const ConvGeom& g, int64_t b) const {
    ConvGeom bg = g;
    bg.n = Begin(b + 1) - Begin(b);
    return bg;
  }
};

// The primitives for one block, made for one thread: oneDNN sizes its
// split by omp_get_max_threads() of the thread that creates and runs it.
// That is left at one: every other oneDNN call sets its own count first
// (cpu::DnnlThreadBudget, the cpu backend's one-thread GEMM), and nothing
// else in nabla runs OpenMP.
const ConvPrims& OneThreadConvPrims(const ConvGeom& g) {
  omp_set_dynamic(0);
  omp_set_num_threads(1);
  return ConvCache().Get(ConvKey(g, 1, kF32, kF32), [&] { return MakeConvPrims(g, kF32, kF32); });
}

void ForwardBlock(const ConvGeom& g, const float* x, const float* w, float* y) {
  const ConvPrims& p = OneThreadConvPrims(g);
  dnnl::stream& s = DnnlStream();
  memory src = p.src.In(s, x), weights = p.weights.In(s, w), dst = p.dst.Out(y);
  p.fwd.execute(s, {{DNNL_ARG_SRC, src},
                    {DNNL_ARG_WEIGHTS, weights},
                    {DNNL_ARG_DST, dst},
                    {DNNL_ARG_SCRATCHPAD, Scratchpad(p.fwd_scratch)}});
  p.dst.Finish(s, dst, y);
  s.wait();
}

void DataGradBlock(const ConvGeom& g, const float* w, const float* dy, float* dx) {
  const ConvPrims& p = OneThreadConvPrims(g);
  dnnl::stream& s = DnnlStream();
  memory diff_dst = p.bd_diff_dst.In(s, dy), weights = p.bd_weights.In(s, w), diff_src = p.bd_diff_src.Out(dx);
  p.bwd_data.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                         {DNNL_ARG_WEIGHTS, weights},
                         {DNNL_ARG_DIFF_SRC, diff_src},
                         {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bd_scratch)}});
  p.bd_diff_src.Finish(s, diff_src, dx);
  s.wait();
}

void WeightGradBlock(const ConvGeom& g, const float* x, const float* dy, float* dw) {
  const ConvPrims& p = OneThreadConvPrims(g);
  dnnl::stream& s = DnnlStream();
  memory src = p.bw_src.In(s, x), diff_dst = p.bw_diff_dst.In(s, dy), diff_w = p.bw_diff_weights.Out(dw);
  p.bwd_weights.execute(s, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_DIFF_DST, diff_dst},
                            {DNNL_ARG_DIFF_WEIGHTS, diff_w},
                            {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bw_scratch)}});
  p.bw_diff_weights.Finish(s, diff_w, dw);
  s.wait();
}

}  // namespace

bool DnnlConvForward(const ConvGeom& g, const float* x, const float* w, float* y) {
  if (g.n == 0 || !Enabled()) return false;
  const BatchBlocks blocks(g.n, kMostImageBlocks);
  const int64_t x_image = g.c * g.h.in * g.w.in, y_image = g.m * g.OutPlane();
  cpu::ParallelFor(blocks.count, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t i = blocks.Begin(b);
      ForwardBlock(blocks.Geom(g, b), x + i * x_image, w, y + i * y_image);
    }
  });
  return true;
}

bool DnnlConvBackward(const ConvGeom& g, const float* x, const float* w, const float* dy, float* dx, float* dw) {
  if (g.n == 0 || !Enabled()) return false;
  const int64_t x_image = g.c * g.h.in * g.w.in, y_image = g.m * g.OutPlane();
  if (dx) {
    const BatchBlocks blocks(g.n, kMostImageBlocks);
    cpu::ParallelFor(blocks.count, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t i = blocks.Begin(b);
        DataGradBlock(blocks.Geom(g, b), w, dy + i * y_image, dx + i * x_image);
      }
    });
  }
  if (dw) {
    const int64_t size = g.m * g.ColRows();
    const BatchBlocks blocks(
        g.n, std::clamp(kMostPartialFloats / std::max<int64_t>(size, 1) + 1, int64_t{1}, kMostWeightBlocks));
    // Block 0 writes dw itself; the others their partial results, which
    // are then added to it in block order.
    thread_local std::vector<float> partial;
    partial.resize(static_cast<size_t>((blocks.count - 1) * size));
    float* parts = partial.data();
    cpu::ParallelFor(blocks.count, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t i = blocks.Begin(b);
        WeightGradBlock(blocks.Geom(g, b), x + i * x_image, dy + i * y_image, b == 0 ? dw : parts + (b - 1) * size);
      }
    });
    if (blocks.count > 1)
      cpu::ParallelFor(size, cpu::GrainForRows(blocks.count), [&](int64_t e0, int64_t e1) {
        for (int64_t b = 1; b < blocks.count; ++b) {
          const float* part = parts + (b - 1) * size;
          for (int64_t e = e0; e < e1; ++e) dw[e] += part[e];
        }
      });
  }
  return true;
}

// bfloat16 convolutions only where oneDNN runs them natively (HasBf16Gemm):
// on AVX2 it has no bf16 convolution at all (primitive creation throws), and
// emulated ones would be slower than the float32 path the callers fall back to.
bool DnnlConvForward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, bfloat16* y) {
  if (!cpu::HasBf16Gemm()) return false;
  return ConvForward(g, memory::data_type::bf16, x, w, y);
}

bool DnnlConvBackward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, const bfloat16* dy, bfloat16* dx,
                      bfloat16* dw) {
  if (!cpu::HasBf16Gemm()) return false;
  return ConvBackward(g, memory::data_type::bf16, memory::data_type::bf16, x, w, dy, dx, dw);
}

bool DnnlConvBackward(const ConvGeom& g, const bfloat16* x, const bfloat16* w, const bfloat16* dy, float* dx,
                      float* dw) {
  if (!cpu::HasBf16Gemm()) return false;
  return ConvBackward(g, memory::data_type::bf16, kF32, x, w, dy, dx, dw);
}

bool DnnlPoolForward(const PoolGeom& g, const float* x, float* y) {
  int64_t pad_r_h = 0, pad_r_w = 0;
  if (g.n == 0 || !Enabled() || !PoolFits(g, &pad_r_h, &pad_r_w)) return false;
  ThreadBudget budget;
  const PoolPrims& p =
      PoolCache().Get(PoolKey(g, budget.Granted()), [&] { return MakePoolPrims(g, pad_r_h, pad_r_w); });
  if (!p.fwd_jit) return false;
  dnnl::stream& s = DnnlStream();
  memory src(p.src, DnnlEngine(), const_cast<float*>(x)), dst(p.dst, DnnlEngine(), y);
  p.fwd_infer.execute(s,
                      {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_SCRATCHPAD, Scratchpad(p.infer_scratch)}});
  s.wait();
  return true;
}

// Max pooling's backward pass needs the forward's workspace (the argmax);
// pool2d does not keep one between the passes, so the forward runs again
// here into a scratch output, which costs a fraction of the convolutions.
bool DnnlPoolBackward(const PoolGeom& g, const float* x, const float* dy, float* dx) {
  int64_t pad_r_h = 0, pad_r_w = 0;
  if (g.n == 0 || !Enabled() || !PoolFits(g, &pad_r_h, &pad_r_w)) return false;
  ThreadBudget budget;
  const PoolPrims& p =
      PoolCache().Get(PoolKey(g, budget.Granted()), [&] { return MakePoolPrims(g, pad_r_h, pad_r_w); });
  if (!p.bwd_jit) return false;
  dnnl::stream& s = DnnlStream();
  memory diff_dst(p.dst, DnnlEngine(), const_cast<float*>(dy)), diff_src(p.src, DnnlEngine(), dx);
  if (g.max) {
    memory src(p.src, DnnlEngine(), const_cast<float*>(x));
    memory scratch = ThreadScratch(&p.dst, p.dst), ws = ThreadScratch(&p.workspace, p.workspace);
    p.fwd_train.execute(s, {{DNNL_ARG_SRC, src},
                            {DNNL_ARG_DST, scratch},
                            {DNNL_ARG_WORKSPACE, ws},
                            {DNNL_ARG_SCRATCHPAD, Scratchpad(p.train_scratch)}});
    p.bwd.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                      {DNNL_ARG_DIFF_SRC, diff_src},
                      {DNNL_ARG_WORKSPACE, ws},
                      {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bwd_scratch)}});
  } else {
    p.bwd.execute(s, {{DNNL_ARG_DIFF_DST, diff_dst},
                      {DNNL_ARG_DIFF_SRC, diff_src},
                      {DNNL_ARG_SCRATCHPAD, Scratchpad(p.bwd_scratch)}});
  }
  s.wait();
  return true;
}

#endif  // NABLA_WITH_DNNL

}  // namespace nabla::nn
