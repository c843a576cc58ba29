#!/usr/bin/python3
"""The GPT of gpt_run.yaml in PyTorch: the same model, initialisation scheme,
data, data order, optimizer and schedule, read from the same run config and
program (so the two cannot drift apart), for comparing eval losses.

    /usr/bin/python3 examples/gpt/gpt_torch.py [examples/gpt/gpt_run.yaml] [--threads N] [--steps N]

The data order is nabla's: windows cut as `ReadTextDataset` cuts them, each
epoch's order from `EpochOrder` (std::mt19937_64 seeded through
std::seed_seq, re-implemented below bit for bit), the first
`samples_per_epoch` of it. The weights start from the same distributions,
not the same values (nabla's random ops have their own generator), so the
two runs agree in their loss curve, not bit for bit.
"""
import argparse
import fnmatch
import glob
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F
import yaml

M32, M64 = 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF


def seed_seq_generate(v, n):
    """std::seed_seq{v...}.generate over n 32-bit words ([rand.util.seedseq])."""
    b = [0x8B8B8B8B] * n
    s = len(v)
    t = 11 if n >= 623 else 7 if n >= 68 else 5 if n >= 39 else 3 if n >= 7 else (n - 1) // 2
    p = (n - t) // 2
    q = p + t
    m = max(s + 1, n)

    def T(x):
        return x ^ (x >> 27)

    for k in range(m):
        r1 = (1664525 * T(b[k % n] ^ b[(k + p) % n] ^ b[(k - 1) % n])) & M32
        if k == 0:
            r2 = (r1 + s) & M32
        elif k <= s:
            r2 = (r1 + k % n + v[k - 1]) & M32
        else:
            r2 = (r1 + k % n) & M32
        b[(k + p) % n] = (b[(k + p) % n] + r1) & M32
        b[(k + q) % n] = (b[(k + q) % n] + r2) & M32
        b[k % n] = r2
    for k in range(m, m + n):
        r3 = (1566083941 * T((b[k % n] + b[(k + p) % n] + b[(k - 1) % n]) & M32)) & M32
        r4 = (r3 - k % n) & M32
        b[(k + p) % n] ^= r3
        b[(k + q) % n] ^= r4
        b[k % n] = r4
    return b


