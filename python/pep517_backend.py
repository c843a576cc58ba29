"""The build backend behind `pip install .` (pyproject.toml, docs/python.md).

It needs nothing but the standard library. pip builds in an isolated
environment into which it would download the backend's requirements; offline,
with Debian's pip, setuptools could only be used under --no-build-isolation.
With no requirements the plain `pip install .` works offline, and so do
`pip install --no-build-isolation .` and `pip wheel .`.

The wheel holds the whole runtime inside the package folder, laid out as an
install prefix so that every relative path the binaries use holds:

    nabla/__init__.py ... _nabla.*.so  *.pyi  py.typed     the module
    nabla/lib/libnabla_*.so                                 the core, backends
    nabla/lib/nabla/plugins/lib*.so                         the standard plugins
    nabla/lib/nabla/devices/lib*.so                         device plugins (OpenCL), loaded on demand
    nabla/bin/nabla                                         the CLI (python3 -m nabla)

The module's RUNPATH starts with $ORIGIN/lib, and the core finds the plugins
beside itself (PluginManager::DefaultPluginDir), so no variable is needed.

Build folder: $NABLA_BUILD_DIR, else build/ in the source tree: the same
folder scripts/build.sh uses (configured by it, Release, Ninja, ccache), so a
pip install after a build compiles nothing again, and CI reuses its build.
Only the targets the package needs are built, with $JOBS jobs (default: the
CPUs this process may use). A sanitizer build folder is refused.
"""
import base64
import csv
import hashlib
import importlib.machinery
import io
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import zipfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = "nabla nabla_python nabla_python_stubs nabla_standard_plugins"


def _log(*args):
    print("nabla build:", *args, file=sys.stderr, flush=True)


