"""flash_attn against PyTorch's attention, softmax(q k^T / sqrt(d) + mask) v in float64, for values
and the gradients of q, k and v: causal or not, equal and different lengths across the 128-row tiles,
masks of every broadcast kind (with -inf), head sizes 32, 64 and 80, bfloat16 (through casts, as the
mixed-precision pass inserts them), and dropout with a fixed seed (its mask drawn by a NumPy Philox)."""
import numpy as np
import pytest
import torch

import nabla
from conftest import opencl_available


def reference(q, k, v, w, mask=None, causal=False, factors=None):
    """out, softmax_lse and the gradients of mean(out * w) in float64; q, k, v [batch, seq, heads, dim]."""
    tq, tk, tv = (torch.tensor(a, dtype=torch.float64, requires_grad=True) for a in (q, k, v))
    s = tq.permute(0, 2, 1, 3) @ tk.permute(0, 2, 3, 1) / np.sqrt(q.shape[-1])
    if mask is not None:
        s = s + torch.tensor(mask, dtype=torch.float64)
    if causal:  # bottom-right aligned: key j visible to query i iff j <= i + seq_k - seq_q
        s = s.masked_fill(torch.ones(q.shape[1], k.shape[1], dtype=torch.bool).triu(k.shape[1] - q.shape[1] + 1),
                          float("-inf"))
    p = torch.softmax(s, -1)
    if factors is not None:
        p = p * torch.tensor(factors)
    out = (p @ tv.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
    (out * torch.tensor(w, dtype=torch.float64)).mean().backward()
    return {"out": out.detach().numpy(), "softmax_lse": torch.logsumexp(s, -1).detach().numpy(),
            "q": tq.grad.numpy(), "k": tk.grad.numpy(), "v": tv.grad.numpy()}


def run_nabla(q, k, v, w, mask=None, causal=False, dtype="float32", attrs=None, fixed_seed_offset=None):
    """flash_attn's out, softmax_lse and gradients, eagerly; bfloat16 through casts from float32."""
    leaves = [nabla.tensor(a.astype(np.float32), requires_grad=True) for a in (q, k, v)]
    inputs = dict(zip("qkv", leaves))
    if mask is not None:
        inputs["attn_mask"] = nabla.tensor(mask.astype(np.float32))
    if dtype == "bfloat16":
        inputs = {n: nabla.ops.cast(t, in_dtype="float32", out_dtype="bfloat16") for n, t in inputs.items()}
    if fixed_seed_offset is not None:
        inputs["fixed_seed_offset"] = nabla.tensor(np.array(fixed_seed_offset, dtype=np.int64))
    res = nabla.call("flash_attn", inputs, {"causal": causal, **(attrs or {})})
    out = res["out"]
    if dtype == "bfloat16":
        out = nabla.ops.cast(out, in_dtype="bfloat16", out_dtype="float32")
    nabla.ops.mean(out * nabla.tensor(w.astype(np.float32))).backward()
    got = {"out": out.numpy(), "softmax_lse": res["softmax_lse"].numpy()}
    for name, t in zip("qkv", leaves):
        got[name] = t.grad.numpy()
    return got


def assert_close(got, want, tol, case):
    for name, w in want.items():
        g = got[name].astype(np.float64)
        assert g.shape == w.shape, (case, name)
        finite = np.isfinite(w)
        assert (np.isfinite(g) == finite).all(), (case, name)
        err = np.abs(g[finite] - w[finite]).max(initial=0.0)
        scale = np.abs(w[finite]).max(initial=0.0)
        assert err <= tol * max(scale, 1e-30), f"{case} {name}: max error {err:.3g} of max {scale:.3g}"


def inputs(rng, b, tq, tk, h, d, dv=None):
    q = rng.uniform(-2, 2, (b, tq, h, d))
    k = rng.uniform(-2, 2, (b, tk, h, d))
    v = rng.uniform(-1, 1, (b, tk, h, dv or d))
    w = rng.uniform(-1, 1, (b, tq, h, dv or d))
    return q, k, v, w


def mask_of(rng, kind, b, h, tq, tk):
    if kind is None:
        return None
    if kind == "padding":  # [b, 1, 1, tk]: the last keys of each sequence hidden
        m = np.zeros((b, 1, 1, tk))
        for i in range(b):
            m[i, ..., tk - 1 - 7 * i:] = -np.inf
        return m
    if kind == "float_2d":  # [tq, tk], a bias every head shares
        return rng.uniform(-3, 0, (tq, tk))
    if kind == "per_head":  # [1, h, tq, tk] with -1e9 entries, never on the diagonal
        m = rng.uniform(-1, 1, (1, h, tq, tk))
        # A row whose every visible key is at -1e9 has its scores rounded to multiples of 64 in
        # float32 (1e9's spacing): float32 and float64 softmaxes then disagree, whoever computes.
        hide = rng.random(m.shape) < 0.2
        hide[..., np.arange(min(tq, tk)), np.arange(min(tq, tk))] = False
        m[hide] = -1e9
        return m
    if kind == "causal_fed":  # [tq, tk]: -1e9 above the bottom-right diagonal, fed as data
        return np.triu(np.full((tq, tk), -1e9), tk - tq + 1)
    raise ValueError(kind)


CONFIGS = [
    # (batch, seq_q, seq_k, heads, head_dim, causal, mask)
    (2, 64, 64, 2, 32, True, None),
    (1, 200, 200, 2, 64, True, None),
    (2, 130, 130, 3, 80, False, None),
    (1, 100, 150, 2, 64, True, "float_2d"),
    (2, 150, 140, 2, 32, False, "padding"),
    (1, 77, 77, 2, 80, True, "per_head"),
    (2, 1, 50, 2, 64, True, None),  # one query (decoding): sees every key
    # A causal mask fed as data: the kernel sees the pattern and runs causal.
    (2, 150, 150, 2, 64, False, "causal_fed"),
    (1, 90, 140, 2, 32, False, "causal_fed"),
    # The diagonal crossing 128-row tiles (the GPT's T = 256) and crossing them off their corners:
    # the kernels cut such tiles into row and key bands only as wide as what each band sees.
    # (Queries that see no key are the grad check's case: PyTorch's softmax gives them NaN.)
    (1, 256, 256, 2, 64, True, None),
    (2, 200, 230, 2, 48, True, None),
    # A head_dim and key count that are no multiples of 4: the edges of float32's transposing pack.
    (1, 70, 75, 3, 30, True, None),
    # Past 256 rows float32 copies a head's rows dense before its products (below, they are read
    # where they lie, heads * head_dim apart): both ways, causal or masked, uneven lengths.
    (1, 280, 300, 2, 64, True, None),
    (1, 260, 390, 3, 32, False, "float_2d"),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "b{}_q{}_k{}_h{}_d{}_{}_{}".format(
    c[0], c[1], c[2], c[3], c[4], "causal" if c[5] else "full", c[6] or "nomask"))
def test_float32_matches_torch(cfg, rng):
    b, tq, tk, h, d, causal, kind = cfg
    q, k, v, w = inputs(rng, b, tq, tk, h, d)
    mask = mask_of(rng, kind, b, h, tq, tk)
    want = reference(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), w.astype(np.float32),
                     None if mask is None else mask.astype(np.float32), causal)
    assert_close(run_nabla(q, k, v, w, mask, causal), want, 2e-5, cfg)


