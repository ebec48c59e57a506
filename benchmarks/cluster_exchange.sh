#!/usr/bin/env bash
# The cross-node gradient exchange on a shaped link (issue: scale-out, "measured"): hosts h2 and h3 of
# scripts/cluster.sh (network namespaces on one machine; needs root) with their eth0 shaped by tc to each
# profile, the pipeline benchmark's model (benchmarks/configs/qwen3-1.7b-shape, random init), full fine-tune
# and LoRA. Per row: the step time of 2 hosts x 1 worker (data parallel across the nodes) against 1 host x 2
# workers (the same ranks and cores, no network), the exchange time the backward did not hide (the trace's
# "gradient exchange across nodes (exposed)" spans, mean per step, the slowest rank), and the bytes each
# node sends per step (fp32 gradients of the trainable parameters: a 2-node all-reduce sends the whole
# vector once) against what the link moves in a step. A mode ending in "-sharded" (e.g. full-sharded) sets
# optim.shard_across_nodes: its exposed time adds the masters' all-gather after the update.
# Usage: benchmarks/cluster_exchange.sh   (environment, defaults in brackets)
#   RP_BENCH_PROFILES ["1gbit 10gbit"]  RP_BENCH_MODES ["full lora16"; also full-sharded, lora16-sharded]  RP_BENCH_STEPS [8: the first 2 not counted]
#   RP_BENCH_SEQ [256]  RP_BUILD_DIR [build]
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
cluster="$root/scripts/cluster.sh"
read -r -a profiles <<<"${RP_BENCH_PROFILES:-1gbit 10gbit}"
read -r -a modes <<<"${RP_BENCH_MODES:-full lora16}"
steps="${RP_BENCH_STEPS:-8}" seq="${RP_BENCH_SEQ:-256}"
why="$("$cluster" check)" || { echo "cluster_exchange: $why"; exit 1; }
export RP_CLUSTER_DIR="${TMPDIR:-/tmp}/rp-cluster-bench" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export RP_NUM_THREADS=1
work="$(mktemp -d)"
trap '"$cluster" down; [[ -n "${RP_BENCH_KEEP:-}" ]] || rm -rf "$work" "$RP_CLUSTER_DIR"' EXIT
"$cluster" down 2>/dev/null || true
"$cluster" up 3 >/dev/null
python3 -c "import sys; sys.stdout.write(('the quick brown fox jumps over the lazy dog. ' * 40 + '\n') * 2000)" >"$work/data.txt"

run() {  # <out dir> <hosts> <mode>
  local lora=0 sharded=false
  [[ $3 == *-sharded ]] && sharded=true
  [[ $3 == lora* ]] && lora="${3%-sharded}" && lora="${lora#lora}"
  "$cluster" mpirun -np 2 --host "$2" -x RP_NUM_THREADS "$bin" --config /dev/null \
    --set "model.path=$root/benchmarks/configs/qwen3-1.7b-shape" --set "model.tokenizer=$root/configs/builtin-tiny" \
    --set model.init=random --set "data.path=$work/data.txt" --set "train.seq_len=$seq" --set train.global_batch=8 \
    --set train.microbatches=4 --set "train.max_steps=$steps" --set optim.mode=sync --set "lora.rank=$lora" \
    --set "optim.shard_across_nodes=$sharded" --set checkpoint.every=0 --set "output.dir=$1" >"$1.log" 2>&1 || { tail -20 "$1.log"; exit 1; }
}

echo "cluster_exchange: 2 hosts x 1 worker vs 1 host x 2 workers, qwen3-1.7b-shape, seq $seq, 8 rows in 4 microbatches, $steps steps"
printf "%-8s %-14s %12s %12s %8s %14s %12s %13s\n" profile mode "step 1 host" "step 2 hosts" "2h/1h" "exposed/step" "MB/step" "link time"
for profile in "${profiles[@]}"; do
  "$cluster" shape "$profile"
  for mode in "${modes[@]}"; do
    run "$work/one-$profile-$mode" h2:2 "$mode"
    run "$work/two-$profile-$mode" h2:1,h3:1 "$mode"
    python3 - "$work/one-$profile-$mode" "$work/two-$profile-$mode" "$profile" "$mode" \
      "$root/benchmarks/configs/qwen3-1.7b-shape" <<'PY'
import json, sys
one, two, profile, mode = sys.argv[1:5]
def step_time(d):
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl") if l.strip()][2:]
    return sum(r["step_time_s"] for r in rows) / len(rows), len(rows)
t1, _ = step_time(one)
t2, counted = step_time(two)
events = json.load(open(two + "/trace.json"))["traceEvents"]
exposed = {}  # (rank, span name) -> durations
for e in events:
    if e.get("name") in ("gradient exchange across nodes (exposed)", "all-gather masters across nodes"):
        exposed.setdefault((e["pid"], e["name"]), []).append(e["dur"] / 1e6)
# The counted steps' spans (the last `counted` of each rank and name), the slowest rank.
per_rank = {}
for (pid, _), v in exposed.items():
    per_rank[pid] = per_rank.get(pid, 0.0) + sum(v[-counted:]) / counted
per_step = max(per_rank.values(), default=0.0)
# Trainable parameters from config.json: every weight (full), or rank x (in + out) per adapted projection (LoRA,
# the default targets q k v o gate up down).
c = json.load(open(sys.argv[5] + "/config.json"))
h, L, I, V = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
nh, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["head_dim"]
shapes = [(h, nh * hd), (h, kv * hd), (h, kv * hd), (nh * hd, h), (h, I), (h, I), (I, h)]
if mode.startswith("lora"):
    params = L * sum(int(mode.removesuffix("-sharded")[4:]) * (a + b) for a, b in shapes)
else:
    params = V * h * (1 if c.get("tie_word_embeddings") else 2) + L * (sum(a * b for a, b in shapes) + 2 * h + 2 * hd) + h
sent = 4 * params  # fp32; 2 nodes: each sends the whole vector once (sharded: half the gradients, half the masters)
rate = {"1gbit": 1e9, "10gbit": 10e9}.get(profile, float("nan")) / 8
print(f"{profile:<8} {mode:<14} {t1:11.3f}s {t2:11.3f}s {t2 / t1:8.2f} {per_step:9.3f}s {100 * per_step / t2:3.0f}% "
      f"{sent / 1e6:12.1f} {sent / rate:12.3f}s")
PY
  done
done
"$cluster" shape off
