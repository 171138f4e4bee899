#!/usr/bin/env bash
# Sets everything up, builds Loom in Release and runs the main job: data-parallel training of the
# 784-512-512-10 MLP on Fashion-MNIST on 2 processes (mpirun -np 2, 1 thread each), 3 epochs.
# Extra arguments go to the example (see build-main/examples/mnist --help), e.g. --model cnn.
# It builds only what it runs: one copy of the library, compiled for this CPU (not the three copies
# scripts/test.sh builds for any x86-64), and the mnist example, in build-main/.
# RANKS=N picks the number of processes.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
build="${BUILD_DIR:-$root/build-main}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_NATIVE=ON -DLOOM_ISA_VARIANTS=OFF \
  -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCHMARKS=OFF "${launcher[@]}" >/dev/null
# Every online core: nproc would honour OMP_NUM_THREADS, which MPI users often export as 1.
cmake --build "$build" -j "$(getconf _NPROCESSORS_ONLN)" --target mnist
mpi_flags=(--oversubscribe --bind-to none)
[ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
cd "$root"
exec mpirun -np "${RANKS:-2}" "${mpi_flags[@]}" "$build/examples/mnist" --out-dir runs/mnist "$@"
