#!/bin/sh
# Configures (Release, Ninja; CMake picks up ccache when it is installed) and
# builds into BUILD_DIR (default build/). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DNABLA_SANITIZE=address. TARGETS
# (space-separated) builds only those targets.
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
# The machines have 2 cores shared with others: never build wider.
JOBS=${JOBS:-2}
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(cd .. && pwd)}"
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
# shellcheck disable=SC2086  # TARGETS is meant to split into words
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS:+--target $TARGETS}
