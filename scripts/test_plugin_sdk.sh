#!/bin/sh
# The plugin SDK as a third-party author meets it (issue 8): installs
# BUILD_DIR (default build/) to a temporary prefix, builds the out-of-tree
# example examples/plugins/acme against it with find_package(nabla), lists
# its ops, checks its gradients, runs it with `nabla exec` (--plugin) and
# trains with `nabla run` (the run config's `plugins:` list, then --plugin),
# builds a project from `nabla plugin new` and one that links nabla::train
# (nabla/train.h), checks that a foreign compiler is
# refused at configure time, and installs a plugin where nabla finds it by
# default. Third-party plugins use nabla's C ABI (docs/plugin-abi.md): acme
# must need no C++ symbol of nabla, build with clang++ and still train in the
# GCC-built nabla, and examples/plugins/c_minimal (written in C) must build
# with the C compiler, pass gradcheck and train. acme carries OpenCL kernels
# built against the installed helpers (nabla/opencl/sdk_kernel.h,
# nabla_add_opencl_kernels), checked with gradcheck, opcheck and exec on the
# OpenCL device where there is one (PoCL in CI). Called by scripts/test.sh
# after the Release tests.
set -eu
cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/nabla-plugin-sdk.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
P=$WORK/prefix
NABLA=$P/bin/nabla
export OPENBLAS_NUM_THREADS=1
unset NABLA_PLUGIN_PATH || true
PY=${PYTHON:-/usr/bin/python3}
GEN=""
command -v ninja >/dev/null 2>&1 && GEN="-G Ninja"

step() { echo "plugin-sdk: $*"; }
fail() { echo "plugin-sdk: FAILED: $*" >&2; exit 1; }

step "install $BUILD_DIR to $P"
cmake --install "$BUILD_DIR" --prefix "$P" >"$WORK/install.log"
for f in bin/nabla lib/libnabla_core.so lib/libnabla_cpu.so lib/nabla/plugins/libmath_ops.so \
         lib/nabla/plugins/libnn_ops.so lib/nabla/plugins/libcontrol_flow.so include/nabla/plugin.h \
         include/nabla/op_registry.h lib/cmake/nabla/nablaConfig.cmake lib/cmake/nabla/nablaConfigVersion.cmake \
         lib/cmake/nabla/nablaTargets.cmake lib/cmake/nabla/nabla_plugin.cmake \
         include/nabla/opkit/opkit.h include/nabla/cpu/cpu.h lib/libnabla_train.so \
         include/nabla/train.h include/nabla/train/trainer.h include/nabla/train/pipeline.h include/nabla/c_api.h \
         include/nabla/sdk/plugin.h include/nabla/sdk/opkit.h include/nabla/opencl/kernel.h \
         include/nabla/opencl/sdk_kernel.h include/nabla/opencl/opencl_c.h lib/cmake/nabla/nabla_opencl.cmake \
         lib/cmake/nabla/nabla_opencl_prelude.cl; do
  [ -e "$P/$f" ] || fail "the install has no $f"
