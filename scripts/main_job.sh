#!/usr/bin/env bash
# Sets everything up, builds Loom in Release and runs the main job.
# Today the main job is the demo in examples/demo.cpp (a small network trained with Loom's ops and
# autograd); the data-parallel Fashion-MNIST training replaces it when examples/mnist lands.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
build="${BUILD_DIR:-$root/build}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)" --target demo
"$build/examples/demo" "$@"
