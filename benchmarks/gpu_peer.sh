#!/usr/bin/env bash
# G2 of the GPU benchmarks (docs/benchmarks.md): roundpipe_train against the RoundPipe reference library
# (benchmarks/peer_roundpipe_ref.py) on the same GPUs, model shape (random init), batch, sequence length and
# microbatch count, bf16: tokens/s and peak GPU memory side by side. The peer's wheels come from
# benchmarks/peer_wheels.sh (RP_PEER_WHEELS, default offline/wheels) into a venv over this machine's torch.
# Environment: RP_BENCH_MODEL [benchmarks/configs/qwen3-1.7b], RP_BENCH_SEQ [2048], RP_BENCH_BATCH [8],
# RP_BENCH_MICROBATCHES [8], RP_BENCH_STEPS [8: 3 warm-up], RP_BUILD_DIR [build], RP_PYTHON [python3].
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
model="${RP_BENCH_MODEL:-$root/benchmarks/configs/qwen3-1.7b}"
seq="${RP_BENCH_SEQ:-2048}" batch="${RP_BENCH_BATCH:-8}" mbs="${RP_BENCH_MICROBATCHES:-8}" steps="${RP_BENCH_STEPS:-8}"
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
peer=$("$work/peer/bin/python" "$root/benchmarks/peer_roundpipe_ref.py" --config "$model" --batch "$batch" \
  --seq "$seq" --microbatches "$mbs" --warmup 3 --steps $((steps - 3)) 2>"$work/peer.log" | tail -1) \
  || { tail -30 "$work/peer.log"; exit 1; }

python3 -c "import sys; sys.stdout.write(('the quick brown fox jumps over the lazy dog. ' * 40 + '\n') * 4000)" >"$work/data.txt"
launch=(mpirun -np "$gpus" --bind-to none)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi
"${launch[@]}" "$bin" --config /dev/null --set "model.path=$model" --set "model.tokenizer=$root/configs/builtin-tiny" \
  --set model.init=random --set model.dtype=bfloat16 --set "data.path=$work/data.txt" --set "train.seq_len=$seq" \
  --set "train.global_batch=$batch" --set "train.microbatches=$mbs" --set "train.max_steps=$steps" \
  --set pipeline.backend=cuda --set checkpoint.every=0 --set "output.dir=$work/ours" >"$work/ours.log" 2>&1 \
  || { tail -30 "$work/ours.log"; exit 1; }
python3 - "$work/ours/metrics.jsonl" "$work/ours/memory.json" "$peer" "$(basename "$model")" "$seq" "$batch" "$mbs" "$gpus" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()][3:]
ours = sum(r["tokens_per_s"] for r in rows) / len(rows)
mem = json.load(open(sys.argv[2]))["ranks"]
ours_mb = max(r["gpu_job_peak_mb"] + r["stage_slots_mb"] for r in mem)
peer = json.loads(sys.argv[3])
name, seq, batch, mbs, gpus = sys.argv[4:9]
print(f"{name}, {gpus} GPU(s), batch {batch} x {seq} tokens, {mbs} microbatches, bf16")
print(f"{'system':<22} {'tokens/s':>10} {'peak GPU MB':>12} {'vs peer':>8}")
print(f"{peer['peer']:<22} {peer['tokens_per_s']:>10.0f} {peer['peak_gpu_mb']:>12.0f} {1.0:>8.2f}")
print(f"{'roundpipe (ours)':<22} {ours:>10.0f} {ours_mb:>12.0f} {ours / peer['tokens_per_s']:>8.2f}")
PY