@pytest.mark.parametrize("cfg", CONFIGS[:6] + CONFIGS[7:8] + CONFIGS[9:], ids=lambda c: "q{}_k{}_d{}_{}_{}".format(
    c[1], c[2], c[4], "causal" if c[5] else "full", c[6] or "nomask"))
def test_bfloat16_matches_torch_within_bf16_rounding(cfg, rng):
    b, tq, tk, h, d, causal, kind = cfg
    q, k, v, w = inputs(rng, b, tq, tk, h, d)
    mask = mask_of(rng, kind, b, h, tq, tk)
    # The reference sees the inputs as bfloat16 holds them; what remains is the kernel's own
    # rounding (probabilities and dS as bfloat16 GEMM operands, out rounded), about 2^-8.
    bf = lambda a: None if a is None else torch.tensor(a, dtype=torch.float32).bfloat16().double().numpy()  # noqa
    want = reference(bf(q), bf(k), bf(v), w.astype(np.float32), bf(mask), causal)
    got = run_nabla(q, k, v, w, mask, causal, dtype="bfloat16")
    assert got["softmax_lse"].dtype == np.float32
    assert_close(got, want, 2e-2, cfg)
    # bfloat16 really ran: float32 is closer.
    exact = run_nabla(bf(q), bf(k), bf(v), w, bf(mask), causal)
    assert np.abs(got["out"] - want["out"]).max() > np.abs(exact["out"] - want["out"]).max()


def philox4x32(key, ctr):
    """Philox4x32-10 on arrays of counters (nabla/opkit/philox.h)."""
    m0, m1, w0, w1, mask = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85, 0xFFFFFFFF
    k0, k1 = key & mask, (key >> 32) & mask
    c = [np.asarray(x, dtype=np.uint64) for x in ctr]
    for _ in range(10):
        p0, p1 = np.uint64(m0) * c[0], np.uint64(m1) * c[2]
        c = [(p1 >> np.uint64(32)) ^ c[1] ^ np.uint64(k0), p1 & np.uint64(mask),
             (p0 >> np.uint64(32)) ^ c[3] ^ np.uint64(k1), p0 & np.uint64(mask)]
        k0, k1 = (k0 + w0) & mask, (k1 + w1) & mask
    return c


