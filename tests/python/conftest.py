"""Shared fixtures: paths of the repository's examples, the seed's data."""
import os
import pathlib

# numpy loads OpenBLAS, which reads OPENBLAS_CORETYPE then: the kernels the
# nabla binary and `import nabla` choose (SkylakeX with AVX-512, Haswell with
# AVX2), so that the tests' processes and the binary compute the same bits.
# test_package checks what an unset one gives.
if "OPENBLAS_CORETYPE" not in os.environ:
    with open("/proc/cpuinfo") as _f:
        _flags = next((line.split(":", 1)[1].split() for line in _f if line.startswith("flags")), [])
    if "avx512f" in _flags or "avx2" in _flags:
        os.environ["OPENBLAS_CORETYPE"] = "SkylakeX" if "avx512f" in _flags else "Haswell"

import numpy as np  # noqa: E402
import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


@pytest.fixture
def examples():
    return EXAMPLES


@pytest.fixture
def rng():
    return np.random.default_rng(1234567890)


def nabla_bin():
    return os.environ.get("NABLA_BIN")


def opencl_available():
    """Whether this build of the module reaches an OpenCL device (PoCL's CPU device counts)."""
    import nabla  # here, not at the top: test_package runs before the module is importable

    try:
        nabla.tensor(np.zeros(1, np.float32), device="opencl")
        return True
    except nabla.Error:
        return False