done
# The OpenCL backend is a device plugin beside the standard plugins, loaded
# on demand: nothing installed links it.
if [ -f "$BUILD_DIR/lib/nabla/devices/libnabla_opencl.so" ]; then
  [ -f "$P/lib/nabla/devices/libnabla_opencl.so" ] || fail "the install has no lib/nabla/devices/libnabla_opencl.so"
  for f in "$P"/bin/nabla "$P"/lib/*.so "$P"/lib/nabla/plugins/*.so; do
    if readelf -d "$f" | grep -E 'NEEDED.*(libnabla_opencl|libOpenCL|libclblast)'; then
      fail "$f links the OpenCL backend or OpenCL, which must load only when a run asks for opencl"
    fi
  done
fi
# The public headers stand alone: no TBB, yaml-cpp or Boost (oneDNN only in
# the SDK's opt-in nabla/cpu/dnnl.h, for plugins that link it themselves).
if grep -rnE '#include *[<"](tbb|oneapi/tbb|yaml-cpp|boost)/' "$P/include/nabla"; then
  fail "a public header includes TBB, yaml-cpp or Boost"
fi
# The installed binary finds its core (RUNPATH) and its standard plugins
# (lib/nabla/plugins next to it), from any working directory, and not the
# build tree's.
(cd / && "$NABLA" ops --json) >"$WORK/ops_all.json"
grep -q "\"path\": \"$P/lib/nabla/plugins/libmath_ops.so\"" "$WORK/ops_all.json" \
  || fail "the installed nabla did not load its own standard plugins from $P/lib/nabla/plugins"
grep -q "$ROOT/$BUILD_DIR" "$WORK/ops_all.json" && fail "the installed nabla loaded plugins from the build tree"

step "build examples/plugins/acme against the install (find_package)"
cp -r examples/plugins/acme "$WORK/acme"
rm -rf "$WORK/acme/build" "$WORK/acme/data" "$WORK/acme/runs"
ACME=$WORK/acme
cmake -S "$ACME" -B "$ACME/build" $GEN -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" >"$WORK/acme_configure.log" \
  || { cat "$WORK/acme_configure.log"; fail "configuring acme"; }
cmake --build "$ACME/build" >"$WORK/acme_build.log" || { cat "$WORK/acme_build.log"; fail "building acme"; }
LIB=$ACME/build/libacme.so
[ -f "$LIB" ] || fail "no $LIB"
# Built the way nabla_add_plugin promises: the C ABI's manifest and entry point exported, no UNIQUE symbols,
# nothing of nabla's C++ needed and no compiler spelled into an ABI tag.
nm -D --defined-only "$LIB" | grep -q ' nabla_plugin_init$' || fail "libacme.so exports no entry point"
nm -D --defined-only "$LIB" | grep -q ' nabla_plugin_manifest_v1$' || fail "libacme.so exports no manifest"
if nm -D --defined-only "$LIB" | grep -q ' u '; then fail "libacme.so has STB_GNU_UNIQUE symbols"; fi
if nm -D --undefined-only -C "$LIB" | grep -i 'nabla'; then fail "libacme.so needs nabla symbols"; fi
if nm -D "$LIB" | grep -E 'nabla_abi_|_gcc[0-9]'; then fail "libacme.so carries a compiler-specific ABI tag"; fi
if readelf -d "$LIB" | grep -E 'NEEDED.*(libnabla|libOpenCL)'; then fail "libacme.so links a nabla library or OpenCL"; fi
echo "plugin-sdk: libacme.so needs no nabla symbol ($(nm -D --undefined-only "$LIB" | wc -l) undefined, all libc/libstdc++)"

step "nabla ops --plugin libacme.so --only-plugin"
"$NABLA" ops --plugin "$LIB" --only-plugin >"$WORK/acme_ops.txt"
cat "$WORK/acme_ops.txt" | grep -E '^(OP|acme_)'
for op in acme_linear acme_swish acme_swish_grad; do
  grep -q "^$op .* acme .*cpu: float32 float64" "$WORK/acme_ops.txt" || fail "$op is not listed with its kernels"
done
grep -q "^3 ops from 1 plugins" "$WORK/acme_ops.txt" || fail "--only-plugin listed more than acme's ops"
(cd "$ACME/build" && ctest --output-on-failure >"$WORK/acme_ctest.log") || { cat "$WORK/acme_ctest.log"; fail "acme's ctest"; }

step "nabla gradcheck --all --only-plugin --plugin libacme.so"
"$NABLA" gradcheck --all --only-plugin --plugin "$LIB" >"$WORK/acme_gradcheck.txt" \
  || { cat "$WORK/acme_gradcheck.txt"; fail "gradcheck of acme's ops"; }
grep -q "^PASS  acme_swish " "$WORK/acme_gradcheck.txt" || fail "gradcheck did not check acme_swish"
grep -q "^PASS  acme_linear " "$WORK/acme_gradcheck.txt" || fail "gradcheck did not check acme_linear"

step "acme's OpenCL kernels (built against the install's nabla/opencl/sdk_kernel.h)"
grep -q "^acme_swish .*opencl: float32 float64" "$WORK/acme_ops.txt" || fail "acme_swish is not listed with OpenCL kernels"
grep -q "^acme_swish_grad .*opencl: float32 float64" "$WORK/acme_ops.txt" \
  || fail "acme_swish_grad is not listed with OpenCL kernels"
if "$NABLA" devices | grep -q '^opencl:0'; then
  "$NABLA" gradcheck --all --only-plugin --plugin "$LIB" --device opencl >"$WORK/acme_gradcheck_cl.txt" \
    || { cat "$WORK/acme_gradcheck_cl.txt"; fail "gradcheck --device opencl of acme's ops"; }
  # acme_swish's check cases on the device: its forward kernel, and its grad op's kernel in the backward run.
  grep "^PASS  acme_swish .*opencl" "$WORK/acme_gradcheck_cl.txt" \
    || { cat "$WORK/acme_gradcheck_cl.txt"; fail "gradcheck --device opencl did not check acme_swish on OpenCL"; }
  "$NABLA" opcheck --plugin "$LIB" --op acme_swish --device opencl >"$WORK/acme_opcheck_cl.txt" \
    || { cat "$WORK/acme_opcheck_cl.txt"; fail "opcheck --device opencl of acme_swish"; }
  cat "$WORK/acme_opcheck_cl.txt"
else
  echo "plugin-sdk: no OpenCL device here: acme's OpenCL kernels are built and registered but not run"
fi

step "nabla exec with --plugin: acme_swish and its gradient against NumPy"
"$PY" - "$WORK/x.npy" <<'PY'
import sys, numpy as np
np.save(sys.argv[1], np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
PY
"$NABLA" exec "$ACME/programs/swish.yaml" --plugin "$LIB" --feed "x=$WORK/x.npy" --backward loss \
  --fetch y,x@GRAD --out "$WORK/swish"
SWISH_DIRS=swish
if "$NABLA" devices | grep -q '^opencl:0'; then
  # The same on OpenCL: acme's kernels, fed from the host.
  "$NABLA" exec "$ACME/programs/swish.yaml" --plugin "$LIB" --feed "x=$WORK/x.npy" --backward loss \
    --fetch y,x@GRAD --out "$WORK/swish_cl" --device opencl 2>"$WORK/swish_cl.err" \
    || { cat "$WORK/swish_cl.err"; fail "exec of acme_swish on OpenCL"; }
  if grep -q "acme_swish.*no opencl kernel" "$WORK/swish_cl.err"; then cat "$WORK/swish_cl.err"; fail "acme_swish fell back to the CPU"; fi
  SWISH_DIRS="swish swish_cl"
fi
"$PY" - "$WORK" $SWISH_DIRS <<'PY'
import sys, numpy as np
d = sys.argv[1]
x = np.load(d + "/x.npy").astype(np.float64)
s = 1 / (1 + np.exp(-1.5 * x))
for out in sys.argv[2:]:
    y, dx = np.load(f"{d}/{out}/y.npy"), np.load(f"{d}/{out}/x@GRAD.npy")
    assert np.allclose(y, x * s, rtol=1e-5, atol=1e-6), (out, y, x * s)
    assert np.allclose(dx, s + 1.5 * x * s * (1 - s), rtol=1e-5, atol=1e-6), (out, dx)
    print(f"plugin-sdk: exec ({out}) matches NumPy (y and x@GRAD, 12 values each)")
PY

step "nabla run with the run config's plugins: list (3 classes, 300 samples)"
"$PY" "$ACME/make_data.py" "$ACME/data"
(cd "$WORK" && "$NABLA" run "$ACME/train.yaml" --progress none) >"$WORK/run.log" || { cat "$WORK/run.log"; fail "nabla run"; }
ACC=$(sed -n 's/^final eval accuracy: \([0-9.]*\) %$/\1/p' "$WORK/run.log")
echo "plugin-sdk: final eval accuracy $ACC %"
# The blobs are well apart: a network whose acme ops or gradients were wrong would not get there.
"$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 90 else 1)" "${ACC:-0}" \
  || { cat "$WORK/run.log"; fail "the acme network did not learn (eval accuracy '$ACC', expected >= 90 %)"; }

step "nabla run --plugin, with the plugins: line taken out of the config"
grep -v '^plugins:' "$ACME/train.yaml" >"$ACME/train_cli.yaml"
(cd "$WORK" && "$NABLA" run "$ACME/train_cli.yaml" --plugin "$LIB" --steps 20 --progress none) >"$WORK/run_cli.log" \
  || { cat "$WORK/run_cli.log"; fail "nabla run --plugin"; }
# Without the plugin the program's ops are unknown: exit 2, one line.
set +e
(cd "$WORK" && "$NABLA" run "$ACME/train_cli.yaml" --steps 1) >/dev/null 2>"$WORK/noplugin.err"
rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l <"$WORK/noplugin.err")" = 1 ] && grep -q acme_ "$WORK/noplugin.err" \
  || { cat "$WORK/noplugin.err"; fail "a program with acme ops ran without the plugin (exit $rc)"; }

step "nabla plugin new foo, built against the install"
"$NABLA" plugin new foo --dir "$WORK/foo" >/dev/null
cmake -S "$WORK/foo" -B "$WORK/foo/build" $GEN -DCMAKE_PREFIX_PATH="$P" >"$WORK/foo_configure.log" \
  || { cat "$WORK/foo_configure.log"; fail "configuring the new plugin"; }
cmake --build "$WORK/foo/build" >"$WORK/foo_build.log" || { cat "$WORK/foo_build.log"; fail "building the new plugin"; }
"$NABLA" ops --plugin "$WORK/foo/build/libfoo.so" --only-plugin | grep -q '^foo_softplus_grad ' \
  || fail "the new plugin does not list foo_softplus_grad"
(cd "$WORK/foo/build" && ctest --output-on-failure >"$WORK/foo_ctest.log") || { cat "$WORK/foo_ctest.log"; fail "foo's ctest"; }
"$NABLA" gradcheck --all --only-plugin --plugin "$WORK/foo/build/libfoo.so" >"$WORK/foo_gradcheck.txt" \
  || { cat "$WORK/foo_gradcheck.txt"; fail "gradcheck of the new plugin"; }
# Every doc the scaffold's README points at ships with the install.
for doc in $(grep -o "$P/share/doc/nabla/[a-z_-]*\.md" "$WORK/foo/README.md"); do
  [ -f "$doc" ] || fail "foo/README.md points at $doc, which the install lacks"
done
grep -q "$P/share/doc/nabla/writing-plugins.md" "$WORK/foo/README.md" || fail "foo/README.md names no installed guide"

step "a program built against the install with nabla::train appends an optimizer"
mkdir -p "$WORK/trainuse"
cat >"$WORK/trainuse/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(trainuse LANGUAGES CXX)
find_package(nabla REQUIRED CONFIG)
add_executable(trainuse main.cc)
target_link_libraries(trainuse PRIVATE nabla::train)
CMAKE
cat >"$WORK/trainuse/main.cc" <<'CXX'
#include <iostream>

#include "nabla/nabla.h"
#include "nabla/train.h"

int main() {
  nabla::PluginManager::Instance().LoadDefaults();
  nabla::ProgramDesc p = nabla::ParseProgram(R"(format: nabla-program/1
blocks:
  - idx: 0
    parent: -1
    vars:
      x: {shape: [-1, 2], dtype: float32, stop_gradient: true}
      w: {shape: [2, 1], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.5}}
    ops:
      - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [y]}}
      - {type: mean, inputs: {X: [y]}, outputs: {Out: [loss]}}
)", "trainuse.yaml");
  nabla::train::OptimizerOptions o;
  o.type = "adam";
  nabla::train::AppendOptimizer(p, nabla::AppendBackward(p, "loss"), o);
  std::cout << p.Root()->Op(p.Root()->OpSize() - 1)->Type() << "\n";
}
CXX
cmake -S "$WORK/trainuse" -B "$WORK/trainuse/build" $GEN -DCMAKE_PREFIX_PATH="$P" >"$WORK/trainuse_configure.log" \
  || { cat "$WORK/trainuse_configure.log"; fail "configuring a project that uses nabla::train"; }
cmake --build "$WORK/trainuse/build" >"$WORK/trainuse_build.log" \
  || { cat "$WORK/trainuse_build.log"; fail "building a project that uses nabla::train"; }
[ "$("$WORK/trainuse/build/trainuse")" = adam ] || fail "nabla::train from the install did not append adam"

step "a program built against the install runs a run config as nabla run does (checkpoints bit for bit)"
mkdir -p "$WORK/runuse/a" "$WORK/runuse/b"
"$PY" - "$WORK/runuse" <<'PYTHON'
import random, sys
random.seed(3)
rows = ["label,f0,f1,f2,f3"]
centers = [(1, 0, 0, 1), (0, 1, 1, 0), (-1, -1, 0, 0)]
for i in range(120):
    c = i % 3
    rows.append(",".join([str(c)] + [f"{v + random.uniform(-0.6, 0.6):.6f}" for v in centers[c]]))
open(sys.argv[1] + "/train.csv", "w").write("\n".join(rows) + "\n")
PYTHON
cat >"$WORK/runuse/run.yaml" <<'YAML'
seed: 5
threads: 1
loss: loss
program:
  format: nabla-program/1
  blocks:
    - idx: 0
      parent: -1
      vars:
        x: {shape: [-1, 4], dtype: float32, stop_gradient: true}
        label: {shape: [-1, 1], dtype: int64}
        w: {shape: [4, 3], dtype: float32, persistable: true, init: {type: uniform_random, min: -0.1, max: 0.1, seed: 3}}
        b: {shape: [3], dtype: float32, persistable: true, init: {type: fill_constant, value: 0.0}}
      ops:
        - {type: mul, inputs: {X: [x], Y: [w]}, outputs: {Out: [xw]}}
        - {type: elementwise_add, inputs: {X: [xw], Y: [b]}, outputs: {Out: [logits]}, attrs: {axis: 1}}
        - {type: softmax_with_cross_entropy, inputs: {Logits: [logits], Label: [label]}, outputs: {Softmax: [prob], Loss: [ce]}}
        - {type: mean, inputs: {X: [ce]}, outputs: {Out: [loss]}}
optimizer: {type: adam, lr: 0.01}
data:
  format: csv
  train: {path: train.csv, feeds: {x: "1:5", label: label}}
  batch_size: 16
epochs: 2
metrics: {accuracy: {}}
checkpoint: {dir: ckpt}
logging: {progress: none}
YAML
cat >"$WORK/runuse/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.25)
project(runuse LANGUAGES CXX)
find_package(nabla REQUIRED CONFIG)
add_executable(runuse main.cc)
target_link_libraries(runuse PRIVATE nabla::train)
CMAKE
cat >"$WORK/runuse/main.cc" <<'CXX'
#include <iostream>

#include "nabla/nabla.h"
#include "nabla/train/run_config.h"
#include "nabla/train/trainer.h"

int main(int argc, char** argv) {
  nabla::PluginManager::Instance().LoadDefaults();
  const nabla::train::RunConfig config = nabla::train::LoadRunConfig(argv[1]);
  const nabla::train::RunSummary s = nabla::train::RunTraining(config, {}, std::cout, false);
  std::cout << "steps " << s.steps << " checkpoint " << s.last_checkpoint << "\n";
  return s.steps > 0 ? 0 : 1;
}
CXX
cmake -S "$WORK/runuse" -B "$WORK/runuse/build" $GEN -DCMAKE_PREFIX_PATH="$P" >"$WORK/runuse_configure.log" \
  || { cat "$WORK/runuse_configure.log"; fail "configuring a project that runs a run config"; }
cmake --build "$WORK/runuse/build" >"$WORK/runuse_build.log" \
  || { cat "$WORK/runuse_build.log"; fail "building a project that runs a run config"; }
(cd "$WORK/runuse/a" && "$NABLA" run ../run.yaml >out.txt) || fail "nabla run of the tiny config"
# OpenBLAS picks its kernels when it loads, before main: the embedding
# program starts with the ones the binary chose for itself (it sets
# OPENBLAS_CORETYPE and re-executes; Debian's OpenBLAS falls back to SSE3
# kernels, with other rounding, on CPUs it does not know).
CORE=$("$NABLA" --version | sed -n 's/.*OpenBLAS kernels: \([A-Za-z0-9]*\).*/\1/p')
(cd "$WORK/runuse/b" && OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$CORE} "$WORK/runuse/build/runuse" ../run.yaml >out.txt) \
  || { cat "$WORK/runuse/b/out.txt"; fail "RunTraining from the install"; }
