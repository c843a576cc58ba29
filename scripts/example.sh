#!/bin/sh
# The main job: train the 784-256-256-10 MLP on Fashion-MNIST for 10 epochs
# (examples/fashion_mnist_mlp.yaml) and print the test accuracy per epoch and
# at the end. Outputs (checkpoints, metrics, plot) go to runs/.
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
"$BUILD_DIR/bin/nabla" run examples/fashion_mnist_mlp.yaml "$@"
