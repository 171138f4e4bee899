#!/usr/bin/env bash
# CTest example_mnist_uneven: two ranks that run different numbers of steps per epoch.
#   uneven_test.sh MPIEXEC MNIST_BINARY WORK_DIR
# 1. Without --join the job fails on every rank with the disagreement error, which points at nn::Join.
# 2. With --join the rank with fewer steps shadows the other's gradient averages, and both epochs
#    (and their train-loss and test-set collectives after the loop) complete.
set -uo pipefail
mpiexec="$1" mnist="$2" work="$3"
. "$(dirname "$0")/../script_prelude.sh"
mpi=("$mpiexec" "${mpi[@]}")
common=(--epochs 2 --threads 1 --test-limit 200)
"${mpi[@]}" -np 1 "$mnist" "${common[@]}" --steps 6 --out-dir "$work/a" : \
            -np 1 "$mnist" "${common[@]}" --steps 3 --out-dir "$work/a" >"$work.plain.log" 2>&1
rc=$?
if [ $rc -eq 0 ] || ! grep -q "run different numbers of steps (uneven data: nn::Join)" "$work.plain.log"; then
  echo "FAIL: uneven steps without --join: exit $rc, expected the disagreement error"; cat "$work.plain.log"; exit 1
fi
"${mpi[@]}" -np 1 "$mnist" "${common[@]}" --steps 6 --join --out-dir "$work/b" : \
            -np 1 "$mnist" "${common[@]}" --steps 3 --join --out-dir "$work/b" >"$work.join.log" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "epoch 2: train loss" "$work.join.log"; then
  echo "FAIL: uneven steps with --join: exit $rc"; cat "$work.join.log"; exit 1
fi
grep "epoch 2: train loss" "$work.join.log"
echo "uneven: ok"