grep -q "steps 16 checkpoint ckpt/ckpt-00000016.safetensors" "$WORK/runuse/b/out.txt" \
  || { cat "$WORK/runuse/b/out.txt"; fail "RunTraining did not train 16 steps"; }
cmp "$WORK/runuse/a/ckpt/ckpt-00000016.safetensors" "$WORK/runuse/b/ckpt/ckpt-00000016.safetensors" \
  || fail "the embedded run's checkpoint differs from nabla run's"

step "examples/plugins/c_minimal, written in C: built with the C compiler against the install"
cp -r examples/plugins/c_minimal "$WORK/c_minimal"
rm -rf "$WORK/c_minimal/build" "$WORK/c_minimal/data" "$WORK/c_minimal/runs"
CM=$WORK/c_minimal
cmake -S "$CM" -B "$CM/build" $GEN -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" >"$WORK/cm_configure.log" \
  || { cat "$WORK/cm_configure.log"; fail "configuring c_minimal"; }
cmake --build "$CM/build" >"$WORK/cm_build.log" || { cat "$WORK/cm_build.log"; fail "building c_minimal"; }
CMLIB=$CM/build/libc_minimal.so
if nm -D --undefined-only "$CMLIB" | grep -E '_Z|nabla'; then fail "libc_minimal.so needs C++ or nabla symbols"; fi
"$NABLA" gradcheck --all --only-plugin --plugin "$CMLIB" >"$WORK/cm_gradcheck.txt" \
  || { cat "$WORK/cm_gradcheck.txt"; fail "gradcheck of c_minimal"; }
