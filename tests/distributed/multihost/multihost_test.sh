#!/usr/bin/env bash
# Usage: multihost_test.sh MPIEXEC MNIST
# Two "hosts" on one machine: network namespaces joined by a veth pair, with OpenMPI's launcher
# reaching the second through `ip netns exec` (its rsh agent) and the ranks talking over TCP only.
#  1. The mnist example trained across the two hosts gives the same losses and accuracy as on one
#     host (shared memory).
#  2. The link goes down mid-run: every rank must end within the peer timeout, with the fault watch's
#     message naming the silent rank. (OpenMPI's mpirun then waits for the unreachable host's
#     daemon, which it cannot reach to confirm the kill; the test interrupts it, as a user would.)
# Exits 77 (skipped) where the machine does not allow network namespaces (not root, no CAP_NET_ADMIN).
set -u
mpiexec=$1
mnist=$2
source "$(dirname "$0")/netns.sh"
if ! netns_up "$mpiexec"; then
  echo "SKIPPED: this machine does not allow network namespaces (needs root / CAP_NET_ADMIN and iproute2)"
  exit 77
fi
root=()
[ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
fail=0
args=(--steps 20 --epochs 1 --threads 1 --test-limit 500)

# 1. The same training on one host and across two.
timeout 120 "$mpiexec" "${root[@]}" -np 2 --oversubscribe --bind-to none "$mnist" "${args[@]}" \
  --out-dir "$dir/one" >"$dir/one.log" 2>&1
timeout 120 "${two_hosts[@]}" "$mnist" "${args[@]}" --out-dir "$dir/two" >"$dir/two.log" 2>&1
rc=$?
one=$(grep -o "epoch 1: train loss [0-9.]*, test loss [0-9.]*, test accuracy [0-9.]*%" "$dir/one.log")
two=$(grep -o "epoch 1: train loss [0-9.]*, test loss [0-9.]*, test accuracy [0-9.]*%" "$dir/two.log")
echo "one host:  $one"
echo "two hosts: $two (exit $rc)"
if [ $rc -ne 0 ] || [ -z "$one" ] || [ "$one" != "$two" ]; then
  echo "FAIL: training across two hosts differs from one host's"; sed 's/^/    /' "$dir/two.log" | head -20; fail=1
fi

# 2. The link goes down while the ranks train.
timeout 120 "${two_hosts[@]}" -x LOOM_PEER_TIMEOUT=5 "$mnist" --epochs 5 --threads 1 --out-dir "$dir/down" \
  >"$dir/down.log" 2>&1 &
launcher=$!
sleep 4
ip netns exec "$h2" ip link set "$v2" down
down=$(date +%s)
# This run's ranks: processes named like the example whose command line holds this run's out-dir
# (not every mnist on the machine: other tests may be training one at the same time).
ranks_alive() {
  local p
  for p in $(pgrep -x "$(basename "$mnist")"); do
    tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- "$dir/down" && return 0
  done
  return 1
}
ended=""
while [ $(( $(date +%s) - down )) -lt 30 ]; do
  if ! ranks_alive; then ended=$(( $(date +%s) - down )); break; fi
  sleep 0.5
done
if [ -z "$ended" ]; then
  echo "FAIL: the ranks still run 30 s after the link went down"; fail=1
else
  echo "the ranks ended ${ended}s after the link went down"
fi
want="has not answered for 5 s while rank"
if ! grep -q "$want" "$dir/down.log"; then
  echo "FAIL: the output lacks '$want'"; fail=1
fi
sed 's/^/    /' "$dir/down.log" | grep "loom rank" | head -4
for _ in 1 2 3 4 5 6; do kill -0 $launcher 2>/dev/null || break; sleep 1; done
if kill -0 $launcher 2>/dev/null; then
  echo "(mpirun waits for the unreachable host's daemon: interrupting it)"
  pkill -INT -f "$dir/hosts"; sleep 1; pkill -INT -f "$dir/hosts"; sleep 1; pkill -9 -f "$dir/hosts"
fi
wait $launcher 2>/dev/null
exit $fail
