"""The package as pip installs it (docs/python.md, "Install"): the version,
`python3 -m nabla`, the plugins found without variables, and the generated
type stubs covering the public names. Runs against whichever nabla is
imported: the build tree's (ctest) or an install (scripts/test.sh)."""
import ast
import builtins
import keyword
import os
import pathlib
import re
import subprocess
import sys
import typing

import pytest

import nabla

from conftest import REPO

PACKAGE = pathlib.Path(nabla.__file__).resolve().parent


def test_version_is_the_projects():
    text = (REPO / "CMakeLists.txt").read_text()
    assert nabla.__version__ == re.search(r"project\(nabla VERSION ([0-9.]+)", text).group(1)


def run_module(*args):
    env = {k: v for k, v in os.environ.items() if k != "NABLA_PLUGIN_PATH"}
    return subprocess.run([sys.executable, "-m", "nabla", *args], capture_output=True, text=True, env=env,
                          cwd="/", timeout=120)


def test_python_m_nabla_runs_the_cli_and_passes_its_exit_status():
    done = run_module("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"nabla {nabla.__version__} ")
    done = run_module("no-such-command")
    assert done.returncode == 2
    assert "unknown command 'no-such-command'" in done.stderr
    done = run_module("ops", "--json")
    assert done.returncode == 0, done.stderr
    assert '"type": "softmax_with_cross_entropy"' in done.stdout


CORE_NAME = ("import ctypes; lib = ctypes.CDLL('libopenblas.so.0'); "
             "lib.openblas_get_corename.restype = ctypes.c_char_p; print(lib.openblas_get_corename().decode())")


def test_kernels_openblas_chose_before_nabla_are_reported_when_slow():
    """`import nabla` sets OPENBLAS_CORETYPE before OpenBLAS loads; numpy
    imported first loads it earlier, and on a CPU OpenBLAS does not know it
    then runs SSE3 kernels: the import says so (a RuntimeWarning), and is
    silent where OpenBLAS chose an AVX2 or AVX-512 core itself."""
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}

    def python(code):
        return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, env=env,
                              cwd="/", timeout=120)

    probe = python("import numpy; " + CORE_NAME)
    if probe.returncode != 0:
        pytest.skip(f"numpy's BLAS is not OpenBLAS here: {probe.stderr.strip()[-200:]}")
    own_choice = probe.stdout.strip()
    fell_back = own_choice.lower() not in nabla._FAST_BLAS_CORES
    late = python("import numpy; import nabla")
    assert late.returncode == 0, late.stderr
    assert ("OpenBLAS was loaded before nabla" in late.stderr) == fell_back, (own_choice, late.stderr)
    if fell_back:
        assert f"runs its {own_choice} kernels" in late.stderr
    early = python("import nabla; import numpy; " + CORE_NAME)
    assert early.returncode == 0, early.stderr
    assert "OpenBLAS was loaded before nabla" not in early.stderr
    with open("/proc/cpuinfo") as f:
        flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    if "avx512f" in flags or "avx2" in flags:
        assert early.stdout.strip() == ("SkylakeX" if "avx512f" in flags else "Haswell")


def test_the_standard_plugins_are_found_beside_the_core():
    # No NABLA_PLUGIN_PATH: the folder is found from libnabla_core itself,
    # inside the package after a pip install.
    plugin_dir = pathlib.Path(nabla.default_plugin_dir()).resolve()
    if (PACKAGE / "lib").is_dir():
        assert plugin_dir == PACKAGE / "lib" / "nabla" / "plugins"
    standard = {p.name for p in plugin_dir.glob("lib*.so")}
    assert {"libmath_ops.so", "libnn_ops.so"} <= standard
    loaded = {pathlib.Path(op["plugin_path"]).resolve() for op in nabla.ops_list() if op["plugin_path"]}
    assert {p.name for p in loaded if p.parent == plugin_dir} == standard


# ------------------------------------------------------------ type stubs


def stub(name):
    path = PACKAGE / name
    assert path.is_file(), f"{path} was not generated"
    return ast.parse(path.read_text(), filename=str(path))


def top_level_names(tree):
    names = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = node
        elif isinstance(node, (ast.ImportFrom, ast.Import)):
            for alias in node.names:
                # Only `import x as x` re-exports from a stub.
                if alias.asname is not None and alias.asname == alias.name:
                    names[alias.asname] = node
    return names


def members(cls_node):
    return {n.name: n for n in cls_node.body if isinstance(n, ast.FunctionDef)}


def test_stubs_are_marked_typed():
    assert (PACKAGE / "py.typed").is_file()


def test_package_stub_covers_every_public_name():
    names = top_level_names(stub("__init__.pyi"))
    missing = [n for n in list(nabla.__all__) + ["__version__"] if n not in names]
    assert not missing, f"__init__.pyi lacks {missing}"