grep -q "^PASS  c_minimal_softsign " "$WORK/cm_gradcheck.txt" || fail "gradcheck did not check c_minimal_softsign"
"$PY" "$ACME/make_data.py" "$CM/data"
(cd "$WORK" && "$NABLA" run "$CM/train.yaml" --progress none) >"$WORK/cm_run.log" \
  || { cat "$WORK/cm_run.log"; fail "nabla run with c_minimal"; }
ACC=$(sed -n 's/^final eval accuracy: \([0-9.]*\) %$/\1/p' "$WORK/cm_run.log")
echo "plugin-sdk: c_minimal final eval accuracy $ACC %"
"$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 90 else 1)" "${ACC:-0}" \
  || { cat "$WORK/cm_run.log"; fail "the c_minimal network did not learn (eval accuracy '$ACC', expected >= 90 %)"; }

# A device plugin on the C ABI, as a third party would write it: it must
# list its device and run a program there with the CPU's bits.
step "examples/devices/skeleton, a device plugin: built against the install, listed, and gives the CPU's results"
cp -r examples/devices/skeleton "$WORK/skeleton"
rm -rf "$WORK/skeleton/build"
SK=$WORK/skeleton
cmake -S "$SK" -B "$SK/build" $GEN -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$P" >"$WORK/sk_configure.log" \
  || { cat "$WORK/sk_configure.log"; fail "configuring the skeleton device"; }