def dropout_factors(b, h, tq, tk, p, seed, offset):
    bh, i, j = np.meshgrid(np.arange(b * h), np.arange(tq), np.arange(tk), indexing="ij")
    word = np.choose(j % 4, philox4x32(seed, (j // 4, i, bh, np.full_like(j, offset))))
    keep = (word >> np.uint64(8)).astype(np.float64) / 16777216.0 >= np.float32(p)
    return (keep / (1 - np.float64(np.float32(p)))).reshape(b, h, tq, tk)


@pytest.mark.parametrize("causal", [True, False])
def test_dropout_with_a_fixed_seed_matches_torch(causal, rng):
    b, tq, tk, h, d, p, seed = 2, 140, 140, 2, 32, 0.2, 20261127
    q, k, v, w = inputs(rng, b, tq, tk, h, d)
    factors = dropout_factors(b, h, tq, tk, p, seed, 1)
    assert 0.75 < (factors > 0).mean() < 0.85
    want = reference(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32), w.astype(np.float32),
                     None, causal, factors)
    got = run_nabla(q, k, v, w, None, causal, attrs={"dropout": p}, fixed_seed_offset=[seed, 1])
    assert_close(got, want, 2e-5, ("dropout", causal))
    # The bfloat16 kernel drops the same probabilities.
    bf = lambda a: torch.tensor(a, dtype=torch.float32).bfloat16().double().numpy()  # noqa: E731
    got = run_nabla(q, k, v, w, None, causal, dtype="bfloat16", attrs={"dropout": p}, fixed_seed_offset=[seed, 1])
    assert_close(got, reference(bf(q), bf(k), bf(v), w.astype(np.float32), None, causal, factors), 2e-2,
                 ("dropout bf16", causal))
    # is_test: no dropout at all.
    got = run_nabla(q, k, v, w, None, causal, attrs={"dropout": p, "is_test": True}, fixed_seed_offset=[seed, 1])
    assert_close(got, reference(q.astype(np.float32), k.astype(np.float32), v.astype(np.float32),
                                w.astype(np.float32), None, causal), 2e-5, ("is_test", causal))


def same_dtype_reference(q, k, v, w, mask, causal):
    """The unfused attention in q's dtype (PyTorch): out, the probabilities and the gradients."""
    tq, tk, tv = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    s = tq.permute(0, 2, 1, 3) @ tk.permute(0, 2, 3, 1) * (1 / np.sqrt(q.shape[-1])) + torch.tensor(mask)
    if causal:
        s = s.masked_fill(torch.ones(q.shape[1], k.shape[1], dtype=torch.bool).triu(k.shape[1] - q.shape[1] + 1),
                          float("-inf"))
    p = torch.softmax(s, -1)
    out = (p @ tv.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
    (out * torch.tensor(w)).mean().backward()
    return {"out": out.detach().numpy(), "softmax": p.detach().numpy(), "q": tq.grad.numpy(), "k": tk.grad.numpy(),
            "v": tv.grad.numpy()}


@pytest.mark.parametrize("device", ["cpu", "opencl"])
@pytest.mark.parametrize("dtype,shift", [(np.float32, -1e9), (np.float64, -1e9), (np.float64, -1e300)])
@pytest.mark.parametrize("causal", [False, True])
def test_rows_whose_every_score_a_mask_shifts_far_keep_their_gradients(device, dtype, shift, causal, rng):
    """A query whose every visible key the additive mask pushes to -1e9 (or -1e300 in float64):
    softmax_lse = m + log(l) then rounds to m (in float32 the scores round to the shift too, so the
    probabilities are uniform). Probabilities recomputed as exp(s - lse) were then 1 in place of 1/n, and the
    gradients off by that factor; the backward (and return_softmax) now find such a row's max and sum
    again. Rows in both 128-row tiles, on each device, against the unfused attention in the same dtype."""
    if device == "opencl" and not opencl_available():
        pytest.skip("no OpenCL device in this build")
    b, t, h, d = 1, 140, 2, 16
    q, k, v, w = (a.astype(dtype) for a in inputs(rng, b, t, t, h, d))
    mask = rng.uniform(-1, 1, (b, h, t, t)).astype(dtype)
    for head, row in ((0, 0), (0, 5), (1, 130)):
        mask[0, head, row, :] = shift
    want = same_dtype_reference(q, k, v, w, mask, causal)
    ts = {n: nabla.tensor(a, requires_grad=True, device=device) for n, a in zip("qkv", (q, k, v))}
    res = nabla.call("flash_attn", {**ts, "attn_mask": nabla.tensor(mask, device=device)},
                     {"causal": causal, "return_softmax": True})
    nabla.ops.mean(res["out"] * nabla.tensor(w, device=device)).backward()
    got = {"out": res["out"].numpy(), "softmax": res["softmax"].numpy()}
    got.update({n: ts[n].grad.numpy() for n in "qkv"})
    visible = np.arange(t) + 1 if causal else np.full(t, t)
    # Where the shift swamps the scores they round to it alike: uniform rows. float64 keeps -1e9 + s
    # apart (to 1e-7): its rows are softmax(s), which `want` checks.
    for head, row in ((0, 0), (0, 5), (1, 130)):
        if abs(shift) * np.finfo(dtype).eps > 1:
            np.testing.assert_allclose(got["softmax"][0, head, row, :visible[row]], 1 / visible[row], rtol=1e-5)
    assert_close(got, want, 1e-5 if dtype == np.float32 else 1e-12, (device, dtype, causal))