def test_extension_stub_covers_every_name_and_member():
    names = top_level_names(stub("_nabla.pyi"))
    ext = nabla._nabla
    missing = [n for n in dir(ext) if not n.startswith("__") and n not in names]
    assert not missing, f"_nabla.pyi lacks {missing}"
    for cls in ("Tensor", "Program", "Executor"):
        have = members(names[cls])
        public = [m for m in dir(getattr(ext, cls)) if not m.startswith("_")]
        assert public, cls
        lacking = [m for m in public if m not in have]
        assert not lacking, f"_nabla.pyi's {cls} lacks {lacking}"
    # Signatures come from pybind11's docstrings, with their types.
    run = members(names["Executor"])["run"]
    assert [a.arg for a in run.args.args] == ["self", "program", "feed", "fetch_list", "step"]
    assert ast.unparse(run.args.args[1].annotation) == "Program"


def test_ops_stub_has_every_op_with_its_slots_and_attributes():
    names = top_level_names(stub("__init__.pyi"))
    assert "ops" in names
    ops = members(names["_Ops"])
    # The standard plugins' ops (another test may have loaded a plugin since the build).
    standard = pathlib.Path(nabla.default_plugin_dir()).resolve()
    listed = [op for op in nabla.ops_list() if op["type"].isidentifier() and not keyword.iskeyword(op["type"])
              and op["plugin_path"] and pathlib.Path(op["plugin_path"]).resolve().parent == standard]
    assert len(listed) > 100
    missing = [op["type"] for op in listed if op["type"] not in ops]
    assert not missing, f"_Ops lacks {missing}"
    for op in listed:
        fn = ops[op["type"]]
        if fn.args.vararg is not None:  # a slot or attribute name Python cannot spell: *args, **kwargs
            continue
        assert [a.arg for a in fn.args.args] == ["self"] + [s["name"] for s in op["inputs"]], op["type"]
        assert [a.arg for a in fn.args.kwonlyargs] == [a["name"] for a in op["attrs"]] + ["output_counts"], op["type"]
    split = ops["split"]
    assert ast.unparse(split.returns) == "List[Tensor]"
    kinds = {a.arg: ast.unparse(a.annotation) for a in split.args.kwonlyargs}
    assert kinds["num"] == "int" and kinds["sections"] == "Sequence[int]"


@pytest.mark.parametrize("name", ["__init__.pyi", "_nabla.pyi"])
def test_stub_names_resolve(name):
    # Every annotation names something the stub defines or imports, so a type
    # checker sees no unknown names.
    tree = stub(name)
    defined = set(top_level_names(tree)) | {"_nabla", "numpy", "os", "onnx", "types"}
    defined |= set(typing.__all__) | set(dir(builtins))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            defined.add(node.name)
    unknown = set()
    for node in ast.walk(tree):
        for ann in [getattr(node, "annotation", None), getattr(node, "returns", None)]:
            if ann is None:
                continue
            for n in ast.walk(ann):
                if isinstance(n, ast.Name) and n.id not in defined:
                    unknown.add(n.id)
    assert not unknown, f"{name} uses undefined names {sorted(unknown)}"


USAGE = '''
import numpy as np
import nabla

p = nabla.Program.load("model.yaml")
pairs = nabla.append_backward(p, "loss")
exe = nabla.Executor(threads=1)
out = exe.run(p, feed={"x": np.zeros((2, 3), np.float32)}, fetch_list=["loss"])
t = nabla.tensor(np.ones(3, np.float32), requires_grad=True)
parts: list = nabla.ops.split(t, num=3)
r = nabla.ops.softmax_with_cross_entropy(t, np.zeros((1,), np.int64))
nabla.ops.mean(r.Loss).backward()
device: str = t.device
version: str = nabla.__version__
with nabla.no_grad():
    pass
nabla.ops.split(t, nm=3)
nabla.ops.acme_op_of_a_plugin_loaded_at_run_time(t, factor=2.0)
'''


def test_stubs_pass_mypy_and_catch_a_misspelt_attribute(tmp_path):
    # mypy (Debian's python3-mypy) reads the stubs as a user's type checker
    # would: they must have no errors, a call with an attribute the op lacks
    # must be one, and an op the stubs do not know (a plugin's) is allowed.
    pytest.importorskip("mypy")
    stubs = tmp_path / "nabla"
    stubs.mkdir()
    for name in ("__init__.pyi", "_nabla.pyi", "py.typed", "onnx.py"):
        (stubs / name).write_bytes((PACKAGE / name).read_bytes())
    (tmp_path / "usage.py").write_text(USAGE)
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--cache-dir", os.devnull,
                           "--no-error-summary", "nabla", "usage.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    misspelt = USAGE.splitlines().index("nabla.ops.split(t, nm=3)") + 1
    assert len(errors) == 1 and errors[0].startswith(f"usage.py:{misspelt}:") and '"nm"' in errors[0], \
        done.stdout + done.stderr
