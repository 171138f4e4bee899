#!/usr/bin/env bash
# CTest example_mnist_resume: after a resume, metrics.jsonl holds each epoch's row once; and a plot
# asked for in a folder that does not exist is drawn there, never onto the terminal.
#   resume_test.sh MNIST_BINARY WORK_DIR
# 1. Two epochs; then epoch 2's checkpoint is removed, as when the run stops after writing epoch
#    2's metrics row but before its checkpoint is in place. --resume latest continues from epoch 1,
#    runs epoch 2 again and then 3: the rows must be epochs 1, 2, 3.
# 2. --resume from epoch 1's checkpoint explicitly, 2 epochs: the rows must be epochs 1, 2.
set -euo pipefail
mnist="$1" work="$2"
rm -rf "$work"
args=(--steps 3 --test-limit 100 --out-dir "$work")
epochs() { sed -n 's/^{"epoch":\([0-9]*\),"steps":\([0-9]*\),.*/\1:\2/p' "$work/metrics.jsonl" | tr '\n' ' '; }
expect() {
  if [ "$(epochs)" != "$1" ]; then
    echo "FAIL: $2: metrics rows (epoch:steps) are '$(epochs)', expected '$1'"
    cat "$work/metrics.jsonl"
    exit 1
  fi
}
"$mnist" "${args[@]}" --epochs 2 >/dev/null
expect "1:3 2:3 " "after 2 epochs"
rm "$work/checkpoints/epoch-2.safetensors"
"$mnist" "${args[@]}" --epochs 3 --resume latest | grep "resumed from"
expect "1:3 2:3 3:3 " "after --resume latest from epoch 1"
"$mnist" "${args[@]}" --epochs 2 --resume "$work/checkpoints/epoch-1.safetensors" | grep "resumed from"
expect "1:3 2:3 " "after --resume from epoch 1, 2 epochs"
# 3. A plot in a folder that does not exist yet: it is made, and no image reaches the terminal.
"$mnist" "${args[@]}" --epochs 1 --plot "$work/elsewhere/deeper/plot.png" >"$work/out.txt" 2>&1
if [ ! -s "$work/elsewhere/deeper/plot.png" ] || grep -aq "PNG" "$work/out.txt"; then
  echo "FAIL: --plot into a new folder: $(ls -la "$work/elsewhere/deeper" 2>&1)"; head -c 300 "$work/out.txt"; exit 1
fi
echo "resume: ok"
