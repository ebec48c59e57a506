#!/usr/bin/env bash
# G1 and G3 of the GPU benchmarks (docs/benchmarks.md): tokens/s of roundpipe_train with the weights in host RAM
# (streamed into the stage slots every stage, as always) against the same run with the uploads skipped
# (RP_BENCH_NO_UPLOADS=1: the compute alone, as if the weights were resident on the GPU), and the model FLOP
# utilisation against the GPU's dense bf16 peak. Randomly initialised models from config.json shapes, the
# byte-level tokenizer of configs/builtin-tiny (ids fit any vocabulary), bf16, one row per microbatch.
# Usage: benchmarks/gpu_throughput.sh   (environment, defaults in brackets)
#   RP_BENCH_MODELS   config dirs ["benchmarks/configs/qwen3-1.7b benchmarks/configs/llama-3.1-8b"]
#   RP_BENCH_LORA     LoRA rank per model, 0 = full fine-tune ["0 16": the 8B's full state exceeds 128 GB RAM]
#   RP_BENCH_WORKERS  ranks [the number of GPUs, at least 1]    RP_BENCH_SEQ  tokens per row [4096]
#   RP_BENCH_STEPS    steps, the first 2 not counted [8]        RP_BENCH_MICROBATCHES [2 x workers + 2]
#   RP_BENCH_BACKEND  pipeline.backend [auto]                   RP_BENCH_PEAK_TFLOPS dense bf16 per GPU [by name]
#   RP_BUILD_DIR      the build to measure [build]
# Dry run on a CPU machine: RP_BENCH_BACKEND=cpu RP_BENCH_MODELS=configs/builtin-tiny RP_BENCH_SEQ=64 \
#   RP_BENCH_LORA=0 RP_BENCH_STEPS=4 benchmarks/gpu_throughput.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="${RP_BUILD_DIR:-$root/build}/src/cli/roundpipe_train"
read -r -a models <<<"${RP_BENCH_MODELS:-$root/benchmarks/configs/qwen3-1.7b $root/benchmarks/configs/llama-3.1-8b}"
read -r -a loras <<<"${RP_BENCH_LORA:-0 16}"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
gpuName=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
workers="${RP_BENCH_WORKERS:-$(( gpus > 0 ? gpus : 1 ))}"
seq="${RP_BENCH_SEQ:-4096}"
steps="${RP_BENCH_STEPS:-8}"
microbatches="${RP_BENCH_MICROBATCHES:-$((2 * workers + 2))}"
backend="${RP_BENCH_BACKEND:-auto}"
peak="${RP_BENCH_PEAK_TFLOPS:-}"
if [[ -z "$peak" ]]; then  # dense bf16 tensor-core peaks (vendor data sheets)
  case "$gpuName" in
    *H100*PCIe*) peak=756 ;; *H100*|*H200*) peak=989 ;; *A100*) peak=312 ;; *L40S*) peak=362 ;;
    *4090*) peak=165 ;; *3090*) peak=71 ;; *) peak="" ;;
  esac
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -c "import sys; sys.stdout.write(('the quick brown fox jumps over the lazy dog. ' * 40 + '\n') * 4000)" >"$work/data.txt"
launch=(mpirun -np "$workers" --bind-to none --oversubscribe)
if [[ $(id -u) -eq 0 ]]; then launch+=(--allow-run-as-root); fi

# Model FLOPs per trained token (forward + backward = 3 x forward; causal attention; no recompute), from config.json.
flops_per_token() {
  python3 - "$1/config.json" "$seq" "$2" <<'PY'
import json, sys
c, T, lora = json.load(open(sys.argv[1])), int(sys.argv[2]), int(sys.argv[3])
h, L, V = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
nh = c["num_attention_heads"]; kv = c.get("num_key_value_heads", nh); hd = c.get("head_dim") or h // nh
matmul = L * (h * nh * hd * 2 + h * kv * hd * 2 + 3 * h * c["intermediate_size"]) + V * h
attention = L * 2 * T * nh * hd  # QK^T and AV, causal: half of 2 x 2 x T x nh x hd per token
forward = 2 * matmul + attention
# LoRA: no weight gradients for the frozen base: backward = 1 x forward (input gradients) instead of 2 x.
print(forward * (2 if lora > 0 else 3))
PY
}

run() {  # model dir, lora rank, extra env -> mean tokens/s over the counted steps
  local model="$1" lora="$2" tag="$3"; shift 3
  local out="$work/out-$tag"
  env "$@" RP_NUM_THREADS="${RP_NUM_THREADS:-0}" "${launch[@]}" "$bin" --config /dev/null \
    --set "model.path=$model" --set "model.tokenizer=$root/configs/builtin-tiny" --set model.init=random \
    --set model.dtype=bfloat16 --set "data.path=$work/data.txt" --set "train.seq_len=$seq" \
    --set "train.microbatches=$microbatches" --set "train.global_batch=$microbatches" --set "train.max_steps=$steps" \
    --set "lora.rank=$lora" --set "pipeline.backend=$backend" --set checkpoint.every=0 \
    --set "output.dir=$out" >"$work/log-$tag.txt" 2>&1 || { tail -30 "$work/log-$tag.txt" >&2; exit 1; }
  python3 - "$out/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
counted = [r["tokens_per_s"] for r in rows[2:]] or [r["tokens_per_s"] for r in rows]
print(f"{sum(counted) / len(counted):.1f}")
PY
}

echo "GPU: ${gpuName:-none} x $workers workers (backend $backend), seq $seq, $microbatches microbatches of 1 row, bf16, peak ${peak:-?} TFLOPS"
printf "%-22s %-6s %14s %14s %9s %12s %7s\n" model mode "tok/s (host)" "tok/s (no up)" "host/no" "TFLOPS/GPU" MFU
i=0
for model in "${models[@]}"; do
  lora="${loras[$i]:-0}"; i=$((i + 1))
  host=$(run "$model" "$lora" "host-$i")
  resident=$(run "$model" "$lora" "resident-$i" RP_BENCH_NO_UPLOADS=1)
  fpt=$(flops_per_token "$model" "$lora")
  read -r ratio tflops mfu < <(python3 -c "
h, r, f, w, p = $host, $resident, $fpt, $workers, '${peak}'
t = h * f / w / 1e12
print(f'{h / r:.3f}', f'{t:.1f}', f'{100 * t / float(p):.1f}%' if p else '-')")
  printf "%-22s %-6s %14s %14s %9s %12s %7s\n" "$(basename "$model")" "$([[ $lora -gt 0 ]] && echo "lora$lora" || echo full)" \
    "$host" "$resident" "$ratio" "$tflops" "$mfu"
done
