#!/bin/sh
# Installs the Debian 12 packages nabla needs, and nothing when they are all
# present (so it is safe to run before every build). Uses sudo only when not
# root. The list is the build's dependencies plus what the tests, examples and dataset
# need.
set -eu

PACKAGES="build-essential cmake g++ libboost-dev libboost-filesystem-dev libboost-system-dev
  libtbb-dev libopenblas-dev libclblast-dev ocl-icd-opencl-dev opencl-headers
  pocl-opencl-icd clinfo libyaml-cpp-dev libgtest-dev libbenchmark-dev libcli11-dev
  libfmt-dev libspdlog-dev nlohmann-json3-dev graphviz libopenmpi-dev openmpi-bin
  python3-torch python3-numpy dataset-fashion-mnist fortunes-min fortunes ccache gnuplot-nox zlib1g-dev ninja-build
  pybind11-dev python3-dev python3-pytest python3-pip python3-venv python3-mypy libdnnl-dev clang libclang-rt-14-dev clang-format
  libonnx-dev libprotobuf-dev python3-onnx"

missing=""
for pkg in $PACKAGES; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  case "$status" in
    "install ok installed") ;;
    *) missing="$missing $pkg" ;;
  esac
done

if [ -z "$missing" ]; then
  echo "setup: all $(echo $PACKAGES | wc -w) packages are installed"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  SUDO=""
else
  SUDO="sudo"
fi
echo "setup: installing:$missing"
$SUDO apt-get update
# shellcheck disable=SC2086  # the list is meant to split into words
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing
