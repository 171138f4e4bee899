#!/usr/bin/env bash
# Long differential run of Loom against PyTorch/numpy (tests/diff/README.md):
#   scripts/diff.sh [CASES] [SEED]      (default 20000 cases, a random seed that is printed)
# Builds the runner in build-diff/ (Release) when needed; extra arguments after SEED go to diff.py.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cases="${1:-20000}"
seed="${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}"
shift $(( $# > 2 ? 2 : $# ))
build="${LOOM_DIFF_BUILD:-$root/build-diff}"
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DLOOM_ISA_VARIANTS=OFF >/dev/null
fi
nice -n 10 cmake --build "$build" -j"$(getconf _NPROCESSORS_ONLN)" --target loom_diff >/dev/null
exec /usr/bin/python3 "$root/tests/diff/diff.py" --runner "$build/tests/loom_diff" --cases "$cases" --seed "$seed" "$@"
