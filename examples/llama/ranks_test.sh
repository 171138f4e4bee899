#!/usr/bin/env bash
# CTest example_llama_ranks: the same global batch and seed give the same loss curve on 1, 2 and 4
# ranks, and it goes down.
#   ranks_test.sh MPIEXEC LLAMA_BINARY WORK_DIR [EXTRA_ARGS...]
# Runs a small configuration alone and under mpirun -np 2 and -np 4 (global batch 8: 8, 4 and 2
# windows per rank), each writing the loss of every global batch (the mean of the ranks' losses) to
# a metrics file, and compares the curves step by step: every loss must agree with the 1-rank one
# within a relative 1e-5 (the ranks sum the same terms in a different order, so the last bits differ;
# AdamW amplifies that slowly), and the last loss must be below the first.
set -euo pipefail
mpiexec="$1" llama="$2" work="$3"
shift 3  # the rest: more arguments for every run (the mixture-of-experts configuration, say)
. "$(dirname "$0")/../script_prelude.sh"
args=(--steps 12 --dims 32 --heads 2 --layers 2 --context 32 --batch-size 8 --lr 3e-3 --threads 1
      --val-windows 8 --log-every 4 "$@")

for np in 1 2 4; do
  launch=("$mpiexec" -np $np "${mpi[@]}")
  [ $np = 1 ] && launch=()  # one rank: the binary alone
  if ! "${launch[@]}" "$llama" "${args[@]}" --metrics "$work/np$np.jsonl" >"$work/np$np.log" 2>&1; then
    echo "FAIL: the run on $np rank(s) failed:"; sed 's/^/    /' "$work/np$np.log"; exit 1
  fi
done
losses() { sed -n 's/^{"step":[0-9]*,"loss":\([^,]*\),.*/\1/p' "$1"; }
for np in 1 2 4; do
  echo "np $np: $(losses "$work/np$np.jsonl" | tr '\n' ' ')"
  grep "peak memory" "$work/np$np.log"
done
fail=0
for np in 2 4; do
  if ! paste <(losses "$work/np1.jsonl") <(losses "$work/np$np.jsonl") | awk -v np=$np '
      { n++; d = $1 - $2; if (d < 0) d = -d; r = d / ($1 < 0 ? -$1 : $1); if (r > worst) worst = r
        if (r > 1e-5) { printf "FAIL: step %d: 1 rank %s, %d ranks %s (relative difference %.2g)\n", n, $1, np, $2, r; bad = 1 } }
      END { if (n != 12) { printf "FAIL: %d ranks: %d losses, expected 12\n", np, n; bad = 1 }
            printf "np %d against np 1: largest relative difference %.2g\n", np, worst; exit bad }'; then
    fail=1
  fi
done
if ! losses "$work/np1.jsonl" | awk 'NR == 1 { first = $1 } { last = $1 } END { exit !(last < first - 0.5) }'; then
  echo "FAIL: the loss did not go down by 0.5 in 12 steps"; fail=1
fi
[ $fail = 0 ] && echo "llama ranks: ok"
exit $fail
