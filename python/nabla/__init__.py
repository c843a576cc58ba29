"""nabla: a deep-learning runtime with programs in YAML, ops in plugins and
append_backward building the gradient ops (docs/python.md).

Static: Program, append_backward, append_optimizer, Executor. Eager: tensor,
Tensor, call, ops, no_grad, Tape. Plugins: load_plugin, ops_list.
"""
import functools as _functools
import json as _json
import os as _os
import shutil as _shutil
import subprocess as _subprocess


def _choose_blas_kernels():
    # Debian's OpenBLAS does not recognise recent Xeons and falls back to its
    # SSE3 kernels, 4-5x slower; it reads OPENBLAS_CORETYPE once, when it
    # loads, which is when _nabla is imported below (the nabla binary does the
    # same before it starts, apps/nabla/main.cc). Returns the kernels chosen,
    # None where the environment chose.
    if "OPENBLAS_CORETYPE" in _os.environ:
        return None
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        return None
    choice = "SkylakeX" if "avx512f" in flags else "Haswell" if "avx2" in flags else None
    if choice:
        _os.environ["OPENBLAS_CORETYPE"] = choice
    return choice


def _openblas_loaded():
    # Whether a module imported before nabla (numpy) has loaded OpenBLAS
    # already: then it chose its kernels without OPENBLAS_CORETYPE.
    try:
        with open("/proc/self/maps") as f:
            return any("libopenblas" in line for line in f)
    except OSError:
        return False


# The kernels of an AVX2 or AVX-512 core: OpenBLAS's own pick on CPUs it knows.
_FAST_BLAS_CORES = {"skylakex", "cooperlake", "sapphirerapids", "haswell", "zen"}


def _warn_if_blas_fell_back(choice):
    # numpy (or another module) loaded OpenBLAS before nabla could set
    # OPENBLAS_CORETYPE: on a CPU OpenBLAS does not know, its small float32
    # GEMMs then run the SSE3 kernels for the whole process, slower and with
    # other rounding than the `nabla` binary's. Said once, at import.
    try:
        import ctypes
        lib = ctypes.CDLL("libopenblas.so.0")
        lib.openblas_get_corename.restype = ctypes.c_char_p
        core = lib.openblas_get_corename().decode()
    except (OSError, AttributeError):
        return
    if core.lower() in _FAST_BLAS_CORES:
        return
    import warnings
    warnings.warn(
        f"OpenBLAS was loaded before nabla (by numpy?) and runs its {core} kernels on this CPU, not {choice}: "
        f"small float32 GEMMs are slower and round differently from the nabla binary's; set "
        f"OPENBLAS_CORETYPE={choice} before starting Python, or import nabla before numpy",
        RuntimeWarning, stacklevel=3)


_blas_choice = _choose_blas_kernels()
_blas_loaded_early = _blas_choice is not None and _openblas_loaded()

from ._version import __version__  # noqa: E402,F401  (the project version in CMakeLists.txt)
from . import _nabla  # noqa: E402
if _blas_loaded_early:
    _warn_if_blas_fell_back(_blas_choice)
from ._nabla import Error, Program, append_backward, append_optimizer, default_plugin_dir  # noqa: E402,F401
from ._nabla import Tensor, default_device, grad_enabled, set_default_device, tensor  # noqa: E402,F401
from . import onnx  # noqa: E402,F401  (nabla.onnx.load / save)
from . import datasets  # noqa: E402,F401  (nabla.datasets.read_idx)
from . import train  # noqa: E402,F401  (nabla.train.run)

__all__ = [
    "Error", "Executor", "Program", "append_backward", "append_optimizer", "load_plugin", "ops_list", "onnx", "train", "datasets",
    "default_plugin_dir",
    "Tensor", "tensor", "set_default_device", "default_device", "call", "ops", "no_grad", "grad_enabled", "Tape",
]


