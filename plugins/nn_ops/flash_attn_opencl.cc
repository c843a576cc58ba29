// OpenCL kernels of flash_attn and flash_attn_grad (flash_attn.cl): one work
// item per query row forward, an online softmax over the keys written
// straight into the row of out; backward, one pass per query row (dq and
// D) and one per key row (dk, dv), the probabilities recomputed
// from softmax_lse (D as the CPU takes it). Memory stays linear in the
// sequence, as on the CPU.
// Dropout draws the CPU kernel's mask, word for word.
#include <limits>

#include "flash_attn.h"
#include "flash_attn_cl.h"
#include "nabla/opencl/kernel.h"
#include "nabla/plugin.h"
#include "nn_util.h"

namespace nabla::nn {
namespace {

using namespace opencl;

struct ClAttn {
  int64_t batch, seq_q, seq_k, heads, dim, dim_v;
  bool causal, has_mask;
  int64_t mask_stride[4] = {0, 0, 0, 0};
  double scale;

  ClAttn(const ExecutionContext& ctx, const Tensor& q, const Tensor& k, const Tensor& v)
      : batch(q.Dim(0)),
        seq_q(q.Dim(1)),
        seq_k(k.Dim(1)),
        heads(q.Dim(2)),
        dim(q.Dim(3)),
        dim_v(v.Dim(3)),
        causal(ctx.Attr<bool>("causal")),
        has_mask(ctx.HasInput("attn_mask")),
        scale(1.0 / std::sqrt(static_cast<double>(q.Dim(3)))) {
    if (has_mask)
      AttnMaskStrides(ctx.Input("attn_mask").GetShape(), {batch, heads, seq_q, seq_k}, mask_stride,
                      "op '" + ctx.Op().Type() + "'");
  }
  KernelArg Dims() const { return Long8({batch, seq_q, seq_k, heads, dim, dim_v, seq_k - seq_q, causal ? 1 : 0}); }
  KernelArg Mask() const {
    return Long8({mask_stride[0], mask_stride[1], mask_stride[2], mask_stride[3], has_mask ? 1 : 0});
  }
  int64_t QueryRows() const { return batch * heads * seq_q; }
  int64_t KeyRows() const { return batch * heads * seq_k; }
};

// flash_attn.cl's row shifts (flash_attn_row_shift) into `shift` and `inv`:
// from LseRecomputeBound on (as the CPU's LseTooLarge), a row's max and
// sum are found again.
template <typename T>
void RowShifts(OpenClDevice& dev, const ClAttn& a, const KernelArg& qa, const KernelArg& ka, const KernelArg& ma,
               const KernelArg& la, void* shift, void* inv) {
  const T large = LseRecomputeBound<T>();
  Run<T>(dev, cl_source::flash_attn(), "flash_attn_row_shift",
         {qa, ka, ma, la, KernelArg::Buffer(shift), KernelArg::Buffer(inv), KernelArg(a.QueryRows()), a.Dims(),
          a.Mask(), KernelArg(static_cast<T>(a.scale)), KernelArg(large)},
         a.QueryRows());
}

// Dropout as flash_attn.cl's R and Z, appended to a kernel's arguments.
template <typename T>
std::vector<KernelArg> WithDropout(std::vector<KernelArg> args, const AttnDropout& d) {
  // The least 24-bit w with w / 2^24 >= p: the CPU's float test, on words.
  const int64_t threshold = static_cast<int64_t>(std::ceil(static_cast<double>(d.p) * 16777216.0));
  args.push_back(Long8({d.on ? 1 : 0, static_cast<int64_t>(d.seed), d.offset, threshold}));
  args.push_back(KernelArg(static_cast<T>(d.scale)));
  return args;
}

template <typename T>
struct FlashAttnKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& q = ctx.Input("q");
    const Tensor& k = ctx.Input("k");
    const Tensor& v = ctx.Input("v");
    const ClAttn a(ctx, q, k, v);
    const AttnDropout dropout = ForwardDropout(ctx);
    KernelArg qa = s.Arg(q), ka = s.Arg(k), va = s.Arg(v);
    // Without a mask the kernels never read this argument; q stands in.
    KernelArg ma = a.has_mask ? s.Arg(ctx.Input("attn_mask")) : qa;
    void* out = AllocateOutput<T>(ctx, ctx.Output("out"), {a.batch, a.seq_q, a.heads, a.dim_v});
    void* lse = AllocateOutput<T>(ctx, ctx.Output("softmax_lse"), {a.batch, a.heads, a.seq_q});
    const KernelArg scale(static_cast<T>(a.scale));
    Run<T>(dev, cl_source::flash_attn(), "flash_attn_fwd",
           WithDropout<T>({qa, ka, va, ma, KernelArg::Buffer(out), KernelArg::Buffer(lse), KernelArg(a.QueryRows()),
                           a.Dims(), a.Mask(), scale},
                          dropout),
           a.QueryRows());
    Tensor* softmax = ctx.Output("softmax");
    if (softmax && ctx.Attr<bool>("return_softmax")) {
      void* probs = AllocateOutput<T>(ctx, softmax, {a.batch, a.heads, a.seq_q, a.seq_k});
      Scratch<T> shift(dev), inv(dev);
      void* sh = shift.Allocate(std::max<int64_t>(1, a.QueryRows()));
      void* iv = inv.Allocate(std::max<int64_t>(1, a.QueryRows()));
      RowShifts<T>(dev, a, qa, ka, ma, KernelArg::Buffer(lse), sh, iv);
      Run<T>(dev, cl_source::flash_attn(), "flash_attn_probs",
             WithDropout<T>({qa, ka, ma, KernelArg::Buffer(lse), KernelArg::Buffer(sh), KernelArg::Buffer(iv),
                             KernelArg::Buffer(probs), KernelArg(a.QueryRows()), a.Dims(), a.Mask(), scale},
                            dropout),
             a.QueryRows());
    } else if (softmax) {
      AllocateOutput<T>(ctx, softmax, {0});  // Paddle's empty softmax without return_softmax
    }
    if (Tensor* seed_offset = ctx.Output("seed_offset")) {
      // What backward draws the mask from; [0, 0] when no dropout runs.
      void* so = seed_offset->Allocate(dev, DType::kInt64, {2});
      const int64_t values[2] = {static_cast<int64_t>(dropout.seed), dropout.offset};
      dev.CopyFromHost(so, values, sizeof values);
    }
  }
};