cmake --build "$SK/build" >"$WORK/sk_build.log" || { cat "$WORK/sk_build.log"; fail "building the skeleton device"; }
SKLIB=$SK/build/libskeleton.so
if nm -D --undefined-only -C "$SKLIB" | grep -i 'nabla'; then fail "libskeleton.so needs nabla symbols"; fi
"$NABLA" devices --plugin "$SKLIB" | grep -q '^skeleton:0 ' || fail "nabla devices --plugin does not list skeleton:0"
NABLA_PLUGIN_PATH="$SK/build" "$NABLA" devices | grep -q '^skeleton:0 ' \
  || fail "nabla devices does not list skeleton:0 from NABLA_PLUGIN_PATH"
"$PY" -c "import sys, numpy as np; np.save(sys.argv[1], np.linspace(-2, 2, 12, dtype=np.float32).reshape(4, 3))" \
  "$WORK/sk_x.npy"
for d in cpu skeleton; do
  "$NABLA" exec "$SK/programs/add_relu.yaml" --plugin "$SKLIB" --device "$d" --feed "x=$WORK/sk_x.npy" --fetch y \
    --out "$WORK/sk_$d" >/dev/null || fail "nabla exec add_relu.yaml --device $d"
done
cmp "$WORK/sk_cpu/y.npy" "$WORK/sk_skeleton/y.npy" || fail "y on the skeleton device differs from y on the CPU"
set +e
"$NABLA" exec "$SK/programs/no_kernel.yaml" --plugin "$SKLIB" --device skeleton --feed "x=$WORK/sk_x.npy" \
  >/dev/null 2>"$WORK/sk_no_kernel.err"
