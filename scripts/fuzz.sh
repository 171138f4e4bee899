#!/usr/bin/env bash
# Fuzzes every reader of outside bytes (tests/fuzz/README.md) with libFuzzer, SECONDS each
# (default 30): sets up, builds the harnesses with clang in build-fuzz/ (the library instrumented,
# ASan + UBSan), writes the seed corpora with Loom's own writers, then runs each harness in turn.
# Fails if any harness finds a crash, a sanitizer report, an error the API does not document, an
# absurd allocation or a wrong read; the input is kept as build-fuzz/fuzz/artifacts/<harness>-*.
#   scripts/fuzz.sh [SECONDS]     FUZZ_ONLY="npy idx" runs only those harnesses
# New inputs that reach new code are kept in build-fuzz/fuzz/corpus/<harness>/ for the next run.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-30}"
"$root/scripts/setup.sh"
# libFuzzer's runtime is in compiler-rt, which clang only recommends.
if ! dpkg-query -W -f='${Status}' libclang-rt-dev 2>/dev/null | grep -q "install ok installed"; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q libclang-rt-dev >&2
fi
build="${BUILD_DIR:-$root/build-fuzz}"
launcher=()
if command -v ccache >/dev/null; then  # cache entries shared between checkouts, as in scripts/test.sh
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$root}" CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-true}"
fi
# -O1 -g1 as the sanitizer pass of scripts/test.sh: fast to compile, symbolized reports. A build
# that `LOOM_SANITIZE=ON LOOM_FUZZ=ON CXX=clang++ scripts/test.sh` made (CI's) is used as it is;
# otherwise only the library and the harnesses are built.
if ! grep -q "^LOOM_FUZZ:BOOL=ON" "$build/CMakeCache.txt" 2>/dev/null; then
  cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" -DLOOM_FUZZ=ON -DLOOM_ISA_VARIANTS=OFF -DLOOM_WITH_MPI=OFF \
    -DLOOM_BUILD_TESTS=OFF -DLOOM_BUILD_BENCHMARKS=OFF -DLOOM_BUILD_EXAMPLES=OFF "${launcher[@]}" >/dev/null
fi
cmake --build "$build" -j "$(getconf _NPROCESSORS_ONLN)" --target fuzz_all
work="$build/fuzz"
mkdir -p "$work/artifacts"
"$build/tests/fuzz/fuzz_seeds" "$work/seeds"

# One thread: the harnesses run one at a time on one core. A fuzz input is a few KB, so no single
# allocation should come near 64 MB: a larger one is a header's size trusted (-malloc_limit_mb).
export OMP_NUM_THREADS=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
failed=()
harnesses=(${FUZZ_ONLY:-npy safetensors idx text checkpoint gguf})
for h in "${harnesses[@]}"; do
  mkdir -p "$work/corpus/$h"
  dict=()
  [ -f "$root/tests/fuzz/$h.dict" ] && dict=(-dict="$root/tests/fuzz/$h.dict")
  echo "== fuzz_$h: ${seconds} s"
  if ! "$build/tests/fuzz/fuzz_$h" -max_total_time="$seconds" -timeout=10 -malloc_limit_mb=64 -rss_limit_mb=2048 \
      -print_final_stats=1 -artifact_prefix="$work/artifacts/$h-" "${dict[@]}" "$work/corpus/$h" "$work/seeds/$h" \
      >"$work/$h.log" 2>&1; then
    failed+=("$h")
    tail -n 60 "$work/$h.log"
  fi
  grep -E "^#[0-9]+ *DONE|^Done [0-9]+ runs|stat::number_of_executed_units" "$work/$h.log" || true
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in ${failed[*]} (inputs in $work/artifacts/, logs in $work/<harness>.log)"
fi
echo "fuzz: $((${#harnesses[@]} - ${#failed[@]})) passed, ${#failed[@]} failed"
[ ${#failed[@]} -eq 0 ]
