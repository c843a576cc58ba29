#!/bin/sh
# `pip install .` as a user runs it (docs/python.md, "Install"): into a fresh
# `python3 -m venv --system-site-packages` (Debian's numpy, torch, pytest
# come from the system) in a temporary folder, offline, then the pytest suite
# (tests/python) against that install, from outside the source tree, with no
# PYTHONPATH or NABLA_PLUGIN_PATH. NABLA_BUILD_DIR=$BUILD_DIR (default build/)
# makes pip build in the folder scripts/test.sh has just built, so nothing
# compiles twice. Called by scripts/test.sh after the Release tests.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
PY=${PYTHON:-/usr/bin/python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nabla-pip.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
unset PYTHONPATH NABLA_PLUGIN_PATH || true

echo "pip-install: venv in $WORK/venv, pip install . (build folder $BUILD_DIR)"
"$PY" -m venv --system-site-packages "$WORK/venv"
# The build's output shows only when it fails (pip prints it then).
NABLA_BUILD_DIR=$BUILD_DIR PIP_DISABLE_PIP_VERSION_CHECK=1 "$WORK/venv/bin/pip" install --no-input -q .

SITE=$("$WORK/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
PKG=$SITE/nabla
for f in __init__.pyi _nabla.pyi py.typed train.py bin/nabla lib/libnabla_core.so lib/libnabla_train.so \
         lib/nabla/plugins/libmath_ops.so; do
  [ -e "$PKG/$f" ] || { echo "pip-install: FAILED: the install lacks nabla/$f" >&2; exit 1; }
done
"$WORK/venv/bin/nabla" --version
# The OpenCL backend ships as a device plugin, loaded on demand by the wheel's core.
if [ -f "$BUILD_DIR/lib/nabla/devices/libnabla_opencl.so" ]; then
  [ -f "$PKG/lib/nabla/devices/libnabla_opencl.so" ] \
    || { echo "pip-install: FAILED: the install lacks nabla/lib/nabla/devices/libnabla_opencl.so" >&2; exit 1; }
  "$WORK/venv/bin/nabla" devices | grep -q '^opencl' \
    || { echo "pip-install: FAILED: the installed nabla lists no OpenCL backend" >&2; exit 1; }
fi

# A third-party plugin of the build (tests/e2e), for load_plugin and nabla.ops.
TEST_PLUGIN=$(find "$BUILD_DIR/test_plugins" -name 'libacme_grad*.so' 2>/dev/null | head -n 1)
[ -z "$TEST_PLUGIN" ] || TEST_PLUGIN=$(realpath "$TEST_PLUGIN")
cd "$WORK"
echo "pip-install: pytest tests/python against $PKG"
NABLA_BIN=$PKG/bin/nabla NABLA_TEST_PLUGIN=$TEST_PLUGIN \
  "$WORK/venv/bin/python" -m pytest -q -p no:cacheprovider "$ROOT/tests/python"
# The suite must have used the install, not a nabla from elsewhere.
"$WORK/venv/bin/python" -c "import nabla, sys; sys.exit(not nabla.__file__.startswith('$PKG/'))"
echo "pip-install: passed"
