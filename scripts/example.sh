#!/bin/sh
# The main job until training lands: make the example's inputs, then run the
# linear model forward and backward and print the loss, output and gradient.
set -eu
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
/usr/bin/python3 examples/make_inputs.py "$BUILD_DIR/examples"
"$BUILD_DIR/bin/nabla" exec examples/linear.yaml \
  --feed x="$BUILD_DIR/examples/x.npy" \
  --backward loss --fetch loss,y,w@GRAD