class MT19937_64:
    N, M = 312, 156
    UPPER, LOWER = 0xFFFFFFFF80000000, 0x7FFFFFFF

    def __init__(self, seed_words):
        w = seed_seq_generate(seed_words, 2 * self.N)
        self.mt = [w[2 * i] | (w[2 * i + 1] << 32) for i in range(self.N)]
        self.i = self.N

    def twist(self):
        mt = self.mt
        for i in range(self.N):
            y = (mt[i] & self.UPPER) | (mt[(i + 1) % self.N] & self.LOWER)
            mt[i] = mt[(i + self.M) % self.N] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
        self.i = 0

    def __call__(self):
        if self.i >= self.N:
            self.twist()
        y = self.mt[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & M64


def epoch_order(n, shuffle, seed, epoch):
    """nabla::train::EpochOrder."""
    order = list(range(n))
    if not shuffle or n < 2:
        return order
    rng = MT19937_64([seed & M32, (seed >> 32) & M32, epoch & M32, (epoch >> 32) & M32])
    for i in range(n - 1, 0, -1):
        rng_range = i + 1
        limit = M64 - M64 % rng_range
        while True:
            r = rng()
            if r < limit:
                break
        j = r % rng_range
        order[i], order[j] = order[j], order[i]
    return order


def expand_files(patterns, exclude):
    """nabla::train::ExpandTextFiles."""
    out, seen = [], set()
    for p in patterns:
        matches = sorted(glob.glob(p))
        if not matches:
            sys.exit(f"{p}: no such file")
        for m in matches:
            if any(fnmatch.fnmatchcase(m, e) for e in exclude):
                continue
            key = os.path.realpath(m)
            if key in seen:
                continue
            seen.add(key)
            out.append(m)
    return out


def text_windows(files, seq, eval_fraction):
    """nabla::train::ReadTextDataset: windows of seq + 1 bytes at stride seq, each file's tail held out."""
    train, held = [], []
    for path in files:
        data = open(path, "rb").read()
        windows = (len(data) - 1) // seq if len(data) > seq else 0
        h = int(math.floor(eval_fraction * windows + 0.5))
        if eval_fraction > 0 and h == 0 and windows >= 2:
            h = 1
        for w in range(windows):
            (held if w >= windows - h else train).append(data[w * seq:w * seq + seq + 1])
    to = lambda ws: torch.tensor([list(w) for w in ws], dtype=torch.long)
    return to(train), to(held)


def lr_at(lr0, sched, step, planned):
    """nabla::ScheduledLearningRate (constant and cosine)."""
    lr = lr0
    if sched.get("type", "constant") == "cosine":
        t = min(1.0, step / max(1, planned))
        final = sched.get("final_lr", 0.0)
        lr = final + (lr0 - final) * 0.5 * (1.0 + math.cos(math.pi * t))
    warm = sched.get("warmup_steps", 0)
    if step < warm:
        lr *= (step + 1) / warm
    return lr


class GPT(torch.nn.Module):
    """The model of make_gpt_program.py, its parameters initialised as that program's init specs say."""

    def __init__(self, prog):
        super().__init__()
        vs = prog["blocks"][0]["vars"]
        self.params = torch.nn.ParameterDict()
        for name, v in vs.items():
            if not v.get("persistable"):
                continue
            init = v["init"]
            t = torch.empty(v["shape"])
            if init["type"] == "gaussian_random":
                torch.nn.init.normal_(t, init.get("mean", 0.0), init["std"])
            else:
                torch.nn.init.constant_(t, init["value"])
            self.params[name] = torch.nn.Parameter(t)
        self.layers = len([n for n in vs if re.fullmatch(r"l\d+_q_w", n)])
        self.heads = next(int(o["attrs"]["shape"][2]) for o in prog["blocks"][0]["ops"] if o["type"] == "reshape")

    def forward(self, tokens):
        P = self.params
        B, T = tokens.shape
        D = P["wte"].shape[1]
        H = self.heads
        h = P["wte"][tokens] + P["wpe"][:T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        for i in range(self.layers):
            p = f"l{i}_"
            x = F.layer_norm(h, (D,), P[p + "ln1_scale"], P[p + "ln1_bias"], 1e-5)
            q, k, v = ((x @ P[p + n + "_w"] + P[p + n + "_b"]).view(B, T, H, D // H).transpose(1, 2) for n in "qkv")
            s = (q @ k.transpose(-1, -2)) / math.sqrt(D // H)
            a = torch.softmax(s.masked_fill(mask, float("-inf")), -1) @ v
            a = a.transpose(1, 2).reshape(B, T, D)
            h = h + a @ P[p + "proj_w"] + P[p + "proj_b"]
            x = F.layer_norm(h, (D,), P[p + "ln2_scale"], P[p + "ln2_bias"], 1e-5)
            x = F.gelu(x @ P[p + "fc_w"] + P[p + "fc_b"])
            h = h + x @ P[p + "out_w"] + P[p + "out_b"]
        x = F.layer_norm(h, (D,), P["lnf_scale"], P["lnf_bias"], 1e-5)
        return x @ P["wte"].t()


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?", default=os.path.join(here, "gpt_run.yaml"))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: PyTorch's default)")
    ap.add_argument("--steps", type=int, default=0, help="stop after N steps (0: the config's epochs)")
    ap.add_argument("--torch-seed", type=int, default=1)
    ap.add_argument("--save", help="write the trained parameters here (torch.save of a name -> tensor dict)")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.torch_seed)
    cfg = yaml.safe_load(open(a.config))
    base = os.path.dirname(os.path.abspath(a.config))
    prog = yaml.safe_load(open(os.path.join(base, cfg["program"])))
    d = cfg["data"]
    assert d["format"] == "text"
    files = d["train"]["files"]
    files = [files] if isinstance(files, str) else files
    exclude = d["train"].get("exclude", [])
    exclude = [exclude] if isinstance(exclude, str) else exclude
    files = expand_files([os.path.join(base, f) for f in files], exclude)
    seq = d["seq_len"]
    train, held = text_windows(files, seq, d.get("eval_fraction", 0.0))
    n = min(d.get("samples_per_epoch", 0) or len(train), len(train))
    bs = d.get("batch_size", 64)
    ebs = d.get("eval_batch_size", 0) or bs
    batches = -(-n // bs)
    epochs = cfg.get("epochs", 1)
    planned = epochs * batches
    seed = d.get("seed", cfg.get("seed", 0))
    o = cfg["optimizer"]
    assert o["type"] == "adamw"
    sched = o.get("lr_schedule", {})
    sched = {"type": sched} if isinstance(sched, str) else sched
    model = GPT(prog)
    opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=(o.get("beta1", 0.9), o.get("beta2", 0.999)),
                            eps=o.get("epsilon", 1e-8), weight_decay=o.get("weight_decay", 0.0))
    clip = o.get("clip_global_norm", 0.0)
    print(f"torch: {len(train)} train windows ({n} per epoch, {batches} batches of {bs}), {len(held)} eval windows, "
          f"{sum(p.numel() for p in model.parameters())} parameters, {torch.get_num_threads()} threads", flush=True)

    def evaluate():
        with torch.no_grad():
            total = 0.0
            for b in range(0, len(held), ebs):
                w = held[b:b + ebs]
                logits = model(w[:, :-1])
                total += F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1)).item() * len(w)
            return total / len(held)

    step, t0 = 0, time.time()
    last_eval = None
    for epoch in range(epochs):
        order = torch.tensor(epoch_order(len(train), d.get("shuffle", True), seed, epoch)[:n])
        ep_loss = 0.0
        for b in range(batches):
            if a.steps and step >= a.steps:
                break
            w = train[order[b * bs:(b + 1) * bs]]
            lr = lr_at(o["lr"], sched, step, planned)
            for g in opt.param_groups:
                g["lr"] = lr
            logits = model(w[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), w[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            if clip > 0:
                # Paddle's ClipGradByGlobalNorm: scale by clip / max(norm, clip).
                norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters()))
                scale = clip / max(norm.item(), clip)
                for p in model.parameters():
                    p.grad.mul_(scale)
            opt.step()
            ep_loss += loss.item() * len(w)
            step += 1
        last_eval = evaluate()
        print(f"torch epoch {epoch + 1}/{epochs}: step {step}, train loss {ep_loss / n:.4f}, "
              f"eval loss {last_eval:.4f}, {time.time() - t0:.1f} s", flush=True)
        if a.steps and step >= a.steps:
            break
    print(f"torch final eval loss {last_eval:.4f} after {step} steps, {time.time() - t0:.1f} s")
    if a.save:
        torch.save({n: p.detach() for n, p in model.params.items()}, a.save)


if __name__ == "__main__":
    main()
