#!/usr/bin/env bash
# G2 of the GPU benchmarks (docs/benchmarks.md): roundpipe_train against the RoundPipe reference library
# (benchmarks/peer_roundpipe_ref.py) on the same GPUs, random-init model shape and bf16, in two tables:
#  1. throughput: the same batch, sequence length and microbatch count; tokens/s and peak GPU memory;
#  2. maximum sequence length at the same memory: both see a card of RP_BENCH_MEMORY_GIB (the peer through its
#     allocator's memory fraction and the free memory its partitioner reads; ours through
#     pipeline.memory_limit_gb, that card's free memory less our reserve), one sequence per microbatch and
#     layer-grain recompute (as the paper's maximum-length runs); the sequence doubles from 2048 until a run
#     fails or its peak allocated GPU memory exceeds the card. RP_BENCH_MEMORY_GIB=0 skips this table.
# The peer's wheels come from benchmarks/peer_wheels.sh (RP_PEER_WHEELS, default offline/wheels) into a venv
# over this machine's torch. Environment: RP_BENCH_MODEL [benchmarks/configs/qwen3-1.7b], RP_BENCH_SEQ [2048],
# RP_BENCH_BATCH [8], RP_BENCH_MICROBATCHES [8], RP_BENCH_STEPS [8: 3 warm-up], RP_BENCH_MEMORY_GIB [24: an
# RTX 4090], RP_BENCH_SEQ_MAX [131072], RP_BUILD_DIR [build], RP_PYTHON [python3].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
model="${RP_BENCH_MODEL:-$root/benchmarks/configs/qwen3-1.7b}"
seq="${RP_BENCH_SEQ:-2048}" batch="${RP_BENCH_BATCH:-8}" mbs="${RP_BENCH_MICROBATCHES:-8}" steps="${RP_BENCH_STEPS:-8}"
card="${RP_BENCH_MEMORY_GIB:-24}" seqMax="${RP_BENCH_SEQ_MAX:-131072}"
wheels="${RP_PEER_WHEELS:-$root/offline/wheels}"
python="${RP_PYTHON:-python3}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
(( gpus > 0 )) || { echo "gpu_peer: no GPU (nvidia-smi lists none)"; exit 1; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

"$python" -m venv --system-site-packages "$work/peer"
if ! "$work/peer/bin/python" -c "import roundpipe, transformers" 2>/dev/null; then
  [[ -d "$wheels" ]] || { echo "gpu_peer: the peer is not installed and $wheels is missing (benchmarks/peer_wheels.sh)"; exit 1; }
  "$work/peer/bin/pip" install -q --no-index --no-deps --find-links "$wheels" "$wheels"/*.whl
fi
python3 -c "import sys; sys.stdout.write(('the quick brown fox jumps over the lazy dog. ' * 40 + '\n') * 4000)" >"$work/data.txt"
launch=(mpirun -np "$gpus" --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

# peer <seq> <batch> <microbatches> <timed steps> <tag> [peer options]: its JSON line, or fails with its log's tail.
peer() {
  local s="$1" b="$2" m="$3" n="$4" tag="$5"; shift 5
  "$work/peer/bin/python" "$root/benchmarks/peer_roundpipe_ref.py" --config "$model" --batch "$b" --seq "$s" \
    --microbatches "$m" --warmup 1 --steps "$n" "$@" >"$work/peer-$tag.out" 2>"$work/peer-$tag.log" \
    || { tail -30 "$work/peer-$tag.log" >&2; return 1; }
  tail -1 "$work/peer-$tag.out"
}

# ours <seq> <batch> <microbatches> <steps> <tag> [--set ...]: "<tokens/s after 1 warm-up step> <peak GPU MB>",
# or fails with its log's tail. The peak is the largest rank's job peak plus its stage slots (memory.json).
ours() {
  local s="$1" b="$2" m="$3" n="$4" tag="$5"; shift 5
  "${launch[@]}" "$bin" --config /dev/null --set "model.path=$model" --set "model.tokenizer=$root/configs/builtin-tiny" \
    --set model.init=random --set model.dtype=bfloat16 --set "data.path=$work/data.txt" --set "train.seq_len=$s" \
    --set "train.global_batch=$b" --set "train.microbatches=$m" --set "train.max_steps=$n" \
    --set pipeline.backend=cuda --set checkpoint.every=0 --set "output.dir=$work/ours-$tag" "$@" \
    >"$work/ours-$tag.log" 2>&1 || { tail -30 "$work/ours-$tag.log" >&2; return 1; }
  python3 - "$work/ours-$tag/metrics.jsonl" "$work/ours-$tag/memory.json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
counted = rows[1:] or rows
mem = json.load(open(sys.argv[2]))["ranks"]
print(sum(r["tokens_per_s"] for r in counted) / len(counted), max(r["gpu_job_peak_mb"] + r["stage_slots_mb"] for r in mem))
PY
}

name="$(basename "$model")"
peerRow=$(peer "$seq" "$batch" "$mbs" $((steps - 3)) throughput --warmup 3)
oursRow=$(ours "$seq" "$batch" "$mbs" "$steps" throughput)
read -r oursTps oursMb <<<"$oursRow"
python3 - "$peerRow" "$oursTps" "$oursMb" "$name" "$seq" "$batch" "$mbs" "$gpus" <<'PY'
import json, sys
peer = json.loads(sys.argv[1])
ours, ours_mb = float(sys.argv[2]), float(sys.argv[3])
name, seq, batch, mbs, gpus = sys.argv[4:9]
print(f"{name}, {gpus} GPU(s), batch {batch} x {seq} tokens, {mbs} microbatches, bf16")
print(f"{'system':<22} {'tokens/s':>10} {'peak GPU MB':>12} {'vs peer':>8}")
print(f"{peer['peer']:<22} {peer['tokens_per_s']:>10.0f} {peer['peak_gpu_mb']:>12.0f} {1.0:>8.2f}")
print(f"{'roundpipe (ours)':<22} {ours:>10.0f} {ours_mb:>12.0f} {ours / peer['tokens_per_s']:>8.2f}")
PY
[[ "$card" != 0 ]] || exit 0

# The ladder: one system's longest sequence whose run completes within the card. Prints
# "<seq> <tok/s> <peak MB> <why the next length stopped>" ("-" fields when even 2048 tokens did not).
cardMb=$(python3 -c "print($card * 2**30 / 1e6)")
oursLimitGb=$(python3 -c "print(round($card * 2**30 / 1e9 - 2.0, 2))")  # that card's free memory less the reserve
ladderMbs=$(( gpus + 1 ))
ladder() {
  local system="$1" best="- - -" why="reached RP_BENCH_SEQ_MAX" s=2048 row log
  while (( s <= seqMax )); do
    if [[ "$system" == peer ]]; then
      log="$work/peer-max-$s.log"
      row=$(peer "$s" "$ladderMbs" "$ladderMbs" 1 "max-$s" --memory-gib "$card" --recompute-grain layer 2>/dev/null) \
        || { why="$s: $(tail -1 "$log")"; break; }
      row=$(python3 -c "import json, sys; r = json.loads(sys.argv[1]); print(r['tokens_per_s'], r['peak_gpu_mb'])" "$row")
    else
      log="$work/ours-max-$s.log"
      row=$(ours "$s" "$ladderMbs" "$ladderMbs" 2 "max-$s" --set pipeline.recompute=layer \
        --set "pipeline.memory_limit_gb=$oursLimitGb" 2>/dev/null) || { why="$s: $(tail -1 "$log")"; break; }
    fi
    python3 -c "import sys; sys.exit(0 if float('${row#* }') <= $cardMb else 1)" \
      || { why="$s: peak ${row#* } MB over the card"; break; }
    best="$s $row"
    s=$(( s * 2 ))
  done
  echo "$best ${why:0:100}"
}
python3 - "$(ladder peer)" "$(ladder ours)" "$(python3 -c "import json, sys; print(json.loads(sys.argv[1])['peer'])" "$peerRow")" \
  "$name" "$card" "$ladderMbs" <<'PY'
import sys
peer, ours, peer_name, name, card, mbs = sys.argv[1:7]
print(f"\n{name}, the longest sequence within {card} GiB per GPU: {mbs} microbatches of one sequence, layer recompute")
print(f"{'system':<22} {'max tokens':>10} {'tokens/s':>10} {'peak GPU MB':>12}  the next length")
for system, row in ((peer_name, peer), ("roundpipe (ours)", ours)):
    seq, tps, mb, why = row.split(" ", 3)
    number = lambda v: "-" if v == "-" else f"{float(v):.0f}"
    print(f"{system:<22} {seq:>10} {number(tps):>10} {number(mb):>12}  {why}")
PY
