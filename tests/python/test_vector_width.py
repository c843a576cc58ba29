"""The op kit's loops run at the CPU's vector width (AVX-512, AVX2 + FMA or the baseline's SSE,
nabla/cpu_vectorized.h) and give the same bits at each: plugins are built with -ffp-contract=off,
so the wider copies compute a * b + c as the baseline does, with no FMA. Broadcast adds and
products, scale, relu and mean forward, and their gradients: the broadcast factor's is a sum over
rows of products (acc += dout * a, an FMA if contracted). Each width in a process of its own,
NABLA_CPU_ISA capping it (read once per process)."""
import os
import subprocess
import sys

import pytest

STEP = r"""
import sys
import numpy as np
import nabla
rng = np.random.default_rng(7)
x = nabla.tensor(rng.uniform(-2, 2, (64, 300)).astype(np.float32), requires_grad=True)
w = nabla.tensor(rng.uniform(-1, 1, (300,)).astype(np.float32), requires_grad=True)
a = x + w
b = a * x
c = nabla.ops.scale(b, scale=0.3, bias=0.1)
d = c * w
e = nabla.ops.relu(d)
loss = nabla.ops.mean(e * e)
loss.backward()
sys.stdout.buffer.write(b"".join(t.numpy().tobytes() for t in (a, b, c, d, e, loss, x.grad, w.grad)))
"""


def run_at(isa):
    env = dict(os.environ, NABLA_CPU_ISA=isa, PYTHONWARNINGS="ignore")
    done = subprocess.run([sys.executable, "-c", STEP], capture_output=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_wider_copies_give_the_baselines_bits(isa):
    baseline = run_at("baseline")
    assert len(baseline) == 4 * (4 * 64 * 300 + 64 * 300 + 1 + 64 * 300 + 300)
    assert run_at(isa) == baseline