rc=$?
set -e
[ "$rc" = 2 ] && [ "$(wc -l <"$WORK/sk_no_kernel.err")" = 1 ] && grep -q "op 'exp'.*skeleton" "$WORK/sk_no_kernel.err" \
  || { cat "$WORK/sk_no_kernel.err"; fail "an op without a skeleton kernel did not fail in one line (exit $rc)"; }
(cd "$SK/build" && ctest --output-on-failure >"$WORK/sk_ctest.log") || { cat "$WORK/sk_ctest.log"; fail "skeleton's ctest"; }
echo "plugin-sdk: the skeleton device plugin runs add_relu.yaml with the CPU's bits"

if command -v clang++ >/dev/null 2>&1; then
  step "acme built with clang++ loads into the GCC-built nabla and trains"
  cmake -S "$ACME" -B "$WORK/acme-clang" $GEN -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_PREFIX_PATH="$P" >"$WORK/clang.log" 2>&1 || { cat "$WORK/clang.log"; fail "configuring acme with clang++"; }
  grep -q '^CMAKE_CXX_COMPILER:[A-Z]*=.*clang' "$WORK/acme-clang/CMakeCache.txt" || fail "acme-clang is not built with clang"
  cmake --build "$WORK/acme-clang" >>"$WORK/clang.log" 2>&1 || { cat "$WORK/clang.log"; fail "building acme with clang++"; }
  # train.yaml names build/libacme.so: run a copy of the project whose build/ is the clang one.
  mkdir -p "$WORK/acme-clang-run"
  cp -r "$ACME/programs" "$ACME/train.yaml" "$ACME/data" "$WORK/acme-clang-run/"
  ln -s "$WORK/acme-clang" "$WORK/acme-clang-run/build"
  "$NABLA" gradcheck --all --only-plugin --plugin "$WORK/acme-clang/libacme.so" >"$WORK/clang_gradcheck.txt" \
    || { cat "$WORK/clang_gradcheck.txt"; fail "gradcheck of the clang-built acme"; }
  (cd "$WORK" && "$NABLA" run "$WORK/acme-clang-run/train.yaml" --progress none) >"$WORK/clang_run.log" \
    || { cat "$WORK/clang_run.log"; fail "nabla run with the clang-built acme"; }
  ACC=$(sed -n 's/^final eval accuracy: \([0-9.]*\) %$/\1/p' "$WORK/clang_run.log")
  echo "plugin-sdk: clang-built acme final eval accuracy $ACC %"
  "$PY" -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 90 else 1)" "${ACC:-0}" \
    || { cat "$WORK/clang_run.log"; fail "the clang-built acme network did not learn (accuracy '$ACC')"; }
fi

step "cmake --install the plugin into nabla's prefix: loaded by default"
cmake --install "$ACME/build" --prefix "$P" >/dev/null
[ -f "$P/lib/nabla/plugins/libacme.so" ] || fail "libacme.so was not installed to lib/nabla/plugins"
"$NABLA" ops | grep -q '^acme_swish ' || fail "the installed acme plugin is not loaded by default"

echo "plugin-sdk: all checks passed"
