#!/bin/sh
# The whole test suite: a Release build with every test, then an
# AddressSanitizer + UndefinedBehaviorSanitizer build running the same tests.
set -eu
cd "$(dirname "$0")/.."
JOBS=${JOBS:-2}

BUILD_DIR=build scripts/build.sh -DNABLA_BUILD_BENCHMARKS=OFF
(cd build && ctest --output-on-failure -j "$JOBS")
# The plugin SDK as an outside author uses it: install, build the example
# plugin against the install, check and train with it.
BUILD_DIR=build scripts/test_plugin_sdk.sh

BUILD_DIR=build-asan scripts/build.sh -DNABLA_BUILD_BENCHMARKS=OFF -DNABLA_SANITIZE=address
# Plugins are dlopen'ed and never unloaded on purpose; LSan still checks the rest.
(cd build-asan && ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
  UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} ctest --output-on-failure -j "$JOBS")
echo "test: all tests passed in build/ and build-asan/"
