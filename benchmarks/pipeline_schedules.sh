#!/usr/bin/env bash
# RoundPipe vs the in-tree baselines (1F1B, GPipe) on the same runtime, one compute thread per worker, on a
# scaled-down model with Qwen3-1.7B's proportions (benchmarks/configs/qwen3-1.7b-shape: 8 layers, the LM head
# ~3 decoder layers of compute), random init, byte tokens of tiny-shakespeare. Prints a table: tokens/s
# (mean over steps 3..N), pipeline efficiency against the single-worker compute rate x W, and the bubble
# ratio the runtime measured. Usage: benchmarks/pipeline_schedules.sh [workers...] (default: 2)
# RP_BENCH_SETS: more space-separated key=value settings for every run (e.g. "pipeline.recompute_ahead=0").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
steps="${RP_BENCH_STEPS:-12}"
sets=()
for kv in ${RP_BENCH_SETS:-}; do sets+=(--set "$kv"); done
workers=("${@:-2}")
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

run() {  # run <name> <ranks> <microbatches> [--set ...]: prints "tok/s bubble%"
  local name=$1 ranks=$2 m=$3; shift 3
  local dir="$out/$name"
  local cmd=("$bin" --config /dev/null --set "model.path=$root/benchmarks/configs/qwen3-1.7b-shape"
    --set model.init=random --set "model.tokenizer=$root/configs/builtin-tiny"
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set data.sample_by=document
    --set train.seq_len=128 --set "train.global_batch=$((2 * m))" --set "train.microbatches=$m"
    --set "train.max_steps=$steps" --set train.threads=1 --set "output.dir=$dir" --set output.log_every=1000
    "${sets[@]}" "$@")
  if [[ $ranks -gt 1 ]]; then
    local extra=(); (( ranks > $(nproc) )) && extra=(--oversubscribe)
    "${launch[@]}" "${extra[@]}" -np "$ranks" "${cmd[@]}" >"$dir.log" 2>&1
  else
    "${cmd[@]}" >"$dir.log" 2>&1
  fi
  python3 - "$dir/metrics.jsonl" "$dir.log" <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
tail = rows[2:] or rows
tps = sum(r["tokens"] for r in tail) / sum(r["step_time_s"] for r in tail)
m = re.search(r"bubble ratio ([0-9.]+)%", open(sys.argv[2]).read())
print(f"{tps:.0f} {m.group(1) if m else '-'}")
PY
}

printf '%-8s %-22s %10s %12s %10s\n' workers schedule "tok/s" "efficiency" "bubble %"
for w in "${workers[@]}"; do
  m=$((w + 1))
  read -r single _ < <(run "single-w$w" 1 "$m")
  printf '%-8s %-22s %10s %12s %10s\n' 1 "one process (compute)" "$single" "-" "-"
  for schedule in "roundpipe async" "roundpipe sync" "1f1b sync" "gpipe sync"; do
    set -- $schedule
    read -r tps bubble < <(run "$1-$2-w$w" "$w" "$m" --set "pipeline.schedule=$1" --set "optim.mode=$2")
    eff=$(python3 -c "print(f'{100*$tps/($single*$w):.0f}%')")
    printf '%-8s %-22s %10s %12s %10s\n' "$w" "$schedule" "$tps" "$eff" "$bubble"
  done
done
