#!/usr/bin/env bash
# Step-time overhead of checkpointing, on the pipeline benchmark's model (benchmarks/configs/qwen3-1.7b-shape,
# ~9M parameters: ~110 MB of masters + moments per checkpoint) with 2 workers: no checkpoints vs a checkpoint
# after every step written in the background (checkpoint.async = true) vs written before training goes on
# (async = false), and every 4 steps in the background. Prints the mean step time over steps 3..N (means, so a
# save's cost is amortised over the steps between saves) and the overhead. Usage: benchmarks/checkpoint_overhead.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
steps="${RP_BENCH_STEPS:-12}"
out="$(mktemp -d "${RP_BENCH_DIR:-/tmp}/rp-ckpt-bench.XXXXXX")"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none -np 2)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

run() {  # run <name> [--set ...]: prints the mean step time in ms
  local dir="$out/$1"; shift
  "${launch[@]}" "$bin" --config /dev/null --set "model.path=$root/benchmarks/configs/qwen3-1.7b-shape" \
    --set model.init=random --set "model.tokenizer=$root/configs/builtin-tiny" \
    --set "data.path=$fixtures/text/tinyshakespeare.txt" --set data.sample_by=document \
    --set train.seq_len=128 --set train.global_batch=6 --set train.microbatches=3 \
    --set "train.max_steps=$steps" --set train.threads=1 --set "output.dir=$dir" --set output.log_every=1000 \
    --set checkpoint.keep=2 "$@" >"$dir.log" 2>&1
  python3 - "$dir/metrics.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])][2:]
print(f"{1000 * statistics.mean(r['step_time_s'] for r in rows):.1f}")
PY
}

none=$(run none --set checkpoint.every=0)
async=$(run async --set checkpoint.every=1 --set checkpoint.async=true)
sync=$(run sync --set checkpoint.every=1 --set checkpoint.async=false)
every4=$(run every4 --set checkpoint.every=4 --set checkpoint.async=true)
echo "checkpoint overhead, 2 workers (${steps} steps, mean step time of steps 3..${steps})"
echo "| checkpointing | step ms | overhead |"
echo "|---|---:|---:|"
python3 - "$none" "$async" "$sync" "$every4" <<'PY'
import sys
none, a, s, e4 = map(float, sys.argv[1:])
print(f"| none | {none:.1f} | — |")
print(f"| every step, async (staged copy, writer thread) | {a:.1f} | {100 * (a / none - 1):+.1f}% |")
print(f"| every step, sync | {s:.1f} | {100 * (s / none - 1):+.1f}% |")
print(f"| every 4 steps, async | {e4:.1f} | {100 * (e4 / none - 1):+.1f}% |")
PY
