#!/usr/bin/env bash
# Uneven workers (docs/benchmarks.md, "Uneven workers"): the pipeline benchmark's model
# (benchmarks/configs/qwen3-1.7b-shape) on W CPU workers, every worker at full speed and then world rank 1
# slowed (RP_SLOW_WORKER, docs/env.md), each with pipeline.dispatch = round_robin and earliest_finish. Prints
# the mean step time of steps 6..N (earliest finish has measured the speeds from step 4 on), the median over
# RP_BENCH_REPEATS runs (default 3; CPU runs on shared cores vary by 10-15% from run to run), and the jobs the
# slow worker got in the last step whose speeds rank 0 logged.
# Usage: benchmarks/uneven_workers.sh [workers] [speed] (default: 3 0.3)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
steps="${RP_BENCH_STEPS:-16}"
repeats="${RP_BENCH_REPEATS:-3}"
w="${1:-3}"
speed="${2:-0.3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
(( w > $(nproc) )) && launch+=(--oversubscribe)
m=$((2 * w))

run() {  # dir, dispatch, RP_SLOW_WORKER value
  RP_SLOW_WORKER="$3" "${launch[@]}" -x RP_SLOW_WORKER -np "$w" "$build/src/cli/roundpipe_train" --config /dev/null \
    --set "model.path=$root/benchmarks/configs/qwen3-1.7b-shape" --set model.init=random \
    --set "model.tokenizer=$root/configs/builtin-tiny" --set "data.path=$fixtures/text/tinyshakespeare.txt" \
    --set data.sample_by=document --set train.seq_len=128 --set "train.global_batch=$m" \
    --set "train.microbatches=$m" --set "train.max_steps=$steps" --set train.threads=1 \
    --set optim.mode=async --set pipeline.replan_every=0 --set "pipeline.dispatch=$2" \
    --set "output.dir=$1" --set output.log_every=1000 >"$1.log" 2>&1
}

echo "$w workers, $m microbatches per step, $steps steps; rank 1 at speed $speed in the slowed runs"
echo
echo "| dispatch | all at 1.0: median ms (runs) | rank 1 at $speed: median ms (runs) | slowdown | slow worker's jobs / step |"
echo "|---|---:|---:|---:|---|"
for dispatch in round_robin earliest_finish; do
  for ((i = 0; i < repeats; ++i)); do
    run "$out/$dispatch-even-$i" "$dispatch" ""
    run "$out/$dispatch-slow-$i" "$dispatch" "1:$speed"
  done
  python3 - "$out/$dispatch" "$dispatch" "$repeats" <<'PY'
import json, re, statistics, sys
base, dispatch, repeats = sys.argv[1], sys.argv[2], int(sys.argv[3])
def mean_ms(d):
    rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][5:]
    return 1000 * statistics.mean(r["step_time_s"] for r in rows)
def median_ms(kind):
    runs = [mean_ms(f"{base}-{kind}-{i}") for i in range(repeats)]
    return statistics.median(runs), " ".join(f"{t:.0f}" for t in runs)
(even, even_runs), (slow, slow_runs) = median_ms("even"), median_ms("slow")
logged = re.findall(r"jobs per worker this step: ([0-9 ]+)", open(f"{base}-slow-0.log").read())
jobs = f"{logged[-1].split()[1]} of {sum(map(int, logged[-1].split()))}" if logged else "round-robin"
print(f"| {dispatch} | {even:.1f} ({even_runs}) | {slow:.1f} ({slow_runs}) | {100 * (slow / even - 1):+.1f}% | {jobs} |")
PY
done