def _project():
    """name, version (CMakeLists.txt's project()), summary, dependencies from pyproject.toml."""
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*nabla\s+VERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise RuntimeError("CMakeLists.txt: no `project(nabla VERSION x.y.z ...)` to take the version from")
    import tomllib  # Python 3.11; the module is built for Debian 12's /usr/bin/python3

    with open(os.path.join(SOURCE, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    return {
        "name": project["name"],
        "version": m.group(1),
        "summary": project.get("description", ""),
        "requires_python": project.get("requires-python", ""),
        "dependencies": project.get("dependencies", []),
        "scripts": project.get("scripts", {}),
        "license": project.get("license", {}).get("text", ""),
    }


def _tag():
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{platform}"


def _dist_info_name(p):
    return f"{p['name']}-{p['version']}.dist-info"


def _metadata_files(p):
    lines = ["Metadata-Version: 2.1", f"Name: {p['name']}", f"Version: {p['version']}"]
    if p["summary"]:
        lines.append(f"Summary: {p['summary']}")
    if p["license"]:
        lines.append(f"License: {p['license']}")
    if p["requires_python"]:
        lines.append(f"Requires-Python: {p['requires_python']}")
    lines += [f"Requires-Dist: {d}" for d in p["dependencies"]]
    files = {
        "METADATA": "\n".join(lines) + "\n",
        "WHEEL": "Wheel-Version: 1.0\nGenerator: nabla pep517_backend\nRoot-Is-Purelib: false\n"
        f"Tag: {_tag()}\n",
        "top_level.txt": "nabla\n",
    }
    if p["scripts"]:
        files["entry_points.txt"] = "[console_scripts]\n" + "".join(
            f"{name} = {target}\n" for name, target in p["scripts"].items())
    return files


# ------------------------------------------------------------ PEP 517 hooks


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    p = _project()
    info = os.path.join(metadata_directory, _dist_info_name(p))
    os.makedirs(info, exist_ok=True)
    for name, text in _metadata_files(p).items():
        with open(os.path.join(info, name), "w") as f:
            f.write(text)
    return os.path.basename(info)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    build_dir = _build()
    with tempfile.TemporaryDirectory(prefix="nabla-wheel-") as tmp:
        stage = os.path.join(tmp, "stage")
        _log(f"cmake --install {build_dir} into a staging folder")
        subprocess.run(["cmake", "--install", build_dir, "--prefix", stage], check=True,
                       stdout=subprocess.DEVNULL)
        files = _package_files(stage)
        name = f"{p['name']}-{p['version']}-{_tag()}.whl"
        path = os.path.join(wheel_directory, name)
        _write_wheel(path, files, p)
    _log(f"wrote {name} ({len(files)} files)")
    return name


# PEP 660: `pip install -e .` builds as build_wheel does and installs a .pth
# that puts <build>/python on sys.path: the venv imports the build tree, so a
# rebuild (scripts/build.sh) is seen without reinstalling.
get_requires_for_build_editable = get_requires_for_build_wheel
prepare_metadata_for_build_editable = prepare_metadata_for_build_wheel


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    p = _project()
    build_dir = _build()
    python_dir = os.path.join(build_dir, "python")
    if not os.path.exists(os.path.join(python_dir, "nabla", "__init__.py")):
        raise RuntimeError(f"{python_dir} holds no nabla package after the build")
    name = f"{p['name']}-{p['version']}-{_tag()}.whl"
    _write_wheel(os.path.join(wheel_directory, name), {}, p,
                 extra={"__editable__.nabla.pth": (python_dir + "\n").encode()})
    _log(f"wrote {name}: an editable install of {python_dir}")
    return name


def build_sdist(sdist_directory, config_settings=None):
    """The tracked files (git ls-files) and PKG-INFO, as <name>-<version>.tar.gz."""
    p = _project()
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=SOURCE, check=True, capture_output=True).stdout
    base = f"{p['name']}-{p['version']}"
    path = os.path.join(sdist_directory, base + ".tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for rel in sorted(filter(None, listed.decode().split("\0"))):
            full = os.path.join(SOURCE, rel)
            if os.path.isfile(full):
                tar.add(full, arcname=f"{base}/{rel}", recursive=False)
        info = _metadata_files(p)["METADATA"].encode()
        ti = tarfile.TarInfo(f"{base}/PKG-INFO")
        ti.size = len(info)
        tar.addfile(ti, io.BytesIO(info))
    return os.path.basename(path)


# ------------------------------------------------------------ the build


def _build():
    build_dir = os.environ.get("NABLA_BUILD_DIR") or "build"
    build_dir = os.path.abspath(os.path.join(SOURCE, build_dir))
    cache = os.path.join(build_dir, "CMakeCache.txt")
    if os.path.exists(cache):
        with open(cache) as f:
            m = re.search(r"^NABLA_SANITIZE:\w+=(\S+)", f.read(), re.M)
        if m and m.group(1) not in ("", "OFF"):
            raise RuntimeError(f"{build_dir} is a sanitizer build (NABLA_SANITIZE={m.group(1)}), which builds no "
                               "Python module; set NABLA_BUILD_DIR to a Release build folder")
    env = dict(os.environ, BUILD_DIR=build_dir, TARGETS=TARGETS)
    # scripts/build.sh builds with 2 jobs unless told: a pip install on a
    # machine of its own may use every CPU it is given (2 on the shared ones).
    env.setdefault("JOBS", str(len(os.sched_getaffinity(0))))
    _log(f"scripts/build.sh in {build_dir} (targets: {TARGETS})")
    # build.sh's output goes to stderr: pip shows it with -v or when the build fails.
    subprocess.run([os.path.join(SOURCE, "scripts", "build.sh")], cwd=SOURCE, env=env, check=True,
                   stdout=sys.stderr)
    return build_dir


def _package_files(stage):
    """{path in the wheel: file on disk} for the package folder."""
    found = [d for d in _glob_dirs(os.path.join(stage, "lib")) if os.path.basename(d) == "nabla"
             and os.path.exists(os.path.join(d, "__init__.py"))]
    if len(found) != 1:
        raise RuntimeError(f"cmake --install put no nabla package under {stage}/lib/python*/ "
                           "(was the Python module built? it needs python3-dev and pybind11-dev)")
    package = found[0]
    files = {}
    for entry in sorted(os.listdir(package)):
        full = os.path.join(package, entry)
        if os.path.isfile(full):
            files[f"nabla/{entry}"] = full
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    modules = [n for n in files if n.startswith("nabla/_nabla.")]
    if not any(n.endswith(s) for n in modules for s in suffixes):
        raise RuntimeError(f"the built module ({', '.join(modules)}) is not for this Python ({sys.executable}, which "
                           f"loads {', '.join(suffixes)}); the build uses /usr/bin/python3 unless "
                           "Python3_EXECUTABLE is set: run pip from a venv of that interpreter")
    lib = os.path.join(stage, "lib")
    for entry in sorted(os.listdir(lib)):
        full = os.path.join(lib, entry)
        # Shared libraries only: the static ones and the CMake package are for C++ builds.
        if os.path.isfile(full) and re.search(r"\.so(\.[0-9]+)*$", entry):
            files[f"nabla/lib/{entry}"] = full
    plugins = os.path.join(lib, "nabla", "plugins")
    for entry in sorted(os.listdir(plugins)):
        if entry.endswith(".so"):
            files[f"nabla/lib/nabla/plugins/{entry}"] = os.path.join(plugins, entry)
    # Absent when nabla was built without OpenCL.
    devices = os.path.join(lib, "nabla", "devices")
    for entry in sorted(os.listdir(devices)) if os.path.isdir(devices) else []:
        if entry.endswith(".so"):
            files[f"nabla/lib/nabla/devices/{entry}"] = os.path.join(devices, entry)
    bindir = os.path.join(stage, "bin")
    for entry in sorted(os.listdir(bindir)) if os.path.isdir(bindir) else []:
        files[f"nabla/bin/{entry}"] = os.path.join(bindir, entry)
    if "nabla/bin/nabla" not in files:
        raise RuntimeError("cmake --install put no bin/nabla in the staging folder")
    return files


def _glob_dirs(root):
    for dirpath, dirnames, _ in os.walk(root):
        for d in dirnames:
            yield os.path.join(dirpath, d)


def _write_wheel(path, files, p, extra=None):
    info = _dist_info_name(p)
    record = []

    def add(zf, arcname, data, mode):
        zi = zipfile.ZipInfo(arcname, date_time=(2000, 1, 1, 0, 0, 0))
        zi.external_attr = (mode & 0xFFFF) << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append((arcname, f"sha256={digest}", str(len(data))))

    with zipfile.ZipFile(path, "w") as zf:
        for arcname, full in sorted(files.items()):
            with open(full, "rb") as f:
                data = f.read()
            executable = os.stat(full).st_mode & 0o111
            add(zf, arcname, data, 0o100755 if executable else 0o100644)
        for arcname, data in sorted((extra or {}).items()):
            add(zf, arcname, data, 0o100644)
        for name, text in sorted(_metadata_files(p).items()):
            add(zf, f"{info}/{name}", text.encode(), 0o100644)
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerows(record)
        writer.writerow((f"{info}/RECORD", "", ""))
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2000, 1, 1, 0, 0, 0))
        zi.external_attr = 0o100644 << 16
        zi.compress_type = zipfile.ZIP_DEFLATED
        zf.writestr(zi, out.getvalue())


if __name__ == "__main__":
    # `python3 python/pep517_backend.py DIR` builds the wheel into DIR (for debugging the backend).
    print(build_wheel(sys.argv[1] if len(sys.argv) > 1 else "."))