def _clone_keeping_tape_values(clone):
    @_functools.wraps(clone)
    def wrapper(self):
        copy = clone(self)
        if hasattr(self, "_tape_values"):
            copy._tape_values = self._tape_values
        return copy

    return wrapper


# A clone of a Tape.to_program() program (e.g. one before append_backward)
# runs on the recorded values too.
Program.clone = _clone_keeping_tape_values(Program.clone)


class Executor(_nabla.Executor):
    __doc__ = _nabla.Executor.__doc__

    def run(self, program, feed=None, fetch_list=None, step=None):
        """Initializes parameters not yet in the scope, feeds {name: ndarray},
        runs block 0 once and returns the fetched vars as ndarrays, in
        fetch_list's order. A program from Tape.to_program() also runs on the
        values the tape recorded: a parameter the scope does not hold yet
        starts from its recorded value (then lives in the scope, as an init:
        would), and any other leaf left out of `feed` gets its recorded value.
        step (int): the number random ops seeded 0 (dropout) draw by, so a
        run repeated with the same step draws the same masks; None: the
        executor's next run number."""
        recorded = getattr(program, "_tape_values", None)
        if recorded and (feed is None or isinstance(feed, dict)):
            feed = {} if feed is None else dict(feed)
            for name, (value, parameter) in recorded.items():
                if name not in feed and not (parameter and self._has_value(name)):
                    feed[name] = value
        return super().run(program, feed, fetch_list, step)


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


# ------------------------------------------------------------------ eager


def call(type, inputs, attrs=None, output_counts=None):
    """Runs any registered op now: inputs {slot: Tensor or list of Tensors
    (ndarrays are wrapped)}, attrs {name: value} typed by the op's schema.
    Returns {output slot: Tensor}, a list for a duplicable slot (output_counts
    {slot: n} says how many, e.g. for split). Recorded for backward when an
    input requires grad and gradients are enabled."""
    return _nabla._call(type, inputs, attrs, output_counts)


class no_grad:
    """Calls inside `with nabla.no_grad():` (or a function decorated with
    @nabla.no_grad()) are not recorded and their results need no gradient."""

    def __init__(self):
        self._guard = _nabla._NoGrad()

    def __enter__(self):
        self._guard.enter()
        return self

    def __exit__(self, *exc):
        self._guard.exit()
        return False

    def __call__(self, fn):
        @_functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with no_grad():
                return fn(*args, **kwargs)

        return wrapper


class Tape:
    """Records every call made on this thread that is recorded for gradients,
    from its creation until the `with` block ends (or stop()). Gradients do
    not need a tape; it is for seeing and keeping what ran:

        with nabla.Tape() as tape:
            loss = ...
        tape.show()        # Graphviz DOT text (an SVG in a notebook with Graphviz)
        tape.to_program()  # a nabla.Program that Executor.run runs on the recorded values
    """

    def __init__(self):
        self._tape = _nabla._Tape()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._tape.stop()
        return False

    def stop(self):
        self._tape.stop()

    @property
    def recording(self):
        return self._tape.recording

    def __len__(self):
        return len(self._tape)

    def clear(self):
        self._tape.clear()

    def show(self):
        """The recorded DAG as Graphviz DOT text: tensors and ops, forward
        edges solid, gradient edges dashed."""
        return self._tape.to_dot()

    def _repr_svg_(self):
        dot = _shutil.which("dot")
        if dot is None:
            return None
        done = _subprocess.run([dot, "-Tsvg"], input=self.show(), capture_output=True, text=True)
        return done.stdout if done.returncode == 0 else None

    def to_program(self):
        """The recorded calls as a nabla.Program: leaves that require grad are
        persistable parameters, other leaves feeds, in call order. The program
        keeps a copy of every leaf's value as it is now, so that
        nabla.Executor().run(program, fetch_list=...) runs it as recorded
        (feed= overrides any leaf, e.g. a new batch; see Executor.run)."""
        program = self._tape.to_program()
        program._tape_values = {name: (t.numpy().copy(), parameter) for name, t, parameter in self._tape.leaves()}
        return program

    def leaves(self):
        """[(var name in to_program(), Tensor, is_parameter), ...]"""
        return self._tape.leaves()

    def feed(self):
        """{var name: ndarray} for every leaf: what Executor.run needs to run
        to_program() on the values the tape saw."""
        return {name: t.numpy() for name, t, _ in self._tape.leaves()}

    def var_name(self, tensor):
        """The var that stands for `tensor` in to_program()."""
        return self._tape.var_name(tensor)

    def save(self, folder):
        """Writes folder/program.yaml and a .npy per leaf; returns the
        `nabla exec` arguments that run it."""
        return self._tape.save(_os.fspath(folder))


