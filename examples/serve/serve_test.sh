#!/usr/bin/env bash
# Trains examples/mnist briefly, exports its forward pass, and serves it from examples/serve, a
# program without the model's code: the served accuracy must be the trained program's, to the digit.
# Usage: serve_test.sh MNIST SERVE WORKDIR
set -euo pipefail
mnist=$1 serve=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$mnist" --steps 30 --epochs 1 --test-limit 1500 --out-dir "$work" --export "$work/mlp.loomfn" | tee "$work/train.txt"
trained=$(sed -n 's/.*test accuracy \([0-9.]*\)%.*/\1/p' "$work/train.txt")
# Batches of 700: other shapes than the one traced (a shapeless export), and a last batch of 100.
"$serve" "$work/mlp.loomfn" --limit 1500 --batch-size 700 | tee "$work/serve.txt"
served=$(sed -n 's/^serve: test accuracy \([0-9.]*\)%.*/\1/p' "$work/serve.txt")
if [ -n "$trained" ] && [ "$trained" = "$served" ]; then
  echo "serve: ok ($trained% both)"
else
  echo "serve: accuracy differs: trained '$trained', served '$served'"
  exit 1
fi