template <typename T>
struct FlashAttnGradKernel {
  void operator()(const ExecutionContext& ctx) const {
    OpenClDevice& dev = DeviceOf(ctx);
    Staging s(dev);
    const Tensor& q = ctx.Input("q");
    const Tensor& k = ctx.Input("k");
    const Tensor& v = ctx.Input("v");
    const ClAttn a(ctx, q, k, v);
    const AttnDropout dropout = BackwardDropout(ctx);
    KernelArg qa = s.Arg(q), ka = s.Arg(k), va = s.Arg(v);
    KernelArg ma = a.has_mask ? s.Arg(ctx.Input("attn_mask")) : qa;
    KernelArg oa = s.Arg(ctx.Input("out")), la = s.Arg(ctx.Input("softmax_lse"));
    KernelArg ga = s.Arg(ctx.Input(GradVarName("out")));
    // A gradient nobody wants is still computed, into scratch.
    Scratch<T> spare_q(dev), spare_k(dev), spare_v(dev), dot(dev);
    auto grad = [&](const char* slot, const Tensor& like, Scratch<T>& spare) {
      Tensor* t = ctx.Output(GradVarName(slot));
      return t ? AllocateOutput<T>(ctx, t, like.GetShape()) : spare.Allocate(like.Numel());
    };
    void* dq = grad("q", q, spare_q);
    void* dk = grad("k", k, spare_k);
    void* dv = grad("v", v, spare_v);
    void* dots = dot.Allocate(std::max<int64_t>(1, a.QueryRows()));
    Scratch<T> shift(dev), inv(dev);
    void* shifts = shift.Allocate(std::max<int64_t>(1, a.QueryRows()));
    void* invs = inv.Allocate(std::max<int64_t>(1, a.QueryRows()));
    RowShifts<T>(dev, a, qa, ka, ma, la, shifts, invs);
    const KernelArg sh = KernelArg::Buffer(shifts), iv = KernelArg::Buffer(invs);
    const KernelArg scale(static_cast<T>(a.scale));
    Run<T>(dev, cl_source::flash_attn(), "flash_attn_bwd_dq",
           WithDropout<T>({qa, ka, va, ma, oa, la, sh, iv, ga, KernelArg::Buffer(dq), KernelArg::Buffer(dots),
                           KernelArg(a.QueryRows()), KernelArg(int64_t{a.seq_k <= kFlashAttnShortKeys}), a.Dims(),
                           a.Mask(), scale},
                          dropout),
           a.QueryRows());
    Run<T>(dev, cl_source::flash_attn(), "flash_attn_bwd_dkv",
           WithDropout<T>({qa, ka, va, ma, la, sh, iv, ga, KernelArg::Buffer(dots), KernelArg::Buffer(dk),
                           KernelArg::Buffer(dv), KernelArg(a.KeyRows()), a.Dims(), a.Mask(), scale},
                          dropout),
           a.KeyRows());
  }
};

}  // namespace

NABLA_REGISTER_OPS(flash_attn_opencl) {
  RegisterOpenClKernels<FlashAttnKernel>(registrar, "flash_attn", __FILE__, __LINE__);
  RegisterOpenClKernels<FlashAttnGradKernel>(registrar, "flash_attn_grad", __FILE__, __LINE__);
}

}  // namespace nabla::nn
