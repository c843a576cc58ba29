"""nabla: a deep-learning runtime with programs in YAML, ops in plugins and
append_backward building the gradient ops (SPEC §8).

Static: Program, append_backward, Executor. Eager: tensor, Tensor, call, ops,
no_grad, Tape. Plugins: load_plugin, ops_list.
"""
import json as _json
import os as _os


def _choose_blas_kernels():
    # Debian's OpenBLAS does not recognise recent Xeons and falls back to its
    # SSE3 kernels, 4-5x slower; it reads OPENBLAS_CORETYPE once, when it
    # loads, which is when _nabla is imported below (the nabla binary does the
    # same before it starts, apps/nabla/main.cc).
    if "OPENBLAS_CORETYPE" in _os.environ:
        return
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return
    if "avx512f" in flags:
        _os.environ["OPENBLAS_CORETYPE"] = "SkylakeX"
    elif "avx2" in flags:
        _os.environ["OPENBLAS_CORETYPE"] = "Haswell"


_choose_blas_kernels()

from . import _nabla  # noqa: E402
from ._nabla import Error, Executor, Program, append_backward, default_plugin_dir  # noqa: E402,F401

__all__ = ["Error", "Executor", "Program", "append_backward", "load_plugin", "ops_list", "default_plugin_dir"]


def ops_list():
    """Every registered op as a dict (type, doc, plugin, inputs, outputs,
    attrs with defaults, has_gradient, kernels per device): the "ops" list
    that `nabla ops --json` prints."""
    return _json.loads(_nabla._registry_json())["ops"]


def load_plugin(path):
    """Loads a plugin file into the registry; returns the op types it added.
    Loading the same file again does nothing."""
    added = _nabla.load_plugin(_os.fspath(path))
    _refresh_ops()
    return added


def _refresh_ops():
    pass
