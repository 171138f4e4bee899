#!/usr/bin/env bash
# Usage: fault_test.sh MPIEXEC "MPI_FLAGS" FAULT_HELPER
# Ends, stops, stalls or desynchronizes rank 1 of a 2-process job mid-training (uncaught exception,
# SIGKILL, early return, SIGSTOP, a stall past the collective timeout, fewer steps than rank 0) and
# checks that mpirun then returns non-zero within seconds, says which rank failed and how, and leaves
# no process; and that a rank that only computes alone for longer than the peer timeout is no fault.
set -u
mpiexec=$1
read -r -a flags <<<"$2"
helper=$3
name=$(basename "$helper")
log=$(mktemp)
trap 'rm -f "$log"' EXIT
fail=0

run() {  # mode, expected exit (zero|nonzero), text expected in the output, [mpirun arguments...] -- [helper arguments]
  local mode=$1 want=$2 text=$3 start rc elapsed
  shift 3
  local extra=() args=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do extra+=("$1"); shift; done
  [ $# -gt 0 ] && shift && args=("$@")
  start=$(date +%s)
  timeout 120 "$mpiexec" -np 2 "${flags[@]}" "${extra[@]}" "$helper" "$mode" "${args[@]}" >"$log" 2>&1
  rc=$?
  elapsed=$(( $(date +%s) - start ))
  if [ "$want" = zero ] && [ $rc -ne 0 ]; then
    echo "FAIL $mode: exit code $rc, expected 0"; fail=1
  elif [ "$want" = nonzero ] && { [ $rc -eq 0 ] || [ $rc -eq 124 ]; }; then
    echo "FAIL $mode: exit code $rc (124 means it hung), expected a failure"; fail=1
  fi
  if [ "$want" = nonzero ] && [ $elapsed -gt 30 ]; then
    echo "FAIL $mode: the job took ${elapsed}s to end"; fail=1
  fi
  if ! grep -qF -- "$text" "$log"; then
    echo "FAIL $mode: output lacks '$text'"; fail=1
  fi
  sleep 1
  # Live processes only: a container without an init process may keep killed ones as zombies.
  if ps -eo stat=,comm= | awk -v n="$name" '$1 !~ /^Z/ && $2 == n { found = 1 } END { exit !found }'; then
    echo "FAIL $mode: processes left behind:"; pgrep -a -x "$name"; pkill -9 -x "$name"; fail=1
  fi
  echo "--- $mode: exit $rc after ${elapsed}s"
  sed 's/^/    /' "$log" | head -20
}

run ok zero "finished 200 steps"
run throw nonzero "[loom rank 1] uncaught exception: boom at step 20"
run kill nonzero "signal 9"
run exit nonzero "[loom rank 0] rank 1 has left the job while rank 0 waits for it in all_sum"
run stop nonzero "[loom rank 0] rank 1 has not answered for 3 s while rank 0 waits for it in all_sum of float32 (64,64)" \
  -x LOOM_PEER_TIMEOUT=3
run sleep nonzero "[loom rank 0] rank 0 has waited 3 s in all_sum of float32 (64,64) for ranks that answer but have not reached it" \
  -x LOOM_COLLECTIVE_TIMEOUT=3 -- 60
run sleep zero "finished 200 steps" -x LOOM_PEER_TIMEOUT=2 -- 5
run uneven nonzero "uncaught exception: [all_sum] the ranks disagree on collective #" 
# The newer collectives under the same watch (every collective enters it in one place,
# Communication::execute): the barrier, which carries no data, and a broadcast's silent peer.
run exit nonzero "[loom rank 0] rank 1 has left the job while rank 0 waits for it in barrier" -x FAULT_COLLECTIVE=barrier
run stop nonzero "[loom rank 0] rank 1 has not answered for 3 s while rank 0 waits for it in broadcast of float32 (64,64)" \
  -x LOOM_PEER_TIMEOUT=3 -x FAULT_COLLECTIVE=broadcast
exit $fail
