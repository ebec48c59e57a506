#!/usr/bin/env bash
# sync vs async (one step stale) at fine-tuning learning rates (docs/benchmarks.md, "Optimizer modes"): the
# demo's fine-tune (configs/tiny-finetune.toml: TinyStories-656K on tiny-shakespeare) on 2 worker processes for
# N steps, for each learning rate and warm-up length. Prints the mean of the last 5 training losses, the final
# eval loss (2% held-out speeches), the largest grad norm after warm-up, and the mean step time.
# Usage: benchmarks/optimizer_modes.sh [lr...] (default: 1e-3 3e-3 1e-2)
# RP_BENCH_STEPS (default 60), RP_BENCH_WARMUPS (default "0 10").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
steps="${RP_BENCH_STEPS:-60}"
read -r -a warmups <<<"${RP_BENCH_WARMUPS:-0 10}"
lrs=("${@:-1e-3 3e-3 1e-2}")
read -r -a lrs <<<"${lrs[*]}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

echo "tiny-finetune, 2 workers, $steps steps, constant lr after warm-up (schedule = constant)"
echo
echo "| lr | warm-up | mode | last-5 loss | eval loss | max grad norm after warm-up | step ms |"
echo "|---:|---:|---|---:|---:|---:|---:|"
cd "$root"
for lr in "${lrs[@]}"; do
  for warmup in "${warmups[@]}"; do
    for mode in sync async; do
      dir="$out/$lr-$warmup-$mode"
      "${launch[@]}" -np 2 "$build/src/cli/roundpipe_train" --config configs/tiny-finetune.toml \
        --set "train.max_steps=$steps" --set train.threads=1 --set "optim.lr=$lr" \
        --set "optim.warmup_steps=$warmup" --set optim.schedule=constant --set "optim.mode=$mode" \
        --set eval.every=0 --set output.sample_prompt= --set "output.dir=$dir" --set output.log_every=1000 \
        >"$dir.log" 2>&1
      python3 - "$dir" "$lr" "$warmup" "$mode" <<'PY'
import json, statistics, sys
d, lr, warmup, mode = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
last5 = statistics.mean(r["loss"] for r in rows[-5:])
evals = [r["eval_loss"] for r in rows if r.get("eval_loss") is not None]
norms = [r["grad_norm"] for r in rows[warmup:] if r.get("grad_norm") is not None]
ms = 1000 * statistics.mean(r["step_time_s"] for r in rows[3:])
print(f"| {lr} | {warmup} | {mode} | {last5:.3f} | {evals[-1] if evals else float('nan'):.3f} | {max(norms):.2f} | {ms:.0f} |")
PY
    done
  done
done
