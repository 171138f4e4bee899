#!/usr/bin/env bash
# CTest example_transformer_lm_modes: every --mode trains the model of one rank. The same seed and
# global batch alone (replicated) and under mpirun as zero1, zero2, fully_sharded, tensor_parallel
# and replicated over a dp 2 x tp 2 mesh (--tp 2) give the same loss at every step, to the 4
# decimals the example prints (the ranks add the same terms in other orders, so the last bits differ).
#   modes_test.sh MPIEXEC TRANSFORMER_LM_BINARY WORK_DIR
set -euo pipefail
mpiexec="$1" lm="$2" work="$3"
. "$(dirname "$0")/../script_prelude.sh"
args=(--steps 6 --log-every 1 --context 32 --batch-size 8 --lr 3e-3 --threads 1 --val-windows 8 --sample-bytes 8)
# "replicated/tp2": a dp 2 x tp 2 mesh (--tp 2).
runs=("1 replicated" "2 zero1" "4 zero2" "4 fully_sharded" "2 tensor_parallel" "4 tensor_parallel" "4 replicated/tp2")
for run in "${runs[@]}"; do
  read -r np mode <<<"$run"
  launch=("$mpiexec" -np "$np" "${mpi[@]}")
  [ "$np" = 1 ] && launch=()
  extra=()
  [ "$mode" = replicated/tp2 ] && extra=(--tp 2)
  if ! "${launch[@]}" "$lm" "${args[@]}" --mode "${mode%/*}" "${extra[@]}" >"$work/${mode/\//_}.np$np.log" 2>&1; then
    echo "FAIL: --mode $mode on $np rank(s) failed:"; sed 's/^/    /' "$work/${mode/\//_}.np$np.log"; exit 1
  fi
done
losses() { sed -n 's/^step [0-9]*\/[0-9]*  loss \([0-9.]*\) .*/\1/p' "$1"; }
fail=0
for run in "${runs[@]}"; do
  read -r np mode <<<"$run"
  echo "$mode, $np rank(s): $(losses "$work/${mode/\//_}.np$np.log" | tr '\n' ' ')"
  if ! paste <(losses "$work/replicated.np1.log") <(losses "$work/${mode/\//_}.np$np.log") | awk -v m="$mode" -v np="$np" '
      { n++; d = $1 - $2; if (d < 0) d = -d
        if (d > 1.5e-4) { printf "FAIL: step %d: 1 rank %s, %s on %d ranks %s\n", n, $1, m, np, $2; bad = 1 } }
      END { if (n != 6) { printf "FAIL: %s on %d ranks: %d losses, expected 6\n", m, np, n; bad = 1 }; exit bad }'; then
    fail=1
  fi
  grep -q "held-out loss" "$work/${mode/\//_}.np$np.log" || { echo "FAIL: $mode on $np ranks printed no held-out loss"; fail=1; }
done
if ! losses "$work/replicated.np1.log" | awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(last < first - 0.3) }'; then
  echo "FAIL: the loss did not go down by 0.3 in 6 steps"; fail=1
fi
[ $fail = 0 ] && echo "transformer_lm modes: ok"
exit $fail
