#!/usr/bin/env bash
# Stateless workers (Note [Stage slots]): 4 real ranks train two randomly initialised models of the same width,
# 6 and 18 decoder layers, with the same 2-layer stages. Each rank's private resident peak (memory.json:
# peak - node store - files) less its share of the sharded optimizer state must stay below the deep model's
# full float32 replica, and must not grow with the depth by more than a quarter of the extra replica (it would
# grow by all of it if every rank held the model). Every step's metrics carry each rank's resident peak so far
# (rank_peak_rss_mb): one per rank, never decreasing, and at most what memory.json reports after the last step.
# Usage: stage_memory.sh <roundpipe_train> <source dir> <mpiexec> [mpiexec flags...]
set -uo pipefail
train="$1"; source="$2"; shift 2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

run() {  # <layers> <plan> <mpiexec and flags...>
  local layers="$1" plan="$2" dir="$work/l$1"
  shift 2
  mkdir -p "$dir/model"
  python3 - "$source/configs/builtin-tiny/config.json" "$dir/model/config.json" "$layers" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=768, intermediate_size=2048, num_attention_heads=12, num_key_value_heads=4,
         num_hidden_layers=int(sys.argv[3]))
json.dump(c, open(sys.argv[2], "w"))
PY
  printf 'the quick brown fox jumps over the lazy dog\n%.0s' {1..200} >"$dir/data.txt"
  RP_NUM_THREADS=1 timeout 300 "$@" -n 4 "$train" --config /dev/null \
    --set "model.path=$dir/model" --set "model.tokenizer=$source/configs/builtin-tiny" --set model.init=random \
    --set "data.path=$dir/data.txt" --set train.seq_len=16 --set train.global_batch=4 --set train.microbatches=4 \
    --set train.max_steps=2 --set train.threads=1 --set "pipeline.plan=$plan" --set "output.dir=$dir/out" \
    >"$dir/log.txt" 2>&1 || { tail -30 "$dir/log.txt"; fail "the $layers-layer run failed"; }
  [[ -s "$dir/out/memory.json" ]] || fail "no memory.json for the $layers-layer run"
  grep -Eq 'step 2/2 .*\| peak [0-9.]+ GB \(rank [0-3]\)' "$dir/log.txt" ||
    fail "the $layers-layer run's progress line shows no per-rank peak: $(grep 'step 2/2' "$dir/log.txt")"
  python3 - "$dir/out/metrics.jsonl" "$dir/out/memory.json" <<'PY' || fail "per-rank peaks of the $layers-layer run"
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
report = {r["rank"]: r["peak_mb"] for r in json.load(open(sys.argv[2]))["ranks"]}
assert [s["step"] for s in steps] == [1, 2], steps
for before, after in zip(steps, steps[1:]):
    assert all(a >= b for a, b in zip(after["rank_peak_rss_mb"], before["rank_peak_rss_mb"])), (before, after)
for s in steps:
    peaks = s["rank_peak_rss_mb"]
    assert len(peaks) == 4 and all(p > 0 for p in peaks), s
    # Rank 0's own peak, read after its optimizer step; the gathered one may be read a moment later, while the
    # job still holds its timing events and losses: the same 0.5 MB slack as against memory.json below.
    assert s["peak_rss_mb"] + 0.5 >= peaks[0], s
for r, peak in enumerate(steps[-1]["rank_peak_rss_mb"]):
    assert peak <= report[r] + 0.5, f"rank {r}: {peak} MB in the metrics, {report[r]} MB in memory.json"
PY
}
# 2-layer stages throughout: forward counts include the embedding, the fused stage 1 decoder layer + the head.
mpi=("$@")
run 6 "2,2,2 | 1 | 2,2,2" "${mpi[@]}"
run 18 "2,2,2,2,2,2,2,2,2 | 1 | 2,2,2,2,2,2,2,2,2" "${mpi[@]}"

python3 - "$work/l6/out/memory.json" "$work/l18/out/memory.json" <<'PY' || exit 1
import json, sys
shallow, deep = (json.load(open(p)) for p in sys.argv[1:3])
layer = 4 * (2 * 768 * 768 + 2 * 768 * 256 + 3 * 768 * 2048 + 2 * 768)  # float32 q, o; k, v; the MLP; norms
replica6, replica18 = 6 * layer / 1e6, 18 * layer / 1e6
# The worker's part of a rank's private memory: everything but its quarter of the optimizer state (float32
# gradient slices and AdamW moments of the slices it updates; over the node's ranks, one copy of the state).
worker = lambda report: max(r["private_peak_mb"] - r["optimizer_mb"] for r in report["ranks"])
w6, w18 = worker(shallow), worker(deep)
print(f"worker private peak per rank: {w6:.0f} MB (6 layers) vs {w18:.0f} MB (18 layers); "
      f"full float32 replica {replica6:.0f} vs {replica18:.0f} MB; node store {deep['node_store_mb']:.0f} MB")
assert len(deep["ranks"]) == 4, deep
if w18 >= replica18:
    sys.exit(f"FAIL: a rank's private peak less its optimizer share, {w18:.0f} MB, is not below the replica {replica18:.0f} MB")
if w18 - w6 > 0.25 * (replica18 - replica6):
    sys.exit(f"FAIL: the private peak grew by {w18 - w6:.0f} MB with {replica18 - replica6:.0f} MB more model")
for r in deep["ranks"]:
    if r["stage_slots_mb"] > 2 * 2 * layer / 1e6 * 1.01 + 1:
        sys.exit(f"FAIL: rank {r['rank']}'s stage slots ({r['stage_slots_mb']:.0f} MB) hold more than two 2-layer stages")
    # 3 floats (gradient, two moments) per trainable element, a quarter of them per rank (embedding included).
    if r["optimizer_mb"] > 3 * deep["node_store_mb"] / 4:
        sys.exit(f"FAIL: rank {r['rank']}'s optimizer share {r['optimizer_mb']:.0f} MB is more than a quarter of the state")
print("ok")
PY
