#!/usr/bin/env bash
# Sets everything up, builds Loom and runs every test with CTest.
#   scripts/test.sh                 Release build in build/
#   LOOM_SANITIZE=ON scripts/test.sh  AddressSanitizer + UBSan build in build-asan/
#   LOOM_SANITIZE=ON LOOM_FUZZ=ON CXX=clang++ scripts/test.sh  the same, by clang and instrumented for
#                                     libFuzzer, in build-fuzz/: scripts/fuzz.sh then fuzzes with it
#   A sanitized build keeps its directory whatever LOOM_WITH_MPI says: switching it recompiles only
#   the files that differ (distributed/mpi/ and the distributed tests).
#   LOOM_WITH_MPI=OFF scripts/test.sh Release build without MPI in build-nompi/ (every process a group of
#                                     size 1; the tests that need more ranks are not registered)
#   LOOM_ISA_VARIANTS=OFF / LOOM_NATIVE=ON  one copy of the library, for the baseline / for this CPU
#   LOOM_WERROR=ON                  warnings in the library's code are errors (CI sets it)
#   LOOM_TEST_LABELS='a|b'          run only the tests with these CTest labels (areas: core, ops, ...,
#                                     distributed, examples, install)
# A Release build with MPI also runs the op, autograd, fast, conv, nn and optim tests a second time with
# LOOM_GEMM=dnnl: every product on oneDNN's backend, whatever this CPU would choose.
# A default x86-64 build has three copies of the library (baseline, x86-64-v3, x86-64-v4; see
# README.md): the suite runs once on the copy the loader picks for this CPU, then once more on each
# lower copy, with the CPU features that select the higher ones hidden from the loader.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
sanitize="${LOOM_SANITIZE:-OFF}"
fuzz="${LOOM_FUZZ:-OFF}"
with_mpi="${LOOM_WITH_MPI:-ON}"
if [ "$sanitize" = "ON" ]; then
  build="${BUILD_DIR:-$root/build-asan}"
  # -O1 -g1 (line tables: enough for symbolized reports) compiles 2.4x faster than -O2 -g; the
  # benchmarks are not built, since no test runs them.
  type=RelWithDebInfo
  extra=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DLOOM_BUILD_BENCHMARKS=OFF)
  # allocator_may_return_null: a request no machine can meet returns null, as glibc's does, so the
  # out-of-memory paths (tests/core/sizes_test.cpp) run instead of ASan stopping the process.
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:allocator_may_return_null=1}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp}"
  # eval checks that every node it placed in its consumer's buffer wrote there (docs/architecture.md)
  export LOOM_CHECK_BUFFER_PLAN="${LOOM_CHECK_BUFFER_PLAN:-1}"
  # One copy, compiled for this CPU: the sanitizers check the AVX-512 paths (the other copies are
  # the Release pass's).
  native="${LOOM_NATIVE:-ON}"
  variants="${LOOM_ISA_VARIANTS:-OFF}"
  if [ "$fuzz" = "ON" ]; then
    # The configuration scripts/fuzz.sh builds its harnesses in.
    build="${BUILD_DIR:-$root/build-fuzz}"
    extra+=(-DLOOM_FUZZ=ON)
  fi
else
  build="${BUILD_DIR:-$root/build}"
  type=Release
  native="${LOOM_NATIVE:-OFF}"
  variants="${LOOM_ISA_VARIANTS:-ON}"
  extra=()
  if [ "$with_mpi" = "OFF" ]; then
    build="${BUILD_DIR:-$root/build-nompi}"
    extra=(-DLOOM_BUILD_BENCHMARKS=OFF)  # no test runs them
  fi
fi
launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros}"  # lets ccache cache the tests' PCH
  # Paths relative to the checkout, so that another checkout (CI's fresh clone) hits the same cache
  # entries; NOHASHDIR for the -g1 builds, whose debug info would otherwise name the directory.
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
fi
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=$type -DLOOM_SANITIZE=$sanitize -DLOOM_WITH_MPI=$with_mpi \
  -DLOOM_WERROR="${LOOM_WERROR:-OFF}" \
  -DLOOM_NATIVE=$native -DLOOM_ISA_VARIANTS=$variants "${extra[@]}" "${launcher[@]}" >/dev/null
# Every online core: nproc would honour OMP_NUM_THREADS, which MPI users often export as 1.
cmake --build "$build" -j "$(getconf _NPROCESSORS_ONLN)"
# Two tests at a time (as many as the cores): the test binaries are mostly one thread's work, and
# the longest (test_ops, about 2 minutes sanitized) then runs beside the others. The tests that
# start mpirun or time faults are RUN_SERIAL (tests/ and examples/CMakeLists.txt).
jobs=(-j "$(getconf _NPROCESSORS_ONLN)")
labels=()
[ -n "${LOOM_TEST_LABELS:-}" ] && labels=(-L "$LOOM_TEST_LABELS")
cd "$build" && ctest "${jobs[@]}" --output-on-failure --timeout 600 "${labels[@]}"
if [ "$sanitize" != "ON" ] && [ -z "${LOOM_TEST_LABELS:-}" ] && [ "$with_mpi" = "ON" ]; then
  # The GEMM seam's oneDNN backend on any CPU: every float32 (and half) product of the op, autograd,
  # fused-op, nn and optim tests (bfloat16 training against float32 among them) through oneDNN
  # (kernels/gemm.h), its primitive cache and its threading.
  echo "== the op, autograd, fast, conv, nn and optim tests with every product on oneDNN (LOOM_GEMM=dnnl)"
  LOOM_GEMM=dnnl ctest "${jobs[@]}" --output-on-failure --timeout 600 -L '^(kernels|ops|autograd|fast|conv|nn|optim)$'
fi
if [ -d "$build/glibc-hwcaps" ]; then
  # The lower copies, as a CPU without AVX-512 (x86-64-v3) and without AVX2 (the baseline) loads them.
  # KernelIsa checks that the loader did.
  for level in "x86-64-v3:-AVX512F" "x86-64:-AVX2"; do
    isa="${level%%:*}" mask="${level#*:}"
    if [ "$isa" = "x86-64-v3" ] && ! /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q "x86-64-v3 (supported"; then
      continue  # this CPU cannot run the x86-64-v3 copy
    fi
    if [ "$isa" = "x86-64-v3" ] && ! /lib64/ld-linux-x86-64.so.2 --help 2>/dev/null | grep -q "x86-64-v4 (supported"; then
      continue  # without AVX-512 the run above already loaded the x86-64-v3 copy
    fi
    # Not the tests whose subject is process faults, hosts or installing: no kernel of theirs
    # depends on the copy.
    echo "== the same tests on the $isa copy of the library"
    GLIBC_TUNABLES="glibc.cpu.hwcaps=$mask" LOOM_EXPECT_ISA="$isa" ctest "${jobs[@]}" --output-on-failure --timeout 600 \
      -E '^(distributed_faults|multihost_mnist|install_consumer)$'
  done
fi
