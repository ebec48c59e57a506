#!/usr/bin/env bash
# Bounded staleness (docs/benchmarks.md, "Bounded staleness"): optim.staleness = 0 (sync), 1, 2, 4.
#  1. Convergence: the demo's fine-tune (configs/tiny-finetune.toml: TinyStories-656K on tiny-shakespeare, its
#     cosine schedule with 10 warm-up steps) on 2 worker processes for N steps at each learning rate. Prints the
#     mean of the last 10 losses, the final eval loss (2% held-out speeches), the steps until the 10-step mean
#     loss first reaches the target (the sync run's 10-step mean at step N/2) and the mean step time; writes
#     every run's losses to $RP_BENCH_CURVES (default: the scratch directory) for benchmarks/plots.py staleness.
#  2. Optimizer-bound step time: a model whose AdamW work outweighs its compute (TinyStories' shape with an
#     untied 131072-token vocabulary: 34M parameters; random weights), one 16-token microbatch per worker (at
#     least 2), optim.threads = 1, on W worker processes. Prints the mean step time of steps 4..N and the share of the step rank 0's
#     optimizer thread spent in AdamW (from its trace), median of RP_BENCH_REPEATS runs (default 3).
#     RP_ADAMW_KERNEL=scalar (docs/env.md) stands in for a weak host: the scalar kernel does the same arithmetic
#     several times slower than the SIMD ones.
# Usage: benchmarks/staleness.sh [lr...] (default: 2e-3 1e-2)
# RP_BENCH_STEPS (default 200), RP_BENCH_WORKERS for part 2 (default "2 4"), RP_BENCH_PARTS (default "1 2").
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${RP_BUILD_DIR:-$root/build}"
fixtures="${RP_FIXTURES_DIR:-$root/../shared/fixtures}"
steps="${RP_BENCH_STEPS:-200}"
repeats="${RP_BENCH_REPEATS:-3}"
read -r -a parts <<<"${RP_BENCH_PARTS:-1 2}"
read -r -a workers <<<"${RP_BENCH_WORKERS:-2 4}"
lrs=("${@:-2e-3 1e-2}")
read -r -a lrs <<<"${lrs[*]}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
curves="${RP_BENCH_CURVES:-$out/curves}"
mkdir -p "$curves"
launch=(mpirun --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
stalenesses=(0 1 2 4)
cd "$root"

if [[ " ${parts[*]} " == *" 1 "* ]]; then
  echo "1. tiny-finetune, 2 workers, $steps steps, cosine schedule, 10 warm-up steps"
  echo
  echo "| lr | staleness | last-10 loss | eval loss | steps to target | target | step ms |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  for lr in "${lrs[@]}"; do
    for k in "${stalenesses[@]}"; do
      dir="$out/$lr-$k"
      "${launch[@]}" -np 2 "$build/src/cli/roundpipe_train" --config configs/tiny-finetune.toml \
        --set "train.max_steps=$steps" --set train.threads=1 --set "optim.lr=$lr" --set "optim.staleness=$k" \
        --set optim.mode="$( ((k > 0)) && echo async || echo sync)" --set "eval.every=$steps" \
        --set output.sample_prompt= --set "output.dir=$dir" --set output.log_every=1000 >"$dir.log" 2>&1
      cp "$dir/metrics.jsonl" "$curves/lr$lr-k$k.jsonl"
      python3 - "$dir" "$lr" "$k" "$out/$lr-0/metrics.jsonl" <<'PY'
import json, statistics, sys
d, lr, k, sync = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
def losses(p): return [r["loss"] for r in map(json.loads, open(p)) if r.get("loss") is not None]
def smooth(xs): return [statistics.mean(xs[max(0, i - 9):i + 1]) for i in range(len(xs))]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
mine = losses(f"{d}/metrics.jsonl")
target = smooth(losses(sync))[len(mine) // 2 - 1]
reached = next((i + 1 for i, x in enumerate(smooth(mine)) if x <= target), None)
evals = [r["eval_loss"] for r in rows if r.get("eval_loss") is not None]
ms = 1000 * statistics.mean(r["step_time_s"] for r in rows[3:])
print(f"| {lr} | {k} | {statistics.mean(mine[-10:]):.3f} | {evals[-1] if evals else float('nan'):.3f} | "
      f"{reached if reached else 'not reached'} | {target:.3f} | {ms:.0f} |")
PY
    done
  done
  echo
fi

if [[ " ${parts[*]} " == *" 2 "* ]]; then
  model="$out/wide-vocab"
  mkdir -p "$model"
  python3 - "$fixtures/models/tinystories-656k/config.json" "$model/config.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(vocab_size=131072, tie_word_embeddings=False)
json.dump(c, open(sys.argv[2], "w"))
PY
  echo "2. optimizer-bound: TinyStories' shape with an untied 131072-token vocabulary (34M parameters), one 16-token"
  echo "   microbatch per worker, optim.threads = 1, AdamW kernel ${RP_ADAMW_KERNEL:-the fastest}; median of $repeats runs"
  echo "   of 12 steps (mean of steps 4..12)"
  echo
  echo "| workers | staleness | step ms | AdamW share of the step (rank 0) |"
  echo "|---:|---:|---:|---:|"
  for w in "${workers[@]}"; do
    extra=()
    ((w > $(nproc))) && extra+=(--oversubscribe)
    [[ -n "${RP_ADAMW_KERNEL:-}" ]] && extra+=(-x RP_ADAMW_KERNEL)
    for k in "${stalenesses[@]}"; do
      results=()
      for ((i = 0; i < repeats; ++i)); do
        dir="$out/opt-$w-$k-$i"
        "${launch[@]}" "${extra[@]}" -np "$w" "$build/src/cli/roundpipe_train" --config /dev/null \
          --set "model.path=$model" --set model.init=random \
          --set "model.tokenizer=$fixtures/models/tinystories-656k" \
          --set "data.path=$fixtures/text/tinyshakespeare.txt" --set train.seq_len=16 \
          --set "train.global_batch=$((w > 2 ? w : 2))" --set "train.microbatches=$((w > 2 ? w : 2))" \
          --set train.max_steps=12 --set train.threads=1 --set optim.threads=1 --set optim.schedule=constant \
          --set "optim.staleness=$k" --set optim.mode="$( ((k > 0)) && echo async || echo sync)" \
          --set pipeline.replan_every=0 --set output.sample_prompt= --set "output.dir=$dir" \
          --set output.log_every=1000 >"$dir.log" 2>&1
        results+=("$(python3 - "$dir" <<'PY'
import json, statistics, sys
d = sys.argv[1]
rows = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][3:]
events = json.load(open(f"{d}/trace.json"))["traceEvents"]
adamw = sum(e["dur"] for e in events if e.get("name", "").startswith("AdamW step") and e.get("pid") == 0) / 1e3
wall = 1000 * sum(json.loads(l)["step_time_s"] for l in open(f"{d}/metrics.jsonl"))
print(f"{1000 * statistics.mean(r['step_time_s'] for r in rows):.1f} {adamw / wall:.2f}")
PY
)")
      done
      python3 - "$w" "$k" "${results[@]}" <<'PY'
import statistics, sys
w, k, runs = sys.argv[1], sys.argv[2], [tuple(map(float, r.split())) for r in sys.argv[3:]]
ms = statistics.median(r[0] for r in runs)
share = statistics.median(r[1] for r in runs)
print(f"| {w} | {k} | {ms:.0f} ({', '.join(f'{r[0]:.0f}' for r in runs)}) | {100 * share:.0f}% |")
PY
    done
  done
fi
