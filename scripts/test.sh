#!/usr/bin/env bash
# Sets everything up, builds Loom and runs every test with CTest.
#   scripts/test.sh                 Release build in build/
#   LOOM_SANITIZE=ON scripts/test.sh  AddressSanitizer + UBSan build in build-asan/
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/scripts/setup.sh"
sanitize="${LOOM_SANITIZE:-OFF}"
if [ "$sanitize" = "ON" ]; then
  build="${BUILD_DIR:-$root/build-asan}"
  type=RelWithDebInfo
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
  export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
  export LSAN_OPTIONS="${LSAN_OPTIONS:-suppressions=$root/scripts/lsan.supp}"
else
  build="${BUILD_DIR:-$root/build}"
  type=Release
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=$type -DLOOM_SANITIZE=$sanitize "${launcher[@]}" >/dev/null
cmake --build "$build" -j "$(nproc)"
# Kernels use up to 2 threads; the tests themselves run one at a time.
cd "$build" && ctest --output-on-failure --timeout 600