# ------------------------------------------------------------------ nabla.ops


class _OpNamespace:
    """One function per registered op, made from its schema: positional
    arguments fill the input slots in order (a list for a duplicable slot),
    keywords name slots or attributes. An op with one output slot returns its
    Tensor (a list for a duplicable slot); an op with several returns a tuple
    in slot order that is also indexed by slot name (out["Loss"], out.Loss).
    Refreshed by load_plugin, so a plugin's op is a function at once."""

    def __init__(self):
        self._names = []

    def __dir__(self):
        return sorted(set(self._names) | set(super().__dir__()))

    def __repr__(self):
        return f"<nabla.ops: {len(self._names)} ops>"

    def _refresh(self, ops):
        for name in self._names:
            self.__dict__.pop(name, None)
        self._names = []
        for op in ops:
            if not op["type"].isidentifier():
                continue
            self.__dict__[op["type"]] = _make_op_function(op)
            self._names.append(op["type"])


def _attr_doc(a):
    default = "required" if a["required"] else f"default {a['default']!r}"
    return f"    {a['name']} ({a['type']}, {default}): {a['doc']}"


def _slot_doc(s):
    flags = [f for f in ("duplicable", "dispensable") if s[f]]
    return f"    {s['name']}{' (' + ', '.join(flags) + ')' if flags else ''}: {s['doc']}"


def _make_op_function(op):
    import collections

    op_type = op["type"]
    outputs = [s["name"] for s in op["outputs"]]
    make_outputs = None
    if len(outputs) > 1:
        base = collections.namedtuple(op_type + "_outputs", outputs, rename=True)

        class Outputs(base):
            __slots__ = ()

            def __getitem__(self, key):
                if isinstance(key, str):
                    return tuple.__getitem__(self, outputs.index(key))
                return tuple.__getitem__(self, key)

            def keys(self):
                return list(outputs)

        Outputs.__name__ = Outputs.__qualname__ = op_type + "_outputs"
        make_outputs = Outputs
    lines = [op["doc"] or op_type, ""]
    lines += ["Inputs:"] + ([_slot_doc(s) for s in op["inputs"]] or ["    none"])
    lines += ["Outputs:"] + [_slot_doc(s) for s in op["outputs"]]
    if op["attrs"]:
        lines += ["Attributes:"] + [_attr_doc(a) for a in op["attrs"]]
    lines += ["", f"From plugin {op['plugin'] or '(in-process)'}; gradient: {'yes' if op['has_gradient'] else 'no'}."]
    # A class per op so that help(nabla.ops.<type>) shows the op's own doc.
    cls = type(
        op_type,
        (_nabla._OpFunction,),
        {"__doc__": "\n".join(lines), "__module__": "nabla.ops", "__repr__": lambda self: f"<nabla.ops.{op_type}>"},
    )
    fn = cls(op_type, [s["name"] for s in op["inputs"]], outputs, [s["duplicable"] for s in op["outputs"]], make_outputs)
    fn.__name__ = fn.__qualname__ = op_type
    return fn


ops = _OpNamespace()


def _refresh_ops():
    ops._refresh(ops_list())


_refresh_ops()
