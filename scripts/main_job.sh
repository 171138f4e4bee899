#!/usr/bin/env bash
# Sets everything up, builds Loom in Release and runs the main job: data-parallel training of the
# 784-512-512-10 MLP on Fashion-MNIST on 2 processes (mpirun -np 2, 1 thread each), 3 epochs.
# Extra arguments go to the example (see build-main/examples/mnist --help), e.g. --model cnn.
# It builds only what it runs: one copy of the library, the one the dynamic loader would pick for this
# CPU from the three that scripts/test.sh builds for any x86-64 (compiled with the same flags, so
# ccache shares their objects), and the mnist example, in build-main/.
# RANKS=N picks the number of processes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
build="${BUILD_DIR:-$root/build-main}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
level=()
if [ "$(uname -m)" = x86_64 ]; then
  for l in x86-64-v4 x86-64-v3; do
    if /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q "$l (supported"; then
      level=(-DLOOM_KERNEL_LEVEL="$l")
      break
    fi
  done
fi
if command -v ccache >/dev/null; then
  # As scripts/test.sh sets them: the same objects hit the same cache entries.
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_ISA_VARIANTS=OFF -DLOOM_NATIVE=OFF "${level[@]}" \
  -DLOOM_WERROR="${LOOM_WERROR:-OFF}" -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
# Every online core: nproc would honour OMP_NUM_THREADS, which MPI users often export as 1.
cmake --build "$build" -j "$(getconf _NPROCESSORS_ONLN)" --target mnist
mpi_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
cd "$root"
exec mpirun -np "${RANKS:-2}" "${mpi_flags[@]}" "$build/examples/mnist" --out-dir runs/mnist "$@"
