#!/usr/bin/env bash
# Calibration of the simulator against real CPU runs (docs/simulator.md, "Calibration"): the pipeline
# benchmark's model (benchmarks/configs/qwen3-1.7b-shape) runs with RoundPipe on W workers; the run's measured
# per-layer times (<output.dir>/profile.json) and its final plan go into roundpipe_sim; the predicted step
# time and bubble ratio are compared with the measured ones (mean step time of steps 4..N; the bubble report).
# Usage: benchmarks/calibrate_sim.sh [workers...] (default: 2 3)
# RP_RECOMPUTE_AHEAD: pipeline.recompute_ahead of the runs and the simulator (default 1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
steps="${RP_BENCH_STEPS:-14}"
ahead="${RP_RECOMPUTE_AHEAD:-1}"
workers=("${@:-2 3}")
read -r -a workers <<<"${workers[*]}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

echo "| workers | optimizer | measured step ms | simulated ms | error | measured bubble | simulated bubble |"
echo "|---:|---|---:|---:|---:|---:|---:|"
for w in "${workers[@]}"; do
  for mode in sync async; do
    dir="$out/w$w-$mode"
    m=$((w + 1))
    extra=(); (( w > $(nproc) )) && extra=(--oversubscribe)
    "${launch[@]}" "${extra[@]}" -np "$w" "$build/src/cli/roundpipe_train" --config /dev/null \
      --set "model.path=$root/benchmarks/configs/qwen3-1.7b-shape" --set model.init=random \
      --set "model.tokenizer=$root/configs/builtin-tiny" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
      --set data.sample_by=document --set train.seq_len=128 --set "train.global_batch=$((2 * m))" \
      --set "train.microbatches=$m" --set "train.max_steps=$steps" --set train.threads=1 \
      --set "optim.mode=$mode" --set pipeline.replan_every=0 --set "pipeline.recompute_ahead=$ahead" \
      --set "output.dir=$dir" --set output.log_every=1000 \
      >"$dir.log" 2>&1
    plan=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['plan'])" "$dir/profile.json")
    "$build/src/cli/roundpipe_sim" --profile "$dir/profile.json" --workers "$w" --microbatches "$m" --rounds 1 \
      --schedule roundpipe --plan "$plan" --recompute-ahead "$ahead" --json "$dir/sim.json" >/dev/null
    python3 - "$dir" "$w" "$mode" <<'PY'
import json, re, statistics, sys
d, w, mode = sys.argv[1:]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][3:]
measured = 1000 * statistics.mean(r["step_time_s"] for r in rows)
sim = json.load(open(f"{d}/sim.json"))
bubble = re.search(r"bubble ratio ([0-9.]+)%", open(f"{d}.log").read())
print(f"| {w} | {mode} | {measured:.1f} | {sim['makespan']:.1f} | {100 * (sim['makespan'] / measured - 1):+.1f}% | "
      f"{bubble.group(1) if bubble else '-'}% | {100 * sim['bubble_ratio']:.1f}% |")
PY
  done
done
