#!/bin/sh
# Builds the libFuzzer targets of tests/fuzz with clang, ASan and UBSan in
# their own tree (BUILD_DIR, default build-fuzz) and runs each for
# FUZZ_SECONDS (default 15) from its checked-in seed corpus. A crash fails the
# script; its input lands in BUILD_DIR/crashes/ (make it a regression test).
# FUZZ_SEED (default 1) fixes libFuzzer's random seed, so a CI run explores
# the same inputs each time and a failure there is the change's, not luck's
# (stop 22's CI met a toy op's bug on a new random path); FUZZ_SEED=0 draws a
# fresh seed for longer campaigns (FUZZ_SECONDS=600 FUZZ_SEED=0).
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-15}
FUZZ_SEED=${FUZZ_SEED:-1}
NAMES="program run_config npy safetensors idx csv onnx"
TARGETS=""
for n in $NAMES; do TARGETS="$TARGETS fuzz_$n"; done
# Only the targets and the libraries they link are built; OpenCL stays out.
CC=clang CXX=clang++ BUILD_DIR=$BUILD_DIR TARGETS=$TARGETS scripts/build.sh -DNABLA_FUZZ=ON \
  -DNABLA_SANITIZE=address -DNABLA_WITH_OPENCL=OFF -DNABLA_BUILD_BENCHMARKS=OFF \
  -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link
mkdir -p "$BUILD_DIR/crashes"
for n in $NAMES; do
  # New inputs go to a scratch corpus; the checked-in seeds stay as they are.
  mkdir -p "$BUILD_DIR/corpus/$n"
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:abort_on_error=1} \
    UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
    "$BUILD_DIR/bin/fuzz_$n" -seed="$FUZZ_SEED" -max_total_time="$FUZZ_SECONDS" -max_len=8192 -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$BUILD_DIR/crashes/$n-" -print_final_stats=1 "$BUILD_DIR/corpus/$n" "tests/fuzz/corpus/$n"
done
echo "fuzz: no crash in $FUZZ_SECONDS s per target ($NAMES)"
