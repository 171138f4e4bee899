#!/usr/bin/env bash
# CTest example_transformer_lm_profile: `--profile` prints the profiler's table for the training step
# and writes a Chrome trace that parses as JSON, with the step's kinds of operation in it; under
# mpirun the trace has one process per rank; LOOM_PROFILE=FILE does the same for a whole program.
#   profile_test.sh MPIEXEC TRANSFORMER_LM_BINARY WORK_DIR
set -euo pipefail
mpiexec="$1" lm="$2" work="$3"
. "$(dirname "$0")/../script_prelude.sh"
args=(--steps 4 --log-every 2 --context 32 --batch-size 8 --threads 1 --val-windows 8 --sample-bytes 8)
fail() { echo "FAIL: $*"; exit 1; }
# Checks a trace: JSON, with process ids 0..ranks-1, X spans that include the given names.
check() {
  /usr/bin/env python3 - "$@" <<'PY' || exit 1
import json, sys
path, ranks, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
ev = json.load(open(path))["traceEvents"]
pids = {e["pid"] for e in ev}
seen = {e["name"] for e in ev if e["ph"] == "X"}
if pids != set(range(ranks)):
    sys.exit("FAIL: %s: processes %s, expected ranks 0..%d" % (path, sorted(pids), ranks - 1))
for n in names:
    if not any(s == n or s.startswith(n) for s in seen):
        sys.exit("FAIL: %s: no span named %s among %s" % (path, n, sorted(seen)[:40]))
print("%s: %d events, %d rank(s)" % (path, len(ev), ranks))
PY
}
"$lm" "${args[@]}" --profile "$work/np1.json" --profile-steps 2 >"$work/np1.log" 2>&1 || { cat "$work/np1.log"; fail "--profile"; }
grep -q "^Matmul " "$work/np1.log" || { cat "$work/np1.log"; fail "no Matmul row in the table"; }
grep -q "inside eval:" "$work/np1.log" || fail "no totals line in the table"
check "$work/np1.json" 1 eval Matmul ScaledDotProductAttention AdamUpdate
if command -v "$mpiexec" >/dev/null 2>&1 && [ "$mpiexec" != NONE ]; then
  "$mpiexec" -np 2 "${mpi[@]}" "$lm" "${args[@]}" --profile "$work/np2.json" --profile-steps 2 >"$work/np2.log" 2>&1 ||
    { cat "$work/np2.log"; fail "--profile under mpirun"; }
  check "$work/np2.json" 2 eval Matmul all_sum
  # The environment variable, for any program: the whole run, written at exit.
  LOOM_PROFILE="$work/env.json" "$mpiexec" -np 2 "${mpi[@]}" -x LOOM_PROFILE "$lm" "${args[@]}" \
    >"$work/env.log" 2>&1 || { cat "$work/env.log"; fail "LOOM_PROFILE under mpirun"; }
  grep -q "trace written to" "$work/env.log" || { cat "$work/env.log"; fail "LOOM_PROFILE wrote no trace"; }
  check "$work/env.json" 2 eval Matmul all_sum
fi
echo "transformer_lm profile: ok"
